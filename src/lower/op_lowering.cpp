// The lowering table: how each graph op that is not decomposed becomes loop IR, by op name. It
// is the lowering column of the op registry (graph/op_registry.cpp), kept here so that graph/
// knows nothing of the loop IR. input and constant have no row: lower_graph makes them buffers.
// tests/unit/op_lowering_test.cpp checks that the two tables name the same ops.
#include "lower/op_lowering.h"

#include <unordered_map>

#include "lower/lower_ops.h"

namespace coil {
namespace {

using L = LoopOp;

constexpr OpLowering elementwise(std::string_view op, LoopOp loop_op) {
  return {op, lower_elementwise, loop_op};
}

const OpLowering kLowerings[] = {
    // Sources (input and constant become buffers in lower_graph itself).
    {"full", lower_full},
    {"iota", lower_iota},

    // Elementwise: the loop op computing one element (gelu, silu and clamp build more around it).
    elementwise("abs", L::abs),
    elementwise("neg", L::neg),
    elementwise("exp", L::exp),
    elementwise("log", L::log),
    elementwise("log1p", L::log1p),
    elementwise("expm1", L::expm1),
    elementwise("sqrt", L::sqrt),
    elementwise("rsqrt", L::rsqrt),
    elementwise("reciprocal", L::reciprocal),
    elementwise("relu", L::relu),
    elementwise("sigmoid", L::sigmoid),
    elementwise("tanh", L::tanh),
    elementwise("erf", L::erf),
    elementwise("gelu", L::erf),
    elementwise("silu", L::sigmoid),
    elementwise("sin", L::sin),
    elementwise("cos", L::cos),
    elementwise("floor", L::floor),
    elementwise("ceil", L::ceil),
    elementwise("round", L::round),
    elementwise("sign", L::sign),
    elementwise("logical_not", L::logical_not),
    elementwise("isnan", L::isnan),
    elementwise("cast", L::to_dtype),
    elementwise("clamp", L::minimum),
    elementwise("add", L::add),
    elementwise("sub", L::sub),
    elementwise("mul", L::mul),
    elementwise("div", L::div),
    elementwise("pow", L::pow),
    elementwise("maximum", L::maximum),
    elementwise("minimum", L::minimum),
    elementwise("fmod", L::fmod),
    elementwise("eq", L::eq),
    elementwise("ne", L::ne),
    elementwise("lt", L::lt),
    elementwise("le", L::le),
    elementwise("gt", L::gt),
    elementwise("ge", L::ge),
    elementwise("logical_and", L::logical_and),
    elementwise("logical_or", L::logical_or),
    elementwise("where", L::where),

    // Views: index remaps of the input's loader.
    {"reshape", lower_view},
    {"permute", lower_view},
    {"transpose", lower_view},
    {"expand", lower_view},
    {"slice", lower_view},
    {"squeeze", lower_view},
    {"unsqueeze", lower_view},
    {"flatten", lower_view},

    // Joins and lookups.
    {"concat", lower_concat},
    {"gather", lower_gather},
    {"index_add", lower_index_add},

    // Reductions.
    {"sum", lower_reduction},
    {"prod", lower_reduction},
    {"max", lower_reduction},
    {"min", lower_reduction},
    {"argmax", lower_arg_reduction},
    {"argmin", lower_arg_reduction},

    // Templates, extern kernels and pooling windows.
    {"matmul", lower_matmul},
    {"bmm", lower_matmul},
    {"conv2d", lower_conv2d},
    {"attention", lower_attention},
    {"attention_lse", lower_attention},
    {"attention_grad", lower_attention},
    {"max_pool2d", lower_pool2d},
    {"avg_pool2d", lower_pool2d},
};

}  // namespace

std::span<const OpLowering> all_lowerings() {
  return kLowerings;
}

const OpLowering* find_lowering(std::string_view op) {
  static const std::unordered_map<std::string_view, const OpLowering*> index = [] {
    std::unordered_map<std::string_view, const OpLowering*> m;
    for (const OpLowering& l : kLowerings) m[l.op] = &l;
    return m;
  }();
  auto it = index.find(op);
  return it == index.end() ? nullptr : it->second;
}

}  // namespace coil
