// The generator's shaped ops: views, concat, gather and index_add, reductions, composites, linear
// algebra, convolution and pooling, sources. Each builds its attributes from the operand's shape,
// and the type rule has the last word (an invalid attempt throws coil::Error).
#include <algorithm>

#include "fuzz/generator_internal.h"
#include "support/check.h"

namespace coil::fuzz {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

}  // namespace

int Generator::make_view(int a) {
  if (a < 0) a = pick([](int) { return true; });
  // Often a chain of views (reshape then transpose ...), which index remapping must compose.
  if (chance(0.4)) {
    try {
      int inner = make_view(a);
      if (inner >= 0 && pooled_[static_cast<size_t>(inner)]) a = inner;
    } catch (const Error&) {
      // The inner view was invalid: view `a` itself.
    }
  }
  const Shape& s = shape(a);
  const auto r = static_cast<int64_t>(s.size());
  // An axis of `a`, sometimes counted from the end.
  auto axis = [&](int64_t extra = 0) {
    int64_t d = uniform(0, r - 1 + extra);
    return chance(0.3) ? d - (r + extra) : d;
  };
  switch (weighted({20, 15, 15, 12, 15, 8, 10, 5})) {
    case 0: {  // reshape to a random factorization; a symbolic part becomes the -1
      int64_t rest = 1;
      bool symbolic = false;
      for (const sym::Expr& d : s) {
        if (auto c = d.as_const())
          rest *= *c;
        else
          symbolic = true;
      }
      if (rest == 0) return -1;
      std::vector<int64_t> target;
      for (int64_t k = uniform(0, 3); k > 0; --k) {
        std::vector<int64_t> ds = divisors(rest);
        int64_t f = ds[static_cast<size_t>(uniform(0, static_cast<int64_t>(ds.size()) - 1))];
        target.push_back(f);
        rest /= f;
      }
      target.push_back(rest);
      shuffle(target);
      if (symbolic) {
        target.insert(target.begin() + uniform(0, static_cast<int64_t>(target.size())), -1);
      } else if (chance(0.25)) {
        target[static_cast<size_t>(uniform(0, static_cast<int64_t>(target.size()) - 1))] = -1;
      }
      return add("reshape", {a}, Attrs{{"shape", target}});
    }
    case 1: {
      std::vector<int64_t> dims(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) dims[static_cast<size_t>(i)] = chance(0.2) ? i - r : i;
      shuffle(dims);
      return add("permute", {a}, Attrs{{"dims", dims}});
    }
    case 2: {
      Attrs attrs;
      if (r > 0 && chance(0.7)) {
        attrs.set("dim0", axis());
        attrs.set("dim1", axis());
      }
      return add("transpose", {a}, attrs);
    }
    case 3: {  // broadcast the 1s, sometimes under new leading dims
      std::vector<int64_t> target;
      if (chance(0.3))
        for (int64_t k = uniform(1, 2); k > 0; --k) target.push_back(uniform(1, 5));
      for (const sym::Expr& d : s) {
        if (d == sym::Expr(1) && chance(0.7))
          target.push_back(pick<int64_t>({2, 3, 5, 8, 17}));
        else if (auto c = d.as_const(); c && chance(0.5))
          target.push_back(*c);
        else
          target.push_back(-1);
      }
      return add("expand", {a}, Attrs{{"shape", target}});
    }
    case 4: {
      std::vector<int64_t> dims = static_dims(a);
      if (dims.empty()) return -1;
      int64_t d = dims[static_cast<size_t>(uniform(0, static_cast<int64_t>(dims.size()) - 1))];
      int64_t n = dim_value(a, d);
      Attrs attrs;
      attrs.set("dim", chance(0.3) ? d - r : d);
      if (n > 0 && chance(0.7))
        attrs.set("start", chance(0.3) ? -uniform(1, n) : uniform(0, n - 1));
      if (n > 0 && chance(0.7))
        attrs.set("end", pick<int64_t>({uniform(0, n), -uniform(1, n), n + 5}));
      if (chance(0.4)) attrs.set("step", uniform(2, 3));
      return add("slice", {a}, attrs);
    }
    case 5: {
      Attrs attrs;
      std::vector<int64_t> ones;
      for (int64_t i = 0; i < r; ++i)
        if (s[static_cast<size_t>(i)] == sym::Expr(1)) ones.push_back(i);
      if (!ones.empty() && chance(0.5))
        attrs.set("dims",
                  std::vector<int64_t>{ones[static_cast<size_t>(uniform(0, ssize(ones) - 1))] -
                                       (chance(0.3) ? r : 0)});
      return add("squeeze", {a}, attrs);
    }
    case 6:
      return add("unsqueeze", {a}, Attrs{{"dim", axis(1)}});
    default: {
      Attrs attrs;
      if (r > 0 && chance(0.7)) {
        int64_t start = uniform(0, r - 1);
        attrs.set("start_dim", start);
        attrs.set("end_dim", uniform(start, r - 1));
      }
      return add("flatten", {a}, attrs);
    }
  }
}

