// The tensor program: an SSA graph of nodes, each producing one tensor value.
//
// A node's type (dtype and shape) is inferred when it is added, from its op's rules in the op
// registry (graph/op_registry.h); an invalid node (shape mismatch, bad attribute, unknown op) is
// rejected then with a coil::Error, so a Graph is always well-typed.
// Shapes hold sym::Expr sizes: constants or named symbols ("s0", "batch"). Symbols are bound
// to concrete sizes at compile time (CompileOptions::sizes).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "coil/attrs.h"
#include "coil/expr.h"
#include "coil/tensor.h"

namespace coil {

struct OpDef;
using Shape = std::vector<sym::Expr>;

/// dtype and shape of a value.
struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool operator==(const TensorType& o) const = default;
};
/// "f32[4, s0]"
std::string type_str(const TensorType& t);
std::string shape_str(const Shape& s);
/// Shape of constants: all sizes must be constant.
Shape make_shape(const std::vector<int64_t>& sizes);
/// The sizes of a shape whose every dim is a constant; nullopt otherwise.
std::optional<std::vector<int64_t>> static_sizes(const Shape& s);

struct Node {
  int id = -1;                // position in Graph::nodes()
  const OpDef* op = nullptr;  // never null
  std::vector<int> inputs;    // ids of input nodes
  Attrs attrs;
  TensorType type;                     // inferred
  std::string name;                    // unique value name, an identifier [A-Za-z_][A-Za-z0-9_]*
  std::shared_ptr<const Tensor> data;  // the value of a "constant" node; null otherwise
  std::string location;  // "model.coil:4:5" where the text format defined it; empty otherwise
  /// Provenance of a node a decomposition added: the composite op it computes part of
  /// ("layer_norm") and that composite's node name ("y"); both empty for a node as written.
  /// Nested decompositions (var inside layer_norm) keep the outermost composite.
  std::string composite, composite_node;
  /// A graph input's name in the model it was imported from, when that is not an identifier
  /// (ONNX's "onnx::Gemm_0" is input onnx_Gemm_0); empty otherwise. The CLI and
  /// CompiledModel's ValueSpec accept and show both; generated code sees only `name`.
  std::string source_name;

  std::string_view op_name() const;
};

/// A graph output: a name, the node that produces it, and (as Node::source_name) its name in
/// the imported model when that differs.
struct GraphOutput {
  std::string name;
  int node = -1;
  std::string source_name;
};

class Graph {
 public:
  /// A graph input. Sizes may be symbols. Names must be unique identifiers.
  int add_input(const std::string& name, DType dtype, Shape shape);
  /// A node running `op` on `inputs`; its type is inferred and checked now.
  /// An empty name gets a fresh one ("t0", "t1", ...).
  int add_node(std::string_view op, std::vector<int> inputs, Attrs attrs = {},
               const std::string& name = "");
  /// A constant tensor (weights, ONNX initializers).
  int add_constant(Tensor value, const std::string& name = "");
  /// Marks a node as a graph output. An empty name reuses the node's name.
  void add_output(int node, const std::string& name = "");
  /// Records the imported model's name of graph input `node` (Node::source_name).
  void set_source_name(int node, std::string source_name);
  /// Records the imported model's name of output `index` (GraphOutput::source_name).
  void set_output_source_name(size_t index, std::string source_name);
  /// Records where a node was defined (a frontend's file:line:col), for later errors.
  void set_location(int node, std::string location);
  /// Records the composite op a decomposition added `node` for (Node::composite).
  void set_composite(int node, std::string composite, std::string composite_node);

  const Node& node(int id) const;
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  /// Node id by value name; -1 when absent.
  int find(std::string_view name) const;
  /// Number of nodes (and graph outputs) that read each node.
  std::vector<int> use_counts() const;
  /// Symbols appearing in input shapes, sorted by name.
  std::vector<sym::Expr> size_symbols() const;
  /// The name an unnamed node added now would get ("t3"), for messages about it.
  std::string next_fresh_name() const;

 private:
  int push(std::unique_ptr<Node> n);
  std::string fresh_name();

  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<int> inputs_;
  std::vector<GraphOutput> outputs_;
  std::unordered_map<std::string, int> by_name_;
  int next_temp_ = 0;
};

/// True when `name` is a valid value name (letters, digits, '_', not starting with a digit).
bool is_identifier(std::string_view name);

/// Per node id: whether some graph output depends on it.
std::vector<bool> live_nodes(const Graph& g);

/// "model.coil:4:5: " for a node with a location, else "node y: ": the prefix of an error
/// about `n` raised after parsing (size binding, the reference interpreter).
std::string error_context(const Node& n);

/// Prints the graph in the text format (graph/text_format.h parses it back).
std::string to_text(const Graph& g);

}  // namespace coil
