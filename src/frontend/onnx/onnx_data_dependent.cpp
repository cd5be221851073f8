// Host kernels of the ONNX ops whose output size depends on values (onnx_data_dependent.h).
// Each follows the ONNX operator spec; NonMaxSuppression also follows ONNX Runtime where the
// spec is silent (ties in score keep the lower box index first; boxes of zero area suppress
// nothing), computed in f32 as both the spec's reference and ONNX Runtime do.
#include "frontend/onnx/onnx_data_dependent.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "frontend/onnx/onnx_context.h"
#include "support/check.h"

namespace coil::onnxfe {
namespace {

struct NodeView {
  const onnx::NodeProto& proto;
  std::string where() const {
    return fmt::format("{} node '{}'", proto.op_type(), printable(proto.name()));
  }
  /// The int attribute `name` (default `dflt`); any attribute outside `known` is an error.
  int64_t attr_int(std::string_view name, int64_t dflt) const {
    for (const auto& a : proto.attribute())
      if (a.name() == name) {
        COIL_USER_CHECK(a.type() == onnx::AttributeProto::INT, "{}: attribute {} must be an int",
                        where(), name);
        return a.i();
      }
    return dflt;
  }
  bool has_attr(std::string_view name) const {
    for (const auto& a : proto.attribute())
      if (a.name() == name) return true;
    return false;
  }
  void only_attrs(std::initializer_list<std::string_view> known) const {
    for (const auto& a : proto.attribute())
      COIL_USER_CHECK(std::find(known.begin(), known.end(), a.name()) != known.end(),
                      "{}: unknown attribute '{}'", where(), printable(a.name()));
  }
};

/// A total order key of one element: long double holds every f32/f64 value and every 64-bit
/// integer exactly (x86-64's 64-bit mantissa), so Unique compares int64 ids exactly.
long double key_at(const Tensor& t, int64_t i) {
  const auto* p = static_cast<const std::byte*>(t.data()) + i * dtype_size(t.dtype());
  if (is_floating(t.dtype()) || t.dtype() == DType::Bool) return load_as_double(t.dtype(), p);
  switch (dtype_size(t.dtype())) {
    case 1:
      return is_signed_integer(t.dtype()) ? *reinterpret_cast<const int8_t*>(p)
                                          : *reinterpret_cast<const uint8_t*>(p);
    case 2:
      return is_signed_integer(t.dtype()) ? *reinterpret_cast<const int16_t*>(p)
                                          : *reinterpret_cast<const uint16_t*>(p);
    case 4:
      return is_signed_integer(t.dtype()) ? *reinterpret_cast<const int32_t*>(p)
                                          : *reinterpret_cast<const uint32_t*>(p);
    default:
      return is_signed_integer(t.dtype())
                 ? static_cast<long double>(*reinterpret_cast<const int64_t*>(p))
                 : static_cast<long double>(*reinterpret_cast<const uint64_t*>(p));
  }
}

Tensor i64_tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(DType::I64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data_as<int64_t>());
  return t;
}

/// Copies slices `rows` of `x` (contiguous) along `axis` into a tensor with that many.
Tensor take_slices(const Tensor& x, int64_t axis, const std::vector<int64_t>& rows) {
  std::vector<int64_t> shape = x.shape();
  const int64_t outer =
      std::accumulate(shape.begin(), shape.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t inner =
      std::accumulate(shape.begin() + axis + 1, shape.end(), int64_t{1}, std::multiplies<>());
  const int64_t n = shape[static_cast<size_t>(axis)];
  shape[static_cast<size_t>(axis)] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(x.dtype(), shape);
  const size_t bytes = static_cast<size_t>(inner * dtype_size(x.dtype()));
  const auto* src = static_cast<const std::byte*>(x.data());
  auto* dst = static_cast<std::byte*>(out.data());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t r = 0; r < rows.size(); ++r)
      std::memcpy(dst + (o * static_cast<int64_t>(rows.size()) + static_cast<int64_t>(r)) *
                            static_cast<int64_t>(bytes),
                  src + (o * n + rows[r]) * static_cast<int64_t>(bytes), bytes);
  return out;
}

std::vector<Tensor> non_zero(const NodeView& n, const Tensor& x) {
  n.only_attrs({});
  COIL_USER_CHECK(x.dim() >= 1, "{}: a 0-d input (coil's NonZero takes rank >= 1)", n.where());
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (key_at(x, i) != 0 || std::isnan(static_cast<double>(key_at(x, i)))) hits.push_back(i);
  const int64_t rank = x.dim(), count = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(static_cast<size_t>(rank * count));
  for (int64_t j = 0; j < count; ++j) {
    int64_t rest = hits[static_cast<size_t>(j)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      out[static_cast<size_t>(d * count + j)] = rest % x.shape()[static_cast<size_t>(d)];
      rest /= x.shape()[static_cast<size_t>(d)];
    }
  }
  return {i64_tensor({rank, count}, out)};
}

/// `x` and the axis its `axis` attribute names (normalized), or x flattened and axis 0 where
/// the attribute is absent (Compress, Unique).
std::pair<Tensor, int64_t> along_axis(const NodeView& n, const Tensor& x) {
  if (!n.has_attr("axis")) return {x.strided({x.numel()}, {1}), 0};
  int64_t axis = n.attr_int("axis", 0);
  COIL_USER_CHECK(axis >= -x.dim() && axis < x.dim(), "{}: axis {} is out of range for {}",
                  n.where(), axis, shape_str(x.shape()));
  return {x, axis < 0 ? axis + x.dim() : axis};
}

std::vector<Tensor> compress(const NodeView& n, const Tensor& x, const Tensor& cond) {
  n.only_attrs({"axis"});
  COIL_USER_CHECK(cond.dim() == 1, "{}: condition must be 1-D, got {}", n.where(),
                  shape_str(cond.shape()));
  auto [flat, axis] = along_axis(n, x);
  const int64_t size = flat.shape()[static_cast<size_t>(axis)];
  COIL_USER_CHECK(cond.numel() <= size,
                  "{}: condition has {} elements, more than the {} it selects from", n.where(),
                  cond.numel(), size);
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < cond.numel(); ++i)
    if (key_at(cond, i) != 0) rows.push_back(i);
  return {take_slices(flat, axis, rows)};
}