int Generator::make_concat() {
  int a = pick([&](int v) { return rank(v) > 0; });
  if (a < 0) return -1;
  int64_t r = rank(a);
  int64_t dim = uniform(0, r - 1);
  std::vector<int> parts{a};
  for (int64_t k = uniform(1, 2); k > 0; --k) {
    Shape s = shape(a);
    bool fresh = chance(0.7) && std::all_of(s.begin(), s.end(), input_dim);
    if (!fresh) {
      parts.push_back(a);
      continue;
    }
    s[static_cast<size_t>(dim)] = uniform(1, 9);
    parts.push_back(add_input(chance(0.7) ? dtype(a) : pick_dtype(), s));
  }
  shuffle(parts);
  return add("concat", parts, Attrs{{"dim", chance(0.3) ? dim - r : dim}});
}

int Generator::make_gather() {
  int data = pick([&](int v) { return !static_dims(v).empty(); });
  if (data < 0) return -1;
  std::vector<int64_t> dims = static_dims(data);
  int64_t axis = dims[static_cast<size_t>(uniform(0, ssize(dims) - 1))];
  int64_t n = dim_value(data, axis);
  if (n == 0) return -1;
  // Indices in range (the reference raises on others): clamped integers, or an arange.
  int idx;
  if (chance(0.6)) {
    std::vector<int64_t> ishape;
    for (int64_t k = uniform(0, 2); k > 0; --k) ishape.push_back(uniform(1, 8));
    idx = add_input(chance(0.5) ? DType::I64 : DType::I32, make_shape(ishape));
    idx = add("clamp", {idx}, Attrs{{"min", -n}, {"max", n - 1}});
  } else {
    int64_t step = pick<int64_t>({1, 1, 2, -1});
    int64_t size = std::min<int64_t>(uniform(1, 9), (n + std::abs(step) - 1) / std::abs(step));
    int64_t span = std::abs(step) * (size - 1);
    int64_t start = step > 0 ? uniform(-n, n - 1 - span) : uniform(-n + span, n - 1);
    idx = add("iota", {},
              Attrs{{"size", size},
                    {"start", start},
                    {"step", step},
                    {"dtype", chance(0.5) ? DType::I64 : DType::I32}});
  }
  Attrs attrs;
  if (axis != 0 || chance(0.5)) attrs.set("axis", axis);
  // index_add along the same dim, now and then: src a new input of data's shape with the
  // index's length there (duplicates likely; indices in range, as for gather).
  bool plain_dims = true;
  for (const sym::Expr& d : shape(data)) plain_dims = plain_dims && input_dim(d);
  if (dtype(data) != DType::Bool && rank(idx) == 1 && plain_dims && chance(0.3)) {
    Shape s = shape(data);
    s[static_cast<size_t>(axis)] = shape(idx)[0];
    int src = add_input(dtype(data), s);
    if (chance(0.3)) attrs.set("axis", axis - rank(data));
    return add("index_add", {data, idx, src}, attrs);
  }
  return add("gather", {data, idx}, attrs);
}

