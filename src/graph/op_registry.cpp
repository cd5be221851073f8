// The op registry: every graph op, once. Columns: name, kind, inputs (min, max), dtype rule and
// loop op (elementwise only), shape/dtype rule, reference kernel, lowering, decomposition, doc.
#include "graph/op_registry.h"

#include <unordered_map>

#include "graph/decompositions.h"
#include "graph/reference/reference_kernels.h"
#include "graph/type_rules.h"
#include "ir/lower_ops.h"
#include "support/check.h"

namespace coil {
namespace {

constexpr OpDef source(std::string_view name, InferFn infer, ReferenceFn ref, LowerFn lower,
                       std::string_view doc) {
  return {name, OpKind::Source, 0,       0,  DTypeRule::Same, LoopOp::constant, infer,
          ref,  lower,          nullptr, doc};
}
constexpr OpDef unary(std::string_view name, LoopOp op, DTypeRule rule, std::string_view doc) {
  return {name,
          OpKind::Elementwise,
          1,
          1,
          rule,
          op,
          infer_elementwise,
          ref_elementwise,
          lower_elementwise,
          nullptr,
          doc};
}
constexpr OpDef binary(std::string_view name, LoopOp op, DTypeRule rule, std::string_view doc) {
  return {name,
          OpKind::Elementwise,
          2,
          2,
          rule,
          op,
          infer_elementwise,
          ref_elementwise,
          lower_elementwise,
          nullptr,
          doc};
}
constexpr OpDef view(std::string_view name, InferFn infer, std::string_view doc) {
  return {name,     OpKind::View, 1,       1,  DTypeRule::Same, LoopOp::load, infer,
          ref_view, lower_view,   nullptr, doc};
}
constexpr OpDef reduction(std::string_view name, InferFn infer, ReferenceFn ref, LowerFn lower,
                          DecomposeFn decompose, std::string_view doc) {
  return {name,
          decompose ? OpKind::Composite : OpKind::Reduction,
          1,
          1,
          DTypeRule::Same,
          LoopOp::reduction,
          infer,
          ref,
          lower,
          decompose,
          doc};
}
constexpr OpDef composite(std::string_view name, int min_in, int max_in, InferFn infer,
                          ReferenceFn ref, DecomposeFn decompose, std::string_view doc) {
  return {name, OpKind::Composite, min_in,    max_in, DTypeRule::Same, LoopOp::constant, infer,
          ref,  nullptr,           decompose, doc};
}

constexpr OpDef lowered(std::string_view name, int min_in, int max_in, InferFn infer,
                        ReferenceFn ref, LowerFn lower, std::string_view doc) {
  return {name, OpKind::Other, min_in,  max_in, DTypeRule::Same, LoopOp::constant, infer,
          ref,  lower,         nullptr, doc};
}

using R = DTypeRule;
using L = LoopOp;

const OpDef kOps[] = {
    // Sources.
    source("input", infer_source, ref_input, nullptr, "a graph input"),
    source("constant", infer_source, ref_constant, nullptr, "a constant tensor (weights)"),
    source("full", infer_full, ref_full, lower_full, "{shape, value, dtype=f32}: a filled tensor"),
    source("iota", infer_iota, ref_iota, lower_iota, "{size, start=0, step=1, dtype=i64}: arange"),

    // Elementwise unary.
    unary("abs", L::abs, R::Same, "|x|"),
    unary("neg", L::neg, R::NotBool, "-x"),
    unary("exp", L::exp, R::Float, "e^x"),
    unary("log", L::log, R::Float, "natural logarithm"),
    unary("log1p", L::log1p, R::Float, "log(1 + x)"),
    unary("expm1", L::expm1, R::Float, "e^x - 1"),
    unary("sqrt", L::sqrt, R::Float, "square root"),
    unary("rsqrt", L::rsqrt, R::Float, "1 / sqrt(x)"),
    unary("reciprocal", L::reciprocal, R::Float, "1 / x"),
    unary("relu", L::relu, R::NotBool, "max(x, 0)"),
    unary("sigmoid", L::sigmoid, R::Float, "1 / (1 + e^-x)"),
    unary("tanh", L::tanh, R::Float, "hyperbolic tangent"),
    unary("erf", L::erf, R::Float, "error function"),
    unary("gelu", L::erf, R::Float,
          "{approximate=\"none\"|\"tanh\"}: x * Phi(x), erf form or tanh approximation"),
    unary("silu", L::sigmoid, R::Float, "x * sigmoid(x)"),
    unary("sin", L::sin, R::Float, "sine"),
    unary("cos", L::cos, R::Float, "cosine"),
    unary("floor", L::floor, R::Same, "round toward -inf"),
    unary("ceil", L::ceil, R::Same, "round toward +inf"),
    unary("round", L::round, R::Same, "round half to even"),
    unary("sign", L::sign, R::NotBool, "-1, 0, 1"),
    unary("logical_not", L::logical_not, R::Bool, "!x"),
    unary("isnan", L::isnan, R::Bool, "x is NaN"),
    {"cast", OpKind::Elementwise, 1, 1, R::Same, L::to_dtype, infer_elementwise, ref_elementwise,
     lower_elementwise, nullptr, "{dtype}: convert (float to int truncates toward 0)"},
    {"clamp", OpKind::Elementwise, 1, 1, R::Same, L::minimum, infer_elementwise, ref_elementwise,
     lower_elementwise, nullptr, "{min?, max?}: min(max(x, min), max); NaN propagates"},

    // Elementwise binary, with numpy broadcasting and torch type promotion.
    binary("add", L::add, R::Same, "a + b"),
    binary("sub", L::sub, R::NotBool, "a - b"),
    binary("mul", L::mul, R::Same, "a * b"),
    binary("div", L::div, R::Float, "a / b (true division)"),
    binary("pow", L::pow, R::Same, "a ^ b"),
    binary("maximum", L::maximum, R::Same, "max(a, b), NaN propagates"),
    binary("minimum", L::minimum, R::Same, "min(a, b), NaN propagates"),
    binary("fmod", L::fmod, R::NotBool, "remainder with the sign of a"),
    binary("eq", L::eq, R::Bool, "a == b"),
    binary("ne", L::ne, R::Bool, "a != b"),
    binary("lt", L::lt, R::Bool, "a < b"),
    binary("le", L::le, R::Bool, "a <= b"),
    binary("gt", L::gt, R::Bool, "a > b"),
    binary("ge", L::ge, R::Bool, "a >= b"),
    binary("logical_and", L::logical_and, R::Bool, "a && b"),
    binary("logical_or", L::logical_or, R::Bool, "a || b"),
    {"where", OpKind::Elementwise, 3, 3, R::Same, L::where, infer_elementwise, ref_elementwise,
     lower_elementwise, nullptr, "(cond, a, b): cond ? a : b"},

    // Views: index remaps, never copies.
    view("reshape", infer_reshape, "{shape}: one size may be -1"),
    view("permute", infer_permute, "{dims}: reorder dims"),
    view("transpose", infer_transpose, "{dim0=0, dim1=1}: swap two dims"),
    view("expand", infer_expand, "{shape}: broadcast size-1 dims; -1 keeps a dim"),
    view("slice", infer_slice, "{dim=0, start=0, end, step=1}: python-style bounds, step > 0"),
    view("squeeze", infer_squeeze,
         "{dims?}: drop size-1 dims (no dims: those statically 1; a symbolic one stays)"),
    view("unsqueeze", infer_unsqueeze, "{dim}: insert a size-1 dim"),
    view("flatten", infer_flatten, "{start_dim=0, end_dim=-1}: merge a range of dims"),
    {"concat", OpKind::Other, 1, -1, R::Same, L::where, infer_concat, ref_concat, lower_concat,
     nullptr, "{dim=0}: join along a dim"},
    {"gather", OpKind::Other, 2, 2, R::Same, L::load, infer_gather, ref_gather, lower_gather,
     nullptr,
     "(data, indices) {axis=0}: data[indices] along axis (an embedding lookup); indices i32 or "
     "i64, negative ones count from the end; out of range: an error in the reference, clamped "
     "in compiled code"},

    // Reductions over any set of axes ({axes?, keepdim=false}; no axes = all).
    reduction("sum", infer_reduction, ref_reduction, lower_reduction, nullptr, "sum"),
    reduction("prod", infer_reduction, ref_reduction, lower_reduction, nullptr, "product"),
    reduction("max", infer_reduction, ref_reduction, lower_reduction, nullptr,
              "maximum, NaN propagates"),
    reduction("min", infer_reduction, ref_reduction, lower_reduction, nullptr,
              "minimum, NaN propagates"),
    reduction("mean", infer_reduction, ref_reduction, nullptr, decompose_mean, "sum / count"),
    reduction("var", infer_reduction, ref_reduction, nullptr, decompose_var,
              "{correction=1}: sum((x - mean)^2) / (count - correction)"),
    reduction("argmax", infer_arg_reduction, ref_arg_reduction, lower_arg_reduction, nullptr,
              "{axis?, keepdim=false}: index of the first maximum (NaN is maximal)"),
    reduction("argmin", infer_arg_reduction, ref_arg_reduction, lower_arg_reduction, nullptr,
              "{axis?, keepdim=false}: index of the first minimum (NaN is minimal)"),

    // Composites, decomposed before lowering.
    composite("softmax", 1, 1, infer_softmax, ref_softmax, decompose_softmax,
              "{axis=-1}: exp(x - max) / sum(exp(x - max))"),
    composite("log_softmax", 1, 1, infer_softmax, ref_softmax, decompose_log_softmax,
              "{axis=-1}: x - max - log(sum(exp(x - max)))"),
    composite("layer_norm", 1, 3, infer_norm, ref_layer_norm, decompose_layer_norm,
              "(x, weight?, bias?) {dims=1, eps=1e-5}: normalize over the last dims"),
    composite("rms_norm", 1, 2, infer_norm, ref_rms_norm, decompose_rms_norm,
              "(x, weight?) {dims=1, eps=1e-6}: x / sqrt(mean(x^2) + eps) * weight"),

    // Linear algebra: one floating dtype for all inputs.
    lowered("matmul", 2, 2, infer_matmul, ref_matmul, lower_matmul,
            "(a, b): torch.matmul; 1-D a is [1, K], 1-D b is [K, 1] (the dim is dropped), "
            "batch dims broadcast: [*batch, M, N]"),
    lowered("bmm", 2, 2, infer_matmul, ref_matmul, lower_matmul,
            "(a, b): [B, M, K] @ [B, K, N] -> [B, M, N]"),
    composite("linear", 2, 3, infer_linear, ref_linear, decompose_linear,
              "(x, w, b?): x [..., in] @ w[out, in]^T + b[out] -> [..., out]"),
    composite("addmm", 3, 3, infer_addmm, ref_addmm, decompose_addmm,
              "(bias, a, b) {alpha=1.0, beta=1.0}: beta * bias + alpha * (a @ b); a [M, K], "
              "b [K, N], bias broadcasts to [M, N]; beta=0 ignores bias"),

    // Convolution and pooling over the last two dims ({stride, padding, ...}: [h, w] or one int).
    lowered(
        "conv2d", 2, 3, infer_conv2d, ref_conv2d, lower_conv2d,
        "(x, w, b?) {stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1}: x [N, C, H, W], "
        "w [OC, C/groups, KH, KW], b [OC] -> [N, OC, OH, OW]"),
    lowered("max_pool2d", 1, 1, infer_pool2d, ref_pool2d, lower_pool2d,
            "{kernel, stride=kernel, padding=[0, 0], dilation=[1, 1], ceil_mode=false}: max over "
            "each window of the last two dims (rank >= 3); NaN propagates, padding never wins"),
    lowered("avg_pool2d", 1, 1, infer_pool2d, ref_pool2d, lower_pool2d,
            "{kernel, stride=kernel, padding=[0, 0], ceil_mode=false, count_include_pad=true}: "
            "mean over each window of the last two dims (rank >= 3), torch's divisor"),
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
