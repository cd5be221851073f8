// Lowering: graph → loop IR (Inductor's GraphLowering).
//
// Each graph node becomes a TensorBox: a value that can produce any of its elements inside a
// loop body (`load`). Elementwise ops and views compose loaders, so a chain of them is
// computed inside its consumer (inlined) instead of being stored; a box is *realized* into a
// buffer (a ComputedBuffer writes it) when it is a reduction, a graph output, or is read by
// several consumers. Views never copy: they only remap the index passed to their input's loader.
#pragma once

#include <functional>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "coil/graph.h"
#include "ir/ir.h"
#include "sym/analyzer.h"

namespace coil {

/// Emits the ops computing one element at `index` (one Expr per dim) into `body`; returns the
/// body position of the value, in the compute dtype of the box's dtype.
using Loader = std::function<int(LoopBody& body, const std::vector<sym::Expr>& index)>;

struct TensorBox {
  DType dtype = DType::F32;  // storage dtype of the value
  Shape sizes;
  Loader load;
  int buffer = -1;  // set when realized: `load` reads this buffer
  /// Ops composed into `load` since the last stored buffer (lowering.cpp: kMaxInlineChain).
  int inline_depth = 0;
  /// Graph nodes whose arithmetic `load` performs (none when it reads a buffer), in graph
  /// order; the last is the box's own node. A computation storing the box records them as its
  /// origins (Origin::inlined for all but the last).
  std::vector<int> nodes;
};

/// A value that is not stored is recomputed inside its readers: its loader calls its inputs'
/// loaders, and each box holds copies of those. A chain of N such ops costs O(N^2) copies (a
/// 10,000-node chain ran out of memory), and each view composes its index map over its
/// source's (a reshape reads the flat index twice: 1,000 nested views ran out of memory too).
/// A value read through more than this many composed ops since its last stored buffer is
/// stored first. Real models stay far below it (a decomposed layer_norm is about 15 ops).
constexpr int kMaxInlineChain = 64;

/// When a value read by several consumers is stored instead of recomputed in each.
/// Recomputing saves a round trip through memory; storing saves the repeated work. A value is
/// stored (realized) when it is a graph output or a reduction, or when it has more than one
/// reader and either of:
///   * more than kRealizeReadsThreshold readers (Inductor: realize_reads_threshold = 4);
///   * a body costing more than kRealizeCostThreshold (ops weighted by expense: a load or an
///     add costs 1, a transcendental kTranscendentalCost), so expensive values such as
///     softmax's exp(x - max) are computed once. Inductor bounds op count at 30 instead.
/// Stored intermediates that never leave a fused kernel become per-row local buffers
/// (sched/fusion.h), so storing rarely costs memory traffic.
constexpr int kRealizeReadsThreshold = 4;
/// A concat of more parts than this is joined in stored groups first (lower_views.cpp).
constexpr size_t kConcatDirectParts = 8;
constexpr int kRealizeCostThreshold = 8;
constexpr int kTranscendentalCost = 8;

struct LowerOptions {
  /// Store every non-view node instead of inlining (tests of memory planning use it).
  bool realize_all = false;
  /// Called after each of lowering's passes ("lower", "simplify_indices",
  /// "elide_store_rounding") with the program as that pass left it: the pipeline verifies and
  /// dumps it there (driver/pass_checks.h).
  std::function<void(std::string_view pass, const IrProgram& program)> after_pass;
};

/// Cost of computing one element of `box` (weights above).
int loader_cost(const TensorBox& box);

struct LowerContext {
  const Graph& graph;
  LowerOptions options;
  IrProgram program;
  std::vector<int> origins;  // graph nodes of the computation being lowered (for comments)
  /// Graph nodes computed inside the inputs of the node being lowered (TensorBox::nodes): the
  /// producers that a computation it adds inlines, unless the box it stores says otherwise.
  std::vector<int> inlined;
  /// Operands of attention nodes stored (converted) for their kernels, by (graph node, dtype):
  /// every attention node reading the same value in the same dtype reads one buffer
  /// (lower_attention.cpp), so that paired calls share a kernel (sched/fusion.h).
  std::map<std::pair<int, DType>, int> attention_operands;

