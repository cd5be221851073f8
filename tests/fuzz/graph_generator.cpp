#include "fuzz/graph_generator.h"

#include "fuzz/generator_internal.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "graph/type_rules.h"
#include "runtime/compare.h"
#include "support/check.h"

namespace coil::fuzz {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const char* const kUnary[] = {"abs",  "neg",   "exp",        "log",         "log1p",   "expm1",
                              "sqrt", "rsqrt", "reciprocal", "relu",        "sigmoid", "tanh",
                              "erf",  "gelu",  "silu",       "sin",         "cos",     "floor",
                              "ceil", "round", "sign",       "logical_not", "isnan"};
const char* const kBinary[] = {"add",     "sub",  "mul",         "div",       "pow", "maximum",
                               "minimum", "fmod", "eq",          "ne",        "lt",  "le",
                               "gt",      "ge",   "logical_and", "logical_or"};
const char* const kCompare[] = {"eq", "ne", "lt", "le", "gt", "ge"};
const DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32,
                            DType::I64, DType::I8,  DType::U8,  DType::Bool};

bool is_comparison(std::string_view op) {
  for (const char* c : kCompare)
    if (op == c) return true;
  return op == "logical_and" || op == "logical_or" || op == "logical_not" || op == "isnan";
}

// Ops whose result jumps when an input moves by a rounding.
bool is_discontinuous(std::string_view op) {
  return is_comparison(op) || op == "floor" || op == "ceil" || op == "round" || op == "sign" ||
         op == "fmod" || op == "pow" || op == "argmax" || op == "argmin";
}

bool is_view(std::string_view op) {
  return op == "reshape" || op == "permute" || op == "transpose" || op == "expand" ||
         op == "slice" || op == "squeeze" || op == "unsqueeze" || op == "flatten";
}

// Ops that never round: on an f16/bf16 result they give the reference's value exactly, as long
// as their value operands have the result's dtype.
bool is_exact(std::string_view op) {
  return is_view(op) || op == "abs" || op == "neg" || op == "relu" || op == "maximum" ||
         op == "minimum" || op == "where" || op == "clamp" || op == "max" || op == "min" ||
         op == "max_pool2d" || op == "floor" || op == "ceil" || op == "round" || op == "sign" ||
         op == "concat" || op == "gather" || op == "iota";
}

bool representable(DType t, double v) {
  Tensor x = Tensor::empty(t, {1});
  x.set_from_double(0, v);
  return x.item_as_double(0) == v || (std::isnan(v) && std::isnan(x.item_as_double(0)));
}

double mul_mag(double a, double b) {
  return a == 0 || b == 0 ? 0 : a * b;
}

}  // namespace

DType Generator::pick_dtype() {
  return kAllDTypes[weighted({34, 10, 11, 11, 8, 8, 4, 4, 10})];
}

DType Generator::pick_float_dtype() {
  return kAllDTypes[weighted({55, 15, 15, 15})];
}

int64_t Generator::pick_size() {
  switch (weighted({22, 33, 25, 12, 8})) {
    case 0:
      return 1;
    case 1:
      return uniform(2, 8);
    case 2:
      return pick<int64_t>({9, 11, 13, 15, 16, 17, 23, 31, 32, 33, 37, 47, 63, 64, 65});
    case 3:
      return uniform(2, 40);
    default:
      return pick<int64_t>({100, 127, 128, 129, 255, 256, 257, 300});
  }
}

Shape Generator::pick_shape() {
  auto r = static_cast<size_t>(weighted({5, 20, 35, 25, 15}));
  std::vector<int64_t> dims(r);
  for (int64_t& d : dims) d = pick_size();
  Shape s = make_shape(dims);
  if (!sizes_.empty() && r > 0 && chance(0.5))
    s[static_cast<size_t>(uniform(0, static_cast<int64_t>(r) - 1))] = sym::make_symbol("s0");
  while (numel(s) > cap_) {  // halve the largest constant dim
    size_t big = 0;
    for (size_t i = 0; i < r; ++i)
      if (s[i].is_const() && (!s[big].is_const() || *s[i].as_const() > *s[big].as_const())) big = i;
    if (!s[big].is_const() || *s[big].as_const() <= 1) break;
    s[big] = std::max<int64_t>(1, *s[big].as_const() / uniform(2, 4));
  }
  return s;
}

