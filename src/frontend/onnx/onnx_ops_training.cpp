// The optimizers of the ai.onnx.preview.training domain (version 1): Adagrad, Adam, Momentum.
// Each updates n tensors at once: inputs R (learning rate, scalar), T (step count, int64
// scalar), then the n tensors X, their n gradients G and the n accumulated states (Adagrad: H;
// Momentum: V; Adam: V, H); outputs the n new X, then the new states in the same order. The
// update rules are ONNX's (onnx/defs/training/defs.cc, the formulas of its backend test cases),
// pointwise per tensor in the tensors' dtype; the scalar step factors that depend on T (Adagrad's
// decayed rate, Adam's bias correction, Momentum's beta at T = 0) are computed in f64 and cast
// once.
#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

struct Groups {
  int count = 0;  // n: tensors updated
  int r = -1, t = -1;
  // in(g, i): input tensor i of group g (0: X, 1: G, 2...: states)
  OnnxNode* node = nullptr;
  int in(int g, int i) const { return node->in(2 + g * count + i); }
};

// Checks the inputs and outputs of an optimizer with `groups` groups (X, G and the states) and
// `out_groups` output groups; R and T scalars, every tensor of one index the same shape and
// floating dtype.
Groups read_groups(OnnxNode& n, int groups, int out_groups) {
  int tensors = n.num_inputs() - 2;
  if (tensors <= 0 || tensors % groups != 0)
    n.error("{} inputs: expected R, T and {} groups of equally many tensors ({} + {} n)",
            n.num_inputs(), groups, 2, groups);
  Groups gr;
  gr.node = &n;
  gr.count = tensors / groups;
  if (n.num_outputs() != out_groups * gr.count)
    n.error("{} outputs for {} updated tensors: expected {}", n.num_outputs(), gr.count,
            out_groups * gr.count);
  gr.r = n.in(0);
  gr.t = n.in(1);
  if (n.rank(gr.r) != 0 || !is_floating(n.dtype(gr.r)))
    n.error("R must be a floating-point scalar, got {} of rank {}", dtype_name(n.dtype(gr.r)),
            n.rank(gr.r));
  if (n.rank(gr.t) != 0 || n.dtype(gr.t) != DType::I64)
    n.error("T must be an int64 scalar, got {} of rank {}", dtype_name(n.dtype(gr.t)),
            n.rank(gr.t));
  for (int i = 0; i < gr.count; ++i) {
    const TensorType& x = n.type(gr.in(0, i));
    if (!is_floating(x.dtype))
      n.error("X{} has dtype {}, not floating point", i + 1, dtype_name(x.dtype));
    for (int g = 1; g < groups; ++g) {
      const TensorType& o = n.type(gr.in(g, i));
      if (o.dtype != x.dtype || o.shape != x.shape)
        n.error("input {} ({} {}) does not match X{} ({} {})", 2 + g * gr.count + i,
                dtype_name(o.dtype), shape_str(o.shape), i + 1, dtype_name(x.dtype),
                shape_str(x.shape));
    }
  }
  return gr;
}

struct Math {
  OnnxNode& n;
  DType t;
  int c(double v) const { return n.scalar(v, t); }
  int add(int a, int b) const { return n.add("add", {a, b}); }
  int sub(int a, int b) const { return n.add("sub", {a, b}); }
  int mul(int a, int b) const { return n.add("mul", {a, b}); }
  int div(int a, int b) const { return n.add("div", {a, b}); }
  int sqrt(int a) const { return n.add("sqrt", {a}); }
};

// norm_coefficient * x + g
int regularized(const Math& m, int x, int g, double norm) {
  return norm == 0 ? g : m.add(m.mul(m.c(norm), x), g);
}

}  // namespace

