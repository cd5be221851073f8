// What the ONNX op mappings (onnx_ops_*.cpp) see of the importer: one ONNX node, its inputs as
// coil values, its attributes, and a builder that adds coil nodes (folding constants as it goes).
#pragma once

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coil/graph.h"
#include "support/check.h"

namespace coil::onnxfe {

/// Thrown by a mapping when the model uses something coil cannot express yet (a dynamic
/// Gather, a non-constant shape, a Pad mode). The importer collects these for all nodes and
/// reports them together; a malformed model is a coil::Error instead.
struct Unsupported {
  std::string reason;
};

template <typename... Args>
[[noreturn]] void unsupported(fmt::format_string<Args...> f, Args&&... args) {
  throw Unsupported{fmt::format(f, std::forward<Args>(args)...)};
}

/// Hands out unique identifiers derived from model names.
class Namer {
 public:
  /// sanitize_onnx_name(hint), with "_2", "_3", ... appended until unused.
  std::string fresh(std::string_view hint);

 private:
  std::unordered_set<std::string> used_;
};

/// A model string fit for an error message: printable ASCII, quotes and backslashes escaped,
/// at most 80 characters.
std::string printable(std::string_view s);

/// Values of constant nodes are computed at import time when they have at most this many
/// elements (larger ones stay graph nodes).
constexpr int64_t kFoldLimit = int64_t{1} << 16;

/// Integer tensors of rank 0 or 1 whose elements are size expressions with symbols: the Shape of
/// a tensor with a symbolic dim (`[batch, 64, 256]`) and the shape arithmetic on it (Gather,
/// Unsqueeze, Concat, Mul, ...; onnx_ops_symbolic.cpp), kept by the importer so that a Reshape
/// to such a shape folds like a constant one. Each is represented in the graph by a placeholder
/// node (zeros of its dtype and shape), keyed here by its id, which nothing may compute with:
/// the importer reports any other use as unsupported.
using SymbolicInts = std::unordered_map<int, std::vector<sym::Expr>>;

/// A value with two or more symbolic sizes that a Reshape made by merging dims
/// (`[seq, 4*batch, 16]` from `[seq, batch, 4, 16]`), kept with its unmerged form: the coil value
/// `base` and, per ONNX dim, how many consecutive dims of `base` it merges (`groups`). coil's
/// `reshape` infers only one size, so a later Reshape that splits such a dim again
/// (`[seq*batch, 64]` -> `[seq, batch, 64]`) is written from `base`, and the ops between
/// (Transpose, MatMul, Gemm, Softmax, elementwise with a broadcast operand) compute on `base`
/// too (onnx_ops_split_view.cpp). The value itself is `base` with each group flattened, so
/// every other mapping reads it as usual. Keyed by the value's id.
struct SplitView {
  int base = -1;
  std::vector<int> groups;
};
/// The import's record of values whose coil form differs from their ONNX shape: SplitViews
/// (above), and broadcast values: a ConstantOfShape of a symbolic shape (the zeros of
/// torch's `zeros_like` on an attention mask, `[4*batch, 1, seq]`) is a constant of 1s of the
/// same rank, whose ONNX value is it expanded to `broadcast[id]` (coil's `full` and `expand`
/// take integer sizes). Elementwise ops keep that form (f of expanded values is the expanded f);
/// the importer refuses any other use (onnx_broadcast_values.cpp).
struct SplitViews {
  std::unordered_map<int, SplitView> views;
  std::unordered_map<int, Shape> broadcast;
};

class OnnxNode {
 public:
  OnnxNode(Graph& g, Namer& namer, SymbolicInts& symbolic, SplitViews& split_views,
           const onnx::NodeProto& proto, int opset, std::vector<int> inputs);

  const onnx::NodeProto& proto() const { return proto_; }
  const std::string& op_type() const { return proto_.op_type(); }
  int opset() const { return opset_; }

  // --- inputs (coil node ids; -1 for an omitted optional input) ---
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[static_cast<size_t>(i)] >= 0; }
  /// Input i; a coil::Error when it is missing.
  int in(int i) const;
  const TensorType& type(int id) const { return g_.node(id).type; }
  int64_t rank(int id) const { return type(id).rank(); }
  DType dtype(int id) const { return type(id).dtype; }
  /// The value of a constant node, or null.
  const Tensor* constant(int id) const;
  /// Input i as a constant integer list (any integer dtype, any rank); Unsupported when the
  /// input is not a constant ("`what` is not a constant").
  std::vector<int64_t> const_ints(int i, std::string_view what) const;
  /// Input i as a constant scalar (one element).
  double const_scalar(int i, std::string_view what) const;
  /// const_scalar as an int64 (ONNX casts a float Trilu k or OneHot depth to int64); an error
  /// when it is NaN or outside int64. An i64 value is read exactly.
  int64_t const_int_scalar(int i, std::string_view what) const;
  /// The static sizes of a value; Unsupported when some size is symbolic.
  std::vector<int64_t> static_shape(int id, std::string_view what) const;
  /// The size expressions of a symbolic integer value (SymbolicInts), or null.
  const std::vector<sym::Expr>* symbolic(int id) const;
  /// Input i as integers that may be size expressions: a constant integer tensor or a symbolic
  /// value (any rank for constants); Unsupported otherwise ("`what` is not a constant").
  std::vector<sym::Expr> sym_ints(int i, std::string_view what) const;
  /// The unmerged form of a value (SplitViews), or null.
  const SplitView* split_view(int id) const;
  /// The ONNX shape of a broadcast value (SplitViews), or null.
  const Shape* broadcast_shape(int id) const;
  void set_broadcast_shape(int id, Shape s) { split_views_.broadcast[id] = std::move(s); }

