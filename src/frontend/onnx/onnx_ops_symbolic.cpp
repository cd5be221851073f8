// Shape arithmetic on symbolic sizes (SymbolicInts, onnx_context.h): what exporters emit around
// a dynamic dim. torch's multi-head attention with a dynamic batch, for one:
//   Shape(x) -> Gather(1) -> Mul(4) -> Unsqueeze -> Concat([64], ., [64]) -> Reshape(q, .)
// Each value is a list of size expressions (`4*batch`), computed here at import time as if it
// were a constant; Reshape and Expand take such a list as their target shape. Any other use of
// a symbolic value is unsupported (the importer says so), since its placeholder holds no data.
#include <algorithm>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"
#include "sym/analyzer.h"

namespace coil::onnxfe {
namespace {

// An integer input of rank 0 or 1 as size expressions.
struct Ints {
  std::vector<sym::Expr> v;
  bool scalar = false;
};

Ints ints_of(OnnxNode& n, int i, std::string_view what) {
  int id = n.in(i);
  if (n.rank(id) > 1) unsupported("{} of rank {} computed from symbolic sizes", what, n.rank(id));
  return {n.sym_ints(i, what), n.rank(id) == 0};
}

DType integer_dtype(OnnxNode& n, int id) {
  DType t = n.dtype(id);
  if (!is_integral(t) || t == DType::Bool)
    n.error("shape arithmetic on {} values (sizes are integers)", dtype_name(t));
  return t;
}

// Axes of Unsqueeze / Squeeze: an input from opset 13, an attribute before.
std::vector<int64_t> axes_of(OnnxNode& n) {
  if (n.opset() >= 13)
    return n.has_input(1) ? n.const_ints(1, "the axes input") : std::vector<int64_t>{};
  return n.attr_ints("axes").value_or(std::vector<int64_t>{});
}

// ONNX's Slice bounds for one axis of size `d`: (start, end) clamped as numpy does.
std::pair<int64_t, int64_t> slice_bounds(int64_t start, int64_t end, int64_t step, int64_t d) {
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v += d;
    return std::clamp(v, lo, hi);
  };
  if (step > 0) return {clamp(start, 0, d), clamp(end, 0, d)};
  return {clamp(start, -1, d - 1), clamp(end, -1, d - 1)};
}

sym::Expr apply(const std::string& op, const sym::Expr& a, const sym::Expr& b) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  // Div: ONNX's integer division truncates; sizes are non-negative, where it is floor division,
  // and a negative divisor negates it (6*N / -3 = -(2*N); floordiv takes positive divisors).
  auto c = b.as_const();
  if (c && *c == 0) unsupported("a division of sizes by 0");
  if (c && *c < 0) return sym::Analyzer().simplify(-sym::floordiv(a, sym::Expr(-*c)));
  return sym::Analyzer().simplify(sym::floordiv(a, b));  // (6*N) // 3 -> 2*N
}

}  // namespace

