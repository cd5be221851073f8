// The ONNX importer's driver: model checks, initializers, inputs, node order, the op mappings
// (onnx_ops_*.cpp, through the table in onnx_op_table.cpp), outputs, and pruning.
#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil {
namespace onnxfe {
namespace {

// Opsets 1 to 6 are read with each op's version of that opset: the mappings implement the
// legacy attributes where the semantics differ (binary ops' broadcast/axis, BatchNormalization's
// is_test, Cast's string `to`, ...) and report the rest as unsupported (docs/onnx.md).
// The mappings follow the ops up to opset 17 (kFullOpset); models of opsets 18 to 23 are read
// too, for Attention (opset 23) and for every op whose newer versions extend types only: a node
// whose op changed otherwise after 17 is reported as unsupported (onnx_semantics_changed).
constexpr int kMinOpset = 1, kMaxOpset = 23, kFullOpset = 17;

/// One node that cannot be imported, for the combined message.
struct UnsupportedUse {
  std::string op;      // "MatMul", or "com.microsoft.FusedConv" for other domains
  std::string node;    // how to name the node in a message
  std::string reason;  // empty for ops coil does not support at all
};

std::string describe_node(const onnx::NodeProto& n, int index) {
  if (!n.name().empty()) return fmt::format("node '{}'", printable(n.name()));
  if (n.output_size() > 0 && !n.output(0).empty())
    return fmt::format("node #{} (output '{}')", index, printable(n.output(0)));
  return fmt::format("node #{}", index);
}

class Importer {
 public:
  Importer(std::string_view name, const OnnxImportOptions& options)
      : name_(name), options_(options) {}
  Graph run(const onnx::ModelProto& m);

 private:
  // A malformed model (a coil::Error) ...
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(message(fmt::format(f, std::forward<Args>(args)...)));
  }
  // ... or a valid one that uses what coil lacks (a dtype, an opset), a coil::UnsupportedError.
  template <typename... Args>
  [[noreturn]] void refuse(fmt::format_string<Args...> f, Args&&... args) const {
    throw UnsupportedError(message(fmt::format(f, std::forward<Args>(args)...)));
  }
  // fail or refuse, as `e` was thrown.
  [[noreturn]] void fail_as(const Error& e, const std::string& what) const {
    if (dynamic_cast<const UnsupportedError*>(&e)) throw UnsupportedError(message(what));
    throw Error(message(what));
  }
  std::string message(const std::string& what) const {
    return fmt::format("{}: {}{}", name_, what,
                       unsupported_.empty() ? "" : "; also " + unsupported_message());
  }
  void read_opset(const onnx::ModelProto& m);
  void add_initializers(const onnx::GraphProto& g);
  void add_inputs(const onnx::GraphProto& g);
  Shape input_shape(const onnx::ValueInfoProto& v, const std::string& name);
  std::vector<int> node_order(const onnx::GraphProto& g);
  void prescan(const onnx::GraphProto& g);
  void import_node(const onnx::NodeProto& n, int index);
  void add_outputs(const onnx::GraphProto& g);
  Graph pruned() const;
  std::string unsupported_message() const;

