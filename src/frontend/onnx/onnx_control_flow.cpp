#include "frontend/onnx/onnx_control_flow.h"

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_tensor.h"
#include "support/check.h"

namespace coil::onnxfe {
namespace {

std::string where(const onnx::NodeProto& n) {
  return fmt::format("{} node '{}'", n.op_type(), printable(n.name()));
}

const onnx::AttributeProto* find(const onnx::NodeProto& n, std::string_view name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

void only_attrs(const onnx::NodeProto& n, std::initializer_list<std::string_view> known) {
  for (const auto& a : n.attribute())
    COIL_USER_CHECK(std::find(known.begin(), known.end(), a.name()) != known.end(),
                    "{}: unknown attribute '{}'", where(n), printable(a.name()));
}

const onnx::GraphProto& graph_attr(const onnx::NodeProto& n, std::string_view name) {
  const auto* a = find(n, name);
  COIL_USER_CHECK(a && a->has_g(), "{}: needs the graph attribute '{}'", where(n), name);
  return a->g();
}

std::vector<int64_t> ints_attr(const onnx::NodeProto& n, std::string_view name, size_t count,
                               int64_t dflt) {
  const auto* a = find(n, name);
  if (!a) return std::vector<int64_t>(count, dflt);
  COIL_USER_CHECK(static_cast<size_t>(a->ints_size()) == count,
                  "{}: attribute {} has {} values for {} tensors", where(n), name, a->ints_size(),
                  count);
  return {a->ints().begin(), a->ints().end()};
}

bool truth(const onnx::NodeProto& n, const Tensor& t, std::string_view what) {
  COIL_USER_CHECK(t.numel() == 1, "{}: {} must hold one value, got {}", where(n), what,
                  shape_str(t.shape()));
  return t.item_as_double(0) != 0;
}

int64_t normalized_axis(const onnx::NodeProto& n, int64_t axis, int64_t rank) {
  COIL_USER_CHECK(axis >= -rank && axis < rank, "{}: axis {} is out of range for rank {}", where(n),
                  axis, rank);
  return axis < 0 ? axis + rank : axis;
}

/// x[..., i, ...] along `axis` (the axis removed), contiguous.
Tensor select(const Tensor& x, int64_t axis, int64_t i) {
  Tensor c = x.is_contiguous() ? x : x.clone();
  const auto& s = c.shape();
  const int64_t outer =
      std::accumulate(s.begin(), s.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t inner =
      std::accumulate(s.begin() + axis + 1, s.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> shape = s;
  shape.erase(shape.begin() + axis);
  Tensor out = Tensor::empty(c.dtype(), shape);
  const size_t bytes = static_cast<size_t>(inner * dtype_size(c.dtype()));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<std::byte*>(out.data()) + o * static_cast<int64_t>(bytes),
                static_cast<const std::byte*>(c.data()) +
                    (o * s[static_cast<size_t>(axis)] + i) * static_cast<int64_t>(bytes),
                bytes);
  return out;
}

/// The parts stacked along a new `axis` (all of one dtype and shape).
Tensor stack(const onnx::NodeProto& n, const std::vector<Tensor>& parts, int64_t axis) {
  const Tensor& first = parts.at(0);
  for (const Tensor& p : parts)
    COIL_USER_CHECK(p.dtype() == first.dtype() && p.shape() == first.shape(),
                    "{}: a scan output changes from {}{} to {}{} between iterations", where(n),
                    dtype_name(first.dtype()), shape_str(first.shape()), dtype_name(p.dtype()),
                    shape_str(p.shape()));
  std::vector<int64_t> shape = first.shape();
  axis = normalized_axis(n, axis, static_cast<int64_t>(shape.size()) + 1);
  const int64_t outer =
      std::accumulate(shape.begin(), shape.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t inner =
      std::accumulate(shape.begin() + axis, shape.end(), int64_t{1}, std::multiplies<>());
  shape.insert(shape.begin() + axis, static_cast<int64_t>(parts.size()));
  Tensor out = Tensor::empty(first.dtype(), shape);
  const size_t bytes = static_cast<size_t>(inner * dtype_size(first.dtype()));
  for (size_t p = 0; p < parts.size(); ++p) {
    Tensor c = parts[p].is_contiguous() ? parts[p] : parts[p].clone();
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(static_cast<std::byte*>(out.data()) +
                      (o * static_cast<int64_t>(parts.size()) + static_cast<int64_t>(p)) *
                          static_cast<int64_t>(bytes),
                  static_cast<const std::byte*>(c.data()) + o * static_cast<int64_t>(bytes), bytes);
  }
  return out;
}

Tensor scalar_i64(int64_t v) {
  Tensor t = Tensor::empty(DType::I64, {});
  *t.data_as<int64_t>() = v;
  return t;
}

Tensor scalar_bool(bool v) {
  Tensor t = Tensor::empty(DType::Bool, {});
  *t.data_as<bool>() = v;
  return t;
}

void expect_outputs(const onnx::NodeProto& n, const std::vector<Tensor>& got, size_t want,
                    std::string_view body) {
  COIL_USER_CHECK(got.size() == want, "{}: its {} returns {} values, the node needs {}", where(n),
                  body, got.size(), want);
}

std::vector<Tensor> run_if(const onnx::NodeProto& n, const std::vector<Tensor>& in,
                           const RunBody& run_body) {
  only_attrs(n, {"then_branch", "else_branch"});
  COIL_USER_CHECK(!in.empty() && in[0].defined(), "{}: needs its condition", where(n));
  const char* attr = truth(n, in[0], "the condition") ? "then_branch" : "else_branch";
  std::vector<Tensor> out = run_body(graph_attr(n, attr), attr, {});
  expect_outputs(n, out, static_cast<size_t>(n.output_size()), attr);
  return out;
}

std::vector<Tensor> run_loop(const onnx::NodeProto& n, const std::vector<Tensor>& in,
                             const RunBody& run_body) {
  only_attrs(n, {"body"});
  const onnx::GraphProto& body = graph_attr(n, "body");
  COIL_USER_CHECK(in.size() >= 2, "{}: takes the trip count and the condition first", where(n));
  const size_t carried = in.size() - 2;
  COIL_USER_CHECK(static_cast<size_t>(n.output_size()) >= carried,
                  "{}: {} loop-carried values but {} outputs", where(n), carried, n.output_size());
  const size_t scans = static_cast<size_t>(n.output_size()) - carried;
  const bool bounded = in[0].defined();
  const int64_t trips =
      bounded ? static_cast<int64_t>(truth(n, in[0], "M") ? in[0].item_as_double(0) : 0) : 0;
  bool go = in[1].defined() ? truth(n, in[1], "the condition") : true;
  std::vector<Tensor> v(in.begin() + 2, in.end());
  std::vector<std::vector<Tensor>> scanned(scans);
  for (int64_t i = 0; (!bounded || i < trips) && go; ++i) {
    std::vector<Tensor> args = {scalar_i64(i), scalar_bool(go)};
    args.insert(args.end(), v.begin(), v.end());
    std::vector<Tensor> out = run_body(body, "body", args);
    expect_outputs(n, out, 1 + carried + scans, "body");
    go = truth(n, out[0], "the body's condition");
    for (size_t k = 0; k < carried; ++k) v[k] = out[1 + k];
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(out[1 + carried + k]);
  }
  std::vector<Tensor> result = v;
  for (size_t k = 0; k < scans; ++k) {
    if (!scanned[k].empty()) {
      result.push_back(stack(n, scanned[k], 0));
      continue;
    }
    // No iteration: an empty stack of the body output's declared element type.
    const auto& t = body.output(static_cast<int>(1 + carried + k)).type().tensor_type();
    std::optional<DType> dt = dtype_from_onnx(t.elem_type());
    COIL_USER_CHECK(dt.has_value(), "{}: scan output {} of no iteration has no known dtype",
                    where(n), k);
    std::vector<int64_t> shape = {0};  // [0, declared dims] where the body declares them all
    bool known = t.has_shape();
    for (const auto& d : t.shape().dim()) known = known && d.has_dim_value();
    if (known)
      for (const auto& d : t.shape().dim()) shape.push_back(d.dim_value());
    result.push_back(Tensor::empty(*dt, shape));
  }
  return result;
}

/// Scan of opset 9 and later over `states` and `scans` (one batch of opset 8's).
std::vector<Tensor> scan_once(const onnx::NodeProto& n, const onnx::GraphProto& body,
                              const RunBody& run_body, std::vector<Tensor> states,
                              const std::vector<Tensor>& scans, const std::vector<int64_t>& in_axes,
                              const std::vector<int64_t>& in_dirs,
                              const std::vector<int64_t>& out_axes,
                              const std::vector<int64_t>& out_dirs, size_t outputs) {
  COIL_USER_CHECK(!scans.empty(), "{}: needs at least one scan input", where(n));
  std::vector<int64_t> axes;
  for (size_t k = 0; k < scans.size(); ++k)
    axes.push_back(normalized_axis(n, in_axes[k], scans[k].dim()));
  const int64_t length = scans[0].shape()[static_cast<size_t>(axes[0])];
  for (size_t k = 0; k < scans.size(); ++k)
    COIL_USER_CHECK(scans[k].shape()[static_cast<size_t>(axes[k])] == length,
                    "{}: scan input {} has {} steps, input 0 has {}", where(n), k,
                    scans[k].shape()[static_cast<size_t>(axes[k])], length);
  const size_t nscan_out = outputs - states.size();
  std::vector<std::vector<Tensor>> scanned(nscan_out);
  for (int64_t t = 0; t < length; ++t) {
    std::vector<Tensor> args = states;
    for (size_t k = 0; k < scans.size(); ++k)
      args.push_back(select(scans[k], axes[k], in_dirs[k] ? length - 1 - t : t));
    std::vector<Tensor> out = run_body(body, "body", args);
    expect_outputs(n, out, outputs, "body");
    for (size_t s = 0; s < states.size(); ++s) states[s] = out[s];
    for (size_t k = 0; k < nscan_out; ++k) scanned[k].push_back(out[states.size() + k]);
  }
  std::vector<Tensor> result = states;
  for (size_t k = 0; k < nscan_out; ++k) {
    COIL_USER_CHECK(length > 0, "{}: a scan of no steps", where(n));
    if (out_dirs[k]) std::reverse(scanned[k].begin(), scanned[k].end());
    result.push_back(stack(n, scanned[k], out_axes[k]));
  }
  return result;
}

std::vector<Tensor> run_scan(const onnx::NodeProto& n, const std::vector<Tensor>& in,
                             const RunBody& run_body, int opset) {
  const onnx::GraphProto& body = graph_attr(n, "body");
  const auto* count = find(n, "num_scan_inputs");
  COIL_USER_CHECK(count != nullptr, "{}: needs the attribute num_scan_inputs", where(n));
  const auto m = static_cast<size_t>(count->i());
  const size_t first = opset < 9 ? 1 : 0;  // opset 8: sequence_lens first
  COIL_USER_CHECK(m >= 1 && in.size() >= first + m, "{}: num_scan_inputs {} for {} inputs",
                  where(n), m, in.size());
  const size_t nstates = in.size() - first - m;
  const auto outputs = static_cast<size_t>(n.output_size());
  COIL_USER_CHECK(outputs >= nstates, "{}: {} states but {} outputs", where(n), nstates, outputs);
  std::vector<Tensor> states(in.begin() + static_cast<std::ptrdiff_t>(first),
                             in.begin() + static_cast<std::ptrdiff_t>(first + nstates));
  std::vector<Tensor> scans(in.begin() + static_cast<std::ptrdiff_t>(first + nstates), in.end());
  const size_t nout = outputs - nstates;
  if (opset >= 9) {
    only_attrs(n, {"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
                   "scan_output_axes", "scan_output_directions"});
    return scan_once(n, body, run_body, states, scans, ints_attr(n, "scan_input_axes", m, 0),
                     ints_attr(n, "scan_input_directions", m, 0),
                     ints_attr(n, "scan_output_axes", nout, 0),
                     ints_attr(n, "scan_output_directions", nout, 0), outputs);
  }
  // Opset 8: a batch axis 0 on every input and output, the scan along axis 1 (0 in a batch).
  only_attrs(n, {"body", "num_scan_inputs", "directions"});
  COIL_USER_CHECK(!in[0].defined(),
                  "{}: sequence_lens is not supported (every sequence runs "
                  "its full length)",
                  where(n));
  std::vector<int64_t> dirs = ints_attr(n, "directions", m, 0);
  const int64_t batches = scans[0].dim() > 0 ? scans[0].shape()[0] : 0;
  std::vector<std::vector<Tensor>> per_batch(outputs);
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<Tensor> st, sc;
    for (const Tensor& t : states) st.push_back(select(t, 0, b));
    for (const Tensor& t : scans) sc.push_back(select(t, 0, b));
    std::vector<Tensor> out =
        scan_once(n, body, run_body, st, sc, std::vector<int64_t>(m, 0), dirs,
                  std::vector<int64_t>(nout, 0), std::vector<int64_t>(nout, 0), outputs);
    for (size_t k = 0; k < outputs; ++k) per_batch[k].push_back(out[k]);
  }
  COIL_USER_CHECK(batches > 0, "{}: a batch of 0", where(n));
  std::vector<Tensor> result;
  for (size_t k = 0; k < outputs; ++k) result.push_back(stack(n, per_batch[k], 0));
  return result;
}

}  // namespace

bool is_control_flow(std::string_view op_type) {
  return op_type == "If" || op_type == "Loop" || op_type == "Scan";
}

std::vector<Tensor> run_control_flow(const onnx::NodeProto& node, const std::vector<Tensor>& inputs,
                                     const RunBody& run_body, int opset) {
  if (node.op_type() == "If") return run_if(node, inputs, run_body);
  if (node.op_type() == "Loop") return run_loop(node, inputs, run_body);
  COIL_USER_CHECK(node.op_type() == "Scan", "{}: not a control-flow op", where(node));
  return run_scan(node, inputs, run_body, opset);
}

}  // namespace coil::onnxfe