// A shape that broadcasts with `s`: some leading dims dropped, some dims 1.
Shape Generator::partner_shape(const Shape& s) {
  size_t drop = chance(0.3) ? static_cast<size_t>(uniform(0, static_cast<int64_t>(s.size()))) : 0;
  Shape out;
  for (size_t i = drop; i < s.size(); ++i)
    out.push_back(!input_dim(s[i]) || chance(0.3) ? sym::Expr(1) : s[i]);
  return out;
}

double Generator::pick_value_for(DType t) {
  if (t == DType::Bool) return static_cast<double>(uniform(0, 1));
  if (!is_floating(t)) return pick<double>({0, 1, -1, 2, 3, -3, 7});
  if (chance(0.03)) return pick<double>({kInf, -kInf, std::nan("")});
  return pick<double>({0, 1, -1, 0.5, 2, 3, -0.25, 0.001, 0.1, 10, 100, 1e-5});
}

int Generator::record(int id, Facts f) {
  facts_.resize(static_cast<size_t>(g_.num_nodes()));
  pooled_.resize(static_cast<size_t>(g_.num_nodes()), false);
  facts_[static_cast<size_t>(id)] = f;
  const TensorType& t = node(id).type;
  bool ok = numel(t.shape) <= cap_;
  // i32/i64 overflow is undefined in C++ (i8/u8 arithmetic wraps on the store, like torch).
  if (t.dtype == DType::I32) ok = ok && f.mag < 0x1p31;
  if (t.dtype == DType::I64) ok = ok && f.mag < 0x1p62;
  if (ok) {
    pooled_[static_cast<size_t>(id)] = true;
    pool_.push_back(id);
  }
  return id;
}

int Generator::add_input(DType t, Shape s) {
  Facts f;
  f.mag = t == DType::Bool ? 1 : t == DType::U8 ? 9 : is_floating(t) ? 2 : 5;
  f.nonneg = t == DType::Bool || t == DType::U8;
  return record(g_.add_input(fmt::format("in{}", inputs_++), t, std::move(s)), f);
}

int Generator::add_full(DType t, double value, std::vector<int64_t> dims) {
  return add("full", {}, Attrs{{"shape", dims}, {"value", value}, {"dtype", t}});
}

int Generator::add_constant(DType t, const std::vector<int64_t>& dims) {
  Facts f;
  f.mag = t == DType::Bool ? 1 : t == DType::U8 ? 9 : is_floating(t) ? 2 : 5;
  f.nonneg = t == DType::Bool || t == DType::U8;
  return record(g_.add_constant(random_tensor(t, dims, rng_())), f);
}

int Generator::add(std::string_view op, std::vector<int> in, Attrs attrs) {
  // Keep discontinuous ops and float-to-integer casts to values both sides compute alike.
  bool to_int = op == "cast" && !is_floating(attrs.get_dtype(op, "dtype"));
  if (is_discontinuous(op) || to_int) {
    for (int v : in)
      COIL_USER_CHECK(!facts_[static_cast<size_t>(v)].lp_taint, "fuzz: rounding-sensitive");
  }
  if (to_int && floating(in[0])) {
    const Facts& f = facts_[static_cast<size_t>(in[0])];
    DType t = attrs.get_dtype(op, "dtype");
    double limit = t == DType::I8 ? 127 : t == DType::U8 ? 255 : t == DType::I32 ? 0x1p31 : 0x1p62;
    COIL_USER_CHECK(!f.nan && (t == DType::Bool || f.mag < limit) && (t != DType::U8 || f.nonneg),
                    "fuzz: cast out of range");
  }
  int id = g_.add_node(op, std::move(in), std::move(attrs));
  return record(id, derive(node(id)));
}