int Generator::make_reduction() {
  static const char* const kOps[] = {"sum",  "prod", "max",    "min",
                                     "mean", "var",  "argmax", "argmin"};
  std::string_view op = kOps[weighted({25, 8, 12, 10, 15, 12, 9, 9})];
  int a = pick([](int) { return true; });
  int64_t r = rank(a);
  Attrs attrs;
  if (chance(0.6)) attrs.set("keepdim", chance(0.7));
  if (op == "argmax" || op == "argmin") {
    if (r > 0 && chance(0.7)) attrs.set("axis", uniform(-r, r - 1));
    return add(op, {a}, attrs);
  }
  int64_t count = 1;
  if (r > 0 && chance(0.75)) {
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < r; ++i) {
      if (!chance(0.5)) continue;
      axes.push_back(chance(0.3) ? i - r : i);
      count *= dim_value(a, i);
    }
    if (axes.empty()) {
      axes.push_back(uniform(0, r - 1));
      count = dim_value(a, axes[0]);
    }
    shuffle(axes);
    attrs.set("axes", axes);
  } else {
    count = numel(shape(a));
  }
  if (op == "prod" && count > 24) op = "sum";  // long products overflow or vanish
  if (op == "var" && chance(0.4)) attrs.set("correction", pick<double>({0, 1, 2}));
  return add(op, {a}, attrs);
}

int Generator::make_composite() {
  size_t which = weighted({25, 20, 30, 25});
  if (which < 2) {
    int a = pick([](int) { return true; });
    Attrs attrs;
    if (rank(a) > 0 && chance(0.6)) attrs.set("axis", uniform(-rank(a), rank(a) - 1));
    return add(which == 0 ? "softmax" : "log_softmax", {a}, attrs);
  }
  int a = pick([&](int v) { return floating(v) && rank(v) > 0; });
  if (a < 0) return -1;
  int64_t dims = rank(a) >= 2 && chance(0.3) ? 2 : 1;
  Attrs attrs;
  if (dims > 1 || chance(0.3)) attrs.set("dims", dims);
  if (chance(0.7)) attrs.set("eps", pick<double>({1e-6, 1e-3, 0.1, 0.3, 0.7}));
  std::vector<int> in{a};
  Shape normalized(shape(a).end() - dims, shape(a).end());
  bool weights = std::all_of(normalized.begin(), normalized.end(), input_dim);
  int params = weights ? static_cast<int>(uniform(0, which == 2 ? 2 : 1)) : 0;
  for (int k = 0; k < params; ++k) in.push_back(add_input(dtype(a), normalized));
  return add(which == 2 ? "layer_norm" : "rms_norm", in, attrs);
}

int Generator::make_linalg() {
  size_t which = weighted({50, 15, 20, 15});
  int a = pick([&](int v) {
    bool ok = floating(v) && rank(v) >= (which == 0 ? 1 : 2) && rank(v) <= (which == 1 ? 3 : 4);
    return ok && input_dim(shape(v).back()) && dim_value(v, rank(v) - 1) <= 96;
  });
  if (a < 0 || (which == 1 && rank(a) != 3) || (which == 3 && rank(a) != 2)) {
    DType t = pick_float_dtype();
    std::vector<int64_t> dims{uniform(1, 40), uniform(1, 48)};
    if (which == 1) dims.insert(dims.begin(), uniform(1, 4));
    a = add_input(t, make_shape(dims));
  }
  const Shape& s = shape(a);
  DType t = dtype(a);
  sym::Expr k = s.back();
  int64_t n = chance(0.8) ? uniform(1, 48) : pick<int64_t>({64, 65, 100, 129});
  int64_t rows = numel(s) / std::max<int64_t>(1, sym::evaluate(k, sizes_));
  COIL_USER_CHECK(rows * n * sym::evaluate(k, sizes_) <= (int64_t{1} << 21), "fuzz: too big");
  if (which == 0) {  // matmul: b is [K], [K, N], [batch..., K, N], or a's transpose
    if (s.size() >= 2 && chance(0.15)) {
      int b = add("transpose", {a}, Attrs{{"dim0", int64_t{-2}}, {"dim1", int64_t{-1}}});
      return add("matmul", {a, b});
    }
    Shape b{k, sym::Expr(n)};
    if (chance(0.1)) b = {k};
    if (s.size() >= 3 && chance(0.5)) b.insert(b.begin(), s.begin(), s.end() - 2);
    int bi = add_input(t, b);
    return chance(0.1) && s.size() == 1 ? add("matmul", {bi, a}) : add("matmul", {a, bi});
  }
  if (which == 1) return add("bmm", {a, add_input(t, Shape{s[0], k, sym::Expr(n)})});
  if (which == 2) {
    std::vector<int> in{a, add_input(t, Shape{sym::Expr(n), k})};
    if (chance(0.5)) in.push_back(add_input(t, Shape{sym::Expr(n)}));
    return add("linear", in);
  }
  int b = add_input(t, Shape{k, sym::Expr(n)});
  Shape bias = pick<int>({0, 1, 2, 3, 4}) == 0 ? Shape{} : Shape{sym::Expr(n)};
  if (chance(0.3)) bias = input_dim(s[0]) ? Shape{s[0], sym::Expr(1)} : Shape{1, sym::Expr(n)};
  Attrs attrs;
  if (chance(0.3)) attrs.set("alpha", pick<double>({0.5, 2.0, -1.0}));
  if (chance(0.3)) attrs.set("beta", pick<double>({0.0, 0.5, 2.0}));
  return add("addmm", {add_input(t, bias), a, b}, attrs);
}

