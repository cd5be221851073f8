// CppVecKernel: explicit SIMD for one loop nest, with coil_vec.h's coil::Vec<float> (the ISA's
// float register; kFloatLanes lanes). One loop steps by the vector width:
//   * horizontal reduction: the innermost r loop; vector accumulators, reduced across lanes
//     after the loop (in coil_vec.h's fixed order), then the scalar epilogue;
//   * pointwise and vertical reduction: the innermost x loop; each lane is one output.
// Accesses along the vector loop: stride 0 broadcasts a scalar, stride 1 is a vector load or
// store, any other stride gathers lane by lane. The main loop covers whole vectors; the tail
// (size % kFloatLanes elements) runs the same body with masked loads and stores, which never
// touch memory past the end.
#include <map>
#include <set>

#include "codegen/cpp/cpp_nest.h"
#include "ir/ir.h"
#include "support/check.h"

namespace coil {
namespace {

constexpr const char* kVec = "coil::Vec<float>";

// Full-vector stores to a graph output of at least this many bytes bypass the caches
// (store_stream): nothing in the graph reads an output back, and past the last-level cache a
// plain store first reads each line (read-for-ownership). x*0.5+1 on 16M floats: 6.1 -> 3.8 ms
// at 1 thread, 3.5 -> 2.7 ms at 2 (this 2-core Zen 4). Smaller outputs may still be in cache
// for the caller, where plain stores are faster.
constexpr int64_t kStreamMinBytes = int64_t{16} << 20;

bool streamed_store(const NestPrinter& p, int buffer) {
  if (buffer < 0) return false;
  const Buffer& b = p.buffer_info(buffer);
  if (b.kind != BufferKind::Output || p.storage_dtype(buffer) != DType::F32) return false;
  auto numel = b.layout.numel().as_const();
  return numel && *numel * 4 >= kStreamMinBytes;
}

// Independent vector accumulators of a horizontal reduction without a cascade.
constexpr int kAccumulators = 4;

bool vectorizable_op(const BodyOp& op) {
  switch (op.op) {
    case LoopOp::load:
    case LoopOp::store:
    case LoopOp::constant:
    case LoopOp::abs:
    case LoopOp::neg:
    case LoopOp::exp:
    case LoopOp::log:
    case LoopOp::log1p:
    case LoopOp::expm1:
    case LoopOp::sqrt:
    case LoopOp::rsqrt:
    case LoopOp::reciprocal:
    case LoopOp::relu:
    case LoopOp::sigmoid:
    case LoopOp::tanh:
    case LoopOp::erf:
    case LoopOp::sin:
    case LoopOp::cos:
    case LoopOp::floor:
    case LoopOp::ceil:
    case LoopOp::round:
    case LoopOp::sign:
    case LoopOp::round_to_bf16:
    case LoopOp::round_to_f16:
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
    case LoopOp::index_expr:
    case LoopOp::indirect_index:
    case LoopOp::to_dtype:
    case LoopOp::logical_not:
    case LoopOp::isnan:
    case LoopOp::eq:
    case LoopOp::ne:
    case LoopOp::lt:
    case LoopOp::le:
    case LoopOp::gt:
    case LoopOp::ge:
    case LoopOp::logical_and:
    case LoopOp::logical_or:
    case LoopOp::where:
      return false;
  }
  COIL_UNREACHABLE("bad loop op");
}

/// Stride of `index` along `var`: 0, 1, or anything else (-1 = not constant).
int64_t stride_along(const sym::Analyzer& a, const sym::Expr& index, const sym::Expr& var) {
  auto s = a.stride(index, var);
  if (!s) return -1;
  return s->as_const().value_or(-1);
}

sym::Expr var_of(const VecLoop& v) {
  return v.reduction ? reduction_var(static_cast<int>(v.index))
                     : loop_var(static_cast<int>(v.index));
}

/// Prints the vector ops of a nest, for a main loop (count empty) or its tail (count "tail").
class VecOpPrinter {
 public:
  VecOpPrinter(NestPrinter& p, const Nest& n, const sym::Analyzer& a, const VecLoop& v,
               std::string count, std::map<int, std::string> tiles = {})
      : p_(p),
        n_(n),
        a_(a),
        v_(v),
        var_(var_of(v)),
        count_(std::move(count)),
        tiles_(std::move(tiles)) {}