void map_adagrad(OnnxNode& n) {
  double decay = n.attr_float("decay_factor", 0.0);
  double eps = n.attr_float("epsilon", static_cast<double>(1e-6f));
  double norm = n.attr_float("norm_coefficient", 0.0);
  Groups gr = read_groups(n, 3, 2);
  // r = R / (1 + T * decay_factor), in f64
  Math d{n, DType::F64};
  int rate =
      d.div(n.cast(gr.r, DType::F64), d.add(d.c(1), d.mul(n.cast(gr.t, DType::F64), d.c(decay))));
  for (int i = 0; i < gr.count; ++i) {
    int x = gr.in(0, i);
    Math m{n, n.dtype(x)};
    int g = regularized(m, x, gr.in(1, i), norm);
    int h = m.add(gr.in(2, i), m.mul(g, g));
    int step = m.div(m.mul(n.cast(rate, m.t), g), m.add(m.sqrt(h), m.c(eps)));
    n.set_output(i, m.sub(x, step));
    n.set_output(gr.count + i, h);
  }
}

void map_adam(OnnxNode& n) {
  double alpha = n.attr_float("alpha", static_cast<double>(0.9f));
  double beta = n.attr_float("beta", static_cast<double>(0.999f));
  double eps = n.attr_float("epsilon", static_cast<double>(1e-6f));
  double norm = n.attr_float("norm_coefficient", 0.0);
  double post = n.attr_float("norm_coefficient_post", 0.0);
  Groups gr = read_groups(n, 4, 3);
  // T > 0: R * sqrt(1 - beta^T) / (1 - alpha^T) (bias correction); else R. In f64.
  Math d{n, DType::F64};
  int t = n.cast(gr.t, DType::F64), r = n.cast(gr.r, DType::F64);
  int corrected = d.div(d.mul(r, d.sqrt(d.sub(d.c(1), n.add("pow", {d.c(beta), t})))),
                        d.sub(d.c(1), n.add("pow", {d.c(alpha), t})));
  int rate = n.add("where", {n.add("gt", {gr.t, n.scalar(0, DType::I64)}), corrected, r});
  for (int i = 0; i < gr.count; ++i) {
    int x = gr.in(0, i);
    Math m{n, n.dtype(x)};
    int g = regularized(m, x, gr.in(1, i), norm);
    int v = m.add(m.mul(m.c(alpha), gr.in(2, i)), m.mul(m.c(1 - alpha), g));
    int h = m.add(m.mul(m.c(beta), gr.in(3, i)), m.mul(m.c(1 - beta), m.mul(g, g)));
    int xn = m.sub(x, m.mul(n.cast(rate, m.t), m.div(v, m.add(m.sqrt(h), m.c(eps)))));
    if (post != 0) xn = m.mul(m.c(1 - post), xn);
    n.set_output(i, xn);
    n.set_output(gr.count + i, v);
    n.set_output(2 * gr.count + i, h);
  }
}

void map_momentum(OnnxNode& n) {
  // All four attributes are required by the schema.
  for (const char* a : {"alpha", "beta", "mode", "norm_coefficient"})
    if (!n.has_attr(a)) n.error("attribute '{}' is required", a);
  double alpha = n.attr_float("alpha", 0), beta = n.attr_float("beta", 0);
  double norm = n.attr_float("norm_coefficient", 0);
  std::string mode = n.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov")
    n.error("mode '{}' is not 'standard' or 'nesterov'", printable(mode));
  Groups gr = read_groups(n, 3, 2);
  // beta at T > 0, else 1 (the first step takes the whole gradient)
  int b = n.add("where", {n.add("gt", {gr.t, n.scalar(0, DType::I64)}), n.scalar(beta, DType::F64),
                          n.scalar(1, DType::F64)});
  for (int i = 0; i < gr.count; ++i) {
    int x = gr.in(0, i);
    Math m{n, n.dtype(x)};
    int g = regularized(m, x, gr.in(1, i), norm);
    int v = m.add(m.mul(m.c(alpha), gr.in(2, i)), m.mul(n.cast(b, m.t), g));
    int r = n.cast(gr.r, m.t);
    int step = mode == "standard" ? v : m.add(g, m.mul(m.c(alpha), v));
    n.set_output(i, m.sub(x, m.mul(r, step)));
    n.set_output(gr.count + i, v);
  }
}

}  // namespace coil::onnxfe