std::vector<Tensor> unique(const NodeView& n, const Tensor& x) {
  n.only_attrs({"axis", "sorted"});
  const int64_t sorted = n.attr_int("sorted", 1);
  COIL_USER_CHECK(sorted == 0 || sorted == 1, "{}: sorted must be 0 or 1, got {}", n.where(),
                  sorted);
  auto [flat, axis] = along_axis(n, x);
  // Slice j along the axis, as keys in row-major order of the other dims.
  const auto& shape = flat.shape();
  const int64_t count = shape[static_cast<size_t>(axis)];
  const int64_t outer =
      std::accumulate(shape.begin(), shape.begin() + axis, int64_t{1}, std::multiplies<>());
  const int64_t inner =
      std::accumulate(shape.begin() + axis + 1, shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<std::vector<long double>> slices(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        slices[static_cast<size_t>(j)].push_back(key_at(flat, (o * count + j) * inner + i));
  std::map<std::vector<long double>, int64_t> first;  // slice -> first index
  std::vector<int64_t> firsts;                        // in order of first occurrence
  for (int64_t j = 0; j < count; ++j)
    if (first.emplace(slices[static_cast<size_t>(j)], j).second) firsts.push_back(j);
  if (sorted == 1) {
    firsts.clear();
    for (const auto& [slice, j] : first) firsts.push_back(j);  // std::map: ascending
  }
  std::map<std::vector<long double>, int64_t> position;
  for (size_t u = 0; u < firsts.size(); ++u)
    position[slices[static_cast<size_t>(firsts[u])]] = static_cast<int64_t>(u);
  std::vector<int64_t> inverse, counts(firsts.size(), 0);
  for (int64_t j = 0; j < count; ++j) {
    int64_t u = position.at(slices[static_cast<size_t>(j)]);
    inverse.push_back(u);
    ++counts[static_cast<size_t>(u)];
  }
  const auto k = static_cast<int64_t>(firsts.size());
  return {take_slices(flat, axis, firsts), i64_tensor({k}, firsts), i64_tensor({count}, inverse),
          i64_tensor({k}, counts)};
}

std::vector<Tensor> non_max_suppression(const NodeView& n, const std::vector<Tensor>& in) {
  n.only_attrs({"center_point_box"});
  const int64_t center = n.attr_int("center_point_box", 0);
  COIL_USER_CHECK(center == 0 || center == 1, "{}: center_point_box must be 0 or 1, got {}",
                  n.where(), center);
  COIL_USER_CHECK(in.size() >= 2 && in[0].defined() && in[1].defined(),
                  "{}: needs boxes and scores", n.where());
  const Tensor& boxes = in[0];
  const Tensor& scores = in[1];
  COIL_USER_CHECK(boxes.dim() == 3 && boxes.shape()[2] == 4,
                  "{}: boxes must be [batches, boxes, 4], got {}", n.where(),
                  shape_str(boxes.shape()));
  COIL_USER_CHECK(scores.dim() == 3 && scores.shape()[0] == boxes.shape()[0] &&
                      scores.shape()[2] == boxes.shape()[1],
                  "{}: scores must be [batches, classes, boxes] for boxes {}, got {}", n.where(),
                  shape_str(boxes.shape()), shape_str(scores.shape()));
  auto scalar = [&](size_t i, double dflt) {
    if (i >= in.size() || !in[i].defined()) return dflt;
    COIL_USER_CHECK(in[i].numel() == 1, "{}: input {} must hold one value, got {}", n.where(), i,
                    shape_str(in[i].shape()));
    return static_cast<double>(key_at(in[i], 0));
  };
  const auto max_out = static_cast<int64_t>(scalar(2, 0));
  const auto iou_threshold = static_cast<float>(scalar(3, 0));
  const bool has_score_threshold = in.size() > 4 && in[4].defined();
  const auto score_threshold = static_cast<float>(scalar(4, 0));
  const int64_t batches = boxes.shape()[0], classes = scores.shape()[1], nb = boxes.shape()[1];
  auto corners = [&](int64_t b, int64_t i) {
    float v[4];
    for (int k = 0; k < 4; ++k)
      v[k] = static_cast<float>(boxes.item_as_double((b * nb + i) * 4 + k));
    if (center == 1)  // [x_center, y_center, width, height]
      return std::array<float, 4>{v[1] - v[3] / 2, v[0] - v[2] / 2, v[1] + v[3] / 2,
                                  v[0] + v[2] / 2};
    return std::array<float, 4>{std::min(v[0], v[2]), std::min(v[1], v[3]), std::max(v[0], v[2]),
                                std::max(v[1], v[3])};
  };
  auto suppresses = [&](const std::array<float, 4>& a, const std::array<float, 4>& c) {
    const float ih = std::min(a[2], c[2]) - std::max(a[0], c[0]);
    const float iw = std::min(a[3], c[3]) - std::max(a[1], c[1]);
    if (ih <= 0 || iw <= 0) return false;
    const float inter = ih * iw;
    const float area_a = (a[2] - a[0]) * (a[3] - a[1]), area_c = (c[2] - c[0]) * (c[3] - c[1]);
    const float uni = area_a + area_c - inter;
    if (area_a <= 0 || area_c <= 0 || uni <= 0) return false;
    return inter / uni > iou_threshold;
  };
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t c = 0; c < classes; ++c) {
      std::vector<std::pair<float, int64_t>> cand;
      for (int64_t i = 0; i < nb; ++i) {
        const auto s = static_cast<float>(scores.item_as_double((b * classes + c) * nb + i));
        if (!has_score_threshold || s > score_threshold) cand.emplace_back(s, i);
      }
      std::stable_sort(cand.begin(), cand.end(),
                       [](const auto& l, const auto& r) { return l.first > r.first; });
      std::vector<std::array<float, 4>> kept;
      for (const auto& [s, i] : cand) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        auto box = corners(b, i);
        if (std::any_of(kept.begin(), kept.end(),
                        [&](const auto& k) { return suppresses(k, box); }))
          continue;
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  return {i64_tensor({static_cast<int64_t>(selected.size() / 3), 3}, selected)};
}

}  // namespace

bool is_data_dependent(std::string_view op_type) {
  return op_type == "NonZero" || op_type == "Compress" || op_type == "Unique" ||
         op_type == "NonMaxSuppression";
}

std::vector<Tensor> run_data_dependent(const onnx::NodeProto& node,
                                       const std::vector<Tensor>& inputs) {
  NodeView n{node};
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) in.push_back(t.defined() && !t.is_contiguous() ? t.clone() : t);
  auto need = [&](size_t count) {
    COIL_USER_CHECK(in.size() >= count, "{}: takes {} inputs, got {}", n.where(), count, in.size());
    for (size_t i = 0; i < count; ++i)
      COIL_USER_CHECK(in[i].defined(), "{}: input {} is missing", n.where(), i);
  };
  const std::string& op = node.op_type();
  if (op == "NonZero") return need(1), non_zero(n, in[0]);
  if (op == "Compress") return need(2), compress(n, in[0], in[1]);
  if (op == "Unique") return need(1), unique(n, in[0]);
  if (op == "NonMaxSuppression") return need(2), non_max_suppression(n, in);
  user_error("{}: not an op whose output size depends on values", n.where());
}

