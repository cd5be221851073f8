// The op registry: every graph op is listed once (graph/op_registry.cpp) with its arity,
// shape and dtype rule, reference-interpreter kernel, decomposition into other graph ops
// (composites), and the attributes it takes. How the other ops become loop IR is not the
// graph's business: lower/op_lowering.h has their lowerings, keyed by op name.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "coil/graph.h"

namespace coil {

enum class OpKind {
  Source,       // input, constant, full, iota
  Elementwise,  // unary, binary, where, cast, clamp: one loop op per element
  View,         // index remaps: reshape, permute, expand, slice, ...; never copies
  Reduction,    // sum, mean, max, argmax, ...
  Composite,    // decomposed into other ops before lowering (softmax, layer_norm, ...)
  Other,        // concat
};

/// How an elementwise op picks its result dtype from the promoted input dtype.
enum class DTypeRule {
  Same,     // result = promoted inputs (add, abs, floor, ...)
  Float,    // integers and bool become f32 (exp, div, sigmoid, ...)
  Bool,     // comparisons and logical ops, isnan
  NotBool,  // like Same but bool inputs are rejected (neg, sub)
};

/// Infers the node's type from its inputs' types and attributes (coil::Error when invalid).
using InferFn = TensorType (*)(const Node& node, const std::vector<const TensorType*>& inputs);
/// Computes the node on host tensors with plain loops in double precision.
using ReferenceFn = Tensor (*)(const Node& node, const std::vector<Tensor>& inputs);
/// Rebuilds a composite node out of simpler ones in `g`; returns the id of the replacement.
using DecomposeFn = int (*)(Graph& g, const Node& node, const std::vector<int>& inputs);

struct OpDef {
  std::string_view name;
  OpKind kind;
  int min_inputs;
  int max_inputs;        // -1: any number
  DTypeRule dtype_rule;  // elementwise ops only
  InferFn infer;
  ReferenceFn reference;
  DecomposeFn decompose;  // null unless kind == Composite, or an op decomposed only on some
                          // targets (attention: graph/decompositions.h DecomposeOptions)
  std::string_view doc;   // inputs and meaning; the attributes are documented by `attrs`
  std::span<const AttrSpec> attrs = {};  // every attribute the op takes (graph/attr_check.h)
};

/// The op named `name`, or null.
const OpDef* find_op(std::string_view name);
/// The op named `name`; coil::Error "unknown op 'name'" when absent.
const OpDef& get_op(std::string_view name);
/// Every registered op, in registry order.
std::span<const OpDef> all_ops();

}  // namespace coil
