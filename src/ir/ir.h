// Loop IR: buffers with layouts, and the computations that fill them.
//
//   Buffer          memory: a graph input, constant, output, or an intermediate.
//   ComputedBuffer  a buffer plus the loop nest computing it. Its kind is
//                     Pointwise: for x in ranges: store(body(x))
//                     Reduction: for x in ranges: store(reduce_{r in reduction_ranges} body(x, r))
//                     Template:  a matmul computed by a code template (Inductor's TemplateBuffer:
//                                tiles, packing, micro-kernel) into which pointwise epilogues fuse
//                     Extern:    a library call (Inductor's ExternKernel: oneDNN, OpenBLAS) or
//                                a call of a kernel header's function (attention's flash
//                                kernel); nothing fuses into it
//                   Template and Extern bodies only list their operands (loads at index 0) and
//                   the store of their result; the spec says how they are accessed.
//   IrProgram       all buffers and computations of a graph, in a valid execution order.
//
// Layouts are row-major contiguous for every buffer coil allocates; inputs are made contiguous
// by the runtime before a call (a later issue may specialize on input strides).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coil/graph.h"
#include "ir/loop_body.h"
#include "support/run_check.h"

namespace coil {

enum class BufferKind { Input, Constant, Intermediate, Output };
std::string_view buffer_kind_name(BufferKind k);

struct Layout {
  DType dtype = DType::F32;
  Shape sizes;
  Shape strides;  // in elements
  /// Linear offset (elements) of the element at `index` (one Expr per dim).
  sym::Expr offset_of(const std::vector<sym::Expr>& index) const;
  sym::Expr numel() const;
};
Layout contiguous_layout(DType dtype, const Shape& sizes);

struct Buffer {
  int id = -1;
  std::string name;  // "arg0", "const0", "buf3", "out0": names coil chose, never user text
  BufferKind kind = BufferKind::Intermediate;
  Layout layout;
  int external_index = -1;  // position among graph inputs / constants / outputs
};

enum class LoopKind { Pointwise, Reduction, Template, Extern };
std::string_view loop_kind_name(LoopKind k);

/// A strided operand of a template or extern kernel: element (batch..., row, col) of `buffer`
/// at offset + sum(batch_i * batch_strides_i) + row * row_stride + col * col_stride.
struct StridedOperand {
  int buffer = -1;
  int64_t offset = 0;
  std::vector<int64_t> batch_strides;  // per output batch dim; 0 where broadcast
  int64_t row_stride = 0, col_stride = 0;

  /// How a BLAS addresses the rows x cols matrix: transposed or not, and its leading dimension
  /// (dims of extent 1 take any stride). nullopt when neither stride is 1.
  struct BlasLayout {
    bool transposed;
    int64_t ld;
  };
  std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols) const;
};

/// How a matmul is computed; chosen at compile time (driver/autotune.h).
enum class MatmulImpl { Template, Dnnl, OpenBlas };
std::string_view matmul_impl_name(MatmulImpl i);

/// out[batch..., i, j] = sum_k a(batch..., i, k) * b(batch..., k, j), accumulated in f32.
/// Batch dims that the weight broadcasts over are folded into M when `a` allows it, so
/// x[B, S, D] @ W[D, E] is one [B*S, D] x [D, E] product.
struct MatmulSpec {
  StridedOperand a, b;
  std::vector<int64_t> batch;  // batch sizes after folding (empty: a single product)
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::F32;  // of a and b (f32 or bf16); the result is stored in its own dtype
  MatmulImpl impl = MatmulImpl::Template;
};

