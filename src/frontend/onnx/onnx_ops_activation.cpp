// Activation functions that ONNX has and coil composes from elementwise ops. Constants take the
// input's dtype, so a 0-dim input keeps its type.
#include <cmath>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

struct Builder {
  OnnxNode& n;
  DType t;
  int c(double v) { return n.scalar(v, t); }
  int op(std::string_view name, std::vector<int> in) { return n.add(name, std::move(in)); }
  int mul(int a, int b) { return op("mul", {a, b}); }
  int add(int a, int b) { return op("add", {a, b}); }
  int sub(int a, int b) { return op("sub", {a, b}); }
  int where(int c, int a, int b) { return op("where", {c, a, b}); }
  int clamp01(int x) { return n.add("clamp", {x}, Attrs{{"min", 0.0}, {"max", 1.0}}); }
  // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
  int softplus(int x) {
    return add(op("relu", {x}), op("log1p", {op("exp", {op("neg", {op("abs", {x})})})}));
  }
  // Cephes' atan for doubles (within 1 ulp; checked against numpy over [-50, 50] and
  // 1e-300..1e300): |x| reduced to [0, 0.66] by atan(x) = pi/2 + atan(-1/x) above tan(3pi/8) and
  // pi/4 + atan((x - 1) / (x + 1)) above 0.66, then x + x z P(z) / Q(z), z = x^2. The builder's
  // dtype must be f64.
  int atan(int x) {
    constexpr double kTan3Pi8 = 2.41421356237309504880, kMoreBits = 6.123233995736765886130e-17;
    constexpr double kPi = 3.14159265358979323846;
    constexpr double P[] = {-8.750608600031904122785e-1, -1.615753718733365076637e1,
                            -7.500855792314704667340e1, -1.228866684490136173410e2,
                            -6.485021904942025371773e1};
    constexpr double Q[] = {2.485846490142306297962e1, 1.650270098316988542046e2,
                            4.328810604912902668951e2, 4.853903996359136964868e2,
                            1.945506571482613964425e2};
    int a = op("abs", {x});
    int big = op("gt", {a, c(kTan3Pi8)});
    int mid = op("logical_and", {op("gt", {a, c(0.66)}), op("logical_not", {big})});
    int r =
        where(big, op("div", {c(-1), a}), where(mid, op("div", {sub(a, c(1)), add(a, c(1))}), a));
    int z = mul(r, r);
    int p = c(P[0]), q = add(z, c(Q[0]));
    for (int i = 1; i < 5; ++i) p = add(mul(p, z), c(P[i])), q = add(mul(q, z), c(Q[i]));
    int poly = add(mul(r, op("div", {mul(z, p), q})), r);
    // Cephes adds the bits of pi/2 a double misses to the small term first.
    int base = where(big, c(kPi / 2), where(mid, c(kPi / 4), c(0)));
    int extra = where(big, c(kMoreBits), where(mid, c(kMoreBits / 2), c(0)));
    return mul(op("sign", {x}), add(base, add(poly, extra)));
  }
};

}  // namespace