bool map_symbolic(OnnxNode& n) {
  const std::string& op = n.op_type();
  if (op == "Identity") {
    n.set_output(0, n.in(0));
    return true;
  }
  if (op == "Cast") {
    Ints x = ints_of(n, 0, "the input");
    auto et = static_cast<int32_t>(n.attr_int("to", 0));
    std::optional<DType> to = dtype_from_onnx(et);
    if (!to || !is_integral(*to) || *to == DType::Bool)
      unsupported("a cast of symbolic sizes to {}", onnx_dtype_name(et));
    n.set_output(0, n.add_ints(x.v, x.scalar, *to));
    return true;
  }
  if (op == "Gather") {
    if (!n.symbolic(n.in(0))) return false;
    Ints data = ints_of(n, 0, "the data");
    if (data.scalar) n.error("data must have at least one dim");
    n.axis(n.attr_int("axis", 0), 1);  // 1-D: axis 0 (or -1)
    std::vector<int64_t> idx = n.const_ints(1, "the indices input");
    auto d = static_cast<int64_t>(data.v.size());
    std::vector<sym::Expr> out;
    for (int64_t i : idx) {
      if (i < -d || i >= d) n.error("index {} is out of range for a dim of size {}", i, d);
      out.push_back(data.v[static_cast<size_t>(i < 0 ? i + d : i)]);
    }
    int64_t idx_rank = n.rank(n.in(1));
    if (idx_rank > 1) unsupported("indices of rank {} into symbolic sizes", idx_rank);
    n.set_output(0, n.add_ints(out, idx_rank == 0, integer_dtype(n, n.in(0))));
    return true;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    Ints x = ints_of(n, 0, "the input");
    std::vector<int64_t> axes = axes_of(n);
    bool unsq = op == "Unsqueeze";
    // 0-D <-> [1]: the only reshapes a list of sizes takes.
    bool ok = unsq ? x.scalar && axes.size() == 1 && (axes[0] == 0 || axes[0] == -1)
                   : !x.scalar && x.v.size() == 1 &&
                         (axes.empty() || (axes.size() == 1 && (axes[0] == 0 || axes[0] == -1)));
    if (!ok) unsupported("{} of symbolic sizes to rank {}", op, unsq ? 2 : 0);
    n.set_output(0, n.add_ints(x.v, !unsq, integer_dtype(n, n.in(0))));
    return true;
  }
  if (op == "Shape") {
    // The shape of a list of sizes: its length (start and end as Shape's own, opset 15).
    Ints x = ints_of(n, 0, "the data");
    if (x.scalar) {
      n.attr_int("start", 0), n.attr_int("end", 0);
      n.set_output(0, n.add_ints({}, false, DType::I64));
      return true;
    }
    auto [b, e] = slice_bounds(n.attr_int("start", 0), n.attr_int("end", 1), 1, 1);
    n.set_output(
        0, n.add_ints(b < e ? std::vector<sym::Expr>{sym::Expr(static_cast<int64_t>(x.v.size()))}
                            : std::vector<sym::Expr>{},
                      false, DType::I64));
    return true;
  }
  if (op == "Reshape" && n.symbolic(n.in(0))) {
    // A list of sizes reshaped to 1-D ([-1] or [its length]; torch's exporter flattens a
    // concatenated shape so) or, with one element, to 0-D: the same sizes.
    Ints x = ints_of(n, 0, "the data");
    std::vector<int64_t> to = n.const_ints(1, "the shape input");
    if (n.opset() >= 14) n.attr_int("allowzero", 0);  // (read: no 0 in a 1-D target of a list)
    const auto len = static_cast<int64_t>(x.v.size());
    bool ok = (to.size() == 1 && (to[0] == -1 || to[0] == len)) || (to.empty() && len == 1);
    if (!ok)
      unsupported("a reshape of {} symbolic sizes to [{}]: only to 1-D or 0-D", len,
                  fmt::join(to, ", "));
    n.set_output(0, n.add_ints(x.v, to.empty(), integer_dtype(n, n.in(0))));
    return true;
  }
  if (op == "Concat") {
    int64_t axis = n.attr_int("axis", 0);
    if (axis != 0 && axis != -1) n.error("axis {} is out of range for rank 1", axis);
    std::vector<sym::Expr> out;
    for (int i = 0; i < n.num_inputs(); ++i) {
      Ints x = ints_of(n, i, "an input");
      if (x.scalar) n.error("input {} is 0-D", i);
      out.insert(out.end(), x.v.begin(), x.v.end());
    }
    n.set_output(0, n.add_ints(out, false, integer_dtype(n, n.in(0))));
    return true;
  }
  if (op == "Slice") {
    if (!n.symbolic(n.in(0))) return false;
    Ints x = ints_of(n, 0, "the data");
    std::vector<int64_t> starts, ends, axes, steps;
    if (n.opset() < 10) {
      starts = n.attr_ints("starts").value_or(starts);
      ends = n.attr_ints("ends").value_or(ends);
      axes = n.attr_ints("axes").value_or(axes);
    } else {
      starts = n.const_ints(1, "starts");
      ends = n.const_ints(2, "ends");
      if (n.has_input(3)) axes = n.const_ints(3, "axes");
      if (n.has_input(4)) steps = n.const_ints(4, "steps");
    }
    if (starts.size() != 1 || ends.size() != 1 || axes.size() > 1 || steps.size() > 1)
      n.error("a slice of a 1-D value takes one start, end, axis and step");
    if (!axes.empty()) n.axis(axes[0], 1);
    int64_t step = steps.empty() ? 1 : steps[0];
    if (step == 0) n.error("step is 0");
    auto [b, e] = slice_bounds(starts[0], ends[0], step, static_cast<int64_t>(x.v.size()));
    std::vector<sym::Expr> out;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
      out.push_back(x.v[static_cast<size_t>(i)]);
    n.set_output(0, n.add_ints(out, false, integer_dtype(n, n.in(0))));
    return true;
  }
  if (op == "Equal") {
    // torch's exporter fixes up an Expand target so: Where(Equal(shape, -1), 1, shape). A size
    // is never negative, so it differs from a negative constant; two equal expressions are
    // equal; anything else depends on the size and is refused.
    Ints a = ints_of(n, 0, "input 0"), b = ints_of(n, 1, "input 1");
    size_t len = std::max(a.v.size(), b.v.size());
    if ((a.v.size() != len && a.v.size() != 1) || (b.v.size() != len && b.v.size() != 1))
      n.error("inputs of {} and {} elements do not broadcast", a.v.size(), b.v.size());
    Tensor out = Tensor::zeros(DType::Bool, a.scalar && b.scalar
                                                ? std::vector<int64_t>{}
                                                : std::vector<int64_t>{static_cast<int64_t>(len)});
    for (size_t i = 0; i < len; ++i) {
      const sym::Expr& x = a.v[a.v.size() == 1 ? 0 : i];
      const sym::Expr& y = b.v[b.v.size() == 1 ? 0 : i];
      bool eq;
      if (x == y) {
        eq = true;
      } else if (x.is_const() && y.is_const()) {
        eq = false;
      } else if ((x.is_const() && x.const_value() < 0) || (y.is_const() && y.const_value() < 0)) {
        eq = false;
      } else {
        unsupported("a comparison of the sizes {} and {} (true at some sizes only)",
                    sym::to_string(x), sym::to_string(y));
      }
      static_cast<bool*>(out.data())[i] = eq;
    }
    n.set_output(0, n.add_constant(out));
    return true;
  }
  if (op == "Where") {
    // A constant condition choosing between lists of sizes (the fix-up above).
    const Tensor* cond = n.constant(n.in(0));
    if (!cond || n.rank(n.in(0)) > 1) return false;
    Ints a = ints_of(n, 1, "input 1"), b = ints_of(n, 2, "input 2");
    const auto c = static_cast<size_t>(cond->numel());
    size_t len = std::max({a.v.size(), b.v.size(), c});
    for (size_t m : {a.v.size(), b.v.size(), c})
      if (m != len && m != 1) n.error("inputs of {} elements do not broadcast to {}", m, len);
    DType t = integer_dtype(n, n.in(1));
    if (integer_dtype(n, n.in(2)) != t) n.error("inputs of two dtypes");
    std::vector<sym::Expr> out;
    for (size_t i = 0; i < len; ++i)
      out.push_back(static_cast<const bool*>(cond->data())[c == 1 ? 0 : i]
                        ? a.v[a.v.size() == 1 ? 0 : i]
                        : b.v[b.v.size() == 1 ? 0 : i]);
    n.set_output(0, n.add_ints(out, a.scalar && b.scalar && n.rank(n.in(0)) == 0, t));
    return true;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    // Opsets 1 to 6: on values of rank 0 or 1, the legacy broadcast (B lined up with A from
    // `axis`) is numpy's; a pair that broadcasts neither way is refused below.
    if (n.opset() < 7) n.ignore_attr("broadcast"), n.ignore_attr("axis");
    Ints a = ints_of(n, 0, "input 0"), b = ints_of(n, 1, "input 1");
    DType t = integer_dtype(n, n.in(0));
    if (integer_dtype(n, n.in(1)) != t) n.error("inputs of two dtypes");
    size_t len = std::max(a.v.size(), b.v.size());
    if ((a.v.size() != len && a.v.size() != 1) || (b.v.size() != len && b.v.size() != 1))
      n.error("inputs of {} and {} elements do not broadcast", a.v.size(), b.v.size());
    std::vector<sym::Expr> out;
    for (size_t i = 0; i < len; ++i)
      out.push_back(apply(op, a.v[a.v.size() == 1 ? 0 : i], b.v[b.v.size() == 1 ? 0 : i]));
    n.set_output(0, n.add_ints(out, a.scalar && b.scalar, t));
    return true;
  }
  return false;
}

bool accepts_symbolic(std::string_view op, int input) {
  return ((op == "Reshape" || op == "Expand") && input == 1) ||
         (op == "ConstantOfShape" && input == 0);
}

}  // namespace coil::onnxfe
