#include "frontend/onnx/onnx_staged.h"

#include <set>

#include <fmt/format.h>

#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_control_flow.h"
#include "frontend/onnx/onnx_data_dependent.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_tensor.h"
#include "support/check.h"
#include "support/log.h"

namespace coil {
namespace {

/// The names a graph reads from its enclosing scope: read by its nodes (and, recursively, by
/// their own bodies) and not defined in it (its inputs, initializers and node outputs).
std::set<std::string> captures(const onnx::GraphProto& g) {
  std::set<std::string> local, out;
  for (const auto& i : g.input()) local.insert(i.name());
  for (const auto& t : g.initializer()) local.insert(t.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) local.insert(o);
  for (const auto& n : g.node()) {
    for (const auto& in : n.input())
      if (!in.empty() && !local.count(in)) out.insert(in);
    for (const auto& a : n.attribute()) {
      std::vector<const onnx::GraphProto*> bodies;
      if (a.has_g()) bodies.push_back(&a.g());
      for (const auto& sg : a.graphs()) bodies.push_back(&sg);
      for (const auto* b : bodies)
        for (const auto& c : captures(*b))
          if (!local.count(c)) out.insert(c);
    }
  }
  return out;
}

/// The values a node reads: its inputs, and what the bodies of its graph attributes (If,
/// Loop, Scan) read from the enclosing scope.
std::vector<std::string> reads(const onnx::NodeProto& n) {
  std::vector<std::string> out;
  for (const auto& in : n.input())
    if (!in.empty()) out.push_back(in);
  for (const auto& a : n.attribute()) {
    if (a.has_g())
      for (const auto& c : captures(a.g())) out.push_back(c);
    for (const auto& sg : a.graphs())
      for (const auto& c : captures(sg)) out.push_back(c);
  }
  return out;
}

/// A node that runs on the host: an op whose output size depends on values, or control flow.
bool is_data_dependent(const onnx::NodeProto& n) {
  return (n.domain().empty() || n.domain() == "ai.onnx") &&
         (onnxfe::is_data_dependent(n.op_type()) || onnxfe::is_control_flow(n.op_type()));
}

std::string signature(const std::vector<Tensor>& ts) {
  std::string key;
  for (const Tensor& t : ts)
    key += fmt::format("{}{};", dtype_name(t.dtype()), shape_str(t.shape()));
  return key;
}

void set_tensor_type(onnx::ValueInfoProto* v, const std::string& name, const Tensor& t) {
  v->Clear();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnxfe::dtype_to_onnx(t.dtype()));
  auto* shape = tt->mutable_shape();
  for (int64_t d : t.shape()) shape->add_dim()->set_dim_value(d);
}

}  // namespace

StagedOnnxModel::~StagedOnnxModel() = default;