  std::string name_;
  const OnnxImportOptions& options_;
  int opset_ = 0;
  Graph g_;
  Namer names_, symbols_, output_names_;
  std::map<std::string, std::string> symbol_of_param_;
  std::unordered_map<std::string, int> values_;  // ONNX value name -> coil node id
  SymbolicInts symbolic_;                        // shapes with symbolic sizes (onnx_context.h)
  SplitViews split_views_;                       // merged dims kept unmerged (onnx_context.h)
  std::unordered_set<std::string> poisoned_;     // values downstream of unsupported nodes
  std::vector<bool> skip_;                       // nodes already reported as unsupported
  std::vector<UnsupportedUse> unsupported_;
};

void Importer::read_opset(const onnx::ModelProto& m) {
  bool found = false;
  int64_t version = 0;
  for (const auto& o : m.opset_import()) {
    if (!is_default_domain(o.domain())) continue;
    found = true;
    version = o.version();
  }
  if (!found && m.opset_import_size() == 0 && m.ir_version() > 0 && m.ir_version() < 3)
    found = true, version = 1;  // IR versions before 3 had no opset_import: opset 1
  // A model of other domains only (the training optimizers' node tests import only
  // ai.onnx.preview.training) has no default-domain node to read at some opset.
  bool default_nodes = false;
  for (const auto& n : m.graph().node()) default_nodes |= is_default_domain(n.domain());
  if (!found && m.opset_import_size() > 0 && !default_nodes) found = true, version = kFullOpset;
  if (!found) fail("the model imports no opset of the default ONNX domain");
  if (version < kMinOpset || version > kMaxOpset)
    refuse("opset {} is not supported (coil supports opsets {} to {})", version, kMinOpset,
           kMaxOpset);
  opset_ = static_cast<int>(version);
}

void Importer::add_initializers(const onnx::GraphProto& g) {
  if (g.sparse_initializer_size() > 0) refuse("sparse initializers are not supported");
  for (const auto& t : g.initializer()) {
    if (t.name().empty()) fail("an initializer has no name");
    if (values_.count(t.name())) fail("initializer '{}' is defined twice", printable(t.name()));
    try {
      Tensor v = tensor_from_proto(t, fmt::format("initializer '{}'", printable(t.name())));
      values_[t.name()] = g_.add_constant(v, names_.fresh(t.name()));
    } catch (const Error& e) {
      fail_as(e, e.what());
    }
  }
}

Shape Importer::input_shape(const onnx::ValueInfoProto& v, const std::string& name) {
  const auto& tt = v.type().tensor_type();
  if (!tt.has_shape()) refuse("input '{}' has no shape (unknown rank is not supported)", name);
  Shape shape;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 0)
        fail("input '{}': dim {} is negative ({})", name, d, dim.dim_value());
      shape.push_back(dim.dim_value());
      continue;
    }
    std::string param = dim.has_dim_param() && !dim.dim_param().empty()
                            ? dim.dim_param()
                            : fmt::format("{}_d{}", name, d);
    auto it = symbol_of_param_.find(param);
    if (it == symbol_of_param_.end()) {
      std::string s = sanitize_onnx_name(param);
      // x0, r0, ... name loop variables in coil's loop IR.
      if (s.size() > 1 && (s[0] == 'x' || s[0] == 'r') &&
          s.find_first_not_of("0123456789", 1) == std::string::npos)
        s = "d_" + s;
      it = symbol_of_param_.emplace(param, symbols_.fresh(s)).first;
    }
    shape.push_back(sym::make_symbol(it->second));
  }
  return shape;
}

void Importer::add_inputs(const onnx::GraphProto& g) {
  for (const auto& v : g.input()) {
    if (values_.count(v.name())) {
      // An input with an initializer is a constant (IR < 4 listed weights as inputs too).
      if (g_.node(values_[v.name()]).op_name() == "constant") continue;
      fail("graph input '{}' is listed twice", printable(v.name()));
    }
    if (v.name().empty()) fail("a graph input has no name");
    std::string name = printable(v.name());
    if (!v.type().has_tensor_type())
      refuse(
          "input '{}' is not a tensor (sequence, map, optional and sparse inputs are not "
          "supported)",
          name);
    int32_t et = v.type().tensor_type().elem_type();
    std::optional<DType> dt = dtype_from_onnx(et);
    if (!dt)
      refuse("input '{}' has dtype {}, which coil does not support", name, onnx_dtype_name(et));
    Shape shape = input_shape(v, name);
    if (auto it = options_.input_values.find(v.name()); it != options_.input_values.end()) {
      const Tensor& t = it->second;
      if (t.dtype() != *dt || t.dim() != static_cast<int64_t>(shape.size()))
        fail("the value given for input '{}' is {}{}, the input is {}", name, dtype_name(t.dtype()),
             shape_str(t.shape()), type_str(TensorType{*dt, shape}));
      values_[v.name()] = g_.add_constant(t, names_.fresh(v.name()));
      continue;
    }
    try {
      int id = g_.add_input(names_.fresh(v.name()), *dt, shape);
      if (g_.node(id).name != v.name()) g_.set_source_name(id, v.name());
      values_[v.name()] = id;
    } catch (const Error& e) {
      fail_as(e, e.what());
    }
  }
}

// Kahn's algorithm, taking ready nodes in file order, so a valid model keeps its order.
std::vector<int> Importer::node_order(const onnx::GraphProto& g) {
  const int n = g.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i) {
    for (const auto& out : g.node(i).output()) {
      if (out.empty()) continue;
      if (values_.count(out) || !producer.emplace(out, i).second)
        fail("value '{}' is defined twice (by {})", printable(out), describe_node(g.node(i), i));
    }
  }
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  std::vector<int> pending(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    for (const auto& in : g.node(i).input()) {
      if (in.empty() || values_.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        fail("{} ({}) reads '{}', which no node, input or initializer defines",
             describe_node(g.node(i), i), printable(g.node(i).op_type()), printable(in));
      users[static_cast<size_t>(it->second)].push_back(i);
      ++pending[static_cast<size_t>(i)];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < n; ++i)
    if (pending[static_cast<size_t>(i)] == 0) ready.push(i);
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)])
      if (--pending[static_cast<size_t>(u)] == 0) ready.push(u);
  }
  if (static_cast<int>(order.size()) < n) {
    int stuck = 0;
    while (pending[static_cast<size_t>(stuck)] == 0) ++stuck;
    fail("the graph has a cycle: {} ({}) depends on its own output",
         describe_node(g.node(stuck), stuck), printable(g.node(stuck).op_type()));
  }
  return order;
}