Facts Generator::derive(const Node& n) const {
  std::string_view op = n.op_name();
  const DType t = n.type.dtype;
  std::vector<const Facts*> in;
  for (int i : n.inputs) in.push_back(&facts_[static_cast<size_t>(i)]);
  auto a = [&](size_t k) -> const Facts& { return *in[k]; };
  Facts f;
  f.mag = kInf;
  for (const Facts* x : in) {
    f.nan = f.nan || x->nan;
    f.lp_taint = f.lp_taint || x->lp_taint;
  }
  double mag_all = 0;
  bool nonneg_all = true;
  for (const Facts* x : in) {
    mag_all = std::max(mag_all, x->mag);
    nonneg_all = nonneg_all && x->nonneg;
  }
  const Attrs& at = n.attrs;
  int64_t in_numel = in.empty() ? 1 : numel(node(n.inputs[0]).type.shape);
  int64_t count = in_numel / std::max<int64_t>(1, numel(n.type.shape));
  if (op == "full") {
    double v = at.get_float(op, "value");
    f.mag = std::fabs(v);
    f.nan = std::isnan(v);
    f.nonneg = v >= 0;
  } else if (op == "iota") {
    double start = static_cast<double>(at.get_int_or(op, "start", 0));
    double step = static_cast<double>(at.get_int_or(op, "step", 1));
    double last = start + step * static_cast<double>(at.get_int(op, "size") - 1);
    f.mag = std::max(std::fabs(start), std::fabs(last));
    f.nonneg = start >= 0 && last >= 0;
  } else if (op == "abs" || op == "relu") {
    f.mag = a(0).mag;
    f.nonneg = true;
  } else if (op == "neg") {
    f.mag = a(0).mag;
  } else if (op == "gelu" || op == "silu") {
    f.mag = a(0).mag + 1;
  } else if (op == "exp" || op == "expm1") {
    f.mag = a(0).mag > 700 ? kInf : std::exp(a(0).mag);
    f.nonneg = op == "exp";
  } else if (op == "sigmoid" || op == "softmax") {
    f.mag = 1;
    f.nonneg = true;
  } else if (op == "tanh" || op == "erf" || op == "sin" || op == "cos" || op == "sign") {
    f.mag = 1;
  } else if (op == "floor" || op == "ceil" || op == "round") {
    f.mag = a(0).mag + 1;
    f.nonneg = a(0).nonneg;
  } else if (op == "sqrt" && a(0).nonneg) {
    f.mag = std::sqrt(a(0).mag);
    f.nonneg = true;
  } else if (op == "cast") {
    f.mag = a(0).mag;
    f.nonneg = a(0).nonneg;
  } else if (op == "clamp") {
    bool lo = at.has("min"), hi = at.has("max");
    double l = lo ? at.get_float(op, "min") : 0, h = hi ? at.get_float(op, "max") : 0;
    f.mag =
        lo && hi ? std::max(std::fabs(l), std::fabs(h)) : std::max(a(0).mag, std::fabs(lo ? l : h));
    f.nonneg = lo && l >= 0 && (!hi || h >= 0);
  } else if (op == "add" || op == "sub") {
    f.mag = a(0).mag + a(1).mag;
    f.nonneg = op == "add" && nonneg_all;
  } else if (op == "mul") {
    f.mag = mul_mag(a(0).mag, a(1).mag);
    f.nonneg = nonneg_all;
  } else if (op == "maximum" || op == "minimum" || op == "concat" || is_view(op) || op == "max" ||
             op == "min" || op == "mean" || op == "max_pool2d" || op == "avg_pool2d" ||
             op == "global_avg_pool2d") {
    f.mag = mag_all;
    f.nonneg = nonneg_all || (op == "maximum" && (a(0).nonneg || a(1).nonneg));
  } else if (op == "where") {
    f.mag = std::max(a(1).mag, a(2).mag);
    f.nonneg = a(1).nonneg && a(2).nonneg;
    f.nan = a(1).nan || a(2).nan;
  } else if (op == "gather") {
    f = a(0);
  } else if (op == "index_add") {
    const double k = static_cast<double>(sym::evaluate(node(n.inputs[1]).type.shape[0], sizes_));
    f.mag = a(0).mag + mul_mag(a(2).mag, k);
    f.nonneg = a(0).nonneg && a(2).nonneg;
    f.nan = a(0).nan || a(2).nan;
  } else if (op == "sum") {
    f.mag = mul_mag(a(0).mag, static_cast<double>(count));
    f.nonneg = a(0).nonneg;
  } else if (op == "prod") {
    f.mag = std::pow(a(0).mag, static_cast<double>(count));
    f.nonneg = a(0).nonneg;
  } else if (op == "argmax" || op == "argmin") {
    f.mag = static_cast<double>(in_numel);
    f.nonneg = true;
    f.nan = false;
  } else if (op == "matmul" || op == "bmm" || op == "linear") {
    const Shape& s = node(n.inputs[0]).type.shape;
    double k = static_cast<double>(sym::evaluate(s.back(), sizes_));
    f.mag = mul_mag(mul_mag(a(0).mag, a(1).mag), k) + (in.size() > 2 ? a(2).mag : 0);
  }
  // A mean over no element is 0/0; a variance over no more elements than its correction too.
  if ((op == "mean" || op == "global_avg_pool2d" || op == "avg_pool2d" || op == "var" ||
       op == "layer_norm" || op == "rms_norm" || op == "softmax" || op == "log_softmax") &&
      in_numel == 0)
    f.nan = true;
  if (op == "var" && static_cast<double>(count) <= at.get_float_or(op, "correction", 1))
    f.nan = true;
  if (is_comparison(op) || t == DType::Bool) {
    f.mag = 1;
    f.nonneg = true;
    f.nan = false;
  }
  if (!is_floating(t)) f.nan = false;
  if (is_floating(t) && !std::isfinite(f.mag)) f.nan = true;
  if (is_low_precision(t)) {
    bool exact = is_exact(op) || op == "full" || op == "cast";
    for (size_t k = op == "where" ? 1 : 0; k < n.inputs.size(); ++k)
      if ((op != "gather" && op != "index_add") || k != 1)
        exact = exact && node(n.inputs[k]).type.dtype == t;
    if (op == "full") exact = representable(t, at.get_float(op, "value"));
    if (op == "clamp")
      for (const char* b : {"min", "max"})
        if (at.has(b)) exact = exact && representable(t, at.get_float(op, b));
    if (op == "iota") exact = representable(t, f.mag);
    f.lp_taint = f.lp_taint || !exact;
  }
  return f;
}

