// The ONNX op mappings, grouped by file (one MapFn per ONNX op or family of ops), and helpers
// they share. The table that names them is onnx_op_table.cpp.
#pragma once

#include <vector>

#include "frontend/onnx/onnx_context.h"

namespace coil::onnxfe {

// onnx_ops_elementwise.cpp
void map_unary(OnnxNode& n);     // Abs, Neg, Exp, ... (one coil op each)
void map_binary(OnnxNode& n);    // Add, Sub, Mul, Div, Pow, comparisons, logic
void map_variadic(OnnxNode& n);  // Sum, Mean, Max, Min
void map_mod(OnnxNode& n);
void map_bitshift(OnnxNode& n);  // uint8
void map_where(OnnxNode& n);
void map_cast(OnnxNode& n);  // Cast, CastLike
void map_clip(OnnxNode& n);
void map_isinf(OnnxNode& n);
void map_identity(OnnxNode& n);  // Identity, Dropout (inference)

// onnx_ops_activation.cpp: compositions of elementwise ops
void map_activation(OnnxNode& n);  // HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Celu,
                                   // Softplus, Softsign, ThresholdedRelu, Shrink, Mish, ...
void map_prelu(OnnxNode& n);

// onnx_ops_reduce.cpp
void map_reduce(OnnxNode& n);      // ReduceSum, ReduceMean, ..., ReduceLogSumExp
void map_arg_reduce(OnnxNode& n);  // ArgMax, ArgMin

// onnx_ops_nn.cpp
void map_softmax(OnnxNode& n);  // Softmax, LogSoftmax, Hardmax
void map_layer_norm(OnnxNode& n);
void map_batch_norm(OnnxNode& n);
void map_instance_norm(OnnxNode& n);
void map_mean_variance_norm(OnnxNode& n);
void map_global_pool(OnnxNode& n);  // GlobalAveragePool, GlobalMaxPool
void map_lrn(OnnxNode& n);

// onnx_ops_linalg.cpp
void map_matmul(OnnxNode& n);
void map_gemm(OnnxNode& n);
void map_conv(OnnxNode& n);
void map_conv_transpose(OnnxNode& n);
void map_det(OnnxNode& n);  // Leibniz sums up to 4x4

// onnx_ops_pool.cpp: 1-D and 3-D windows through coil's 2-D pools
void map_pool(OnnxNode& n);  // MaxPool, AveragePool

// onnx_ops_integer.cpp: integer products as exact f32 products of the zero-point-shifted
// operands
void map_matmul_integer(OnnxNode& n);  // MatMulInteger, QLinearMatMul
void map_conv_integer(OnnxNode& n);    // ConvInteger, QLinearConv

// onnx_ops_rnn.cpp: the time loop unrolled into matmuls and gate arithmetic per step
void map_rnn(OnnxNode& n);  // LSTM, GRU, RNN

// onnx_ops_shape.cpp
void map_reshape(OnnxNode& n);
void map_flatten(OnnxNode& n);
void map_transpose(OnnxNode& n);
void map_squeeze(OnnxNode& n);
void map_unsqueeze(OnnxNode& n);
void map_expand(OnnxNode& n);
void map_concat(OnnxNode& n);
void map_shape(OnnxNode& n);
void map_size(OnnxNode& n);
void map_constant(OnnxNode& n);
void map_constant_of_shape(OnnxNode& n);
void map_range(OnnxNode& n);
void map_depth_space(OnnxNode& n);  // DepthToSpace, SpaceToDepth

// onnx_ops_index.cpp
void map_slice(OnnxNode& n);
void map_split(OnnxNode& n);
void map_gather(OnnxNode& n);
void map_tile(OnnxNode& n);
void map_pad(OnnxNode& n);
void map_eye_like(OnnxNode& n);
void map_trilu(OnnxNode& n);
void map_one_hot(OnnxNode& n);

// onnx_ops_scan.cpp: pairwise comparisons along an axis; window constants
void map_cumsum(OnnxNode& n);
void map_topk(OnnxNode& n);
void map_window(OnnxNode& n);             // HannWindow, HammingWindow, BlackmanWindow
void map_mel_weight_matrix(OnnxNode& n);  // a constant of triangular filters

// onnx_ops_tfidf.cpp: n-gram counts by comparisons of shifted slices with the pool
void map_tfidf_vectorizer(OnnxNode& n);

// onnx_ops_training.cpp: the optimizers of ai.onnx.preview.training, pointwise
void map_adagrad(OnnxNode& n);
void map_adam(OnnxNode& n);
void map_momentum(OnnxNode& n);

// onnx_ops_roialign.cpp: separable bilinear weights as one-hot matrices, two batched matmuls
void map_roi_align(OnnxNode& n);

// onnx_ops_dft.cpp: direct transforms, f64 matmuls with constant cos/sin matrices
void map_dft(OnnxNode& n);
void map_stft(OnnxNode& n);

// onnx_ops_einsum.cpp
void map_einsum(OnnxNode& n);

// onnx_ops_resize.cpp
void map_resize(OnnxNode& n);  // Resize, Upsample

// onnx_ops_gridsample.cpp: an interpolation matrix of one-hot taps, then a batched matmul
void map_grid_sample(OnnxNode& n);

// onnx_ops_quantize.cpp: 8-bit quantization as round / clamp / cast compositions
void map_quantize_linear(OnnxNode& n);
void map_dequantize_linear(OnnxNode& n);
void map_dynamic_quantize_linear(OnnxNode& n);

// onnx_ops_loss.cpp
void map_nll_loss(OnnxNode& n);
void map_softmax_cross_entropy(OnnxNode& n);

// onnx_ops_scatter.cpp: one-hot comparisons with the indices
void map_gather_elements(OnnxNode& n);
void map_gather_nd(OnnxNode& n);
void map_scatter_elements(OnnxNode& n);  // ScatterElements, Scatter
void map_scatter_nd(OnnxNode& n);
void map_max_unpool(OnnxNode& n);
void map_reverse_sequence(OnnxNode& n);

// onnx_ops_symbolic.cpp: shape arithmetic on SymbolicInts (Shape of symbolic tensors)
/// Maps a node with a symbolic integer input (Identity, Cast, Gather, Unsqueeze, Squeeze, Concat,
/// Slice, Add, Sub, Mul, Div); false when `n` is not such an op or uses the value otherwise.
bool map_symbolic(OnnxNode& n);
/// Whether input `input` of op `op` may be a symbolic value (Reshape's and Expand's shape).
bool accepts_symbolic(std::string_view op, int input);

// onnx_ops_split_view.cpp: reshapes to several symbolic sizes (SplitView, onnx_context.h);
// onnx_broadcast_values.cpp: check_broadcast_use
/// Maps Transpose, MatMul, Gemm, Softmax, LogSoftmax, Add, Sub, Mul, Div on the unmerged form
/// of an input that has a SplitView; false when `n` has none or the op cannot keep it (then the
/// ordinary mapping reads the merged value).
bool map_split_view(OnnxNode& n);
/// x reshaped to `target` (no 0 entries; at most one -1) as splits of constant dims (unless
/// `split_constants` is false) and merges of dims, from x's SplitView where it has one; the
/// result keeps its unmerged form as a SplitView. -1 when no such rewrite exists (a symbolic
/// dim would split, or dims mix across groups of equal products).
int reshape_split_view(OnnxNode& n, int x, const Shape& target, bool split_constants);
/// Run after a node's mapping: when it reads a broadcast value (a ConstantOfShape of a symbolic
/// shape, SplitViews), the op must be elementwise and its result is a broadcast value too, or
/// has the shape that broadcasting the inputs' ONNX shapes gives; Unsupported otherwise.
void check_broadcast_use(OnnxNode& n);

// onnx_ops_attention.cpp
void map_attention(OnnxNode& n);  // Attention (opset 23): coil's attention op, KV cache concat
/// The first opset in 18..`opset` where ONNX changed op `op` in a way its mapping (written for
/// opsets up to 17) would misread; 0 when every newer version only extends types.
int onnx_semantics_changed(std::string_view op, int opset);

// --- helpers ---

/// Reshapes x to `target`: constant sizes and at most one symbolic size (which coil infers) as
/// one `reshape`; several symbolic sizes through reshape_split_view; Unsupported otherwise.
int reshape_to(OnnxNode& n, int x, const Shape& target);
/// x with dim `axis` replaced by the elements at the given (non-negative, in-range) indices,
/// built from slices and a concat; Unsupported beyond 64 pieces.
int gather_const(OnnxNode& n, int x, int64_t axis, const std::vector<int64_t>& indices);
/// A coil reduction ({axes, keepdim}); axes must be normalized.
int reduce(OnnxNode& n, std::string_view op, int x, const std::vector<int64_t>& axes, bool keepdim);
/// ONNX's reduction axes (attribute, or input 1 from `input_opset` on) normalized and sorted;
/// empty means all (or none when noop_with_empty_axes is set: then `noop` is set).
std::vector<int64_t> reduction_axes(OnnxNode& n, int input_opset, bool* noop);
/// An iota along `axis` of a tensor of rank `rank` with `size` elements, shaped to broadcast
/// (size at `axis`, 1 elsewhere).
int iota_along(OnnxNode& n, int64_t size, int64_t axis, int64_t rank);

// Windows (onnx_ops_linalg.cpp), shared by Conv, the pools and the integer ops.
/// ONNX's padding of x's spatial dims (kernel, stride, dilation: one entry per spatial dim of x)
/// from the pads attribute or auto_pad: the begin pads, then the end pads. `attr_dims` is the
/// count of spatial dims the attributes name (1 for a 1-D window computed as 2-D: no padding
/// along the added dim).
std::vector<int64_t> onnx_pads(OnnxNode& n, int x, const std::vector<int64_t>& kernel,
                               const std::vector<int64_t>& stride,
                               const std::vector<int64_t>& dilation, size_t attr_dims);
/// x with `before` and `after` elements of `value` added along `axis` (a concat with `full`
/// blocks; the shape must be static).
int pad_axis(OnnxNode& n, int x, int64_t axis, int64_t before, int64_t after, double value);
/// An int-list attribute of `attr_dims` entries, or `dflt` for each; for a 1-D window (computed
/// as 2-D) the entry of the added dim, `extra`, is appended.
std::vector<int64_t> spatial_attr(OnnxNode& n, std::string_view name, int64_t dflt,
                                  size_t attr_dims, int64_t extra = 1);
int unsqueeze_last(OnnxNode& n, int x);
int squeeze_last(OnnxNode& n, int x);
/// ONNX's Conv of floating-point x and w (bias: -1 for none) with the node's attributes: 1-D
/// and 2-D windows, as map_conv.
int conv_float(OnnxNode& n, int x, int w, int bias);
/// saturate(round(x / scale) + zero_point) cast to the 8-bit dtype `t` (round half to even), x,
/// scale and zero_point (-1: none) in f32 and broadcastable: QuantizeLinear's arithmetic
/// (onnx_ops_quantize.cpp).
int quantize_to(OnnxNode& n, int x, int scale, int zero_point, DType t);

/// Indices (any integer dtype) as i64 with negative ones counted from the end of a dim of `size`.
int normalize_index(OnnxNode& n, int idx, int64_t size);
/// `data` with the updates that hit each position combined into it: `hit` (bool) and `updates`
/// have a dim `axis` over the updates where data has none (data's dims are those of hit without
/// it); `reduction` is ONNX's: none (the last hit wins), add, mul, max, min.
int scatter_reduce(OnnxNode& n, int data, int hit, int updates, int64_t axis,
                   std::string_view reduction);

}  // namespace coil::onnxfe