int Generator::make_conv_pool() {
  size_t which = weighted({40, 25, 25, 10});
  int x = pick([&](int v) {
    if (!floating(v) || rank(v) < 3 || rank(v) > 4) return false;
    if (which == 0 && (rank(v) != 4 || dtype(v) == DType::F64)) return false;  // oneDNN: no f64
    return dim_value(v, rank(v) - 1) <= 40 && dim_value(v, rank(v) - 2) <= 40;
  });
  if (x < 0) {
    std::vector<int64_t> dims{uniform(1, 2), uniform(1, 6), uniform(1, 20), uniform(1, 20)};
    if (which != 0 && chance(0.4)) dims.erase(dims.begin());
    DType t = pick_float_dtype();
    if (which == 0 && t == DType::F64) t = DType::F32;
    x = add_input(t, make_shape(dims));
  }
  if (which == 3) return add("global_avg_pool2d", {x});
  auto pair = [&](int64_t lo, int64_t hi) -> AttrValue {
    if (chance(0.3)) return uniform(lo, hi);
    return std::vector<int64_t>{uniform(lo, hi), uniform(lo, hi)};
  };
  Attrs attrs;
  if (which == 0) {
    if (!input_dim(shape(x)[1])) return -1;
    int64_t c = dim_value(x, 1);
    std::vector<int64_t> gs = divisors(c);
    // An empty channel dim (c = 0) has no divisors: one group.
    int64_t groups =
        chance(0.7) || gs.empty() ? 1 : gs[static_cast<size_t>(uniform(0, ssize(gs) - 1))];
    int64_t oc = groups * uniform(1, 4);
    Shape w{sym::Expr(oc), sym::Expr(c / groups), sym::Expr(uniform(1, 5)),
            sym::Expr(uniform(1, 5))};
    if (groups > 1) attrs.set("groups", groups);
    if (chance(0.4)) attrs.set("stride", pair(1, 3));
    if (chance(0.4)) attrs.set("padding", pair(0, 2));
    if (chance(0.2)) attrs.set("dilation", pair(1, 2));
    std::vector<int> in{x};
    auto weight_dims = static_sizes(w);
    in.push_back(chance(0.3) ? add_constant(dtype(x), *weight_dims) : add_input(dtype(x), w));
    if (chance(0.5)) in.push_back(add_input(dtype(x), Shape{sym::Expr(oc)}));
    return add("conv2d", in, attrs);
  }
  bool is_max = which == 1;
  std::vector<int64_t> kernel{uniform(1, 4), uniform(1, 4)};
  attrs.set("kernel", chance(0.3) ? AttrValue{kernel[0]} : AttrValue{kernel});
  if (chance(0.5)) attrs.set("stride", pair(1, 3));
  int64_t kmin = std::min(kernel[0], kernel[1]);
  if (chance(0.4)) attrs.set("padding", uniform(0, kmin / 2));
  if (is_max && chance(0.2)) attrs.set("dilation", pair(1, 2));
  if (chance(0.3)) attrs.set("ceil_mode", true);
  if (!is_max && chance(0.3)) attrs.set("count_include_pad", false);
  return add(is_max ? "max_pool2d" : "avg_pool2d", {x}, attrs);
}