// A pooled value satisfying `ok`, usually one of the newest (so that chains form), else any
// (so that branches and dead nodes form); -1 when there is none.
int Generator::pick(const std::function<bool(int)>& ok) {
  std::vector<int> all, computed;
  for (int v : pool_) {
    if (!ok(v)) continue;
    all.push_back(v);
    std::string_view op = node(v).op_name();
    if (op != "input" && op != "constant" && op != "full" && op != "iota") computed.push_back(v);
  }
  if (all.empty()) return -1;
  if (!computed.empty() && chance(0.65))
    return computed[static_cast<size_t>(
        uniform(std::max<int64_t>(0, ssize(computed) - 3), ssize(computed) - 1))];
  return all[static_cast<size_t>(uniform(0, ssize(all) - 1))];
}

// A computed value that `a` was computed from (one or two nodes up), or -1: combining a value
// with its own ancestor (x - sum(x), x * sigmoid(x), gt(sign(x), x)) makes a value read twice,
// which is what fusion and realization decisions turn on.
int Generator::ancestor(int a) {
  std::vector<int> up;
  for (int i : node(a).inputs) {
    up.push_back(i);
    for (int j : node(i).inputs) up.push_back(j);
  }
  std::vector<int> ok;
  for (int v : up)
    if (pooled_[static_cast<size_t>(v)] && node(v).op_name() != "full") ok.push_back(v);
  return ok.empty() ? -1 : ok[static_cast<size_t>(uniform(0, ssize(ok) - 1))];
}

