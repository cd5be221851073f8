// The op registry: every graph op, once. Columns: name, kind, inputs (min, max), dtype rule
// (elementwise only), shape/dtype rule, reference kernel, decomposition, doc, attributes (the
// k*Attrs lists below: name, kind, default, allowed values, doc). How each op that is not
// decomposed becomes loop IR is the lowering table (lower/op_lowering.cpp), keyed by op name:
// the graph knows nothing of the loop IR.
#include "graph/op_registry.h"

#include <unordered_map>

#include "graph/decompositions.h"
#include "graph/reference/reference_kernels.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

constexpr OpDef source(std::string_view name, InferFn infer, ReferenceFn ref, std::string_view doc,
                       std::span<const AttrSpec> attrs = {}) {
  return {name, OpKind::Source, 0, 0, DTypeRule::Same, infer, ref, nullptr, doc, attrs};
}
constexpr OpDef unary(std::string_view name, DTypeRule rule, std::string_view doc,
                      std::span<const AttrSpec> attrs = {}) {
  return {name, OpKind::Elementwise, 1, 1, rule, infer_elementwise, ref_elementwise, nullptr, doc,
          attrs};
}
constexpr OpDef binary(std::string_view name, DTypeRule rule, std::string_view doc) {
  return {name, OpKind::Elementwise, 2, 2, rule, infer_elementwise, ref_elementwise, nullptr, doc};
}
constexpr OpDef view(std::string_view name, InferFn infer, std::string_view doc,
                     std::span<const AttrSpec> attrs) {
  return {name, OpKind::View, 1, 1, DTypeRule::Same, infer, ref_view, nullptr, doc, attrs};
}
constexpr OpDef reduction(std::string_view name, InferFn infer, ReferenceFn ref,
                          DecomposeFn decompose, std::string_view doc,
                          std::span<const AttrSpec> attrs) {
  return {name,
          decompose ? OpKind::Composite : OpKind::Reduction,
          1,
          1,
          DTypeRule::Same,
          infer,
          ref,
          decompose,
          doc,
          attrs};
}
constexpr OpDef composite(std::string_view name, int min_in, int max_in, InferFn infer,
                          ReferenceFn ref, DecomposeFn decompose, std::string_view doc,
                          std::span<const AttrSpec> attrs = {}) {
  return {name, OpKind::Composite, min_in, max_in, DTypeRule::Same, infer,
          ref,  decompose,         doc,    attrs};
}

// Lowered directly (lower/op_lowering.cpp), not decomposed, and neither elementwise nor a view.
constexpr OpDef lowered(std::string_view name, int min_in, int max_in, InferFn infer,
                        ReferenceFn ref, std::string_view doc,
                        std::span<const AttrSpec> attrs = {}) {
  return {name, OpKind::Other, min_in, max_in, DTypeRule::Same, infer, ref, nullptr, doc, attrs};
}

using R = DTypeRule;
using K = AttrKind;

// ---- The attributes of each op (shared by ops that take the same ones) ----

// The sizes of full, reshape and expand as text, for a target with size symbols (a graph from
// torch's dynamic shapes: [b, t, heads, -1] has two): integers and the graph's symbol names.
constexpr std::string_view kSizesDoc =
    "the sizes as integers and size symbols, \"s0, s1, 12, 64\" (this or shape)";