  void emit(const std::function<bool(int)>& pick) {
    CodeWriter& w = p_.writer();
    for (int i = 0; i < static_cast<int>(n_.body.ops().size()); ++i) {
      if (!pick(i)) continue;
      const BodyOp& op = n_.body.op(i);
      std::string t = p_.tmp(n_, i);
      auto arg = [&](int k) { return p_.tmp(n_, op.args[static_cast<size_t>(k)]); };
      switch (op.op) {
        case LoopOp::reduction:
          break;
        case LoopOp::load:
          if (tiles_.count(i)) {
            // A row of a transposed tile (CppTile2DKernel), contiguous in L1.
            w.linef("auto {} = {}::loadu(&{}[a * {}]{});", t, kVec, tiles_.at(i), p_.lanes(),
                    count_arg());
          } else {
            emit_load(op, t);
          }
          break;
        case LoopOp::store: {
          if (p_.store_dropped(op.buffer)) break;
          COIL_ASSERT(stride_along(a_, op.index, var_) == 1, "vector store must be contiguous");
          bool stream = count_.empty() && streamed_store(p_, op.buffer);
          w.linef("{}.{}(&{}{});", arg(0), stream ? "store_stream" : "store",
                  p_.access(n_, op.buffer, op.index, a_), count_arg());
          break;
        }
        case LoopOp::constant:
          w.linef("auto {} = {}({});", t, kVec, cpp_float(op.fvalue));
          break;
        case LoopOp::neg:
          w.linef("auto {} = -{};", t, arg(0));
          break;
        case LoopOp::add:
          w.linef("auto {} = {} + {};", t, arg(0), arg(1));
          break;
        case LoopOp::sub:
          w.linef("auto {} = {} - {};", t, arg(0), arg(1));
          break;
        case LoopOp::mul:
          w.linef("auto {} = {} * {};", t, arg(0), arg(1));
          break;
        case LoopOp::div:
          w.linef("auto {} = {} / {};", t, arg(0), arg(1));
          break;
        case LoopOp::pow:
        case LoopOp::maximum:
        case LoopOp::minimum:
        case LoopOp::fmod:
          w.linef("auto {} = {}.{}({});", t, arg(0), loop_op_name(op.op), arg(1));
          break;
        case LoopOp::abs:
        case LoopOp::exp:
        case LoopOp::log:
        case LoopOp::log1p:
        case LoopOp::expm1:
        case LoopOp::sqrt:
        case LoopOp::rsqrt:
        case LoopOp::reciprocal:
        case LoopOp::relu:
        case LoopOp::sigmoid:
        case LoopOp::tanh:
        case LoopOp::erf:
        case LoopOp::sin:
        case LoopOp::cos:
        case LoopOp::floor:
        case LoopOp::ceil:
        case LoopOp::round:
        case LoopOp::sign:
        case LoopOp::round_to_bf16:
        case LoopOp::round_to_f16:
          w.linef("auto {} = {}.{}();", t, arg(0), loop_op_name(op.op));
          break;
        case LoopOp::index_expr:
        case LoopOp::indirect_index:
        case LoopOp::to_dtype:
        case LoopOp::logical_not:
        case LoopOp::isnan:
        case LoopOp::eq:
        case LoopOp::ne:
        case LoopOp::lt:
        case LoopOp::le:
        case LoopOp::gt:
        case LoopOp::ge:
        case LoopOp::logical_and:
        case LoopOp::logical_or:
        case LoopOp::where:
          COIL_UNREACHABLE("{} is not vectorizable", loop_op_name(op.op));
      }
    }
  }

 private:
  std::string count_arg() const { return count_.empty() ? "" : ", " + count_; }

  static std::string cpp_float(double v) {
    if (std::isnan(v)) return "std::numeric_limits<float>::quiet_NaN()";
    if (std::isinf(v))
      return v > 0 ? "std::numeric_limits<float>::infinity()"
                   : "-std::numeric_limits<float>::infinity()";
    std::string s = fmt::format("{}", static_cast<float>(v));
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s + "f";
  }

