// Reference kernels of the reductions: sum, prod, max, min, mean, var, argmax, argmin.
//
// Floating inputs accumulate in double and round once; integral inputs (bool included) sum,
// multiply and compare in int64 exactly (wrapping on overflow), as torch does for integer
// sums. max/min propagate NaN; argmax/argmin treat NaN as the extreme value, first one wins.
#include <cmath>
#include <limits>

#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

// Where each input element (row-major) goes in the reduced output.
struct ReduceLayout {
  std::vector<int64_t> out_shape;  // keepdim applied
  std::vector<int64_t> out_of;     // output index of each input element
  int64_t out_numel = 1;
  int64_t count = 1;  // input elements per output element
};

ReduceLayout reduce_layout(const std::vector<int64_t>& shape, const std::vector<int64_t>& axes,
                           bool keepdim) {
  ReduceLayout l;
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
  std::vector<int64_t> kept_shape;  // keepdim form: reduced dims become 1
  for (size_t d = 0; d < shape.size(); ++d) {
    kept_shape.push_back(reduced[d] ? 1 : shape[d]);
    if (reduced[d]) l.count *= shape[d];
    if (!reduced[d] || keepdim) l.out_shape.push_back(reduced[d] ? 1 : shape[d]);
  }
  l.out_numel = shape_numel(l.out_shape);
  std::vector<int64_t> ostrides = contiguous_strides(kept_shape);
  l.out_of.reserve(static_cast<size_t>(shape_numel(shape)));
  ref::for_each_index(shape, [&](const std::vector<int64_t>& idx) {
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      if (!reduced[d]) o += idx[d] * ostrides[d];
    l.out_of.push_back(o);
  });
  return l;
}

void check_nonempty(const Node& node, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& axes) {
  for (int64_t a : axes)
    COIL_USER_CHECK(shape[static_cast<size_t>(a)] != 0,
                    "{}: reduction over dim {} of extent 0 has no identity", node.op_name(), a);
}

Tensor int_reduction(const Node& node, const Tensor& x, const ReduceLayout& l) {
  std::string_view op = node.op_name();
  std::vector<int64_t> v = ref::read_ints(x);
  // max/min compare order keys (u64's order is not int64's); sum and prod wrap alike.
  bool ordered = op == "max" || op == "min";
  if (ordered)
    for (int64_t& e : v) e = ref::order_key(x.dtype(), e);
  int64_t init = op == "prod"  ? 1
                 : op == "max" ? std::numeric_limits<int64_t>::min()
                 : op == "min" ? std::numeric_limits<int64_t>::max()
                               : 0;
  std::vector<int64_t> acc(static_cast<size_t>(l.out_numel), init);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t& a = acc[static_cast<size_t>(l.out_of[i])];
    auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(v[i]);
    if (op == "sum")
      a = static_cast<int64_t>(ua + ub);
    else if (op == "prod")
      a = static_cast<int64_t>(ua * ub);
    else if (op == "max")
      a = std::max(a, v[i]);
    else if (op == "min")
      a = std::min(a, v[i]);
    else
      COIL_UNREACHABLE("no integer reduction {}", op);
  }
  if (ordered)
    for (int64_t& a : acc) a = ref::order_key(x.dtype(), a);
  Tensor out = Tensor::empty(node.type.dtype, l.out_shape);
  for (int64_t i = 0; i < l.out_numel; ++i) ref::set_int(out, i, acc[static_cast<size_t>(i)]);
  return out;
}

