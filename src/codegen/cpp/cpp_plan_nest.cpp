// The planner's shape tests of one loop nest (cpp_plan.h): which loop a nest is vectorized
// along, how a horizontal reduction accumulates, and whether the nest is a 2-D tile, a
// row-split column reduction or a split reduction.
#include "codegen/cpp/cpp_plan.h"
#include "sym/size_hints.h"

#include "ir/ir.h"
#include "support/check.h"

namespace coil {
namespace {

bool vectorizable_op(const BodyOp& op) {
  switch (op.op) {
    case LoopOp::load:
    case LoopOp::store:
    case LoopOp::constant:
      COIL_CPP_VEC_UNARY_METHOD_OP_CASES
    case LoopOp::neg:
    case LoopOp::add:
    case LoopOp::sub:
    case LoopOp::mul:
    case LoopOp::div:
    case LoopOp::pow:
    case LoopOp::maximum:
    case LoopOp::minimum:
    case LoopOp::fmod:
      return true;
    case LoopOp::reduction:
      return op.reduction != ReductionType::argmax && op.reduction != ReductionType::argmin;
      COIL_CPP_SCALAR_ONLY_OP_CASES
      return false;
  }
  COIL_UNREACHABLE("bad loop op");
}

/// Without a cascade, kAccumulators accumulators per reduction over consecutive vectors,
/// combined pairwise at the end: with one, every vector's math call waits for the previous
/// add, and softmax's exp-and-sum loop ran 1.5x slower. Only where the loop body has a
/// long-latency op (a math call, a division), or where every reduction is a max/min: a
/// NaN-propagating max is two dependent instructions per vector, and softmax's max loop with
/// four accumulators made the whole kernel 7-9% faster (A/B in one process, 1 and 2 threads).
/// A plain sum over loads runs at memory speed either way (measured on e1: no gain).
int plan_accumulators(const Nest& n, const CppVecPlan& v, int lanes) {
  for (bool c : v.cascade)
    if (c) return 1;
  bool only_min_max = true;
  for (int red : n.reductions) {
    ReductionType t = n.body.op(red).reduction;
    only_min_max = only_min_max && (t == ReductionType::max || t == ReductionType::min);
  }
  bool heavy = false;
  for (size_t i = 0; i < n.body.ops().size(); ++i) {
    if (n.after[i]) continue;
    const LoopOp op = n.body.op(static_cast<int>(i)).op;
    heavy = heavy || is_transcendental(op) || op == LoopOp::div || op == LoopOp::sqrt ||
            op == LoopOp::rsqrt || op == LoopOp::reciprocal;
  }
  const int64_t vectors = v.extent / lanes;
  return (heavy || only_min_max) && vectors >= 2 * kAccumulators ? kAccumulators : 1;
}

}  // namespace

bool mask_vector_op(const Nest& n, const BodyOp& op) {
  auto arg_dtype = [&](int k) { return n.body.dtype_of(op.args[static_cast<size_t>(k)]); };
  const DType f32 = DType::F32, mask = DType::Bool;
  switch (op.op) {
    case LoopOp::load:
      return op.dtype == mask && !is_indirect_load(op);
    case LoopOp::store:
      return op.dtype == mask;
    case LoopOp::logical_not:
      return arg_dtype(0) == mask;
    case LoopOp::logical_and:
    case LoopOp::logical_or:
      return arg_dtype(0) == mask && arg_dtype(1) == mask;
    case LoopOp::eq:
    case LoopOp::ne:
      return arg_dtype(0) == arg_dtype(1) && (arg_dtype(0) == f32 || arg_dtype(0) == mask);
    case LoopOp::lt:
    case LoopOp::le:
    case LoopOp::gt:
    case LoopOp::ge:
      return arg_dtype(0) == f32 && arg_dtype(1) == f32;
    case LoopOp::isnan:
      return arg_dtype(0) == f32;
    case LoopOp::where:
      return (op.dtype == f32 || op.dtype == mask) && arg_dtype(0) == mask &&
             arg_dtype(1) == op.dtype && arg_dtype(2) == op.dtype;
    case LoopOp::to_dtype:
      return (op.dtype == f32 && arg_dtype(0) == mask) || (op.dtype == mask && arg_dtype(0) == f32);
    default:
      return false;
  }
}

int64_t stride_along(const sym::Analyzer& a, const sym::Expr& index, const sym::Expr& var) {
  auto s = a.stride(index, var);
  if (!s) return -1;
  return s->as_const().value_or(-1);
}

sym::Expr var_of(const VecLoop& v) {
  return v.reduction ? reduction_var(static_cast<int>(v.index))
                     : loop_var(static_cast<int>(v.index));
}

std::optional<std::set<int>> vector_scalar_ops(const Nest& n, const VecLoop& loop) {
  const sym::Expr var = var_of(loop);
  std::set<int> scalar;
  for (int i = 0; i < static_cast<int>(n.body.ops().size()); ++i) {
    const BodyOp& op = n.body.op(i);
    auto is_scalar = [&](int k) { return scalar.count(op.args[static_cast<size_t>(k)]) > 0; };
    if (op.dtype == DType::F32) {
      // An f32 op in vector form, reading vectors, except a select on a scalar condition and
      // the conversion of a scalar (avg pooling's divisor where the window is clipped); a
      // select on a vector mask, or a mask's conversion, is a mask op (mask_vector_op).
      if (op.op == LoopOp::where) {
        if (is_scalar(1) || is_scalar(2)) return std::nullopt;
        if (!is_scalar(0) && !mask_vector_op(n, op)) return std::nullopt;
      } else if (op.op == LoopOp::to_dtype) {
        if (!is_scalar(0) && !mask_vector_op(n, op)) return std::nullopt;
      } else {
        if (is_indirect_load(op) || !vectorizable_op(op)) return std::nullopt;
        for (int k = 0; k < loop_op_arity(op.op); ++k)
          if (is_scalar(k)) return std::nullopt;
      }
      continue;
    }
    if (mask_vector_op(n, op)) {
      // A mask op whose operands are all vectors (a bool load, a mask store) stays in the
      // vector loop; one whose operands are all scalar is computed once before it (below).
      int scalar_args = 0;
      for (int k = 0; k < loop_op_arity(op.op); ++k) scalar_args += is_scalar(k) ? 1 : 0;
      if (op.op == LoopOp::load || (scalar_args == 0 && loop_op_arity(op.op) > 0)) continue;
      if (scalar_args < loop_op_arity(op.op)) return std::nullopt;  // mixed: no form
    }
    switch (op.op) {
      case LoopOp::load:
      case LoopOp::store:
      case LoopOp::reduction:
      case LoopOp::indirect_index:
        return std::nullopt;
      case LoopOp::index_expr:
        if (sym::depends_on(op.index, var)) return std::nullopt;
        break;
      default:
        for (int k = 0; k < loop_op_arity(op.op); ++k)
          if (!is_scalar(k)) return std::nullopt;
    }
    scalar.insert(i);
  }
  return scalar;
}

std::optional<VecLoop> choose_vec_loop(const Nest& n, size_t first_loop, int lanes, bool scalar_ops,
                                       bool masks) {
  if (lanes < 2) return std::nullopt;
  bool has_scalar = false;
  for (const BodyOp& op : n.body.ops()) {
    // Indirect loads (gather) print scalar: their index is a value, not a loop expression.
    if (is_indirect_load(op)) return std::nullopt;
    const bool f32_vector = vectorizable_op(op) && op.dtype == DType::F32;
    has_scalar = has_scalar || (!f32_vector && !(masks && mask_vector_op(n, op)));
  }
  // Scalar ops only in pointwise nests: a reduction's r loops open after the point where
  // they are printed.
  if (has_scalar && (!scalar_ops || !n.reductions.empty())) return std::nullopt;
  sym::Analyzer a = nest_analyzer(n);
  bool has_red = !n.reductions.empty() && !n.red_ranges.empty();
  if (has_red) {
    sym::Expr r = reduction_var(static_cast<int>(n.red_ranges.size() - 1));
    bool ok = true;
    for (size_t i = 0; i < n.body.ops().size(); ++i) {
      const BodyOp& op = n.body.op(static_cast<int>(i));
      int64_t s = op.index.defined() ? stride_along(a, op.index, r) : 0;
      if (op.op == LoopOp::load && s != 0 && s != 1) ok = false;
      // A prologue's store inside the reduction loop must be a contiguous vector store.
      if (op.op == LoopOp::store && !n.after[i] && s != 1) ok = false;
    }
    if (ok) return VecLoop{true, n.red_ranges.size() - 1};
  }
  if (n.ranges.size() <= first_loop) return std::nullopt;
  size_t xi = n.ranges.size() - 1;
  sym::Expr x = loop_var(static_cast<int>(xi));
  for (const BodyOp& op : n.body.ops()) {
    if (op.op == LoopOp::store && stride_along(a, op.index, x) != 1) return std::nullopt;
  }
  // A vertical reduction must not need a pointwise-lane value for its combine order: every
  // lane is its own output, so any reduction is fine here.
  if (has_scalar && !vector_scalar_ops(n, VecLoop{false, xi})) return std::nullopt;
  return VecLoop{false, xi};
}

CppVecPlan plan_vec(const Nest& n, const VecLoop& loop, int lanes) {
  CppVecPlan v;
  v.loop = loop;
  v.extent = loop.reduction ? n.red_ranges[loop.index] : n.ranges[loop.index];
  if (!loop.reduction) v.scalar = vector_scalar_ops(n, loop).value_or(std::set<int>{});
  if (loop.reduction) {
    // Long float sums accumulate in a cascade, so their error grows with log n rather than n.
    const bool long_rows = product(n.red_ranges) > kCascadeMinElements;
    for (int red : n.reductions)
      v.cascade.push_back(long_rows && n.body.op(red).reduction == ReductionType::sum);
    // A symbolic extent (a size-generic module's) keeps one accumulator, whose loop the
    // printer writes for any extent (cpp_vec_kernel.cpp); several need a plan per extent.
    const bool symbolic = n.red_range_text[loop.index] != std::to_string(n.red_ranges[loop.index]);
    v.accumulators = symbolic ? 1 : plan_accumulators(n, v, lanes);
  }
  return v;
}

std::optional<CppTilePlan> plan_tile2d(const Nest& n, int lanes) {
  if (n.ranges.size() != 2 || !n.reductions.empty()) return std::nullopt;
  auto vl = choose_vec_loop(n, 0, lanes);
  if (!vl || vl->reduction || vl->index != 1) return std::nullopt;
  sym::Analyzer a = nest_analyzer(n);
  const sym::Expr x0 = loop_var(0), x1 = loop_var(1);
  CppTilePlan t;
  for (int i = 0; i < static_cast<int>(n.body.ops().size()); ++i) {
    const BodyOp& op = n.body.op(i);
    if (op.op != LoopOp::load) continue;
    // A tile reads element (x0 + a, x1 + b) at start + a + b * s1: the index must be affine in
    // both loops with constant coefficients (x0 + 2*(x1 % 2) has a stride along x1 nowhere).
    auto s1 = a.linear_stride(op.index, x1), s0 = a.linear_stride(op.index, x0);
    int64_t s1c = s1 ? s1->as_const().value_or(0) : 0;
    if (s0 && s0->as_const() == 1 && s1c > 1) t.tiles[i] = s1c;
  }
  if (t.tiles.empty()) return std::nullopt;
  const int64_t rows = n.ranges[0], cols = n.ranges[1];
  // Tiles are visited in blocks of block_rows x kBlockCols elements (x0 x x1): the strided side
  // then reads block_rows * 4 contiguous bytes from each of kBlockCols rows per block instead of
  // one cache line per row over the whole matrix, and the contiguous side kBlockCols * 4 bytes
  // from each of block_rows rows. On a 4096x4096 x.t() + y: 23 ms at one thread unblocked,
  // 11.4-11.7 ms in 128x128 blocks, 10.2-10.5 ms in 512x64 (2 threads 5.9-6.1 -> 5.2-5.6 ms;
  // A/B in one process; 256x64 and 512x128 in between, 1024x64, 256x32 and 128x64 slower or
  // equal), where the same add without the transpose takes 9.4 ms. Blocks are also the unit
  // of parallel work: where 512-row blocks would leave fewer than 64 of them (a 16-core host
  // needs the work split finer), the rows come in 128s (128x64 measured like 128x128 above).
  constexpr int64_t kBlockCols = 64, kBlockRows = 512, kFewBlockRows = 128, kMinBlocks = 64;
  const int64_t col_blocks = (cols + kBlockCols - 1) / kBlockCols;
  const int64_t row_blocks = (rows + kBlockRows - 1) / kBlockRows;
  t.block_rows = row_blocks * col_blocks >= kMinBlocks ? kBlockRows : kFewBlockRows;
  t.block_cols = kBlockCols;
  t.whole_tiles = rows % lanes == 0 && cols % lanes == 0;
  // Below 64K elements (256 KiB of f32 per operand) the operands stay in L2: blocks would only
  // add loops.
  constexpr int64_t kMinBlockedElements = int64_t{64} << 10;
  t.blocked = (rows > t.block_rows || cols > kBlockCols) && rows * cols >= kMinBlockedElements;
  return t;
}

std::optional<CppRowSplitPlan> plan_row_split(const Nest& n, int lanes) {
  if (n.ranges.size() != 1 || n.red_ranges.size() != 1 || n.reductions.empty()) return std::nullopt;
  auto vl = choose_vec_loop(n, 0, lanes);
  if (!vl || vl->reduction) return std::nullopt;
  const int64_t cols = n.ranges[0], rows = n.red_ranges[0];
  if (cols > kRowSplitMaxColumns) return std::nullopt;
  // Whether the rows are many enough follows a symbolic row count: a guard of the module.
  const sym::Expr erows = n.red_range_expr.empty() ? sym::Expr(rows) : n.red_range_expr[0];
  if (!sym::decide_at_least(erows, kRowSplitMinRows).value_or(rows >= kRowSplitMinRows))
    return std::nullopt;
  // Chunks depend on the sizes only: about 256 rows each, at most 64. A symbolic row count
  // (at least kRowSplitMinRows, by the guard) always gets 64, so that the text holds for every
  // size, and chunks of ceil(rows / 64).
  CppRowSplitPlan r;
  const bool symbolic = !erows.is_const();
  r.chunks = symbolic ? 64 : std::min<int64_t>(64, (rows + 255) / 256);
  r.rows_per_chunk = (rows + r.chunks - 1) / r.chunks;
  r.rows_per_chunk_text =
      symbolic ? fmt::format("(({} + {}) / {})", n.red_range_text[0], r.chunks - 1, r.chunks)
               : std::to_string(r.rows_per_chunk);
  return r;
}

std::optional<CppSplitPlan> plan_split_reduction(const Nest& n) {
  if (n.reductions.empty() || n.red_ranges.empty() || product(n.ranges) >= kParallelThreadsHint ||
      product(n.red_ranges) < kSplitReductionMinElements)
    return std::nullopt;
  CppSplitPlan s;
  int64_t r0 = n.red_ranges[0], per_r0 = product(n.red_ranges) / std::max<int64_t>(r0, 1);
  s.chunk = std::max<int64_t>(1, kSplitReductionChunkElements / std::max<int64_t>(per_r0, 1));
  s.chunks = (r0 + s.chunk - 1) / s.chunk;
  if (s.chunks > 1024) {
    s.chunk = (r0 + 1023) / 1024;
    s.chunks = (r0 + s.chunk - 1) / s.chunk;
  }
  // Float sums inside a chunk use a cascade (error grows with log n, not n).
  for (int red : n.reductions) {
    const BodyOp& rop = n.body.op(red);
    s.cascade.push_back(rop.reduction == ReductionType::sum && is_floating(rop.dtype));
  }
  return s;
}

}  // namespace coil