void map_activation(OnnxNode& n) {
  int x = n.in(0);
  Builder b{n, n.dtype(x)};
  const std::string& op = n.op_type();
  auto alpha = [&](double d) { return n.attr_float("alpha", d); };
  int y;
  if (op == "HardSigmoid") {  // max(0, min(1, alpha * x + beta))
    y = b.clamp01(b.add(b.mul(x, b.c(alpha(0.2))), b.c(n.attr_float("beta", 0.5))));
  } else if (op == "HardSwish") {  // x * HardSigmoid(x) with alpha 1/6, beta 0.5
    y = b.mul(x, b.clamp01(b.add(b.mul(x, b.c(1.0 / 6)), b.c(0.5))));
  } else if (op == "LeakyRelu") {
    y = b.where(b.op("lt", {x, b.c(0)}), b.mul(x, b.c(alpha(0.01))), x);
  } else if (op == "Elu") {  // x < 0 ? alpha * (e^x - 1) : x
    y = b.where(b.op("lt", {x, b.c(0)}), b.mul(b.c(alpha(1.0)), b.op("expm1", {x})), x);
  } else if (op == "Selu") {  // gamma * (x > 0 ? x : alpha * (e^x - 1))
    // Selu-1's defaults were these constants rounded (1.6732, 1.0507).
    bool v1 = n.opset() < 6;
    double a = alpha(v1 ? 1.6732000112533569 : 1.67326319217681884765625),
           g = n.attr_float("gamma", v1 ? 1.0507000684738159 : 1.05070102214813232421875);
    int neg = b.mul(b.c(a), b.op("expm1", {x}));
    y = b.mul(b.c(g), b.where(b.op("gt", {x, b.c(0)}), x, neg));
  } else if (op == "Celu") {  // max(0, x) + min(0, alpha * (e^(x / alpha) - 1))
    double a = alpha(1.0);
    int e = b.mul(b.c(a), b.op("expm1", {b.op("div", {x, b.c(a)})}));
    y = b.add(b.op("relu", {x}), b.op("minimum", {b.c(0), e}));
  } else if (op == "Softplus") {
    y = b.softplus(x);
  } else if (op == "Softsign") {  // x / (1 + |x|)
    y = b.op("div", {x, b.add(b.c(1), b.op("abs", {x}))});
  } else if (op == "ThresholdedRelu") {  // x > alpha ? x : 0
    y = b.where(b.op("gt", {x, b.c(alpha(1.0))}), x, b.c(0));
  } else if (op == "Shrink") {  // x < -l ? x + bias : x > l ? x - bias : 0
    double l = n.attr_float("lambd", 0.5), bias = n.attr_float("bias", 0.0);
    y = b.where(b.op("lt", {x, b.c(-l)}), b.add(x, b.c(bias)),
                b.where(b.op("gt", {x, b.c(l)}), b.sub(x, b.c(bias)), b.c(0)));
  } else if (op == "Mish") {  // x * tanh(softplus(x))
    y = b.mul(x, b.op("tanh", {b.softplus(x)}));
  } else if (op == "Sinh" || op == "Cosh") {  // (e^x -+ e^-x) / 2
    int ep = b.op("exp", {x}), en = b.op("exp", {b.op("neg", {x})});
    y = b.mul(b.op(op == "Sinh" ? "sub" : "add", {ep, en}), b.c(0.5));
  } else if (op == "Tan") {
    y = b.op("div", {b.op("sin", {x}), b.op("cos", {x})});
  } else if (op == "Asinh" || op == "Acosh") {
    // asinh |x| = log1p(|x| + x^2 / (1 + sqrt(x^2 + 1))) (no cancellation near 0), acosh x =
    // log1p(t + sqrt(t (x + 1))), t = x - 1 (none near 1); beyond 1e8 both are log(2 |x|) to
    // double precision, and x^2 would overflow.
    bool sinh = op == "Asinh";
    int a = sinh ? b.op("abs", {x}) : x;
    int small;
    if (sinh) {
      int sq = b.mul(a, a);
      int frac = b.op("div", {sq, b.add(b.c(1), b.op("sqrt", {b.add(sq, b.c(1))}))});
      small = b.op("log1p", {b.add(a, frac)});
    } else {
      int t = b.sub(x, b.c(1));
      small = b.op("log1p", {b.add(t, b.op("sqrt", {b.mul(t, b.add(x, b.c(1)))}))});
    }
    int large = b.add(b.op("log", {a}), b.c(std::log(2.0)));
    y = b.where(b.op("gt", {a, b.c(1e8)}), large, small);
    if (sinh) y = b.mul(b.op("sign", {x}), y);
  } else if (op == "Atan" || op == "Asin" || op == "Acos") {
    // In f64 (Cephes' atan), cast back: asin x = atan(x / sqrt((1 - x)(1 + x))), acos x =
    // 2 atan(sqrt((1 - x) / (1 + x))); +-1 give +-inf inside, outside [-1, 1] a NaN.
    if (!is_floating(b.t)) n.error("the input must be floating point, got {}", dtype_name(b.t));
    Builder d{n, DType::F64};
    int v = n.cast(x, DType::F64);
    int one = d.c(1);
    if (op == "Asin")
      v = d.atan(d.op("div", {v, d.op("sqrt", {d.mul(d.sub(one, v), d.add(one, v))})}));
    else if (op == "Acos")
      v = d.mul(d.c(2), d.atan(d.op("sqrt", {d.op("div", {d.sub(one, v), d.add(one, v)})})));
    else
      v = d.atan(v);
    y = n.cast(v, b.t);
  } else if (op == "Atanh") {  // log1p(2x / (1 - x)) / 2: inf at 1, NaN beyond
    int r = b.op("div", {b.mul(b.c(2), x), b.sub(b.c(1), x)});
    y = b.mul(b.op("log1p", {r}), b.c(0.5));
  } else {
    COIL_UNREACHABLE("map_activation: {}", op);
  }
  n.set_output(0, y);
}

void map_prelu(OnnxNode& n) {
  int x = n.in(0), slope = n.in(1);
  // Opsets 1 to 6 (before numpy broadcasting): a slope of one element is shared, a 1-D slope of
  // C elements is per channel (dim 1 of x), as the exporters of the time (Caffe2, PyTorch) meant.
  if (n.opset() < 7) {
    const Shape& sx = n.type(x).shape;
    const Shape& ss = n.type(slope).shape;
    if (ss.size() == 1 && sx.size() >= 2 && ss[0] == sx[1] && ss[0] != sym::Expr(1)) {
      for (size_t i = 2; i < sx.size(); ++i)
        slope = n.add("unsqueeze", {slope}, Attrs{{"dim", int64_t{-1}}});
    } else if (ss != sx && shape_numel(static_sizes(ss).value_or(std::vector<int64_t>{0})) != 1) {
      n.error("slope {} is neither one element, per channel nor x's shape {}", shape_str(ss),
              shape_str(sx));
    }
  }
  int zero = n.scalar(0, n.dtype(x));
  n.set_output(0, n.add("where", {n.add("lt", {x, zero}), n.add("mul", {x, slope}), x}));
}

}  // namespace coil::onnxfe