StagedOnnxModel::StagedOnnxModel(const std::string& bytes, std::string name, CompileOptions options)
    : name_(std::move(name)), options_(std::move(options)) {
  COIL_USER_CHECK(model_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
                  "{}: not a valid ONNX model (the protobuf does not parse)", name_);
  for (const auto& o : model_.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = static_cast<int>(o.version());
  const auto& g = model_.graph();
  std::set<std::string> known, inits;  // values available before the next stage
  for (const auto& in : g.input()) known.insert(in.name());
  for (const auto& t : g.initializer()) known.insert(t.name()), inits.insert(t.name());
  std::vector<int> pending(static_cast<size_t>(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i) pending[static_cast<size_t>(i)] = i;
  while (!pending.empty()) {
    // A compiled stage: every node that can run now, in order; then each host op that can.
    Stage compiled;
    std::set<std::string> made;
    std::vector<int> rest;
    for (int i : pending) {
      const auto& n = g.node(i);
      bool ready = !is_data_dependent(n);
      for (const auto& r : reads(n)) ready = ready && (known.count(r) || made.count(r));
      if (!ready) {
        rest.push_back(i);
        continue;
      }
      compiled.nodes.push_back(i);
      for (const auto& o : n.output())
        if (!o.empty()) made.insert(o);
    }
    std::vector<Stage> host;
    pending.clear();
    for (int i : rest) {
      const auto& n = g.node(i);
      bool ready = is_data_dependent(n);
      for (const auto& r : reads(n)) ready = ready && (known.count(r) || made.count(r));
      if (!ready) {
        pending.push_back(i);
        continue;
      }
      Stage h;
      h.host = true;
      h.nodes = {i};
      host.push_back(std::move(h));
    }
    COIL_USER_CHECK(!compiled.nodes.empty() || !host.empty(),
                    "{}: node {} ('{}') reads a value that no node, input or initializer "
                    "defines",
                    name_, pending.empty() ? -1 : pending[0],
                    pending.empty() ? "" : onnxfe::printable(g.node(pending[0]).name()));
    if (!compiled.nodes.empty()) {
      std::set<std::string> in;
      for (int i : compiled.nodes)
        for (const auto& r : reads(g.node(i)))
          if (known.count(r) && !inits.count(r) && !in.count(r)) {  // (initializers: inside)
            in.insert(r);
            compiled.inputs.push_back(r);
          }
      stages_.push_back(std::move(compiled));
    }
    for (const auto& m : made) known.insert(m);
    for (Stage& h : host) {
      for (const auto& o : g.node(h.nodes[0]).output())
        if (!o.empty()) known.insert(o);
      stages_.push_back(std::move(h));
    }
  }
  // What each compiled stage must return: the values later stages or the graph outputs read.
  std::set<std::string> later;
  for (const auto& o : g.output()) later.insert(o.name());
  for (auto s = stages_.rbegin(); s != stages_.rend(); ++s) {
    if (!s->host) {
      for (int i : s->nodes)
        for (const auto& o : g.node(i).output())
          if (!o.empty() && later.count(o)) s->outputs.push_back(o);
    }
    for (int i : s->nodes)
      for (const auto& r : reads(g.node(i))) later.insert(r);
  }
  for (const auto& d : describe()) COIL_LOG(guards, "{}: stage {}", name_, d);
}

std::vector<std::string> StagedOnnxModel::describe() const {
  std::vector<std::string> out;
  for (const Stage& s : stages_) {
    if (s.host) {
      const auto& n = model_.graph().node(s.nodes[0]);
      out.push_back(fmt::format("host: {} '{}'", n.op_type(), onnxfe::printable(n.name())));
    } else {
      std::vector<std::string> ops;
      for (int i : s.nodes) ops.push_back(model_.graph().node(i).op_type());
      out.push_back(fmt::format("compiled: {}", fmt::join(ops, ", ")));
    }
  }
  return out;
}

int StagedOnnxModel::compiled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(compiled_.size());
}

const OnnxModel& StagedOnnxModel::stage_model(size_t s, const std::vector<Tensor>& inputs) const {
  const Stage& stage = stages_[s];
  std::string key = fmt::format("{}:", s);
  for (const Tensor& t : inputs)
    key += fmt::format("{}{};", dtype_name(t.dtype()), shape_str(t.shape()));
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = compiled_.find(key); it != compiled_.end()) return *it->second;
  onnx::ModelProto sub;
  sub.set_ir_version(model_.ir_version());
  *sub.mutable_opset_import() = model_.opset_import();
  auto* g = sub.mutable_graph();
  g->set_name(fmt::format("{}_stage{}", model_.graph().name(), s));
  std::set<std::string> read;
  for (int i : stage.nodes) {
    *g->add_node() = model_.graph().node(i);
    for (const auto& r : reads(model_.graph().node(i))) read.insert(r);
  }
  for (const auto& t : model_.graph().initializer())
    if (read.count(t.name())) *g->add_initializer() = t;
  for (size_t i = 0; i < stage.inputs.size(); ++i)
    set_tensor_type(g->add_input(), stage.inputs[i], inputs[i]);
  for (const auto& o : stage.outputs) g->add_output()->set_name(o);
  COIL_LOG(guards, "{}: compiling stage {} for inputs {}", name_, s, key);
  auto model = std::make_unique<OnnxModel>(OnnxModel::from_bytes(
      sub.SerializeAsString(), fmt::format("{} (stage {})", name_, s), options_));
  return *compiled_.emplace(key, std::move(model)).first->second;
}