constexpr AttrSpec kFullAttrs[] = {
    optional_attr("shape", K::Ints, "the sizes (this or sizes)").min(0),
    optional_attr("sizes", K::String, kSizesDoc),
    required_attr("value", K::Float, "the fill value (an integer fills integer dtypes exactly)"),
    attr("dtype", K::DType, "f32", "the result dtype"),
};
constexpr AttrSpec kIotaAttrs[] = {
    required_attr("size", K::Int, "the number of elements").min(0),
    attr("start", K::Float, "0", "the first value (integer start and step compute in integers)"),
    attr("step", K::Float, "1", "the distance between values: element i is start + i * step"),
    attr("dtype", K::DType, "i64", "the result dtype"),
};
constexpr std::string_view kGeluApproximations[] = {"none", "tanh"};
constexpr AttrSpec kGeluAttrs[] = {
    attr("approximate", K::String, "\"none\"",
         "\"none\": the erf form, \"tanh\": its tanh approximation")
        .one_of(kGeluApproximations),
};
constexpr AttrSpec kCastAttrs[] = {
    required_attr("dtype", K::DType, "the result dtype"),
};
constexpr AttrSpec kClampAttrs[] = {
    optional_attr("min", K::Float, "the lower bound; absent: none (one of min, max is needed)"),
    optional_attr("max", K::Float, "the upper bound; absent: none"),
};
constexpr AttrSpec kReshapeAttrs[] = {
    optional_attr("shape", K::Ints, "the new sizes; one may be -1 (inferred) (this or sizes)")
        .min(-1),
    optional_attr("sizes", K::String, kSizesDoc),
};
constexpr AttrSpec kPermuteAttrs[] = {
    required_attr("dims", K::Ints,
                  "the input dim of each result dim (negative counts from the end)"),
};
constexpr AttrSpec kTransposeAttrs[] = {
    attr("dim0", K::Int, "0", "one of the swapped dims"),
    attr("dim1", K::Int, "1", "the other"),
};
constexpr AttrSpec kExpandAttrs[] = {
    optional_attr("shape", K::Ints, "the result sizes; -1 keeps the input's size (this or sizes)")
        .min(-1),
    optional_attr("sizes", K::String, kSizesDoc),
};
constexpr AttrSpec kSliceAttrs[] = {
    attr("dim", K::Int, "0", "the sliced dim"),
    attr("start", K::Int, "0", "the first index; negative counts from the end; clamped"),
    optional_attr("end", K::Int, "one past the last index, like start; absent: the dim's size"),
    attr("step", K::Int, "1", "the distance between indices").min(1),
};
constexpr AttrSpec kSqueezeAttrs[] = {
    optional_attr("dims", K::Ints, "the size-1 dims to drop; absent: those statically 1"),
};
constexpr AttrSpec kUnsqueezeAttrs[] = {
    required_attr("dim", K::Int, "where the new dim goes in the result"),
};
constexpr AttrSpec kFlattenAttrs[] = {
    attr("start_dim", K::Int, "0", "the first merged dim"),
    attr("end_dim", K::Int, "-1", "the last merged dim"),
};
constexpr AttrSpec kConcatAttrs[] = {
    attr("dim", K::Int, "0", "the joined dim"),
};
constexpr AttrSpec kGatherAttrs[] = {
    attr("axis", K::Int, "0", "the indexed dim of data"),
};
constexpr AttrSpec kIndexAddAttrs[] = {
    attr("axis", K::Int, "0", "the dim of x that index addresses"),
};
constexpr AttrSpec kAxes = optional_attr("axes", K::Ints, "the reduced dims; absent or []: all");
constexpr AttrSpec kAxis = optional_attr("axis", K::Int, "one reduced dim, instead of axes");
constexpr AttrSpec kKeepdim = attr("keepdim", K::Bool, "false", "keep the reduced dims as size 1");
constexpr AttrSpec kReduceAttrs[] = {kAxes, kAxis, kKeepdim};
constexpr AttrSpec kVarAttrs[] = {
    kAxes,
    kAxis,
    kKeepdim,
    attr("correction", K::Float, "1", "subtracted from the count (1: the unbiased variance)"),
};
constexpr AttrSpec kArgReduceAttrs[] = {
    optional_attr("axis", K::Int, "the reduced dim; absent: the flattened input"),
    kKeepdim,
};
constexpr AttrSpec kSoftmaxAttrs[] = {
    attr("axis", K::Int, "-1", "the normalized dim"),
};
constexpr AttrSpec kLayerNormAttrs[] = {
    attr("dims", K::Int, "1", "how many trailing dims are normalized").min(1),
    attr("eps", K::Float, "1e-5", "added to the variance").min(0),
};
constexpr AttrSpec kRmsNormAttrs[] = {
    attr("dims", K::Int, "1", "how many trailing dims are normalized").min(1),
    attr("eps", K::Float, "1e-6", "added to the mean square").min(0),
};
constexpr AttrSpec kAddmmAttrs[] = {
    attr("alpha", K::Float, "1.0", "the product's factor"),
    attr("beta", K::Float, "1.0", "the bias's factor; 0 ignores the bias (its NaN and inf too)"),
};
constexpr AttrSpec kConv2dAttrs[] = {
    attr("stride", K::IntPair, "[1, 1]", "the window step [h, w]").min(1),
    attr("padding", K::IntPair, "[0, 0]", "zeros added on each side [h, w]").min(0),
    attr("dilation", K::IntPair, "[1, 1]", "the distance between kernel taps [h, w]").min(1),
    attr("groups", K::Int, "1", "channel groups (C and OC divisible by it)").min(1),
};
constexpr AttrSpec kPoolKernel = required_attr("kernel", K::IntPair, "the window [h, w]").min(1);
constexpr AttrSpec kPoolStride =
    optional_attr("stride", K::IntPair, "the window step [h, w]; absent: the kernel").min(1);
