// The CPU backend's planning step: every decision about how a kernel's loop nests are printed,
// made before any text is written (as triton_plan.h does for the GPU). The printers
// (cpp_kernel.cpp, cpp_vec_kernel.cpp, cpp_tile_kernel.cpp, cpp_template.cpp) print what the
// plan says and test no shapes of their own.
//
// Per nest the plan names its kind:
//   scalar           plain loops (no vector form: an op, dtype or access without one);
//   vector           CppVecKernel along one loop (choose_vec_loop): horizontal reduction along
//                    the innermost r loop, or pointwise / vertical reduction along the
//                    innermost x loop; its accumulators, streaming stores and prefetches;
//   tile2d           CppTile2DKernel: a transpose read through lanes x lanes tiles in L1;
//   row_split        a column reduction split over fixed chunks of rows;
//   split_reduction  a lone reduction with too few outputs, split over its outermost r loop;
//   matmul_template, library_matmul, extern_conv: kernels that are not loop nests.
// and per kernel the shared outer loops, how many of them OpenMP parallelizes, the local row
// buffers (stack or per-thread heap), the small 16-bit inputs widened once per call and the
// constants packed at load time. COIL_LOGS=plan prints it (to_string).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp/cpp_kernel.h"
#include "codegen/cpp/cpp_nest.h"

/// The loop ops that the vector type spells as a method of one operand (`x.exp()`): the vector
/// printer (cpp_vec_ops.h) and vectorizable_op (cpp_plan_nest.cpp) share the list, as `case`
/// labels, so that both switches stay exhaustive without a `default:`.
#define COIL_CPP_VEC_UNARY_METHOD_OP_CASES \
  case LoopOp::abs:                        \
  case LoopOp::exp:                        \
  case LoopOp::log:                        \
  case LoopOp::log1p:                      \
  case LoopOp::expm1:                      \
  case LoopOp::sqrt:                       \
  case LoopOp::rsqrt:                      \
  case LoopOp::reciprocal:                 \
  case LoopOp::relu:                       \
  case LoopOp::sigmoid:                    \
  case LoopOp::tanh:                       \
  case LoopOp::erf:                        \
  case LoopOp::sin:                        \
  case LoopOp::cos:                        \
  case LoopOp::floor:                      \
  case LoopOp::ceil:                       \
  case LoopOp::round:                      \
  case LoopOp::sign:                       \
  case LoopOp::round_to_bf16:              \
  case LoopOp::round_to_f16:

/// The loop ops with no vector form: a nest that holds one is printed as scalar loops.
#define COIL_CPP_SCALAR_ONLY_OP_CASES \
  case LoopOp::index_expr:            \
  case LoopOp::indirect_index:        \
  case LoopOp::to_dtype:              \
  case LoopOp::logical_not:           \
  case LoopOp::isnan:                 \
  case LoopOp::eq:                    \
  case LoopOp::ne:                    \
  case LoopOp::lt:                    \
  case LoopOp::le:                    \
  case LoopOp::gt:                    \
  case LoopOp::ge:                    \
  case LoopOp::logical_and:           \
  case LoopOp::logical_or:            \
  case LoopOp::where:

namespace coil {

enum class CppNestKind {
  Scalar,
  Vector,
  Tile2D,
  RowSplit,
  SplitReduction,
  MatmulTemplate,
  LibraryMatmul,
  ExternConv,
  ExternAttention,
  ExternIndexAdd,
};
std::string_view cpp_nest_kind_name(CppNestKind k);  // "vector", "tile2d", ...

/// A pointwise nest whose innermost loop is vectorized only inside [begin, end), its interior:
/// there every comparison of the loop variable against a bound (a padded window's "inside the
/// input" test) is decided, and `interior` is the body with those tests folded, the selects
/// they drive resolved and the clamps of its indices simplified away. The loop runs [0, begin)
/// and [end, extent) as scalar loops of the nest's own body (cpp_plan_window.cpp).
struct CppWindowSplit {
  int64_t begin = 0, end = 0;
  size_t loop = 0;  // the split loop (the nest's innermost)
  Nest interior;
};

/// A vector nest (CppVecKernel).
struct CppVecPlan {
  VecLoop loop{};
  int64_t extent = 0;  // iterations of the vector loop
  /// Independent accumulators per horizontal reduction over consecutive vectors (1 or
  /// kAccumulators; cpp_plan.cpp: plan_accumulators says when).
  int accumulators = 1;
  std::vector<bool> cascade;  // per reduction: long float sum in a coil::CascadeSum
  std::set<int> streamed;     // store ops whose whole vectors bypass the caches
  /// A streamed store whose rows start off the vector alignment: the loop starts with a
  /// masked head up to it (-1: none).
  int stream_head_store = -1;
  std::map<int, int64_t> prefetch;  // load op -> elements ahead (a later row) to prefetch
  /// Ops whose value is the same for every iteration of the vector loop (and of the loops
  /// inside it): broadcasts of stride-0 loads, constants and what is computed from them only.
  /// They are printed once, before the loop (not in loops whose stores stream: see
  /// cpp_plan.cpp, plan_invariants).
  std::set<int> invariant;
  /// Ops of a pointwise nest that are not f32 (index arithmetic, comparisons, masks) but whose
  /// value is the same in every lane: printed in scalar form once before the vector loop; a
  /// `where` on one of them selects whole vectors, a conversion of one to f32 broadcasts it
  /// (vector_scalar_ops).
  std::set<int> scalar;
  std::optional<CppWindowSplit> window;  // vectorized only in the interior of the loop
};

/// A 2-D tile nest (CppTile2DKernel).
struct CppTilePlan {
  std::map<int, int64_t> tiles;  // transposed load op -> its stride along x1
  int64_t block_rows = 0, block_cols = 0;
  bool blocked = false;      // tiles visited in blocks of block_rows x block_cols
  bool whole_tiles = false;  // both extents multiples of the lanes: no masked tile
};

/// A row-split column reduction.
struct CppRowSplitPlan {
  int64_t chunks = 0, rows_per_chunk = 0;
  /// rows_per_chunk as the loops print it: the number, or for a row count that is a size
  /// symbol's the expression ((ks0 + 63) / 64).
  std::string rows_per_chunk_text;
};

/// A split reduction: r0 in `chunks` chunks of `chunk` iterations.
struct CppSplitPlan {
  int64_t chunk = 0, chunks = 0;
  std::vector<bool> cascade;  // per reduction: float sum in a coil::CascadeSum
};

struct CppNestPlan {
  CppNestKind kind = CppNestKind::Scalar;
  size_t first_loop = 0;  // its loops from here on (the earlier ones are the kernel's)
  bool parallel = false;  // its own first loop carries the OpenMP pragma
  std::optional<CppVecPlan> vec;
  CppTilePlan tile;
  CppRowSplitPlan row_split;
  CppSplitPlan split;
  std::vector<std::string> origins;  // graph nodes it computes, "y__2 (exp)"
};

/// A local row buffer (an intermediate that lives in one outer iteration).
struct CppLocalBuffer {
  int buffer = -1;
  std::string name;  // buf2_local
  DType dtype = DType::F32;
  int64_t elements = 0;
  std::string elements_text;  // as printed: a symbolic row's expression (extent_text)
};

/// A small bf16/f16 input read many times per element, converted to f32 once per call.
struct CppWidenedInput {
  int buffer = -1;
  std::string arg, name;  // in_ptr1, in_ptr1_f32
  DType dtype = DType::BF16;
  int64_t elements = 0, reads = 0;
  /// Reads per element as the source comment prints it: "16", or "(ks0)" where the reads
  /// follow a size symbol.
  std::string reads_per_element;
};

struct CppKernelPlan {
  const ComputedBuffer* lead = nullptr;  // the first computation (a template's matmul)
  int lanes = 1;                         // f32 lanes of the target vectors
  std::vector<Nest> nests;
  std::vector<CppNestPlan> nest_plans;  // one per nest
  std::vector<KernelArg> args;
  std::vector<PackedOperand> packed;      // constants packed at load time (after args)
  std::map<int, std::string> arg_name;    // buffer -> in_ptrN / out_ptrN
  std::map<int, std::string> local_name;  // local buffer -> row array (loaded somewhere)
  std::set<int> dropped_stores;           // local buffers only ever forwarded: never stored
  std::vector<CppLocalBuffer> locals;
  bool heap_locals = false;  // over kMaxStackLocalBytes: per-thread, allocated once per thread
  std::vector<CppWidenedInput> widened;
  int outer_depth = 0;      // loops shared by all nests (the schedule's)
  size_t shared_loops = 0;  // of those, the ones the kernel opens (a lone vector nest may own
                            // the last)
  int parallel_depth = 0;   // shared loops under `omp parallel for collapse`
  bool stream_fence = false;
  /// Matmul template: the epilogue nest run on each output tile row, with its plan (vector
  /// along its last loop, or scalar); whether the product is read only by the epilogue.
  std::optional<Nest> epilogue;
  CppNestPlan epilogue_plan;
  bool product_is_local = false;