/// y = conv2d(x, w) + bias over NCHW tensors (torch semantics; padding top/left/bottom/right).
struct Conv2dSpec {
  int x = -1, w = -1, bias = -1;  // buffers (bias -1: none)
  int64_t n = 0, c = 0, h = 0, wd = 0, oc = 0, kh = 0, kw = 0;
  std::array<int64_t, 2> stride{1, 1}, dilation{1, 1};
  std::array<int64_t, 4> padding{0, 0, 0, 0};
  int64_t groups = 1;
  bool weights_constant = false;
  /// Applied to the output by the call, folded in from the conv's sole pointwise consumer by
  /// fold_conv_activations (lower/lowering.h): silu and relu (NaN kept) as oneDNN post-ops;
  /// clamp only on coil's depthwise kernel (oneDNN's clip turns a NaN into 0).
  enum class Activation { none, silu, relu, clamp };
  Activation activation = Activation::none;
  double clamp_min = 0, clamp_max = 0;  // clamp: maximum(clamp_min, y), then minimum(clamp_max, .)
  /// x / y hold NHWC data behind their NCHW declaration: a tensor passed from one oneDNN call
  /// to another, which nothing else reads (keep_conv_layouts, lower/conv_layouts.cpp).
  bool x_nhwc = false, y_nhwc = false;
  /// A 1x1 conv computed inside this depthwise call, band by band of output rows: x is then the
  /// expand conv's input [n, expand->c, h, wd], and the depthwise conv reads
  /// activation(expand->w @ x + expand->bias), never stored (fuse_expand_depthwise,
  /// lower/expand_depthwise.cpp; kernels/coil_expand_depthwise.h).
  struct Expand {
    int w = -1, bias = -1;  // buffers: [c, expand->c, 1, 1] and [c] (-1: none)
    int64_t c = 0;          // input channels
    Activation activation = Activation::none;
    double clamp_min = 0, clamp_max = 0;
  };
  std::optional<Expand> expand;
};

/// "silu", "relu", "clamp" or "none".
const char* activation_name(Conv2dSpec::Activation a);

/// A depthwise conv (as many groups as input and output channels, f32) runs on coil's own
/// kernel (kernels/coil_depthwise.h) over NCHW, not oneDNN, which reorders around each call.
bool runs_on_coil_depthwise(const Conv2dSpec& c);

/// A dense conv with at most 4 input channels (an image stem) runs on coil's direct kernel
/// (kernels/coil_direct_conv.h) over NCHW: oneDNN is slow at so few channels and reorders its
/// output on every call.
bool runs_on_coil_direct(const Conv2dSpec& c);

/// Either of coil's own conv kernels (which take relu, clamp and silu with NaN kept).
inline bool runs_on_coil_conv(const Conv2dSpec& c) {
  return runs_on_coil_depthwise(c) || runs_on_coil_direct(c);
}

/// Which function of kernels/coil_attention.h an attention Extern calls: the graph ops
/// attention (forward), attention_lse (logsumexp) and attention_grad (backward with wrt q, k
/// or v).
enum class AttentionKernel { forward, logsumexp, grad_q, grad_k, grad_v };

/// y = attention(q, k, v[, mask]) (the graph op): q [B, H, Tq, D], k [B, Hkv, Tk, D],
/// v [B, Hkv, Tk, Dv] read through strides (rows contiguous), y [B, H, Tq, Dv] contiguous; the
/// CPU's flash kernel (kernels/coil_attention.h). Its backward ops (`kernel`) write the
/// logsumexp [B, H, Tq] f32 (v unused) or one gradient, contiguous in q's, k's or v's shape.
struct AttentionSpec {
  AttentionKernel kernel = AttentionKernel::forward;
  int q = -1, k = -1, v = -1, mask = -1;  // buffers (mask -1: none; v -1 for logsumexp)
  /// The backward's operands: attention's result, its gradient (contiguous [B, H, Tq, Dv], the
  /// spec's dtype) and the logsumexp (contiguous [B, H, Tq] f32); -1 for forward/logsumexp.
  int out = -1, grad_out = -1, lse = -1;
  /// Element (b, h, t, d) of q is q + q_offset + b * q_strides[0] + h * q_strides[1] +
  /// t * q_strides[2] + d (k and v alike): views such as the heads of a qkv projection are
  /// read in place.
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
  std::array<int64_t, 3> q_strides{0, 0, 0}, k_strides{0, 0, 0}, v_strides{0, 0, 0};
  bool bool_mask = false;  // the mask is bool (false: -inf), else f32 (added)
  int64_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  double scale = 1.0;
  bool causal = false;
  /// Elements of the mask buffer per step of batch, head, query and key (0 where it
  /// broadcasts).
  std::array<int64_t, 4> mask_strides{0, 0, 0, 0};
  DType dtype = DType::F32;  // of q, k, v and the result: f32, bf16 or f16
};