std::vector<Tensor> StagedOnnxModel::run_body(
    int node, const onnx::GraphProto& body, std::string_view attr,
    const std::vector<Tensor>& formal,
    const std::function<Tensor(const std::string&)>& outer) const {
  COIL_USER_CHECK(body.input_size() == static_cast<int>(formal.size()),
                  "{}: the {} of node {} declares {} inputs, the op passes {}", name_, attr, node,
                  body.input_size(), formal.size());
  std::vector<std::string> names;
  std::vector<Tensor> values = formal;
  for (const auto& i : body.input()) names.push_back(i.name());
  for (const auto& c : captures(body)) {
    names.push_back(c);
    values.push_back(outer(c));
  }
  const std::string key = fmt::format("{}/{}:{}", node, attr, signature(values));
  const OnnxModel* model = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = compiled_.find(key);
    if (it == compiled_.end()) {
      onnx::ModelProto sub;
      sub.set_ir_version(model_.ir_version());
      *sub.mutable_opset_import() = model_.opset_import();
      auto* g = sub.mutable_graph();
      *g = body;
      g->clear_input();
      for (size_t i = 0; i < names.size(); ++i)
        set_tensor_type(g->add_input(), names[i], values[i]);
      for (auto& o : *g->mutable_output()) o.mutable_type()->mutable_tensor_type()->clear_shape();
      COIL_LOG(guards, "{}: compiling the {} of node {} for inputs {}", name_, attr, node, key);
      it = compiled_
               .emplace(key, std::make_unique<OnnxModel>(OnnxModel::from_bytes(
                                 sub.SerializeAsString(),
                                 fmt::format("{} ({} of node {})", name_, attr, node), options_)))
               .first;
    }
    model = it->second.get();
  }
  std::map<std::string, Tensor> by_name;
  for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = values[i];
  std::vector<Tensor> fed;
  for (const auto& n : model->input_names()) fed.push_back(by_name.at(n));
  return model->run(fed);
}

std::vector<Tensor> StagedOnnxModel::run(const std::map<std::string, Tensor>& given) const {
  const auto& g = model_.graph();
  // The fed inputs against their declared types (a compiled model checks its own; the host
  // stages would take any shape).
  for (const auto& in : g.input()) {
    auto it = given.find(in.name());
    if (it == given.end() || !in.type().has_tensor_type()) continue;
    const auto& tt = in.type().tensor_type();
    std::optional<DType> dt = onnxfe::dtype_from_onnx(tt.elem_type());
    COIL_USER_CHECK(!dt || *dt == it->second.dtype(), "{}: input '{}' must be {}, got {}", name_,
                    onnxfe::printable(in.name()), dtype_name(*dt), dtype_name(it->second.dtype()));
    if (!tt.has_shape()) continue;
    bool fits = tt.shape().dim_size() == it->second.dim();
    for (int d = 0; fits && d < tt.shape().dim_size(); ++d)
      fits = !tt.shape().dim(d).has_dim_value() ||
             tt.shape().dim(d).dim_value() == it->second.shape()[static_cast<size_t>(d)];
    COIL_USER_CHECK(fits, "{}: input '{}' has shape {}, which its declared shape does not allow",
                    name_, onnxfe::printable(in.name()), shape_str(it->second.shape()));
  }
  std::map<std::string, Tensor> env = given;
  std::function<Tensor(const std::string&)> value = [&](const std::string& name) -> Tensor {
    if (auto it = env.find(name); it != env.end()) return it->second;
    for (const auto& t : g.initializer())
      if (t.name() == name) return env[name] = onnxfe::tensor_from_proto(t, name);
    user_error("{}: no value for '{}'", name_, onnxfe::printable(name));
  };
  for (size_t s = 0; s < stages_.size(); ++s) {
    const Stage& stage = stages_[s];
    if (stage.host) {
      const auto& n = g.node(stage.nodes[0]);
      std::vector<Tensor> in;
      for (const auto& i : n.input()) in.push_back(i.empty() ? Tensor() : value(i));
      std::vector<Tensor> out =
          onnxfe::is_control_flow(n.op_type())
              ? onnxfe::run_control_flow(
                    n, in,
                    [&](const onnx::GraphProto& body, std::string_view attr,
                        const std::vector<Tensor>& formal) {
                      return run_body(stage.nodes[0], body, attr, formal, value);
                    },
                    opset_)
              : onnxfe::run_data_dependent(n, in);
      for (int i = 0; i < n.output_size(); ++i)
        if (!n.output(i).empty()) env[n.output(i)] = out.at(static_cast<size_t>(i));
      continue;
    }
    if (stage.outputs.empty()) continue;  // nothing after it reads what it computes
    std::vector<Tensor> in;
    for (const auto& i : stage.inputs) in.push_back(value(i));
    const OnnxModel& m = stage_model(s, in);
    // The sub-model's fed inputs are the stage's inputs that are not initializers, in order.
    std::vector<Tensor> fed;
    for (size_t i = 0; i < stage.inputs.size(); ++i)
      if (std::find(m.input_names().begin(), m.input_names().end(), stage.inputs[i]) !=
          m.input_names().end())
        fed.push_back(in[i]);
    std::vector<Tensor> out = m.run(fed);
    for (size_t i = 0; i < stage.outputs.size(); ++i) env[stage.outputs[i]] = out.at(i);
  }
  std::vector<Tensor> outs;
  for (const auto& o : g.output()) outs.push_back(value(o.name()));
  return outs;
}

}  // namespace coil