  /// The storage dtype of buffer `b` as the loops read it (f32 for a widened input and for the
  /// accumulator tile).
  DType storage_dtype(const IrProgram& p, int b) const;
  /// The C++ pointer of buffer `b`: its kernel parameter or its widened copy.
  std::string pointer(int b) const;
};

CppKernelPlan plan_cpp_kernel(const IrProgram& program, const Schedule& schedule, size_t k,
                              const CppTarget& target);

/// The comment that heads nest `i` in the generated code: what it computes, how, and its graph
/// nodes ("nest 1: sum over r0 (vector, 4 accumulators): y__2 (exp), y__3 (sum)").
std::string nest_label(const Nest& n, const CppNestPlan& np, size_t i);

/// The plan as COIL_LOGS=plan prints it.
std::string to_string(const CppKernelPlan& plan, const IrProgram& program,
                      const std::string& kernel_name);

// ---- the shape tests of one nest (cpp_plan_nest.cpp) ----------------------------------------

/// The loop a nest is vectorized along (CppVecKernel): the innermost reduction loop
/// (horizontal reduction) when every load is contiguous or invariant along it, else the
/// innermost pointwise loop (pointwise, vertical reduction) when every store is contiguous
/// along it (loads may broadcast or gather). nullopt when the nest has an op, dtype or access
/// without a vector form, or no candidate loop at or after `first_loop`.
/// `scalar_ops`: a pointwise nest may also hold ops that are not f32 when their values are the
/// same in every lane (vector_scalar_ops); only the planner of plain loop kernels prints them.
/// `masks`: any nest may hold mask ops (mask_vector_op); plain loop kernels and a matmul
/// template's epilogue (a relu's backward, `where(x > 0, x @ w, 0)`) print them.
std::optional<VecLoop> choose_vec_loop(const Nest& n, size_t first_loop, int lanes,
                                       bool scalar_ops = false, bool masks = false);
/// The ops of a pointwise nest that CppVecKernel prints in scalar form along `loop`: every op
/// that is not f32, each an index_expr independent of the loop variable or an op over such ops
/// only (no load, store or indirect index); nullopt when some op fits neither that nor the
/// vector form (an f32 op reads such an op only as a `where` condition or a converted value).
std::optional<std::set<int>> vector_scalar_ops(const Nest& n, const VecLoop& loop);
/// Whether `op` has a vector form as a mask (a Vec<float> whose true lanes have every bit set,
/// coil_vec_core.h's comparisons): a bool load or store, logical ops on masks, comparisons of
/// f32 (eq/ne of masks too), isnan, a `where` on a mask, and the f32 <-> bool conversions.
/// Only the planner of plain loop kernels (scalar_ops) prints them (a masked softmax's
/// `where(mask, -inf, x)` along its rows; CppVecKernel, cpp_vec_ops.h).
bool mask_vector_op(const Nest& n, const BodyOp& op);
/// The interior split of a pointwise nest that choose_vec_loop rejects (CppWindowSplit): the
/// comparisons of index expressions that depend on the innermost loop variable x, each affine
/// in x, bound the interior; nullopt when there are none, the interior holds fewer than two
/// iterations, the loop comes before `first_loop`, some loop of the nest has a symbolic extent,
/// or the folded body still has no vector form.
std::optional<CppWindowSplit> plan_window_split(const Nest& n, size_t first_loop, int lanes);
/// The interior's analyzer: the nest's loops, the split loop bound to [begin, end).
sym::Analyzer window_interior_analyzer(const CppWindowSplit& w);
/// `l` with its sizes and strides at their hints: the layout a local row is planned with (a
/// size-generic compile plans rows at the sizes being compiled).
Layout layout_at_hints(Layout l);
/// The vector plan of `n` along `loop`: extent, cascades, accumulators (the kernel planner adds
/// streams, prefetches and invariants).
CppVecPlan plan_vec(const Nest& n, const VecLoop& loop, int lanes);
/// A two-dimensional pointwise nest whose store is contiguous along x1 while some load is
/// contiguous along x0 (a transpose: x.t() + y); nullopt for any other nest.
std::optional<CppTilePlan> plan_tile2d(const Nest& n, int lanes);
/// A column reduction: one pointwise loop x0 of at most kRowSplitMaxColumns outputs, one
/// vectorizable reduction loop r0 over at least kRowSplitMinRows rows; nullopt otherwise.
std::optional<CppRowSplitPlan> plan_row_split(const Nest& n, int lanes);
/// A reduction with fewer outputs than the thread hint and at least
/// kSplitReductionMinElements reduced elements per output; nullopt otherwise.
std::optional<CppSplitPlan> plan_split_reduction(const Nest& n);

}  // namespace coil
