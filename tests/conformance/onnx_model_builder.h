// Builds small ONNX models with the protobuf classes, and imports them, for the frontend's tests
// (tests/error/onnx_errors_test.cpp, tests/conformance/onnx_import_test.cpp).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "coil/tensor.h"
#include "frontend/onnx/onnx_import.h"
#include "support/error_of.h"

namespace coil::onnx_test {

using TP = onnx::TensorProto;

/// Sets a tensor type; a dim of -1 becomes the dim_param `param`.
inline void set_type(onnx::ValueInfoProto* v, const std::string& name, int32_t elem,
                     const std::vector<int64_t>& dims, const std::string& param = "N") {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* s = t->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0)
      s->add_dim()->set_dim_param(param);
    else
      s->add_dim()->set_dim_value(d);
  }
}

inline onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op,
                                 const std::vector<std::string>& in,
                                 const std::vector<std::string>& out,
                                 const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& s : in) n->add_input(s);
  for (const auto& s : out) n->add_output(s);
  return n;
}

inline onnx::AttributeProto* add_int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
  return a;
}

inline onnx::AttributeProto* add_ints_attr(onnx::NodeProto* n, const std::string& name,
                                           const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
  return a;
}

/// An int64 initializer (1-D, or 0-D when `scalar`).
inline void add_i64_initializer(onnx::ModelProto& m, const std::string& name,
                                const std::vector<int64_t>& v, bool scalar = false) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(TP::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

/// An empty model: ir_version 8, the default domain at `opset`.
inline onnx::ModelProto empty_model(int64_t opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

/// x: f32[2, 3] -> Relu (node "relu") -> y.
inline onnx::ModelProto relu_model(int64_t opset = 13) {
  onnx::ModelProto m = empty_model(opset);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {2, 3});
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {2, 3});
  add_node(m, "Relu", {"x"}, {"y"}, "relu");
  return m;
}

/// The model imported as "m.onnx" (the name the error tests' messages carry).
inline Graph import(const onnx::ModelProto& m) {
  return import_onnx_bytes(m.SerializeAsString(), "m.onnx");
}
/// The import's error message ("" when it imports).
inline std::string import_error(const onnx::ModelProto& m) {
  return coil::testing::error_of([&] { import(m); });
}
}  // namespace coil::onnx_test