// A second operand that broadcasts with `a`.
int Generator::partner(int a) {
  DType t = chance(0.6) ? dtype(a) : pick_dtype();
  switch (weighted({25, 20, 30, 15, 10, 10})) {
    case 0:
      if (int b = ancestor(a); b >= 0) return b;
      [[fallthrough]];
    case 1: {
      int b = pick([&](int v) {
        try {
          broadcast_shapes("fuzz", shape(a), shape(v));
          return true;
        } catch (const Error&) {
          return false;
        }
      });
      if (b >= 0) return b;
      [[fallthrough]];
    }
    case 2:
      return add_input(t, partner_shape(shape(a)));
    case 3:
      return add_full(t, pick_value_for(t));
    case 4:
      return a;
    default: {
      auto dims = static_sizes(partner_shape(shape(a)));
      if (!dims || shape_numel(*dims) > 64) return add_full(t, pick_value_for(t));
      return add_constant(t, *dims);
    }
  }
}

int Generator::make_unary() {
  std::string_view op = kUnary[uniform(0, std::size(kUnary) - 1)];
  int a = pick([](int) { return true; });
  // sin/cos turn one rounding of a large input into another result: fused f16/bf16 code rounds
  // where it stores, the reference after every node (Facts::lp_taint).
  if (op == "sin" || op == "cos")
    COIL_USER_CHECK(
        !facts_[static_cast<size_t>(a)].lp_taint || facts_[static_cast<size_t>(a)].mag <= 8,
        "fuzz: sin/cos of a large rounded value");
  Attrs attrs;
  if (op == "gelu" && chance(0.6))
    attrs.set("approximate", std::string(chance(0.7) ? "tanh" : "none"));
  return add(op, {a}, attrs);
}

int Generator::make_binary() {
  std::string_view op = kBinary[uniform(0, std::size(kBinary) - 1)];
  int a = pick([](int) { return true; });
  int b;
  if ((op == "fmod" || op == "pow") && !floating(a)) {
    // Integer fmod by 0 and negative integer powers are errors in the reference.
    b = add_full(dtype(a), static_cast<double>(uniform(1, 3)));
  } else {
    b = partner(a);
    if (op == "pow")
      COIL_USER_CHECK(
          facts_[static_cast<size_t>(a)].mag <= 10 && facts_[static_cast<size_t>(b)].mag <= 4,
          "fuzz: pow too large");
    if (chance(0.5)) std::swap(a, b);
  }
  return add(op, {a, b});
}

int Generator::make_where() {
  int x = pick([](int) { return true; });
  int y = partner(x);
  int c;
  switch (weighted({30, 50, 20})) {
    case 0:
      c = pick(
          [&](int v) { return dtype(v) == DType::Bool && shape(v).size() <= shape(x).size(); });
      if (c >= 0) break;
      [[fallthrough]];
    case 1: {  // a comparison of the selected value, as in where(gt(s, x), a, s)
      std::vector<int> args{x, partner(x)};
      if (chance(0.5)) std::swap(args[0], args[1]);
      c = add(kCompare[uniform(0, 5)], args);
      break;
    }
    default:
      c = add_input(DType::Bool, partner_shape(shape(x)));
  }
  if (chance(0.5)) std::swap(x, y);
  return add("where", {c, x, y});
}

int Generator::make_cast() {
  int a = pick([](int) { return true; });
  DType back = dtype(a);
  int c = add("cast", {a}, Attrs{{"dtype", pick_dtype()}});
  // Round trips (f32 -> bf16 -> f32) must keep the rounding of the narrow type.
  if (chance(0.35)) c = add("cast", {c}, Attrs{{"dtype", back}});
  return c;
}