  // --- attributes (a wrong attribute type is a coil::Error) ---
  bool has_attr(std::string_view name) const { return find_attr(name) != nullptr; }
  int64_t attr_int(std::string_view name, int64_t dflt) const;
  double attr_float(std::string_view name, double dflt) const;
  std::string attr_string(std::string_view name, std::string dflt) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  std::optional<std::vector<double>> attr_floats(std::string_view name) const;
  std::optional<std::vector<std::string>> attr_strings(std::string_view name) const;
  const onnx::TensorProto* attr_tensor(std::string_view name) const;
  /// The attribute `name`, or null. Every attribute read goes through here, which marks it read.
  const onnx::AttributeProto* find_attr(std::string_view name) const;
  /// Marks attribute `name` as handled without reading its value: for one whose every value
  /// means the same to coil (Dropout's ratio at inference); the call site says why.
  void ignore_attr(std::string_view name) const { find_attr(name); }
  /// Run after the mapping: an attribute it did not read would be silently ignored, which is
  /// right only when the attribute holds ONNX's default for the op at this opset. Any other
  /// value is Unsupported (naming the attribute and its value), and a name the op's schema does
  /// not have is a coil::Error (onnx_attr_check.cpp).
  void check_unread_attrs() const;

  // --- building ---
  /// Adds a coil node (folded into a constant when all its inputs are constants).
  int add(std::string_view op, std::vector<int> inputs, Attrs attrs = {});
  int add_constant(const Tensor& t);
  /// An integer value of dtype `t`, 0-D (`scalar`, one element) or 1-D: a constant when every
  /// element is a constant, else a SymbolicInts placeholder.
  int add_ints(const std::vector<sym::Expr>& v, bool scalar, DType t);
  /// `base` with each of `groups` (counts of consecutive dims, summing to its rank) flattened
  /// into one dim, recorded as a SplitView unless every group is one dim (then `base` itself).
  int add_split_view(int base, std::vector<int> groups);
  /// A 0-dim constant.
  int scalar(double v, DType t);
  /// `x` cast to `t` (x itself when it already is).
  int cast(int x, DType t);
  /// Normalizes an ONNX axis for a tensor of `rank` (a coil::Error when out of range).
  int64_t axis(int64_t a, int64_t rank) const;

  // --- outputs ---
  int num_outputs() const { return proto_.output_size(); }
  /// Whether output i exists and has a name (ONNX omits optional outputs with "").
  bool wants_output(int i) const { return i < num_outputs() && !proto_.output(i).empty(); }
  void set_output(int i, int id);
  const std::vector<int>& outputs() const { return outputs_; }

  /// A coil::Error about this node.
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    user_error("{}", fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  int fold(int id);

  Graph& g_;
  Namer& namer_;
  SymbolicInts& symbolic_;
  SplitViews& split_views_;
  const onnx::NodeProto& proto_;
  int opset_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::string hint_;
  mutable std::vector<bool> attr_read_;  // by index in proto_.attribute()
};

/// Maps one ONNX node; sets every wanted output or throws Unsupported / coil::Error.
using MapFn = void (*)(OnnxNode& n);

struct OnnxOpDef {
  std::string_view name;
  MapFn map;              // null: known but not supported yet
  std::string_view note;  // for docs and for the unsupported message when map is null
};

/// The ONNX op `name`, or null when coil does not know it: an op of the default domain by its
/// name, one of another domain as `domain.name` (ai.onnx.preview.training.Adam).
const OnnxOpDef* find_onnx_op(std::string_view name);
/// Whether `domain` is ONNX's default domain ("" or "ai.onnx").
bool is_default_domain(std::string_view domain);
/// The key of node `n`'s op in the table: its op_type, with `domain.` before it for a domain
/// other than the default one.
std::string onnx_op_key(const onnx::NodeProto& n);
/// The table's row for node `n`'s op (by onnx_op_key), or null; a default-domain op_type that
/// spells another domain's key ("ai.onnx.preview.training.Adam") is unknown.
const OnnxOpDef* find_onnx_node_op(const onnx::NodeProto& n);
/// Every ONNX op the frontend knows, in table order.
std::span<const OnnxOpDef> all_onnx_ops();

}  // namespace coil::onnxfe
