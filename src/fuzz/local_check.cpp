#include "fuzz/local_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "fuzz/evaluate.h"
#include "graph/interpreter.h"
#include "runtime/compare.h"

namespace coil::fuzz {

namespace {

// Headroom over the first-order bounds below (rounding constants, blocked sums, the f64
// reference's own last bit).
constexpr double kSlack = 8;

double max_abs(const Tensor* t) {
  double m = 0;
  if (!t) return 0;
  for (int64_t i = 0; i < t->numel(); ++i) {
    double v = std::fabs(t->item_as_double(i));
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

// Unit roundoff of the arithmetic a kernel of this dtype accumulates in (f16/bf16 kernels
// accumulate in f32; their own output rounding is in the dtype's default tolerance).
double unit_roundoff(DType t) {
  return t == DType::F64 ? 0x1p-53 : 0x1p-24;
}

// Per-row bound of a norm over the trailing `dims` dims: K * u * (max|x| / scale) * (1 + the
// output's size), where scale is sqrt(var + eps) (layer_norm) or sqrt(mean(x^2) + eps)
// (rms_norm): a nearly constant row divides the rounding of its mean by sqrt(eps).
std::vector<double> norm_bound(const Node& n, const Tensor& x, const Tensor* w, double u) {
  const bool layer = n.op_name() == "layer_norm";
  const int64_t dims = n.attrs.get_int_or(n.op_name(), "dims", 1);
  const double eps = n.attrs.get_float_or(n.op_name(), "eps", layer ? 1e-5 : 1e-6);
  int64_t row = 1;
  for (int64_t d = 0; d < dims && d < static_cast<int64_t>(x.shape().size()); ++d)
    row *= x.shape()[x.shape().size() - 1 - static_cast<size_t>(d)];
  const double wmax = w ? std::max(1.0, max_abs(w)) : 1.0;
  std::vector<double> bound(static_cast<size_t>(x.numel()), 0);
  if (row == 0) return bound;
  for (int64_t r = 0; r < x.numel() / row; ++r) {
    double mean = 0, sq = 0, mx = 0;
    for (int64_t i = 0; i < row; ++i) {
      double v = x.item_as_double(r * row + i);
      mean += v;
      sq += v * v;
      if (std::isfinite(v)) mx = std::max(mx, std::fabs(v));
    }
    mean /= static_cast<double>(row);
    double var = std::max(sq / static_cast<double>(row) - mean * mean, 0.0);
    double scale = std::sqrt((layer ? var : sq / static_cast<double>(row)) + eps);
    double a = mx / scale;
    double b = kSlack * u * static_cast<double>(row) * a * (1 + a) * wmax;
    for (int64_t i = 0; i < row; ++i) bound[static_cast<size_t>(r * row + i)] = b;
  }
  return bound;
}

// The operand values of node `n`: inputs as given, every other node as the compiled model
// computed it.
std::vector<const Tensor*> operands_of(const Node& n, const std::vector<Tensor>& values) {
  std::vector<const Tensor*> out;
  for (int i : n.inputs) out.push_back(&values[static_cast<size_t>(i)]);
  return out;
}

// `n` alone, its operands as inputs of their dtypes and actual (bound) shapes.
Tensor reference_of(const Node& n, const std::vector<const Tensor*>& operands) {
  Graph s;
  std::vector<int> in;
  std::vector<Tensor> args;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    Shape shape;
    for (int64_t d : operands[k]->shape()) shape.push_back(sym::Expr(d));
    in.push_back(s.add_input(fmt::format("a{}", k), operands[k]->dtype(), shape));
    args.push_back(*operands[k]);
  }
  s.add_output(s.add_node(n.op_name(), in, n.attrs), "y");
  return interpret(s, args)[0];
}

// `exact`: the same bits are due (ops that never round): -0 and +0 differ.
bool element_close(double a, double e, double atol, double rtol, bool exact) {
  if (exact && !std::isnan(a) && !std::isnan(e))
    return a == e && std::signbit(a) == std::signbit(e);
  return element_matches(a, e, Tolerance{rtol, atol});
}

}  // namespace

std::vector<double> rounding_bound(const Node& n, const std::vector<const Tensor*>& operands,
                                   const Tensor& result) {
  const std::string_view op = n.op_name();
  const DType t = n.type.dtype;
  if (!is_floating(t)) return {0};
  const double u = unit_roundoff(t);
  auto arg = [&](size_t k) { return k < operands.size() ? operands[k] : nullptr; };
  const double in_numel = operands.empty() ? 1 : static_cast<double>(operands[0]->numel());
  const double terms = in_numel / std::max<double>(1, static_cast<double>(result.numel()));
  if (op == "sum") return {kSlack * u * terms * max_abs(arg(0))};
  if (op == "mean" || op == "avg_pool2d" || op == "global_avg_pool2d") {
    // The sum's K * u * max|x|, divided by the K terms.
    return {kSlack * u * max_abs(arg(0))};
  }
  if (op == "var") {
    // K squares of (x - mean), each at most (2 max|x|)^2, over K - correction.
    double m = max_abs(arg(0));
    double corr = n.attrs.get_float_or(op, "correction", 1);
    return {kSlack * u * 4 * m * m * terms / std::max(terms - corr, 1.0)};
  }
  if (op == "prod") {
    return {kSlack * u * std::max(terms, 1.0) * max_abs(&result)};
  }
  if (op == "matmul" || op == "bmm" || op == "linear" || op == "addmm") {
    const bool addmm = op == "addmm";
    const Tensor* a = arg(addmm ? 1 : 0);
    const Tensor* b = arg(addmm ? 2 : 1);
    const Tensor* bias = addmm ? arg(0) : arg(2);
    double alpha = addmm ? std::fabs(n.attrs.get_float_or(op, "alpha", 1)) : 1;
    double beta = addmm ? std::fabs(n.attrs.get_float_or(op, "beta", 1)) : 1;
    double k = a && !a->shape().empty() ? static_cast<double>(a->shape().back()) : 1;
    return {kSlack * u * (k * alpha * max_abs(a) * max_abs(b) + beta * max_abs(bias))};
  }
  if (op == "conv2d") {
    const Tensor* w = arg(1);
    double k = w && w->shape().size() == 4
                   ? static_cast<double>(w->numel() / std::max<int64_t>(w->shape()[0], 1))
                   : 1;
    return {kSlack * u * (k * max_abs(arg(0)) * max_abs(w) + max_abs(arg(2)))};
  }
  if (op == "softmax" || op == "log_softmax") {
    // exp(x - max) has relative error u * |x - max| <= 2u max|x|; the sum of `terms` of them
    // (at most 1 each) adds terms * u; log_softmax adds the log of that sum's error.
    double k = 1;
    int64_t axis = n.attrs.get_int_or(op, "axis", -1);
    const auto& s = operands[0]->shape();
    if (!s.empty()) {
      int64_t r = static_cast<int64_t>(s.size());
      k = static_cast<double>(s[static_cast<size_t>((axis % r + r) % r)]);
    }
    return {kSlack * u * (2 * max_abs(arg(0)) + k)};
  }
  if (op == "layer_norm" || op == "rms_norm") return norm_bound(n, *operands[0], arg(1), u);
  if (op == "sin" || op == "cos") {
    // Argument reduction: the error of x mod 2*pi grows with |x|.
    return {kSlack * u * max_abs(arg(0))};
  }
  if (op == "pow") {
    // x^y = exp(y log x): the relative error grows with |y log x|.
    double x = std::max(max_abs(arg(0)), 1.0), y = max_abs(arg(1));
    return {kSlack * u * y * std::log(x) * max_abs(&result)};
  }
  return {0};
}

LocalVerdict check_nodes(const Graph& g, const std::vector<Tensor>& values) {
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    std::string_view op = n.op_name();
    if (op == "input") continue;
    const Tensor& got = values[static_cast<size_t>(n.id)];
    std::vector<const Tensor*> operands = operands_of(n, values);
    Tensor want;
    try {
      want = op == "constant" ? *n.data : reference_of(n, operands);
    } catch (const std::exception& e) {
      return {LocalVerdict::kInconclusive, n.id,
              fmt::format("node {} ({}) cannot run alone: {}", n.name, op, e.what())};
    }
    // A max/min over a set holding -0 and +0 gives the zero its order reaches first: the sign
    // of a zero is due only from elementwise ops.
    const bool exact = is_exact_op(op) || !is_floating(n.type.dtype);
    const bool reduces = op == "max" || op == "min" || op == "max_pool2d";
    Tolerance tol = exact ? Tolerance{0, 0} : default_tolerance(n.type.dtype);
    std::vector<double> extra = rounding_bound(n, operands, got);
    if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
      return {
          LocalVerdict::kNodeDiffers, n.id,
          fmt::format("node {} ({}) has another shape or dtype than its reference", n.name, op)};
    }
    for (int64_t i = 0; i < got.numel(); ++i) {
      double atol = tol.atol + extra[extra.size() == 1 ? 0 : static_cast<size_t>(i)];
      double a = got.item_as_double(i), e = want.item_as_double(i);
      if (element_close(a, e, atol, tol.rtol, exact && !reduces)) continue;
      if (reduces && a == e) continue;
      return {LocalVerdict::kNodeDiffers, n.id,
              fmt::format("node {} ({} {}) differs from the reference on the compiled values "
                          "of its operands: at linear index {} got {}, expected {} (rtol {}, "
                          "atol {:.3g} with its rounding bound)",
                          n.name, op, dtype_name(n.type.dtype), i, a, e, tol.rtol, atol)};
    }
  }
  return {LocalVerdict::kExplained, -1,
          "every node matches the reference on the compiled values of its operands: the "
          "output's difference is rounding that the graph amplified"};
}