constexpr AttrSpec kPoolCeilMode =
    attr("ceil_mode", K::Bool, "false", "round the output size up (torch's rule)");
constexpr AttrSpec kMaxPool2dAttrs[] = {
    kPoolKernel,
    kPoolStride,
    attr("padding", K::IntPair, "[0, 0]",
         "implicit -inf on each side [h, w], at most half the kernel")
        .min(0),
    attr("dilation", K::IntPair, "[1, 1]", "the distance between window taps [h, w]").min(1),
    kPoolCeilMode,
};
constexpr AttrSpec kAvgPool2dAttrs[] = {
    kPoolKernel,
    kPoolStride,
    attr("padding", K::IntPair, "[0, 0]",
         "implicit zeros on each side [h, w], at most half the kernel")
        .min(0),
    kPoolCeilMode,
    attr("count_include_pad", K::Bool, "true", "divide by the whole window, padding included"),
};

constexpr AttrSpec kAttentionAttrs[] = {
    attr("causal", K::Bool, "false",
         "query i sees keys j <= i + Tk - Tq (bottom-right aligned, as decoding with a KV cache "
         "needs; torch's is_causal=True is top-left aligned: pass a mask for that)"),
    optional_attr("scale", K::Float, "the factor of q @ k^T; absent: 1 / sqrt(D)"),
};
constexpr std::string_view kAttentionGradWrt[] = {"q", "k", "v"};
constexpr AttrSpec kAttentionGradAttrs[] = {
    required_attr("wrt", K::String, "the input differentiated: \"q\", \"k\" or \"v\"")
        .one_of(kAttentionGradWrt),
    kAttentionAttrs[0],
    kAttentionAttrs[1],
};