/// y = index_add(x, index, src) {axis} (the graph op) over contiguous buffers seen as
/// x [outer, n, inner], index [k], src [outer, k, inner]: y = x, then row (o, index[j]) of y
/// gains row (o, j) of src, j in order. The CPU prints the loops itself (each element sums in
/// order j: the same result at any thread count); the GPU calls torch.index_add (atomics).
struct IndexAddSpec {
  int x = -1;         // buffer of x; -1: x is `fill` everywhere (the zeros of a gradient)
  double fill = 0.0;  // x's value when x is -1
  int index = -1, src = -1;
  int64_t outer = 1, n = 1, k = 0, inner = 1;
  int site = -1;  // IrProgram::run_checks entry: an index out of range (that slice is skipped)
  DType dtype = DType::F32;
};

/// A graph node a computation came from (structured provenance: kernel names and the "graph
/// nodes:" comments of generated code are built from these, codegen/kernel_names.h).
struct Origin {
  int node = -1;               // graph node id; ids are in graph (topological) order
  std::string name;            // its value name: "t3", "y__layer_norm_2"
  std::string op;              // its op: "add", "sum"
  std::string composite;       // the composite op a decomposition made it for ("layer_norm"), or ""
  std::string composite_node;  // that composite's node name ("y"), or ""
  bool inlined = false;        // a producer computed inside the body, not the value it stores
  bool data_movement = false;  // an input, constant, full or view: no arithmetic of its own
};

struct ComputedBuffer {
  int buffer = -1;  // the buffer written
  LoopKind kind = LoopKind::Pointwise;
  std::vector<sym::Expr> ranges;            // extents of x0, x1, ...
  std::vector<sym::Expr> reduction_ranges;  // extents of r0, r1, ... (Reduction only)
  LoopBody body;                            // ends with one store
  /// The graph node(s) it computes, then the producers inlined into its body, in graph order.
  std::vector<Origin> origins;
  /// `origins` as text for comments in generated code: "t3 (add)", "y__layer_norm_3 (sum <-
  /// slice, sub)" (describe_origins).
  std::vector<std::string> origin_names;

  std::shared_ptr<const MatmulSpec> matmul;        // Template, or Extern with a matmul
  std::shared_ptr<const Conv2dSpec> conv;          // Extern conv2d
  std::shared_ptr<const AttentionSpec> attention;  // Extern attention (a kernel-header call)
  std::shared_ptr<const IndexAddSpec> index_add;   // Extern index_add (loops / torch call)

  bool is_reduction() const { return kind == LoopKind::Reduction; }
  /// Template or Extern: computed by a template or library call, not by its body.
  bool is_opaque() const { return kind == LoopKind::Template || kind == LoopKind::Extern; }
  /// Buffers read by the body, in first-use order.
  std::vector<int> reads() const;
};

/// `origins` as comment text: each computed node as "name (op)", the ops of the producers
/// inlined into it after an arrow, each once: "z (add <- transpose, mul)".
std::vector<std::string> describe_origins(const std::vector<Origin>& origins);

/// The loop variables: x0.. for pointwise dims and r0.. for reduction dims.
sym::Expr loop_var(int i);
sym::Expr reduction_var(int i);

struct IrProgram {
  std::vector<Buffer> buffers;
  std::vector<ComputedBuffer> computations;              // execution order
  std::vector<int> input_buffers;                        // per graph input
  std::vector<int> constant_buffers;                     // per constant node (see constants)
  std::vector<int> output_buffers;                       // per graph output
  std::vector<std::shared_ptr<const Tensor>> constants;  // data of constant_buffers
  /// What generated code checks at run time (BodyOp::site indexes this).
  std::vector<RunCheck> run_checks;

  /// The number in the next intermediate buffer's name ("buf7"): its id, or more once passes
  /// have dropped buffers (drop_unused_buffers renumbers ids, not names), so names stay unique.
  int next_intermediate_name = 0;

  int add_buffer(BufferKind kind, Layout layout, int external_index = -1);
  const Buffer& buffer(int id) const { return buffers[static_cast<size_t>(id)]; }
};

/// Readable dump (COIL_LOGS=ir).
std::string to_string(const IrProgram& p);

}  // namespace coil