  void emit_load(const BodyOp& op, const std::string& t) {
    CodeWriter& w = p_.writer();
    std::string lv = p_.access(n_, op.buffer, op.index, a_);
    int64_t s = stride_along(a_, op.index, var_);
    if (s == 0) {
      w.linef("auto {} = {}(static_cast<float>({}));", t, kVec, lv);
    } else if (s == 1) {
      w.linef("auto {} = {}::loadu(&{}{});", t, kVec, lv, count_arg());
      if (int64_t ahead = p_.prefetch_ahead(n_, op.buffer, op.index, a_))
        w.linef("coil::prefetch_ahead(&{}, {});", lv, ahead);
    } else {
      // Gather: each lane reads at its own index (the loop variable shadowed per lane).
      std::string v = var_.symbol_name();
      w.linef("alignas(64) float {}_lanes[{}] = {{}};", t, p_.lanes());
      w.open();
      w.linef("const int64_t {0}_vec = {0};", v);
      w.linef("for (int64_t lane = 0; lane < {}; lane++)",
              count_.empty() ? std::to_string(p_.lanes()) : count_);
      w.open();
      w.linef("const int64_t {0} = {0}_vec + lane;", v);
      w.linef("{}_lanes[lane] = static_cast<float>({});", t, lv);
      w.close();
      w.close();
      w.linef("auto {0} = {1}::loadu({0}_lanes);", t, kVec);
    }
  }