const OpDef kOps[] = {
    // Sources.
    source("input", infer_source, ref_input, "a graph input"),
    source("constant", infer_source, ref_constant, "a constant tensor (weights)"),
    source("full", infer_full, ref_full, "a filled tensor", kFullAttrs),
    source("iota", infer_iota, ref_iota, "arange", kIotaAttrs),

    // Elementwise unary.
    unary("abs", R::Same, "|x|"),
    unary("neg", R::NotBool, "-x"),
    unary("exp", R::Float, "e^x"),
    unary("log", R::Float, "natural logarithm"),
    unary("log1p", R::Float, "log(1 + x)"),
    unary("expm1", R::Float, "e^x - 1"),
    unary("sqrt", R::Float, "square root"),
    unary("rsqrt", R::Float, "1 / sqrt(x)"),
    unary("reciprocal", R::Float, "1 / x"),
    unary("relu", R::NotBool, "max(x, 0)"),
    unary("sigmoid", R::Float, "1 / (1 + e^-x)"),
    unary("tanh", R::Float, "hyperbolic tangent"),
    unary("erf", R::Float, "error function"),
    unary("gelu", R::Float, "x * Phi(x), the erf form or its tanh approximation", kGeluAttrs),
    unary("silu", R::Float, "x * sigmoid(x)"),
    unary("sin", R::Float, "sine"),
    unary("cos", R::Float, "cosine"),
    unary("floor", R::Same, "round toward -inf"),
    unary("ceil", R::Same, "round toward +inf"),
    unary("round", R::Same, "round half to even"),
    unary("sign", R::NotBool, "-1, 0, 1"),
    unary("logical_not", R::Bool, "!x"),
    unary("isnan", R::Bool, "x is NaN"),
    {"cast", OpKind::Elementwise, 1, 1, R::Same, infer_elementwise, ref_elementwise, nullptr,
     "convert (float to int truncates toward 0)", kCastAttrs},
    {"clamp", OpKind::Elementwise, 1, 1, R::Same, infer_elementwise, ref_elementwise, nullptr,
     "min(max(x, min), max); NaN propagates", kClampAttrs},

    // Elementwise binary, with numpy broadcasting and torch type promotion.
    binary("add", R::Same, "a + b"),
    binary("sub", R::NotBool, "a - b"),
    binary("mul", R::Same, "a * b"),
    binary("div", R::Float, "a / b (true division)"),
    binary("pow", R::Same, "a ^ b"),
    binary("maximum", R::Same, "max(a, b), NaN propagates"),
    binary("minimum", R::Same, "min(a, b), NaN propagates"),
    binary("fmod", R::NotBool, "remainder with the sign of a"),
    binary("eq", R::Bool, "a == b"),
    binary("ne", R::Bool, "a != b"),
    binary("lt", R::Bool, "a < b"),
    binary("le", R::Bool, "a <= b"),
    binary("gt", R::Bool, "a > b"),
    binary("ge", R::Bool, "a >= b"),
    binary("logical_and", R::Bool, "a && b"),
    binary("logical_or", R::Bool, "a || b"),
    {"where", OpKind::Elementwise, 3, 3, R::Same, infer_elementwise, ref_elementwise, nullptr,
     "(cond, a, b): cond ? a : b"},

    // Views: index remaps, never copies.
    view("reshape", infer_reshape, "same elements, new sizes", kReshapeAttrs),
    view("permute", infer_permute, "reorder dims", kPermuteAttrs),
    view("transpose", infer_transpose, "swap two dims", kTransposeAttrs),
    view("expand", infer_expand, "broadcast size-1 dims (and add leading ones)", kExpandAttrs),
    view("slice", infer_slice, "every step-th index of [start, end) along dim (python bounds)",
         kSliceAttrs),
    view("squeeze", infer_squeeze, "drop size-1 dims (a symbolic one stays)", kSqueezeAttrs),
    view("unsqueeze", infer_unsqueeze, "insert a size-1 dim", kUnsqueezeAttrs),
    view("flatten", infer_flatten, "merge a range of dims", kFlattenAttrs),
    {"concat", OpKind::Other, 1, -1, R::Same, infer_concat, ref_concat, nullptr, "join along a dim",
     kConcatAttrs},
    {"gather", OpKind::Other, 2, 2, R::Same, infer_gather, ref_gather, nullptr,
     "(data, indices): data[indices] along axis (an embedding lookup); indices i32 or i64, "
     "negative ones count from the end; out of range: an error in the reference, clamped in "
     "compiled code",
     kGatherAttrs},
    {"index_add", OpKind::Other, 3, 3, R::Same, infer_index_add, ref_index_add, nullptr,
     "(x, index, src): x with src's slice j added to x's slice index[j] along axis, j in order "
     "(torch.index_add; an embedding's gradient); index 1-D i32 or i64, negative entries count "
     "from the end, duplicates add up; src is x's shape with len(index) at axis; out of range: "
     "an error in the reference, a run-time error in compiled code (the slice is skipped)",
     kIndexAddAttrs},

    // Reductions over any set of axes (no axes = all).
    reduction("sum", infer_reduction, ref_reduction, nullptr, "sum", kReduceAttrs),
    reduction("prod", infer_reduction, ref_reduction, nullptr, "product", kReduceAttrs),
    reduction("max", infer_reduction, ref_reduction, nullptr, "maximum, NaN propagates",
              kReduceAttrs),
    reduction("min", infer_reduction, ref_reduction, nullptr, "minimum, NaN propagates",
              kReduceAttrs),
    reduction("mean", infer_reduction, ref_reduction, decompose_mean, "sum / count", kReduceAttrs),
    reduction("var", infer_reduction, ref_reduction, decompose_var,
              "sum((x - mean)^2) / max(count - correction, 0)", kVarAttrs),
    reduction("argmax", infer_arg_reduction, ref_arg_reduction, nullptr,
              "index of the first maximum (NaN is maximal)", kArgReduceAttrs),
    reduction("argmin", infer_arg_reduction, ref_arg_reduction, nullptr,
              "index of the first minimum (NaN is minimal)", kArgReduceAttrs),

    // Composites, decomposed before lowering.
    composite("softmax", 1, 1, infer_softmax, ref_softmax, decompose_softmax,
              "exp(x - max) / sum(exp(x - max))", kSoftmaxAttrs),
    composite("log_softmax", 1, 1, infer_softmax, ref_softmax, decompose_log_softmax,
              "x - max - log(sum(exp(x - max)))", kSoftmaxAttrs),
    composite("layer_norm", 1, 3, infer_norm, ref_layer_norm, decompose_layer_norm,
              "(x, weight?, bias?): (x - mean) / sqrt(var + eps) * weight + bias over the last "
              "dims",
              kLayerNormAttrs),
    composite("rms_norm", 1, 2, infer_norm, ref_rms_norm, decompose_rms_norm,
              "(x, weight?): x / sqrt(mean(x^2) + eps) * weight over the last dims", kRmsNormAttrs),

    // Linear algebra: one floating dtype for all inputs.
    lowered("matmul", 2, 2, infer_matmul, ref_matmul,
            "(a, b): torch.matmul; 1-D a is [1, K], 1-D b is [K, 1] (the dim is dropped), "
            "batch dims broadcast: [*batch, M, N]"),
    lowered("bmm", 2, 2, infer_matmul, ref_matmul, "(a, b): [B, M, K] @ [B, K, N] -> [B, M, N]"),
    composite("linear", 2, 3, infer_linear, ref_linear, decompose_linear,
              "(x, w, b?): x [..., in] @ w[out, in]^T + b[out] -> [..., out]"),
    composite("addmm", 3, 3, infer_addmm, ref_addmm, decompose_addmm,
              "(bias, a, b): beta * bias + alpha * (a @ b); a [M, K], b [K, N], bias broadcasts "
              "to [M, N]",
              kAddmmAttrs),

    // Convolution and pooling over the last two dims ({stride, padding, ...}: [h, w], [n] or n).
    lowered("conv2d", 2, 3, infer_conv2d, ref_conv2d,
            "(x, w, b?): x [N, C, H, W], w [OC, C/groups, KH, KW], b [OC] -> [N, OC, OH, OW]",
            kConv2dAttrs),
    lowered("max_pool2d", 1, 1, infer_pool2d, ref_pool2d,
            "max over each window of the last two dims (rank >= 3); NaN propagates, padding "
            "never wins",
            kMaxPool2dAttrs),
    lowered("avg_pool2d", 1, 1, infer_pool2d, ref_pool2d,
            "mean over each window of the last two dims (rank >= 3), torch's divisor",
            kAvgPool2dAttrs),
    // Attention: lowered to a flash kernel on the CPU, decomposed for cuda and for f64.
    {"attention", OpKind::Other, 3, 4, R::Same, infer_attention, ref_attention, decompose_attention,
     "(q, k, v, mask?): softmax(q @ k^T * scale + mask) @ v; q [B, H, Tq, D], k [B, Hkv, Tk, D], "
     "v [B, Hkv, Tk, Dv] -> [B, H, Tq, Dv]; head h reads kv head h / (H / Hkv) (grouped-query); "
     "the mask broadcasts to [B, H, Tq, Tk], bool (true: attend; false: -inf) or floating "
     "(added); a row with every key masked is NaN, as softmax of all -inf; f16/bf16 compute in "
     "f32",
     kAttentionAttrs},
    {"attention_lse", OpKind::Other, 2, 3, R::Same, infer_attention_lse, ref_attention_lse,
     decompose_attention_lse,
     "(q, k, mask?): the logsumexp of each row of attention's scaled, masked scores, [B, H, Tq] "
     "f32 (f64 for f64 q); -inf for a row that sees no key. What attention_grad takes (torch's "
     "flash forward returns it)",
     kAttentionAttrs},
    {"attention_grad", OpKind::Other, 6, 7, R::Same, infer_attention_grad, ref_attention_grad,
     decompose_attention_grad,
     "(q, k, v, out, grad_out, lse, mask?): the gradient of out = attention(q, k, v, mask) with "
     "respect to q, k or v given grad_out = dL/dout and lse = attention_lse(q, k, mask): "
     "P = exp(scores - lse) (0 where lse is -inf), dS = P * (grad_out v^T - rowsum(grad_out * "
     "out)); dq = scale * dS k, dk = scale * dS^T q, dv = P^T grad_out (k's and v's summed over "
     "each kv head's query heads); the shape of the input it differentiates",
     kAttentionGradAttrs},
    composite("global_avg_pool2d", 1, 1, infer_global_pool2d, ref_global_avg_pool2d,
              decompose_global_avg_pool2d, "mean over the last two dims, kept as [..., 1, 1]"),
};

}  // namespace

std::span<const OpDef> all_ops() {
  return kOps;
}

const OpDef* find_op(std::string_view name) {
  static const std::unordered_map<std::string_view, const OpDef*> index = [] {
    std::unordered_map<std::string_view, const OpDef*> m;
    for (const OpDef& op : kOps) m[op.name] = &op;
    return m;
  }();
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

const OpDef& get_op(std::string_view name) {
  const OpDef* op = find_op(name);
  COIL_USER_CHECK(op != nullptr, "unknown op '{}'", name);
  return *op;
}

}  // namespace coil
