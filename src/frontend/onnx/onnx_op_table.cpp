// The ONNX ops the frontend knows: one row each, with the function that maps it onto coil's
// graph ops and a note for docs/onnx.md. Rows without a function are recognized but not
// supported yet; they are reported together with every other unsupported op of a model.
#include <unordered_map>

#include "frontend/onnx/onnx_data_dependent.h"
#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

const OnnxOpDef kOnnxOps[] = {
    // Output sizes that depend on values (onnx_data_dependent.cpp): folded when the inputs are
    // constants, else run on the host between compiled stages (coil::OnnxModel).
    {"NonZero", map_data_dependent, "host kernel between compiled stages"},
    {"Compress", map_data_dependent, "host kernel between compiled stages"},
    {"Unique", map_data_dependent, "host kernel between compiled stages"},
    {"NonMaxSuppression", map_data_dependent, "host kernel between compiled stages (f32 IoU)"},
    {"If", map_control_flow, "host: the branch a compiled sub-model"},
    {"Loop", map_control_flow, "host loop: the body a compiled sub-model"},
    {"Scan", map_control_flow, "host loop: the body a compiled sub-model"},

    // Elementwise (onnx_ops_elementwise.cpp).
    {"Abs", map_unary, "abs"},
    {"Neg", map_unary, "neg"},
    {"Exp", map_unary, "exp"},
    {"Log", map_unary, "log"},
    {"Sqrt", map_unary, "sqrt"},
    {"Reciprocal", map_unary, "reciprocal"},
    {"Relu", map_unary, "relu"},
    {"Sigmoid", map_unary, "sigmoid"},
    {"Tanh", map_unary, "tanh"},
    {"Erf", map_unary, "erf"},
    {"Sin", map_unary, "sin"},
    {"Cos", map_unary, "cos"},
    {"Floor", map_unary, "floor"},
    {"Ceil", map_unary, "ceil"},
    {"Round", map_unary, "round (half to even)"},
    {"Sign", map_unary, "sign"},
    {"Not", map_unary, "logical_not"},
    {"IsNaN", map_unary, "isnan"},
    {"IsInf", map_isinf, "eq with +-inf"},
    {"Identity", map_identity, "the input itself"},
    {"Dropout", map_identity, "the input and an all-true mask (training: ratio 0 only)"},
    {"Add", map_binary, "add"},
    {"Sub", map_binary, "sub"},
    {"Mul", map_binary, "mul"},
    {"Div", map_binary, "div; integers: truncating division computed in f64"},
    {"Pow", map_binary, "pow, cast to the base's dtype"},
    {"And", map_binary, "logical_and"},
    {"Or", map_binary, "logical_or"},
    {"Xor", map_binary, "ne"},
    {"Equal", map_binary, "eq"},
    {"Less", map_binary, "lt"},
    {"LessOrEqual", map_binary, "le"},
    {"Greater", map_binary, "gt"},
    {"GreaterOrEqual", map_binary, "ge"},
    {"Mod", map_mod, "fmod; fmod=0: fmod corrected to the divisor's sign"},
    {"BitShift", map_bitshift,
     "uint8: x * 2^y mod 256, floor(x / 2^y) in f32 (exact); uint16/32/64: x * 2^y wrapping, "
     "floor(x / 2^y) in f64 (u64 in two exact halves)"},
    {"Sum", map_variadic, "add chain"},
    {"Mean", map_variadic, "add chain / count"},
    {"Max", map_variadic, "maximum chain"},
    {"Min", map_variadic, "minimum chain"},
    {"Where", map_where, "where"},
    {"Cast", map_cast, "cast"},
    {"CastLike", map_cast, "cast"},
    {"Clip", map_clip, "clamp (constant bounds) or maximum/minimum"},

    // Activations (onnx_ops_activation.cpp).
    {"HardSigmoid", map_activation, "clamp(alpha * x + beta, 0, 1)"},
    {"HardSwish", map_activation, "x * clamp(x / 6 + 0.5, 0, 1)"},
    {"LeakyRelu", map_activation, "where(x < 0, alpha * x, x)"},
    {"Elu", map_activation, "where(x < 0, alpha * expm1(x), x)"},
    {"Selu", map_activation, "gamma * where(x > 0, x, alpha * expm1(x))"},
    {"Celu", map_activation, "relu(x) + minimum(0, alpha * expm1(x / alpha))"},
    {"Softplus", map_activation, "relu(x) + log1p(exp(-|x|))"},
    {"Softsign", map_activation, "x / (1 + |x|)"},
    {"ThresholdedRelu", map_activation, "where(x > alpha, x, 0)"},
    {"Shrink", map_activation, "nested where"},
    {"Mish", map_activation, "x * tanh(softplus(x))"},
    {"Sinh", map_activation, "(exp(x) - exp(-x)) / 2"},
    {"Cosh", map_activation, "(exp(x) + exp(-x)) / 2"},
    {"Tan", map_activation, "sin / cos"},
    {"Asinh", map_activation, "sign(x) log1p(|x| + x^2 / (1 + sqrt(x^2 + 1))); log(2|x|) > 1e8"},
    {"Acosh", map_activation, "log1p(t + sqrt(t (x + 1))), t = x - 1; log(2x) beyond 1e8"},
    {"Atanh", map_activation, "log1p(2x / (1 - x)) / 2"},
    {"Atan", map_activation, "Cephes' atan in f64 (range reduction, rational function)"},
    {"Asin", map_activation, "atan(x / sqrt((1 - x)(1 + x))) in f64"},
    {"Acos", map_activation, "2 atan(sqrt((1 - x) / (1 + x))) in f64"},
    {"PRelu", map_prelu, "where(x < 0, slope * x, x)"},

    // Reductions (onnx_ops_reduce.cpp).
    {"ReduceSum", map_reduce, "sum"},
    {"ReduceMean", map_reduce, "mean"},
    {"ReduceMax", map_reduce, "max"},
    {"ReduceMin", map_reduce, "min"},
    {"ReduceProd", map_reduce, "prod"},
    {"ReduceL1", map_reduce, "sum(abs(x))"},
    {"ReduceL2", map_reduce, "sqrt(sum(x * x))"},
    {"ReduceSumSquare", map_reduce, "sum(x * x)"},
    {"ReduceLogSum", map_reduce, "log(sum(x))"},
    {"ReduceLogSumExp", map_reduce, "m + log(sum(exp(x - m))), m = max(x)"},
    {"ArgMax", map_arg_reduce, "argmax; select_last_index: max of matching iota"},
    {"ArgMin", map_arg_reduce, "argmin; select_last_index: max of matching iota"},

    // Neural-network ops (onnx_ops_nn.cpp).
    {"Softmax", map_softmax, "softmax; opset < 13: over the flattened dims from axis"},
    {"LogSoftmax", map_softmax, "log_softmax; opset < 13: as Softmax"},
    {"Hardmax", map_softmax, "eq(iota, argmax)"},
    {"LayerNormalization", map_layer_norm, "layer_norm; Mean and InvStdDev outputs by mean/var"},
    {"BatchNormalization", map_batch_norm,
     "(x - mean) * scale / sqrt(var + eps) + B; training_mode: the batch's mean and var"},
    {"InstanceNormalization", map_instance_norm, "mean and var over the spatial dims"},
    {"MeanVarianceNormalization", map_mean_variance_norm, "(x - mean) / (std + 1e-9)"},
    {"GlobalAveragePool", map_global_pool, "mean over the spatial dims"},
    {"GlobalMaxPool", map_global_pool, "max over the spatial dims"},
    {"LRN", map_lrn, "x / (bias + alpha / size * sum of shifted squares)^beta"},

    // Shapes (onnx_ops_shape.cpp).
    {"Reshape", map_reshape, "reshape (constant shape; 0 copies a dim unless allowzero)"},
    {"Flatten", map_flatten, "flatten to 2-D"},
    {"Transpose", map_transpose, "permute"},
    {"Squeeze", map_squeeze, "squeeze"},
    {"Unsqueeze", map_unsqueeze, "unsqueeze per axis"},
    {"Expand", map_expand, "expand (bidirectional broadcast)"},
    {"Concat", map_concat, "concat"},
    {"Shape", map_shape, "constant; symbolic dims: size expressions (onnx_ops_symbolic.cpp)"},
    {"Size", map_size, "constant; symbolic dims: a size expression"},
    {"Constant", map_constant, "constant"},
    {"ConstantOfShape", map_constant_of_shape,
     "constant, or full when large; of symbolic sizes: a broadcast value"},
    {"Range", map_range, "constant, or iota when large"},
    {"DepthToSpace", map_depth_space, "reshape + permute + reshape (DCR, CRD)"},
    {"SpaceToDepth", map_depth_space, "reshape + permute + reshape"},

    // Indexing (onnx_ops_index.cpp).
    {"Slice", map_slice, "slice; negative steps: concat of slices"},
    {"Split", map_split, "slices"},
    {"Gather", map_gather, "constant indices: slices + concat + reshape; dynamic indices: gather"},
    {"Tile", map_tile, "reshape + expand + reshape"},
    {"Pad", map_pad, "constant: concat with full; edge, reflect: concat of slices"},
    {"EyeLike", map_eye_like, "eq(iota - iota, k)"},
    {"Trilu", map_trilu, "where with an iota mask"},
    {"OneHot", map_one_hot, "where(eq(indices, iota), on, off)"},

    // Data-dependent indexing as one-hot comparisons (onnx_ops_scatter.cpp).
    {"GatherElements", map_gather_elements, "sum of where(indices == iota, data, 0)"},
    {"GatherND", map_gather_nd, "linear index, then sum of where(index == iota, data, 0)"},
    {"ScatterElements", map_scatter_elements, "where / sum / prod / max / min over the hits"},
    {"Scatter", map_scatter_elements, "ScatterElements without reduction"},
    {"ScatterND", map_scatter_nd, "linear index, then as ScatterElements"},
    {"MaxUnpool", map_max_unpool, "scatter into zeros, per (N, C) plane"},
    {"ReverseSequence", map_reverse_sequence, "one-hot of the reversed time index"},

    // Along one axis by pairwise comparisons; window constants (onnx_ops_scan.cpp).
    {"CumSum", map_cumsum, "sum of where(iota <= iota, x, 0) over a new dim"},
    {"TopK", map_topk, "ranks by pairwise comparison, then a one-hot pick"},
    {"HannWindow", map_window, "constant"},
    {"HammingWindow", map_window, "constant"},
    {"BlackmanWindow", map_window, "constant"},
    {"MelWeightMatrix", map_mel_weight_matrix, "constant (ONNX's reference formulas)"},

    // Fourier transforms (onnx_ops_dft.cpp): direct O(n^2), in f64.
    {"DFT", map_dft, "f64 matmuls with constant cos/sin matrices along the axis"},
    {"STFT", map_stft, "frames as slices, the window, then DFT's matmuls"},

    // Text (onnx_ops_tfidf.cpp): integer tokens.
    {"TfIdfVectorizer", map_tfidf_vectorizer,
     "per n-gram length and skip: eq of shifted slices with the pool, all, sum"},

    // Regions of interest (onnx_ops_roialign.cpp).
    {"RoiAlign", map_roi_align,
     "per roi: one-hot bilinear row and column weights, two batched matmuls (max: per tap)"},

    // Resizing (onnx_ops_resize.cpp).
    {"Resize", map_resize, "per axis: gathers of constant indices times constant weights"},
    {"Upsample", map_resize, "Resize with asymmetric coordinates (nearest: floor)"},

    // Losses (onnx_ops_loss.cpp).
    {"NegativeLogLikelihoodLoss", map_nll_loss, "-sum of where(target == iota, input, 0)"},
    {"SoftmaxCrossEntropyLoss", map_softmax_cross_entropy, "log_softmax, then the NLL loss"},

    // Sampling at run-time coordinates (onnx_ops_gridsample.cpp).
    {"GridSample", map_grid_sample,
     "X times a matrix of one-hot taps (bilinear, nearest, bicubic)"},

    // 8-bit quantization (onnx_ops_quantize.cpp): per tensor or per axis, run-time scales.
    {"QuantizeLinear", map_quantize_linear, "clamp(round(x / scale) + zero_point), cast"},
    {"DequantizeLinear", map_dequantize_linear, "(x - zero_point) * scale"},
    {"DynamicQuantizeLinear", map_dynamic_quantize_linear,
     "scale and zero point from min/max reductions, then QuantizeLinear"},

    // Integer products (onnx_ops_integer.cpp): exact f32 products of the shifted 8-bit operands.
    {"MatMulInteger", map_matmul_integer,
     "matmul of (A - a_zero_point) and (B - b_zero_point) in f32 (exact), cast to int32"},
    {"ConvInteger", map_conv_integer,
     "conv2d of (x - x_zero_point) and (w - w_zero_point) in f32 (exact), cast to int32"},
    {"QLinearMatMul", map_matmul_integer, "MatMulInteger, then QuantizeLinear's rounding"},
    {"QLinearConv", map_conv_integer, "ConvInteger plus B, then QuantizeLinear's rounding"},

    // Matrix products, convolution (onnx_ops_linalg.cpp), pooling (onnx_ops_pool.cpp); floating
    // point; 1-D, 2-D and 3-D windows.
    {"MatMul", map_matmul, "matmul"},
    {"Gemm", map_gemm, "addmm (with C) or matmul, transA/transB as transposes"},
    {"Conv", map_conv, "conv2d; asymmetric pads: concat with zeros; 3-D: a sum over depth taps"},
    {"ConvTranspose", map_conv_transpose,
     "conv2d (3-D: as Conv) of the zero-interleaved input, flipped weight"},
    {"MaxPool", map_pool, "max_pool2d; asymmetric pads: concat with -inf; 3-D: two 2-D pools"},
    {"AveragePool", map_pool, "avg_pool2d; asymmetric pads: concat with zeros; 3-D: two 2-D pools"},
    {"Det", map_det, "Leibniz sum over permutations (up to 4x4)"},
    {"Einsum", map_einsum, "diagonals, sums, then batched matmuls (integers: mul + sum)"},

    // Attention (onnx_ops_attention.cpp): opset 23, read in models of opsets up to 23.
    {"Attention", map_attention,
     "attention (past_key/past_value: concat; softcap or qk_matmul_output: written out)"},

    // Recurrent ops (onnx_ops_rnn.cpp): static sequence length, the time loop unrolled.
    {"LSTM", map_rnn, "matmul of X by W^T, then per step h @ R^T and the gates"},
    {"GRU", map_rnn, "matmul of X by W^T, then per step h @ R^T and the gates"},
    {"RNN", map_rnn, "matmul of X by W^T, then per step act(xw_t + h @ R^T)"},

    // Optimizers of the ai.onnx.preview.training domain (onnx_ops_training.cpp), named with
    // their domain: pointwise updates of n tensors.
    {"ai.onnx.preview.training.Adagrad", map_adagrad, "the update rule, pointwise"},
    {"ai.onnx.preview.training.Adam", map_adam, "the update rule, pointwise"},
    {"ai.onnx.preview.training.Momentum", map_momentum,
     "the update rule (standard, nesterov), pointwise"},
};

}  // namespace

const OnnxOpDef* find_onnx_op(std::string_view name) {
  static const std::unordered_map<std::string_view, const OnnxOpDef*> index = [] {
    std::unordered_map<std::string_view, const OnnxOpDef*> m;
    for (const OnnxOpDef& op : kOnnxOps) m[op.name] = &op;
    return m;
  }();
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

bool is_default_domain(std::string_view domain) {
  return domain.empty() || domain == "ai.onnx";
}

std::string onnx_op_key(const onnx::NodeProto& n) {
  return is_default_domain(n.domain()) ? n.op_type() : n.domain() + "." + n.op_type();
}

const OnnxOpDef* find_onnx_node_op(const onnx::NodeProto& n) {
  if (is_default_domain(n.domain()) && n.op_type().find('.') != std::string::npos) return nullptr;
  return find_onnx_op(onnx_op_key(n));
}

std::span<const OnnxOpDef> all_onnx_ops() {
  return kOnnxOps;
}

}  // namespace coil::onnxfe