  NestPrinter& p_;
  const Nest& n_;
  const sym::Analyzer& a_;
  VecLoop v_;
  sym::Expr var_;
  std::string count_;
  std::map<int, std::string> tiles_;  // op -> tile array holding its transposed values
};

struct VecReduction {
  std::string init, combine, finalize;  // {acc} {v}; finalize reduces lanes
};

VecReduction vec_reduction(ReductionType t) {
  switch (t) {
    case ReductionType::sum:
      return {"0.0f", "{acc} + {v}", "{acc}.reduce_add()"};
    case ReductionType::prod:
      return {"1.0f", "{acc} * {v}", "{acc}.reduce_mul()"};
    case ReductionType::max:
      return {"coil::lowest<float>()", "{acc}.maximum({v})", "{acc}.reduce_max()"};
    case ReductionType::min:
      return {"coil::highest<float>()", "{acc}.minimum({v})", "{acc}.reduce_min()"};
    case ReductionType::argmax:
    case ReductionType::argmin:
      break;
  }
  COIL_UNREACHABLE("{} has no vector form", reduction_type_name(t));
}

/// The first element of the nest's streamed store (its access with the vector variable 0) when
/// that is not provably on a vector boundary for every value of the outer loops, e.g.
/// out[1000*x0 + x1] with 16 lanes; nullopt otherwise (no streamed store, or always aligned).
std::optional<std::string> misaligned_stream(const NestPrinter& p, const Nest& n,
                                             const sym::Analyzer& a, const VecLoop& v) {
  for (const BodyOp& op : n.body.ops()) {
    if (op.op != LoopOp::store || !streamed_store(p, op.buffer) || p.store_dropped(op.buffer))
      continue;
    sym::Expr start = a.simplify(sym::substitute(op.index, {{var_of(v), sym::Expr(0)}}));
    if (a.statically_known_multiple_of(start, p.lanes())) return std::nullopt;
    return p.access(n, op.buffer, start, a);
  }
  return std::nullopt;
}

/// `v` from `begin` to `end` (C++ expressions, known at run time): whole vectors, then one
/// masked tail of `tail` lanes. `body(count)` prints one vector's ops ("" = whole).
void emit_whole_and_tail(CodeWriter& w, const std::string& v, const std::string& begin,
                         const std::string& end, int64_t lanes,
                         const std::function<void(const std::string&)>& body) {
  w.linef("int64_t {0} = {1};", v, begin);
  w.linef("for (; {0} + {1} <= {2}; {0} += {1})", v, lanes, end);
  w.open();
  body("");
  w.close();
  w.linef("if ({} < {})", v, end);
  w.open();
  w.linef("const int64_t tail = {} - {};", end, v);
  body("tail");
  w.close();
}

}  // namespace

bool nest_streams(const NestPrinter& p, const Nest& n) {
  for (const BodyOp& op : n.body.ops())
    if (op.op == LoopOp::store && streamed_store(p, op.buffer)) return true;
  return false;
}

std::optional<VecLoop> choose_vec_loop(const Nest& n, size_t first_loop, int lanes) {
  if (lanes < 2) return std::nullopt;
  for (const BodyOp& op : n.body.ops()) {
    // Indirect loads (gather) print scalar: their index is a value, not a loop expression.
    if (is_indirect_load(op)) return std::nullopt;
    if (!vectorizable_op(op) || op.dtype != DType::F32) return std::nullopt;
  }
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
  return VecLoop{false, xi};
}

void emit_vec_nest(NestPrinter& p, const Nest& n, size_t first_loop, bool parallel) {
  auto vl = choose_vec_loop(n, first_loop, p.lanes());
  COIL_ASSERT(vl.has_value(), "emit_vec_nest on a nest without a vector loop");
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  size_t x_end = vl->reduction ? n.ranges.size() : vl->index;
  for (size_t i = first_loop; i < x_end; ++i) {
    w.linef("for (int64_t x{0} = 0; x{0} < {1}; x{0}++)", i, n.ranges[i]);
    w.open();
  }
  // The vector loop as a main part of whole vectors and a masked tail.
  std::string v = vl->reduction ? fmt::format("r{}", vl->index) : fmt::format("x{}", vl->index);
  int64_t extent = vl->reduction ? n.red_ranges[vl->index] : n.ranges[vl->index];
  const int64_t lanes = p.lanes(), full = extent / lanes * lanes;
  auto main_and_tail = [&](const std::function<void(const std::string& count)>& body, bool par) {
    if (full > 0) {
      if (par) w.line("#pragma omp parallel for");
      w.linef("for (int64_t {0} = 0; {0} < {1}; {0} += {2})", v, full, lanes);
      w.open();
      body("");
      w.close();
    }
    if (extent % lanes != 0) {
      w.open();
      w.linef("const int64_t {} = {};", v, full);
      w.linef("const int64_t tail = {};", extent - full);
      body("tail");
      w.close();
    }
  };
  auto inside = [&](int i) { return !n.after[static_cast<size_t>(i)]; };
  auto after = [&](int i) { return n.after[static_cast<size_t>(i)]; };

  if (n.reductions.empty()) {
    auto body = [&](const std::string& count) { VecOpPrinter(p, n, a, *vl, count).emit(inside); };
    std::optional<std::string> start = parallel ? std::nullopt : misaligned_stream(p, n, a, *vl);
    if (!start) {
      main_and_tail(body, parallel);
    } else {
      // The streamed output's rows start off the vector alignment: a masked head up to it,
      // then whole vectors that all stream, then the tail (softmax [10000, 1000]: 23-28% faster
      // than streaming only the rows that happen to be aligned).
      w.open();
      w.linef("const int64_t head = coil::stream_head(&{}, {});", *start, extent);
      w.line("if (head > 0)");
      w.open();
      w.linef("const int64_t {} = 0;", v);
      body("head");
      w.close();
      emit_whole_and_tail(w, v, "head", std::to_string(extent), lanes, body);
      w.close();
    }
  } else if (vl->reduction) {
    // Horizontal: vector accumulators over the r loops, reduced across lanes at the end. Long
    // float sums accumulate in a cascade, so their error grows with log n rather than n.
    const bool long_rows = product(n.red_ranges) > kCascadeMinElements;
    auto cascade = [&](size_t k) {
      return long_rows && n.body.op(n.reductions[k]).reduction == ReductionType::sum;
    };
    std::vector<std::string> accs;
    for (size_t k = 0; k < n.reductions.size(); ++k) {
      int red = n.reductions[k];
      accs.push_back(p.new_acc() + "_vec");
      if (cascade(k)) {
        w.linef("coil::CascadeSum<{}> {};", kVec, accs.back());
      } else {
        w.linef("auto {} = {}({});", accs.back(), kVec,
                vec_reduction(n.body.op(red).reduction).init);
      }
    }
    // Without a cascade, kAccumulators accumulators per reduction over consecutive vectors
    // (unrolled main loop), combined pairwise at the end: with one, every vector's math call
    // waits for the previous add, and softmax's exp-and-sum loop ran 1.5x slower.
    bool any_cascade = false;
    for (size_t k = 0; k < accs.size(); ++k) any_cascade = any_cascade || cascade(k);
    // Only where the loop body has a long-latency op (a math call, a division), or where every
    // reduction is a max/min: a NaN-propagating max is two dependent instructions per vector, and
    // softmax's max loop with four accumulators made the whole kernel 7-9% faster (A/B in one
    // process, 1 and 2 threads). A plain sum over loads runs at memory speed either way
    // (measured on e1: no gain), and every unrolled body costs compile time.
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
    const int64_t vectors = extent / lanes;
    const bool unroll = (heavy || only_min_max) && !any_cascade && vectors >= 2 * kAccumulators;
    std::vector<std::vector<std::string>> part_accs(accs.size());
    if (unroll) {
      for (size_t k = 0; k < accs.size(); ++k) {
        part_accs[k].push_back(accs[k]);
        for (int u = 1; u < kAccumulators; ++u) {
          part_accs[k].push_back(fmt::format("{}{}", accs[k], u));
          w.linef("auto {} = {};", part_accs[k].back(), accs[k]);
        }
      }
    }
    auto combine_into = [&](size_t k, const std::string& acc, const std::string& count) {
      const BodyOp& rop = n.body.op(n.reductions[k]);
      std::string c = subst(subst(vec_reduction(rop.reduction).combine, "{acc}", acc), "{v}",
                            p.tmp(n, rop.args[0]));
      if (count.empty())
        w.linef("{} = {};", acc, c);
      else
        w.linef("{0} = {1}::set({0}, {2}, {3});", acc, kVec, c, count);
    };
    if (unroll) {
      const int64_t step = lanes * kAccumulators, unrolled = vectors / kAccumulators * step;
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) {
        w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_ranges[j]);
        w.open();
      }
      w.linef("for (int64_t {0}_base = 0; {0}_base < {1}; {0}_base += {2})", v, unrolled, step);
      w.open();
      for (int u = 0; u < kAccumulators; ++u) {
        w.open();
        w.linef("const int64_t {0} = {0}_base + {1};", v, u * lanes);
        VecOpPrinter(p, n, a, *vl, "").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, part_accs[k][u], "");
        w.close();
      }
      w.close();
      if (unrolled < full) {
        w.linef("for (int64_t {0} = {1}; {0} < {2}; {0} += {3})", v, unrolled, full, lanes);
        w.open();
        VecOpPrinter(p, n, a, *vl, "").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, accs[k], "");
        w.close();
      }
      if (extent % lanes != 0) {
        w.open();
        w.linef("const int64_t {} = {};", v, full);
        w.linef("const int64_t tail = {};", extent - full);
        VecOpPrinter(p, n, a, *vl, "tail").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, accs[k], "tail");
        w.close();
      }
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) w.close();
      // Pairwise, in a fixed order: (a0 + a1) + (a2 + a3).
      for (size_t k = 0; k < accs.size(); ++k) {
        const std::string& comb = vec_reduction(n.body.op(n.reductions[k]).reduction).combine;
        auto pair = [&](const std::string& x, const std::string& y) {
          return subst(subst(comb, "{acc}", x), "{v}", y);
        };
        std::vector<std::string> level = part_accs[k];
        while (level.size() > 1) {
          std::vector<std::string> next;
          for (size_t i = 0; i + 1 < level.size(); i += 2)
            next.push_back(fmt::format("({})", pair(level[i], level[i + 1])));
          if (level.size() % 2) next.push_back(level.back());
          level = std::move(next);
        }
        w.linef("{} = {};", accs[k], level[0].substr(1, level[0].size() - 2));
      }
    }
    if (!unroll) {
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) {
        w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_ranges[j]);
        w.open();
      }
    }
    if (!unroll)
      main_and_tail(
          [&](const std::string& count) {
            VecOpPrinter(p, n, a, *vl, count).emit(inside);
            for (size_t k = 0; k < accs.size(); ++k) {
              const BodyOp& rop = n.body.op(n.reductions[k]);
              std::string v = p.tmp(n, rop.args[0]);
              if (cascade(k)) {
                if (count.empty())
                  w.linef("{}.add({});", accs[k], v);
                else
                  w.linef("{}.add({}::set({}(0.0f), {}, {}));", accs[k], kVec, kVec, v, count);
                continue;
              }
              std::string c =
                  subst(subst(vec_reduction(rop.reduction).combine, "{acc}", accs[k]), "{v}", v);
              if (count.empty())
                w.linef("{} = {};", accs[k], c);
              else
                w.linef("{0} = {1}::set({0}, {2}, {3});", accs[k], kVec, c, count);
            }
          },
          false);
    if (!unroll)
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) w.close();
    for (size_t k = 0; k < accs.size(); ++k) {
      int red = n.reductions[k];
      std::string acc = cascade(k) ? accs[k] + ".result()" : accs[k];
      w.linef("float {} = {};", p.tmp(n, red),
              subst(vec_reduction(n.body.op(red).reduction).finalize, "{acc}", acc));
    }
    p.emit_scalar_ops(n, a, after);
  } else {
    // Vertical: each lane accumulates its own output over the scalar r loops.
    main_and_tail(
        [&](const std::string& count) {
          std::vector<std::string> accs;
          for (int red : n.reductions) {
            accs.push_back(p.new_acc() + "_vec");
            w.linef("auto {} = {}({});", accs.back(), kVec,
                    vec_reduction(n.body.op(red).reduction).init);
          }
          for (size_t j = 0; j < n.red_ranges.size(); ++j) {
            w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_ranges[j]);
            w.open();
          }
          VecOpPrinter(p, n, a, *vl, count).emit(inside);
          for (size_t k = 0; k < accs.size(); ++k) {
            const BodyOp& rop = n.body.op(n.reductions[k]);
            w.linef("{} = {};", accs[k],
                    subst(subst(vec_reduction(rop.reduction).combine, "{acc}", accs[k]), "{v}",
                          p.tmp(n, rop.args[0])));
          }
          for (size_t j = 0; j < n.red_ranges.size(); ++j) w.close();
          for (size_t k = 0; k < accs.size(); ++k)
            w.linef("auto {} = {};", p.tmp(n, n.reductions[k]), accs[k]);
          VecOpPrinter(p, n, a, *vl, count).emit(after);
        },
        parallel);
  }
  for (size_t i = first_loop; i < x_end; ++i) w.close();
}