Tensor float_reduction(const Node& node, const Tensor& x, const ReduceLayout& l) {
  std::string_view op = node.op_name();
  std::vector<double> v = ref::read_doubles(x);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double init = op == "prod"  ? 1.0
                : op == "max" ? -std::numeric_limits<double>::infinity()
                : op == "min" ? std::numeric_limits<double>::infinity()
                              : 0.0;
  std::vector<double> acc(static_cast<size_t>(l.out_numel), init);
  for (size_t i = 0; i < v.size(); ++i) {
    double& a = acc[static_cast<size_t>(l.out_of[i])];
    if (op == "sum" || op == "mean" || op == "var")
      a += v[i];
    else if (op == "prod")
      a *= v[i];
    else if (op == "max")
      a = std::isnan(a) || std::isnan(v[i]) ? nan : std::max(a, v[i]);
    else if (op == "min")
      a = std::isnan(a) || std::isnan(v[i]) ? nan : std::min(a, v[i]);
    else
      COIL_UNREACHABLE("no reduction {}", op);
  }
  auto count = static_cast<double>(l.count);
  if (op == "mean" || op == "var") {
    for (double& a : acc) a /= count;  // 0 / 0 = NaN for an empty mean, as torch
  }
  if (op == "var") {
    // Second pass over the deviations from the mean: exact enough in double, no cancellation.
    std::vector<double> m2(acc.size(), 0.0);
    for (size_t i = 0; i < v.size(); ++i) {
      double d = v[i] - acc[static_cast<size_t>(l.out_of[i])];
      m2[static_cast<size_t>(l.out_of[i])] += d * d;
    }
    double correction = node.attrs.get_float_or(op, "correction", 1.0);
    // torch: divisor max(0, N - correction); m2 / 0 gives NaN (m2 = 0) or inf.
    double divisor = std::max(0.0, count - correction);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = m2[i] / divisor;
  }
  Tensor out = Tensor::empty(node.type.dtype, l.out_shape);
  for (int64_t i = 0; i < l.out_numel; ++i) ref::set_double(out, i, acc[static_cast<size_t>(i)]);
  return out;
}

}  // namespace

Tensor ref_reduction(const Node& node, const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  std::string_view op = node.op_name();
  std::vector<int64_t> axes = reduction_axes(node, x.dim());
  bool keepdim = node.attrs.get_bool_or(op, "keepdim", false);
  if (op == "max" || op == "min") check_nonempty(node, x.shape(), axes);
  ReduceLayout l = reduce_layout(x.shape(), axes, keepdim);
  bool exact_int =
      !is_floating(x.dtype()) && (op == "sum" || op == "prod" || op == "max" || op == "min");
  return exact_int ? int_reduction(node, x, l) : float_reduction(node, x, l);
}

Tensor ref_arg_reduction(const Node& node, const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  std::string_view op = node.op_name();
  bool keepdim = node.attrs.get_bool_or(op, "keepdim", false);
  bool is_max = op == "argmax";
  std::vector<int64_t> axes;
  int64_t axis = -1;  // -1: over the flattened tensor
  if (node.attrs.has("axis")) {
    axis = normalize_axis(op, node.attrs.get_int(op, "axis"), x.dim());
    if (x.dim() > 0)
      axes.push_back(axis);
    else
      axis = -1;
  } else {
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  }
  for (int64_t a : axes)
    COIL_USER_CHECK(x.shape()[static_cast<size_t>(a)] != 0,
                    "{}: reduction over dim {} of extent 0 has no result", op, a);
  ReduceLayout l = reduce_layout(x.shape(), axes, keepdim);

  // Position of each element within its reduced group: the index along `axis`, or the
  // flattened index. Row-major order visits a group in increasing position, so keeping the
  // first strictly better value keeps the first of ties.
  std::vector<int64_t> pos;
  int64_t linear = 0;
  ref::for_each_index(x.shape(), [&](const std::vector<int64_t>& idx) {
    pos.push_back(axis >= 0 ? idx[static_cast<size_t>(axis)] : linear);
    ++linear;
  });

  auto n = static_cast<size_t>(l.out_numel);
  std::vector<int64_t> best_pos(n, -1);
  if (is_floating(x.dtype())) {
    std::vector<double> v = ref::read_doubles(x);
    std::vector<double> best(n, 0.0);
    for (size_t i = 0; i < v.size(); ++i) {
      auto o = static_cast<size_t>(l.out_of[i]);
      bool better =
          best_pos[o] < 0 || (!std::isnan(best[o]) &&
                              (std::isnan(v[i]) || (is_max ? v[i] > best[o] : v[i] < best[o])));
      if (better) best[o] = v[i], best_pos[o] = pos[i];
    }
  } else {
    std::vector<int64_t> v = ref::read_ints(x);
    for (int64_t& e : v) e = ref::order_key(x.dtype(), e);
    std::vector<int64_t> best(n, 0);
    for (size_t i = 0; i < v.size(); ++i) {
      auto o = static_cast<size_t>(l.out_of[i]);
      bool better = best_pos[o] < 0 || (is_max ? v[i] > best[o] : v[i] < best[o]);
      if (better) best[o] = v[i], best_pos[o] = pos[i];
    }
  }
  Tensor out = Tensor::empty(node.type.dtype, l.out_shape);
  for (size_t i = 0; i < n; ++i) ref::set_int(out, static_cast<int64_t>(i), best_pos[i]);
  return out;
}

}  // namespace coil