void map_data_dependent(OnnxNode& n) {
  std::vector<Tensor> values;
  for (int i = 0; i < n.num_inputs(); ++i) {
    if (!n.has_input(i)) {
      values.emplace_back();
      continue;
    }
    const Tensor* c = n.constant(n.in(i));
    if (!c)
      unsupported(
          "{}: coil::OnnxModel (C++) and `coil run` {}; one graph (coil compile, check, "
          "bench, export; coil.Graph.import_onnx) cannot hold it",
          kDataDependent, kStaged);
    values.push_back(*c);
  }
  for (const auto& a : n.proto().attribute()) n.find_attr(a.name());  // read below
  std::vector<Tensor> out = run_data_dependent(n.proto(), values);
  for (int i = 0; i < n.num_outputs(); ++i)
    if (n.wants_output(i)) n.set_output(i, n.add_constant(out[static_cast<size_t>(i)]));
}

void map_control_flow(OnnxNode& n) {
  for (const auto& a : n.proto().attribute()) n.find_attr(a.name());  // checked when it runs
  unsupported(
      "control flow: coil::OnnxModel (C++) and `coil run` {}, each body compiled as a "
      "sub-model; one graph (coil compile, check, bench, export; coil.Graph.import_onnx) cannot "
      "hold it",
      kStaged);
}

}  // namespace coil::onnxfe