void Importer::prescan(const onnx::GraphProto& g) {
  skip_.assign(static_cast<size_t>(g.node_size()), false);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    const OnnxOpDef* def = find_onnx_node_op(n);
    if (def && def->map && opset_ > kFullOpset && is_default_domain(n.domain())) {
      if (int changed = onnx_semantics_changed(n.op_type(), opset_)) {
        unsupported_.push_back(
            {printable(n.op_type()), describe_node(n, i),
             fmt::format("its opset-{} definition differs from opset {}'s, which coil reads",
                         changed, kFullOpset)});
        skip_[static_cast<size_t>(i)] = true;
        continue;
      }
    }
    if (def && def->map) continue;
    std::string op = is_default_domain(n.domain()) ? printable(n.op_type())
                                                   : printable(n.domain() + "." + n.op_type());
    unsupported_.push_back({op, describe_node(n, i), ""});
    skip_[static_cast<size_t>(i)] = true;
  }
}

void Importer::import_node(const onnx::NodeProto& n, int index) {
  auto poison = [&] {
    for (const auto& out : n.output()) poisoned_.insert(out);
  };
  if (skip_[static_cast<size_t>(index)]) return poison();
  std::vector<int> inputs;
  for (const auto& in : n.input()) {
    if (in.empty()) {
      inputs.push_back(-1);
      continue;
    }
    if (poisoned_.count(in)) return poison();
    inputs.push_back(values_.at(in));
  }
  OnnxNode ctx(g_, names_, symbolic_, split_views_, n, opset_, std::move(inputs));
  try {
    bool symbolic = false;
    for (int i = 0; i < ctx.num_inputs(); ++i)
      symbolic |= ctx.has_input(i) && ctx.symbolic(ctx.in(i)) != nullptr;
    if (!symbolic || !map_symbolic(ctx)) {
      // A symbolic value's placeholder holds no data: only a shape argument may read it.
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        const auto* s = ctx.has_input(i) ? ctx.symbolic(ctx.in(i)) : nullptr;
        if (!s || accepts_symbolic(n.op_type(), i)) continue;
        std::vector<std::string> sizes;
        for (const auto& e : *s) sizes.push_back(sym::to_string(e));
        unsupported(
            "input {} ('{}') holds the symbolic sizes [{}], which coil computes with only in "
            "shape arithmetic and as a Reshape or Expand target",
            i, printable(n.input(i)), fmt::join(sizes, ", "));
      }
      if (!map_split_view(ctx)) find_onnx_node_op(n)->map(ctx);
    }
    ctx.check_unread_attrs();
    check_broadcast_use(ctx);
    for (int i = 0; i < ctx.num_outputs(); ++i)
      if (ctx.wants_output(i) && ctx.outputs()[static_cast<size_t>(i)] < 0)
        unsupported("output {} ('{}')", i, printable(n.output(i)));
  } catch (const Unsupported& u) {
    unsupported_.push_back({printable(n.op_type()), describe_node(n, index), u.reason});
    return poison();
  } catch (const Error& e) {
    fail_as(e,
            fmt::format("{} ({}): {}", describe_node(n, index), printable(n.op_type()), e.what()));
  }
  for (int i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.wants_output(i)) values_[n.output(i)] = ctx.outputs()[static_cast<size_t>(i)];
}

std::string Importer::unsupported_message() const {
  // Grouped by op and reason, in order of first appearance.
  std::vector<std::pair<std::string, std::string>> keys;
  std::map<std::pair<std::string, std::string>, std::vector<const UnsupportedUse*>> groups;
  for (const auto& u : unsupported_) {
    auto key = std::make_pair(u.op, u.reason);
    if (groups[key].empty()) keys.push_back(key);
    groups[key].push_back(&u);
  }
  std::vector<std::string> parts;
  for (const auto& key : keys) {
    const auto& uses = groups[key];
    std::string where = uses.size() == 1 ? uses[0]->node : fmt::format("{} nodes", uses.size());
    parts.push_back(fmt::format("{} ({}, opset {}{}{})", key.first, where, opset_,
                                key.second.empty() ? "" : ": ", key.second));
  }
  return fmt::format("unsupported ops: {}", fmt::join(parts, ", "));
}