bool emit_vec_segment(NestPrinter& p, const Nest& n, const std::string& begin,
                      const std::string& end) {
  if (!n.reductions.empty() || n.ranges.empty()) return false;
  auto vl = choose_vec_loop(n, n.ranges.size() - 1, p.lanes());
  if (!vl || vl->reduction || vl->index != n.ranges.size() - 1) return false;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  std::string v = fmt::format("x{}", vl->index);
  auto all = [](int) { return true; };
  emit_whole_and_tail(w, v, begin, end, p.lanes(), [&](const std::string& count) {
    VecOpPrinter(p, n, a, *vl, count).emit(all);
  });
  return true;
}

bool emit_row_split_reduction(NestPrinter& p, const Nest& n) {
  if (n.ranges.size() != 1 || n.red_ranges.size() != 1 || n.reductions.empty()) return false;
  auto vl = choose_vec_loop(n, 0, p.lanes());
  if (!vl || vl->reduction) return false;
  const int64_t cols = n.ranges[0], rows = n.red_ranges[0], lanes = p.lanes();
  if (cols > kRowSplitMaxColumns || rows < kRowSplitMinRows) return false;
  // Chunks depend on the sizes only: about 256 rows each, at most 64.
  const int64_t chunks = std::min<int64_t>(64, (rows + 255) / 256);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  auto inside = [&](int i) { return !n.after[static_cast<size_t>(i)]; };
  auto after = [&](int i) { return n.after[static_cast<size_t>(i)]; };
  const int64_t full = cols / lanes * lanes;
  // Runs `body(count)` over the columns: whole vectors, then a masked tail.
  auto over_columns = [&](const std::function<void(const std::string&)>& body) {
    if (full > 0) {
      w.linef("for (int64_t x0 = 0; x0 < {}; x0 += {})", full, lanes);
      w.open();
      body("");
      w.close();
    }
    if (cols % lanes != 0) {
      w.open();
      w.linef("const int64_t x0 = {};", full);
      w.linef("const int64_t tail = {};", cols - full);
      body("tail");
      w.close();
    }
  };
  auto cnt = [](const std::string& c) { return c.empty() ? std::string() : ", " + c; };
  // The partial rows are placed away from the input rows and each other in the low 12 address
  // bits (coil::ScratchArray: 4K aliasing), and reached through a plain pointer: through the
  // array object, the loop would reload its data pointer after every vector store (an
  // intrinsic store may alias anything).
  std::vector<std::string> streams, parts;
  for (const BodyOp& op : n.body.ops())
    if (op.op == LoopOp::load && op.buffer >= 0) {
      std::string ptr = p.pointer(op.buffer);
      if (std::find(streams.begin(), streams.end(), ptr) == streams.end()) streams.push_back(ptr);
    }
  for (size_t k = 0; k < n.reductions.size(); ++k) {
    parts.push_back(p.new_acc() + "_part");
    w.linef("coil::ScratchArray<float> {}_storage({}, {{{}}});", parts.back(), chunks * cols,
            fmt::join(streams, ", "));
    w.linef("float* const {0} = {0}_storage.get();", parts.back());
    streams.push_back(parts.back());
  }
  w.linef("// {} rows in {} chunks of {}: partial column results, combined in chunk order", rows,
          chunks, rows_per_chunk);
  w.line("#pragma omp parallel for");
  w.linef("for (int64_t c = 0; c < {}; c++)", chunks);
  w.open();
  over_columns([&](const std::string& count) {
    for (size_t k = 0; k < parts.size(); ++k) {
      w.linef("{}({}).store(&{}[c * {} + x0]{});", kVec,
              vec_reduction(n.body.op(n.reductions[k]).reduction).init, parts[k], cols, cnt(count));
    }
  });
  w.linef("for (int64_t r0 = c * {0}; r0 < std::min<int64_t>(c * {0} + {0}, {1}); r0++)",
          rows_per_chunk, rows);
  w.open();
  over_columns([&](const std::string& count) {
    VecOpPrinter(p, n, a, *vl, count).emit(inside);
    for (size_t k = 0; k < parts.size(); ++k) {
      const BodyOp& rop = n.body.op(n.reductions[k]);
      std::string acc =
          fmt::format("{}::loadu(&{}[c * {} + x0]{})", kVec, parts[k], cols, cnt(count));
      std::string c = subst(subst(vec_reduction(rop.reduction).combine, "{acc}", "(" + acc + ")"),
                            "{v}", p.tmp(n, rop.args[0]));
      w.linef("({}).store(&{}[c * {} + x0]{});", c, parts[k], cols, cnt(count));
    }
  });
  w.close();
  w.close();
  over_columns([&](const std::string& count) {
    for (size_t k = 0; k < parts.size(); ++k) {
      int red = n.reductions[k];
      std::string acc = p.tmp(n, red);
      w.linef("auto {} = {}::loadu(&{}[x0]{});", acc, kVec, parts[k], cnt(count));
      w.linef("for (int64_t c = 1; c < {}; c++)", chunks);
      w.open();
      std::string c =
          subst(subst(vec_reduction(n.body.op(red).reduction).combine, "{acc}", acc), "{v}",
                fmt::format("{}::loadu(&{}[c * {} + x0]{})", kVec, parts[k], cols, cnt(count)));
      w.linef("{} = {};", acc, c);
      w.close();
    }
    VecOpPrinter(p, n, a, *vl, count).emit(after);
  });
  return true;
}