  /// A loader reading buffer `id` with its layout.
  TensorBox buffer_box(int buffer_id) const;
  /// Stores `box` into a new buffer of `kind` (Pointwise computation), unless it already is
  /// a realized intermediate and kind is Intermediate.
  TensorBox realize(const TensorBox& box, BufferKind kind = BufferKind::Intermediate,
                    int external_index = -1);
  /// Appends `c` to the program, tagged with the graph nodes being lowered (`origins`) and the
  /// producers it inlines (`inlined`).
  void add_computation(ComputedBuffer c);
  /// Appends `c`, which computes `nodes` (TensorBox::nodes: the last one stored, the others
  /// inlined); the node being lowered when `nodes` is empty.
  void add_computation(ComputedBuffer c, const std::vector<int>& nodes);
  /// A Reduction computation over `axes` of `input` into a new buffer shaped `out_shape` (the
  /// node's shape: reduced dims dropped, or kept as 1 with keepdim).
  TensorBox reduce(const TensorBox& input, const std::vector<int64_t>& axes, ReductionType type,
                   DType result_dtype, const Shape& out_shape);
};

/// Lowers a decomposed graph whose sizes are all bound (graph/decompositions.h).
IrProgram lower_graph(const Graph& g, const LowerOptions& options = {});

/// Simplifies every index of every computation with its loop ranges known (run by lower_graph).
void simplify_indices(IrProgram& program);

/// Stores round to their buffer's dtype anyway: a store of round_to_bf16(v) into a bf16 buffer
/// (f16 alike) stores v instead, and ops nothing uses any more are dropped (run by lower_graph).
void elide_store_rounding(IrProgram& program);

/// A conv2d library call absorbs its output's only reader when that reader is silu
/// (x * sigmoid(x)) at the conv's own index: the call applies it as a post-op and writes the
/// reader's buffer (lower/fold_conv_activations.cpp). CPU only (run by the pipeline).
void fold_conv_activations(IrProgram& program);

/// The store index of a computation's body (its last op).
const sym::Expr& store_index(const ComputedBuffer& c);

/// An activation a conv call can apply to its output (clamp's bounds lo <= hi).
struct ConvActivation {
  Conv2dSpec::Activation activation;
  double lo = 0, hi = 0;
};

/// The activation a pointwise body computes from buffer `in` at `index` into its store, or
/// nullopt when the body is anything else. clamp only with `clamps` (coil's own depthwise and
/// direct kernels): clamp is maximum(constant lo, x) then minimum(constant hi, .), the form
/// lowering gives clamp {min, max} and ONNX's Clip, with lo <= hi.
std::optional<ConvActivation> conv_activation_of(const LoopBody& body, int in,
                                                 const sym::Expr& index, bool clamps);

/// An inverted residual block's expand conv (1x1, stride 1, f32, its bias and a relu, clamp or
/// silu after it) whose output only a depthwise conv on coil's planes path reads becomes part
/// of that conv's call (Conv2dSpec::expand), computed band by band so that the expanded tensor
/// is never stored (lower/expand_depthwise.cpp). CPU only (run by the pipeline before
/// convs_as_matmuls); not where every intermediate is stored for inspection.
void fuse_expand_depthwise(IrProgram& program);

/// A tensor written by one oneDNN conv2d call and read only by another (as its input) passes
/// between them channels-last, with no reorder on either side (lower/conv_layouts.cpp). CPU
/// only, after fold_conv_activations; not where every intermediate is stored for inspection.
void keep_conv_layouts(IrProgram& program);

/// Removes the intermediate buffers nothing writes or reads any more (a folded pass's output)
/// and renumbers the rest: the IR has no dangling buffers (ir/verify.h).
void drop_unused_buffers(IrProgram& program);

/// A 1x1 conv2d (stride 1, no padding, one group, f32) becomes the matmul template over its
/// NCHW operands plus a pointwise bias add, and its readers over [N, OC, H, W] get their H and W
/// loops merged so that they fuse as the template's epilogue (lower/convs_as_matmuls.cpp).
/// CPU only (run by the pipeline before fold_conv_activations).
void convs_as_matmuls(IrProgram& program);

}  // namespace coil