void Importer::add_outputs(const onnx::GraphProto& g) {
  if (g.output_size() == 0) fail("the graph has no outputs");
  for (const auto& o : g.output()) {
    auto it = values_.find(o.name());
    if (it == values_.end())
      fail("graph output '{}' is not computed by any node", printable(o.name()));
    if (symbolic_.count(it->second))
      refuse(
          "graph output '{}' holds sizes computed from symbolic dims (coil outputs tensors only)",
          printable(o.name()));
    if (auto b = split_views_.broadcast.find(it->second); b != split_views_.broadcast.end())
      refuse(
          "graph output '{}' is a ConstantOfShape of the symbolic shape {} (coil cannot "
          "expand to symbolic sizes)",
          printable(o.name()), shape_str(b->second));
    DType got = g_.node(it->second).type.dtype;
    if (o.type().has_tensor_type() && o.type().tensor_type().elem_type() != 0) {
      int32_t et = o.type().tensor_type().elem_type();
      std::optional<DType> want = dtype_from_onnx(et);
      if (!want)
        refuse("output '{}' has dtype {}, which coil does not support", printable(o.name()),
               onnx_dtype_name(et));
      if (*want != got)
        fail("output '{}' is declared {} but computes {}", printable(o.name()), onnx_dtype_name(et),
             dtype_name(got));
    }
    g_.add_output(it->second, output_names_.fresh(o.name()));
    if (g_.outputs().back().name != o.name())
      g_.set_output_source_name(g_.outputs().size() - 1, o.name());
  }
}

// The graph without the nodes that no output reads (folded constants' originals, unused
// initializers); every graph input stays, in order.
Graph Importer::pruned() const {
  std::vector<bool> live(static_cast<size_t>(g_.num_nodes()), false);
  for (const auto& o : g_.outputs()) live[static_cast<size_t>(o.node)] = true;
  for (int id : g_.inputs()) live[static_cast<size_t>(id)] = true;
  for (int id = g_.num_nodes(); id-- > 0;)
    if (live[static_cast<size_t>(id)])
      for (int in : g_.node(id).inputs) live[static_cast<size_t>(in)] = true;
  for (const auto& [id, sizes] : symbolic_)
    if (live[static_cast<size_t>(id)])
      throw InternalError(
          fmt::format("{}: a symbolic value's placeholder is computed with", name_));
  Graph out;
  std::vector<int> remap(static_cast<size_t>(g_.num_nodes()), -1);
  for (const auto& n : g_.nodes()) {
    if (!live[static_cast<size_t>(n->id)]) continue;
    int id;
    if (n->op_name() == "input") {
      id = out.add_input(n->name, n->type.dtype, n->type.shape);
      if (!n->source_name.empty()) out.set_source_name(id, n->source_name);
    } else if (n->op_name() == "constant") {
      id = out.add_constant(*n->data, n->name);
    } else {
      std::vector<int> ins;
      for (int in : n->inputs) ins.push_back(remap[static_cast<size_t>(in)]);
      id = out.add_node(n->op_name(), ins, n->attrs, n->name);
    }
    remap[static_cast<size_t>(n->id)] = id;
  }
  for (const auto& o : g_.outputs()) {
    out.add_output(remap[static_cast<size_t>(o.node)], o.name);
    if (!o.source_name.empty()) out.set_output_source_name(out.outputs().size() - 1, o.source_name);
  }
  return out;
}

Graph Importer::run(const onnx::ModelProto& m) {
  if (!m.has_graph()) fail("the model has no graph (is this an .onnx file?)");
  read_opset(m);
  const onnx::GraphProto& g = m.graph();
  add_initializers(g);
  add_inputs(g);
  std::vector<int> order = node_order(g);
  prescan(g);
  for (int i : order) import_node(g.node(i), i);
  if (!unsupported_.empty())
    throw UnsupportedError(fmt::format("{}: {}", name_, unsupported_message()));
  add_outputs(g);
  return pruned();
}

}  // namespace
}  // namespace onnxfe

Graph import_onnx_bytes(std::string_view bytes, std::string_view name,
                        const OnnxImportOptions& options) {
  COIL_USER_CHECK(bytes.size() < (size_t{1} << 31), "{}: the file is larger than 2 GiB", name);
  onnx::ModelProto m;
  COIL_USER_CHECK(m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
                  "{}: not a valid ONNX model (the protobuf does not parse: truncated or not an "
                  ".onnx file)",
                  name);
  return onnxfe::Importer(name, options).run(m);
}

Graph import_onnx(const std::filesystem::path& path, const OnnxImportOptions& options) {
  std::error_code ec;
  COIL_USER_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a model file",
                  path.string());
  std::ifstream f(path, std::ios::binary);
  COIL_USER_CHECK(f.good(), "{}: cannot open the file", path.string());
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {  // libstdc++ throws from the stream buffer on EISDIR, EIO
    user_error("{}: read error ({})", path.string(), e.what());
  }
  COIL_USER_CHECK(!f.bad(), "{}: read error", path.string());
  return import_onnx_bytes(bytes, path.string(), options);
}

}  // namespace coil