bool emit_tile2d_nest(NestPrinter& p, const Nest& n, bool parallel) {
  if (n.ranges.size() != 2 || !n.reductions.empty()) return false;
  auto vl = choose_vec_loop(n, 0, p.lanes());
  if (!vl || vl->reduction || vl->index != 1) return false;
  sym::Analyzer a = nest_analyzer(n);
  const sym::Expr x0 = loop_var(0), x1 = loop_var(1);
  std::map<int, std::string> tiles;
  std::map<int, int64_t> tile_strides;  // stride along x1 of each transposed operand
  for (int i = 0; i < static_cast<int>(n.body.ops().size()); ++i) {
    const BodyOp& op = n.body.op(i);
    if (op.op != LoopOp::load) continue;
    // A tile reads element (x0 + a, x1 + b) at start + a + b * s1: the index must be affine in
    // both loops with constant coefficients (x0 + 2*(x1 % 2) has a stride along x1 nowhere).
    auto s1 = a.linear_stride(op.index, x1), s0 = a.linear_stride(op.index, x0);
    int64_t s1c = s1 ? s1->as_const().value_or(0) : 0;
    if (s0 && s0->as_const() == 1 && s1c > 1) {
      tiles[i] = p.tmp(n, i) + "_tile";
      tile_strides[i] = s1c;
    }
  }
  if (tiles.empty()) return false;
  const int64_t L = p.lanes(), rows = n.ranges[0], cols = n.ranges[1];
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
  const int64_t block_rows = row_blocks * col_blocks >= kMinBlocks ? kBlockRows : kFewBlockRows;
  const bool full = rows % L == 0 && cols % L == 0;  // no partial tile: unmasked accesses
  // Below 64K elements (256 KiB of f32 per operand) the operands stay in L2: blocks would only
  // add loops.
  constexpr int64_t kMinBlockedElements = int64_t{64} << 10;
  const bool blocked =
      (rows > block_rows || cols > kBlockCols) && rows * cols >= kMinBlockedElements;
  CodeWriter& w = p.writer();
  w.linef(
      "// 2-D tiles of {0}x{0}{1}: transposed operands are read along x0, transposed in "
      "registers",
      L, blocked ? fmt::format(" in blocks of {}x{}", block_rows, kBlockCols) : "");
  if (blocked) {
    if (parallel) w.line("#pragma omp parallel for collapse(2)");
    w.linef("for (int64_t x0_block = 0; x0_block < {}; x0_block += {})", rows, block_rows);
    w.linef("for (int64_t x1_block = 0; x1_block < {}; x1_block += {})", cols, kBlockCols);
    w.open();
    w.linef(
        "for (int64_t x0_tile = x0_block; x0_tile < std::min<int64_t>(x0_block + {}, {}); "
        "x0_tile += {})",
        block_rows, rows, L);
    w.open();
    w.linef(
        "for (int64_t x1_tile = x1_block; x1_tile < std::min<int64_t>(x1_block + {}, {}); "
        "x1_tile += {})",
        kBlockCols, cols, L);
    w.open();
  } else {
    if (parallel) w.line("#pragma omp parallel for");
    w.linef("for (int64_t x0_tile = 0; x0_tile < {}; x0_tile += {})", rows, L);
    w.open();
    w.linef("for (int64_t x1_tile = 0; x1_tile < {}; x1_tile += {})", cols, L);
    w.open();
  }
  if (full) {
    w.linef("constexpr int64_t rows = {0}, cols = {0};", L);
  } else {
    w.linef("const int64_t rows = std::min<int64_t>({}, {} - x0_tile);", L, rows);
    w.linef("const int64_t cols = std::min<int64_t>({}, {} - x1_tile);", L, cols);
  }
  for (const auto& [i, tile] : tiles) {
    const BodyOp& op = n.body.op(i);
    w.linef("alignas(64) float {}[{}];", tile, L * L);
    // Source row b: elements (x0_tile + 0..rows, x1_tile + b), contiguous, tile_strides[i] apart.
    // coil::transpose_tile loads the cols x rows block as row vectors (masked in the tails),
    // transposes it in registers and stores tile[a][b].
    w.open();
    w.line("const int64_t x0 = x0_tile;");
    w.line("const int64_t x1 = x1_tile;");
    w.linef("coil::transpose_tile(&{}, {}, {}, {}, cols, rows);",
            p.access(n, op.buffer, op.index, a), tile_strides.at(i), tile, L);
    w.close();
  }
  w.line("for (int64_t a = 0; a < rows; a++)");
  w.open();
  w.line("const int64_t x0 = x0_tile + a;");
  w.line("const int64_t x1 = x1_tile;");
  VecOpPrinter(p, n, a, *vl, full ? "" : "cols", tiles).emit([](int) { return true; });
  w.close();
  w.close();
  w.close();
  if (blocked) w.close();
  return true;
}

}  // namespace coil