FuzzCase with_every_node_as_output(const FuzzCase& c, std::vector<int>& added) {
  FuzzCase all = clone_case(c);
  added.clear();
  for (const auto& np : c.graph.nodes()) {
    if (np->op_name() == "input") continue;
    all.graph.add_output(np->id, fmt::format("local_{}", np->id));
    added.push_back(np->id);
  }
  return all;
}

LocalVerdict check_locally(const FuzzCase& c, const CompileOptions& options,
                           const std::vector<Tensor>& inputs, size_t output,
                           const std::function<bool(const Tensor&)>& still_differs) {
  const size_t original = c.graph.outputs().size();
  std::vector<int> added;
  FuzzCase all = with_every_node_as_output(c, added);
  std::vector<Tensor> got;
  try {
    got = compile(all.graph, options).run(inputs);
  } catch (const std::exception& e) {
    return {LocalVerdict::kInconclusive, -1,
            fmt::format("the graph with every node as an output failed: {}", e.what())};
  }
  if (!still_differs(got[output]))
    return {LocalVerdict::kGoneWhenStored, -1,
            "with every node as an output the difference is gone"};
  std::vector<Tensor> values(static_cast<size_t>(c.graph.num_nodes()));
  for (size_t k = 0; k < c.graph.inputs().size(); ++k)
    values[static_cast<size_t>(c.graph.inputs()[k])] = inputs[k];
  for (size_t k = 0; k < added.size(); ++k)
    values[static_cast<size_t>(added[k])] = std::move(got[original + k]);
  return check_nodes(c.graph, values);
}

}  // namespace coil::fuzz
