// ONNX reductions onto coil's sum/mean/max/min/prod (with keepdim) and argmax/argmin. The result
// keeps the input's dtype, as ONNX requires (coil's integer sums are i64, its means f32).
#include <algorithm>
#include <set>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {

std::vector<int64_t> reduction_axes(OnnxNode& n, int input_opset, bool* noop) {
  int x = n.in(0);
  std::vector<int64_t> raw;
  if (n.opset() >= input_opset) {
    if (n.has_input(1)) raw = n.const_ints(1, "the axes input");
  } else if (auto a = n.attr_ints("axes")) {
    raw = *a;
  }
  bool noop_if_empty = n.attr_int("noop_with_empty_axes", 0) != 0;  // read either way
  *noop = raw.empty() && noop_if_empty;
  std::set<int64_t> axes;
  for (int64_t a : raw)
    if (!axes.insert(n.axis(a, n.rank(x))).second) n.error("axis {} is listed twice", a);
  if (n.rank(x) == 0) return {};
  return {axes.begin(), axes.end()};
}

int reduce(OnnxNode& n, std::string_view op, int x, const std::vector<int64_t>& axes,
           bool keepdim) {
  if (axes.empty() && n.rank(x) == 0) return x;
  Attrs a{{"keepdim", keepdim}};
  if (!axes.empty()) a.set("axes", axes);
  return n.add(op, {x}, a);
}

void map_reduce(OnnxNode& n) {
  int x = n.in(0);
  const std::string& op = n.op_type();
  bool noop = false;
  std::vector<int64_t> axes = reduction_axes(n, op == "ReduceSum" ? 13 : 18, &noop);
  if (noop) return n.set_output(0, x);
  if (axes.empty())
    for (int64_t i = 0; i < n.rank(x); ++i) axes.push_back(i);
  bool keep = n.attr_int("keepdims", 1) != 0;
  DType t = n.dtype(x);
  int y;
  if (op == "ReduceSum") {
    y = reduce(n, "sum", x, axes, keep);
  } else if (op == "ReduceMean") {
    y = reduce(n, "mean", x, axes, keep);
  } else if (op == "ReduceMax") {
    y = reduce(n, "max", x, axes, keep);
  } else if (op == "ReduceMin") {
    y = reduce(n, "min", x, axes, keep);
  } else if (op == "ReduceProd") {
    y = reduce(n, "prod", x, axes, keep);
  } else if (op == "ReduceL1") {
    y = reduce(n, "sum", n.add("abs", {x}), axes, keep);
  } else if (op == "ReduceSumSquare") {
    y = reduce(n, "sum", n.add("mul", {x, x}), axes, keep);
  } else if (op == "ReduceL2") {
    y = n.add("sqrt", {reduce(n, "sum", n.add("mul", {x, x}), axes, keep)});
  } else if (op == "ReduceLogSum") {
    y = n.add("log", {reduce(n, "sum", x, axes, keep)});
  } else if (op == "ReduceLogSumExp") {
    // m + log(sum(e^(x - m))) with m the maximum; an all -inf row has m = -inf: use 0 there.
    int m = reduce(n, "max", x, axes, true);
    int inf = n.add("eq", {n.add("abs", {m}), n.scalar(INFINITY, n.dtype(m))});
    m = n.add("where", {inf, n.scalar(0, n.dtype(m)), m});
    int s = reduce(n, "sum", n.add("exp", {n.add("sub", {x, m})}), axes, keep);
    if (!keep) m = n.add("squeeze", {m}, Attrs{{"dims", axes}});
    y = n.add("add", {n.add("log", {s}), m});
  } else {
    COIL_UNREACHABLE("map_reduce: {}", op);
  }
  n.set_output(0, n.cast(y, t));
}

void map_arg_reduce(OnnxNode& n) {
  int x = n.in(0);
  int64_t axis = n.axis(n.attr_int("axis", 0), n.rank(x));
  bool keep = n.attr_int("keepdims", 1) != 0;
  bool max = n.op_type() == "ArgMax";
  if (n.rank(x) == 0) n.error("the input must have at least one dim");
  if (n.attr_int("select_last_index", 0) == 0)
    return n.set_output(
        0, n.add(max ? "argmax" : "argmin", {x}, Attrs{{"axis", axis}, {"keepdim", keep}}));
  // The last index of the extreme value: the largest index where x equals the extreme.
  int extreme = reduce(n, max ? "max" : "min", x, {axis}, true);
  int64_t size = n.static_shape(x, "the input")[static_cast<size_t>(axis)];
  int idx = iota_along(n, size, axis, n.rank(x));
  int hit = n.add("eq", {x, extreme});
  int y = reduce(n, "max", n.add("where", {hit, idx, n.scalar(-1, DType::I64)}), {axis}, keep);
  n.set_output(0, y);
}

}  // namespace coil::onnxfe