int Generator::make_source() {
  if (chance(0.5)) {
    DType t = pick_dtype();
    std::vector<int64_t> dims;
    int other = pick([](int) { return true; });
    if (auto s = static_sizes(shape(other)); s && chance(0.7)) dims = *s;
    return add_full(t, pick_value_for(t), dims);
  }
  Attrs attrs{{"size", pick_size()}};
  if (chance(0.5)) attrs.set("start", uniform(-5, 5));
  if (chance(0.4)) attrs.set("step", pick<int64_t>({2, -1, 3}));
  if (chance(0.6)) attrs.set("dtype", pick_dtype());
  return add("iota", {}, attrs);
}

// attention and its backward ops: q [B, H, Tq, D] (a 4-D floating value of static sizes, or a
// new input), k and v inputs with Hkv dividing H (Tk may be 0), maybe a bool or additive mask
// of a broadcast shape, causal and scale; then attention itself, its logsumexp, or one of its
// gradients (out = attention(...), grad_out an input, lse = attention_lse(...)).
int Generator::make_attention() {
  int q = pick([&](int v) {
    if (!floating(v) || rank(v) != 4) return false;
    for (const sym::Expr& d : shape(v))
      if (!d.is_const()) return false;
    return dim_value(v, 3) <= 40 && dim_value(v, 2) <= 80 && numel(shape(v)) <= 8192;
  });
  if (q < 0)
    q = add_input(pick_float_dtype(),
                  Shape{sym::Expr(uniform(1, 2)), sym::Expr(pick<int64_t>({1, 2, 3, 4, 6})),
                        sym::Expr(chance(0.8) ? uniform(1, 40) : pick<int64_t>({64, 65, 80})),
                        sym::Expr(pick<int64_t>({1, 4, 8, 16, 24, 32}))});
  const DType t = dtype(q);
  const int64_t b = dim_value(q, 0), h = dim_value(q, 1), tq = dim_value(q, 2), d = dim_value(q, 3);
  std::vector<int64_t> hs = divisors(h);
  const int64_t hkv = hs.empty() ? h : hs[static_cast<size_t>(uniform(0, ssize(hs) - 1))];
  const int64_t tk = chance(0.05) ? 0 : chance(0.8) ? uniform(1, 50) : pick<int64_t>({64, 100});
  const int64_t dv = chance(0.5) ? d : uniform(1, 32);
  COIL_USER_CHECK(b * h * std::max<int64_t>(tq, 1) * std::max<int64_t>(tk, 1) * std::max(d, dv) <=
                      (int64_t{1} << 20),
                  "fuzz: too big");
  auto sz = [](std::vector<int64_t> dims) {
    Shape s;
    for (int64_t x : dims) s.push_back(sym::Expr(x));
    return s;
  };
  int k = add_input(t, sz({b, hkv, tk, d})), v = add_input(t, sz({b, hkv, tk, dv}));
  int mask = -1;
  if (chance(0.35)) {
    const std::vector<std::vector<int64_t>> shapes = {
        {tk}, {tq, tk}, {b, 1, tq, tk}, {1, h, tq, 1}, {b, h, tq, tk}};
    DType mt = weighted({50, 35, 15}) == 0 ? DType::Bool : chance(0.7) ? DType::F32 : t;
    mask = add_input(mt, sz(shapes[static_cast<size_t>(uniform(0, ssize(shapes) - 1))]));
  }
  Attrs attrs;
  if (chance(0.4)) attrs.set("causal", true);
  if (chance(0.2)) attrs.set("scale", pick<double>({0.3, 1.0}));
  auto with_mask = [&](std::vector<int> in) {
    if (mask >= 0) in.push_back(mask);
    return in;
  };
  const size_t which = weighted({50, 15, 35});
  if (which == 0) return add("attention", with_mask({q, k, v}), attrs);
  int lse = add("attention_lse", with_mask({q, k}), attrs);
  if (which == 1) return lse;
  int out = add("attention", with_mask({q, k, v}), attrs);
  int grad_out = add_input(t, sz({b, h, tq, dv}));
  Attrs grad_attrs = attrs;
  grad_attrs.set("wrt", std::string(pick<const char*>({"q", "k", "v"})));
  return add("attention_grad", with_mask({q, k, v, out, grad_out, lse}), grad_attrs);
}

}  // namespace coil::fuzz