int Generator::make_clamp() {
  int a = pick([&](int v) { return dtype(v) != DType::Bool; });
  if (a < 0) return -1;
  Attrs attrs;
  size_t which = weighted({50, 25, 25});
  if (floating(a)) {
    if (which != 2) attrs.set("min", pick<double>({-1, -0.5, 0, 0.5}));
    if (which != 1) attrs.set("max", pick<double>({0.5, 1, 2, chance(0.1) ? -2.0 : 1.5}));
  } else {
    if (which != 2) attrs.set("min", pick<int64_t>({-2, 0, 1}));
    if (which != 1) attrs.set("max", pick<int64_t>({1, 3, chance(0.1) ? -3 : 4}));
  }
  return add("clamp", {a}, attrs);
}

int Generator::step() {
  switch (weighted({16, 20, 5, 7, 3, 18, 2, 2, 10, 7, 7, 4, 2, 2})) {
    case 0:
      return make_unary();
    case 1:
      return make_binary();
    case 2:
      return make_where();
    case 3:
      return make_cast();
    case 4:
      return make_clamp();
    case 5:
      return make_view();
    case 6:
      return make_concat();
    case 7:
      return make_gather();
    case 8:
      return make_reduction();
    case 9:
      return make_composite();
    case 10:
      return make_linalg();
    case 11:
      return make_conv_pool();
    case 13:
      return make_attention();
    default:
      return make_source();
  }
}

FuzzCase Generator::run() {
  if (chance(0.15)) sizes_["s0"] = pick<int64_t>({1, 1, 1, 2, 3, 5, 8, 13, 64, 127});
  cap_ = chance(0.08) ? 65536 : 4096;
  for (int k = chance(0.6) ? 1 : 2; k-- > 0;) add_input(pick_dtype(), pick_shape());
  int target = static_cast<int>(chance(0.5) ? uniform(1, 12) : uniform(2, 7));
  int made = 0;
  for (int attempt = 0; made < target && attempt < 30 * target; ++attempt) {
    try {
      int v = step();
      if (v >= 0 && pooled_[static_cast<size_t>(v)]) ++made;
    } catch (const Error&) {
      // The type rule (or a guard above) rejected the attempt: try something else.
    }
  }

  // Outputs: most sinks (values nothing reads; the others stay dead code), some
  // intermediates, now and then an input or a second name for an output.
  std::vector<int> uses = g_.use_counts();
  std::vector<int> outs;
  for (int v : pool_) {
    if (node(v).op_name() == "input") continue;
    bool sink = uses[static_cast<size_t>(v)] == 0;
    if (chance(sink ? 0.7 : 0.15) && outs.size() < 5) outs.push_back(v);
  }
  if (outs.empty()) {
    int last = pool_.empty() ? g_.inputs()[0] : pool_.back();
    outs.push_back(last);
  }
  if (chance(0.05) && std::find(outs.begin(), outs.end(), g_.inputs()[0]) == outs.end())
    outs.push_back(g_.inputs()[0]);
  shuffle(outs);
  for (int v : outs) g_.add_output(v);
  if (chance(0.05)) g_.add_output(outs.front(), node(outs.front()).name + "_again");

  int threads = static_cast<int>(pick<int64_t>({1, 2, 2, 3}));
  uint64_t input_seed = rng_() % 1000000;
  std::string matmul;
  for (const auto& n : g_.nodes()) {
    std::string_view op = n->op_name();
    if ((op == "matmul" || op == "bmm" || op == "linear" || op == "addmm") && chance(0.3))
      matmul = chance(0.5) ? "dnnl" : "openblas";
  }
  return FuzzCase{std::move(g_), sizes_, input_seed, threads, matmul};
}

FuzzCase generate_case(uint64_t graph_seed) {
  return Generator(graph_seed).run();
}

}  // namespace coil::fuzz
