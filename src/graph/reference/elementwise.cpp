// Reference kernels of the elementwise ops: unary, binary, where, cast, clamp.
//
// Inputs are broadcast (numpy rules on the actual shapes) and converted to the compute dtype
// first: the promoted input dtype, or the result dtype for ops that turn integers into floats
// (exp, div, ...), as torch's TensorIterator does. Floating computations run in double and
// round once to the result dtype; integral ones (bool included) run in int64 with two's
// complement wrap-around, so i64 values beyond 2^53 stay exact.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <string_view>

#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

using FloatFn = std::function<double(const double*)>;
using IntFn = std::function<int64_t(const int64_t*)>;

struct FloatRule {
  std::string_view op;
  double (*fn)(const double*);
};

// NaN propagates; between equal values (-0 and +0) b wins, as in torch.maximum/minimum. So
// relu(x) = nan_max(0, x) and clamp's nan_max(lo, x) keep x's zero, as torch's relu and clamp.
double nan_max(double a, double b) {
  return std::isnan(a) ? a : std::isnan(b) ? b : (a > b ? a : b);
}
double nan_min(double a, double b) {
  return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? a : b);
}

const FloatRule kFloatRules[] = {
    {"abs", [](const double* a) { return std::fabs(a[0]); }},
    {"neg", [](const double* a) { return -a[0]; }},
    {"exp", [](const double* a) { return std::exp(a[0]); }},
    {"log", [](const double* a) { return std::log(a[0]); }},
    {"log1p", [](const double* a) { return std::log1p(a[0]); }},
    {"expm1", [](const double* a) { return std::expm1(a[0]); }},
    {"sqrt", [](const double* a) { return std::sqrt(a[0]); }},
    {"rsqrt", [](const double* a) { return 1.0 / std::sqrt(a[0]); }},
    {"reciprocal", [](const double* a) { return 1.0 / a[0]; }},
    {"relu", [](const double* a) { return nan_max(0.0, a[0]); }},
    {"sigmoid", [](const double* a) { return 1.0 / (1.0 + std::exp(-a[0])); }},
    {"tanh", [](const double* a) { return std::tanh(a[0]); }},
    {"erf", [](const double* a) { return std::erf(a[0]); }},
    {"silu", [](const double* a) { return a[0] / (1.0 + std::exp(-a[0])); }},
    {"sin", [](const double* a) { return std::sin(a[0]); }},
    {"cos", [](const double* a) { return std::cos(a[0]); }},
    {"floor", [](const double* a) { return std::floor(a[0]); }},
    {"ceil", [](const double* a) { return std::ceil(a[0]); }},
    // Half to even: nearbyint uses the current rounding mode, round-to-nearest-even by default.
    {"round", [](const double* a) { return std::nearbyint(a[0]); }},
    {"sign",
     [](const double* a) {
       return std::isnan(a[0]) ? a[0] : static_cast<double>((a[0] > 0) - (a[0] < 0));
     }},
    {"logical_not", [](const double* a) { return a[0] == 0 ? 1.0 : 0.0; }},
    {"isnan", [](const double* a) { return std::isnan(a[0]) ? 1.0 : 0.0; }},
    {"cast", [](const double* a) { return a[0]; }},  // the store converts
    {"add", [](const double* a) { return a[0] + a[1]; }},
    {"sub", [](const double* a) { return a[0] - a[1]; }},
    {"mul", [](const double* a) { return a[0] * a[1]; }},
    {"div", [](const double* a) { return a[0] / a[1]; }},
    {"pow", [](const double* a) { return std::pow(a[0], a[1]); }},
    {"maximum", [](const double* a) { return nan_max(a[0], a[1]); }},
    {"minimum", [](const double* a) { return nan_min(a[0], a[1]); }},
    {"fmod", [](const double* a) { return std::fmod(a[0], a[1]); }},
    {"eq", [](const double* a) { return a[0] == a[1] ? 1.0 : 0.0; }},
    {"ne", [](const double* a) { return a[0] != a[1] ? 1.0 : 0.0; }},
    {"lt", [](const double* a) { return a[0] < a[1] ? 1.0 : 0.0; }},
    {"le", [](const double* a) { return a[0] <= a[1] ? 1.0 : 0.0; }},
    {"gt", [](const double* a) { return a[0] > a[1] ? 1.0 : 0.0; }},
    {"ge", [](const double* a) { return a[0] >= a[1] ? 1.0 : 0.0; }},
    {"logical_and", [](const double* a) { return a[0] != 0 && a[1] != 0 ? 1.0 : 0.0; }},
    {"logical_or", [](const double* a) { return a[0] != 0 || a[1] != 0 ? 1.0 : 0.0; }},
    {"where", [](const double* a) { return a[0] != 0 ? a[1] : a[2]; }},
};

struct IntRule {
  std::string_view op;
  int64_t (*fn)(const int64_t*);
};

// Wrapping arithmetic: overflow wraps modulo 2^64 (then to the result dtype), as torch's
// integer kernels do in practice, instead of being undefined behavior.
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

int64_t int_pow(int64_t base, int64_t exp) {
  COIL_USER_CHECK(exp >= 0, "pow: integers to negative integer powers are not allowed ({} ^ {})",
                  base, exp);
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (; exp > 0; exp >>= 1) {
    if (exp & 1) result *= b;
    b *= b;
  }
  return static_cast<int64_t>(result);
}

int64_t int_fmod(int64_t a, int64_t b) {
  COIL_USER_CHECK(b != 0, "fmod: integer division by zero");
  if (b == -1) return 0;  // INT64_MIN % -1 overflows in C++
  return a % b;
}

const IntRule kIntRules[] = {
    {"abs", [](const int64_t* a) { return a[0] < 0 ? wrap_sub(0, a[0]) : a[0]; }},
    {"neg", [](const int64_t* a) { return wrap_sub(0, a[0]); }},
    {"relu", [](const int64_t* a) { return std::max<int64_t>(a[0], 0); }},
    {"floor", [](const int64_t* a) { return a[0]; }},
    {"ceil", [](const int64_t* a) { return a[0]; }},
    {"round", [](const int64_t* a) { return a[0]; }},
    {"sign", [](const int64_t* a) { return static_cast<int64_t>((a[0] > 0) - (a[0] < 0)); }},
    {"logical_not", [](const int64_t* a) { return static_cast<int64_t>(a[0] == 0); }},
    {"isnan", [](const int64_t*) { return int64_t{0}; }},
    {"cast", [](const int64_t* a) { return a[0]; }},  // the store converts
    {"add", [](const int64_t* a) { return wrap_add(a[0], a[1]); }},
    {"sub", [](const int64_t* a) { return wrap_sub(a[0], a[1]); }},
    {"mul", [](const int64_t* a) { return wrap_mul(a[0], a[1]); }},
    {"pow", [](const int64_t* a) { return int_pow(a[0], a[1]); }},
    {"maximum", [](const int64_t* a) { return std::max(a[0], a[1]); }},
    {"minimum", [](const int64_t* a) { return std::min(a[0], a[1]); }},
    {"fmod", [](const int64_t* a) { return int_fmod(a[0], a[1]); }},
    {"eq", [](const int64_t* a) { return static_cast<int64_t>(a[0] == a[1]); }},
    {"ne", [](const int64_t* a) { return static_cast<int64_t>(a[0] != a[1]); }},
    {"lt", [](const int64_t* a) { return static_cast<int64_t>(a[0] < a[1]); }},
    {"le", [](const int64_t* a) { return static_cast<int64_t>(a[0] <= a[1]); }},
    {"gt", [](const int64_t* a) { return static_cast<int64_t>(a[0] > a[1]); }},
    {"ge", [](const int64_t* a) { return static_cast<int64_t>(a[0] >= a[1]); }},
    {"logical_and", [](const int64_t* a) { return static_cast<int64_t>(a[0] != 0 && a[1] != 0); }},
    {"logical_or", [](const int64_t* a) { return static_cast<int64_t>(a[0] != 0 || a[1] != 0); }},
    {"where", [](const int64_t* a) { return a[0] != 0 ? a[1] : a[2]; }},
};

// u64 values travel as the int64 of the same bits (reference_util.h): add, sub, mul, neg,
// pow, eq, ne and the logic ops are the same on the bits; these are the ops whose result
// depends on reading them unsigned. (u16 and u32 values fit int64 as they are.)
uint64_t u(int64_t v) {
  return static_cast<uint64_t>(v);
}
int64_t s(uint64_t v) {
  return static_cast<int64_t>(v);
}

const IntRule kU64Rules[] = {
    {"abs", [](const int64_t* a) { return a[0]; }},
    {"relu", [](const int64_t* a) { return a[0]; }},
    {"sign", [](const int64_t* a) { return static_cast<int64_t>(a[0] != 0); }},
    {"maximum", [](const int64_t* a) { return s(std::max(u(a[0]), u(a[1]))); }},
    {"minimum", [](const int64_t* a) { return s(std::min(u(a[0]), u(a[1]))); }},
    {"fmod",
     [](const int64_t* a) {
       COIL_USER_CHECK(a[1] != 0, "fmod: integer division by zero");
       return s(u(a[0]) % u(a[1]));
     }},
    {"lt", [](const int64_t* a) { return static_cast<int64_t>(u(a[0]) < u(a[1])); }},
    {"le", [](const int64_t* a) { return static_cast<int64_t>(u(a[0]) <= u(a[1])); }},
    {"gt", [](const int64_t* a) { return static_cast<int64_t>(u(a[0]) > u(a[1])); }},
    {"ge", [](const int64_t* a) { return static_cast<int64_t>(u(a[0]) >= u(a[1])); }},
};

double gelu_erf(double x) {
  return 0.5 * x * (1.0 + std::erf(x * std::numbers::sqrt2 / 2));
}
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

FloatFn float_fn(const Node& node) {
  std::string_view op = node.op_name();
  if (op == "gelu") {
    bool tanh = node.attrs.get_string_or(op, "approximate", "none") == "tanh";
    return tanh ? FloatFn([](const double* a) { return gelu_tanh(a[0]); })
                : FloatFn([](const double* a) { return gelu_erf(a[0]); });
  }
  if (op == "clamp") {
    bool has_lo = node.attrs.has("min"), has_hi = node.attrs.has("max");
    double lo = has_lo ? node.attrs.get_float(op, "min") : 0;
    double hi = has_hi ? node.attrs.get_float(op, "max") : 0;
    return [=](const double* a) {
      double x = a[0];
      if (has_lo) x = nan_max(lo, x);
      if (has_hi) x = nan_min(hi, x);
      return x;
    };
  }
  for (const FloatRule& r : kFloatRules)
    if (r.op == op) return r.fn;
  COIL_UNREACHABLE("no floating reference for elementwise op {}", op);
}

IntFn int_fn(const Node& node, DType compute) {
  std::string_view op = node.op_name();
  if (op == "clamp") {
    // Bounds are converted to the input's integer dtype first (torch casts the scalars).
    bool has_lo = node.attrs.has("min"), has_hi = node.attrs.has("max");
    int64_t lo = has_lo ? ref::wrap_to(compute, ref::number_attr(node, "min").i) : 0;
    int64_t hi = has_hi ? ref::wrap_to(compute, ref::number_attr(node, "max").i) : 0;
    int64_t klo = ref::order_key(compute, lo), khi = ref::order_key(compute, hi);
    return [=](const int64_t* a) {
      int64_t x = ref::order_key(compute, a[0]);
      if (has_lo) x = std::max(x, klo);
      if (has_hi) x = std::min(x, khi);
      return ref::order_key(compute, x);
    };
  }
  if (compute == DType::U64)
    for (const IntRule& r : kU64Rules)
      if (r.op == op) return r.fn;
  for (const IntRule& r : kIntRules)
    if (r.op == op) return r.fn;
  COIL_UNREACHABLE("no integer reference for elementwise op {} on {}", op, dtype_name(compute));
}

// The dtype the inputs are converted to before the op computes.
DType compute_dtype_of(const Node& node, const std::vector<Tensor>& in) {
  if (node.op_name() == "cast") return in[0].dtype();
  std::vector<TensorType> types;
  for (size_t i = node.op_name() == "where" ? 1 : 0; i < in.size(); ++i)
    types.push_back(TensorType{in[i].dtype(), make_shape(in[i].shape())});
  std::vector<const TensorType*> ptrs;
  for (const TensorType& t : types) ptrs.push_back(&t);
  DType promoted = elementwise_promoted_dtype(ptrs);
  if (node.op->dtype_rule == DTypeRule::Float && !is_floating(promoted)) return node.type.dtype;
  return promoted;
}

// Calls f(out_index, inputs' element indices) for every output element.
template <typename F>
void for_each_broadcast(const std::vector<int64_t>& shape,
                        const std::vector<std::vector<int64_t>>& strides, F&& f) {
  std::vector<int64_t> offs(strides.size());
  int64_t i = 0;
  ref::for_each_index(shape, [&](const std::vector<int64_t>& idx) {
    for (size_t k = 0; k < strides.size(); ++k) {
      offs[k] = 0;
      for (size_t d = 0; d < idx.size(); ++d) offs[k] += idx[d] * strides[k][d];
    }
    f(i++, offs);
  });
}

}  // namespace

Tensor ref_elementwise(const Node& node, const std::vector<Tensor>& in) {
  std::string_view op = node.op_name();
  COIL_ASSERT(!in.empty() && in.size() <= 3, "{}: {} inputs", op, in.size());
  std::vector<int64_t> shape = in[0].shape();
  for (size_t i = 1; i < in.size(); ++i) shape = ref::broadcast_sizes(op, shape, in[i].shape());
  std::vector<std::vector<int64_t>> strides;
  for (const Tensor& t : in) strides.push_back(ref::broadcast_strides(t.shape(), shape));

  DType compute = compute_dtype_of(node, in);
  Tensor out = Tensor::empty(node.type.dtype, shape);
  if (is_floating(compute)) {
    std::vector<std::vector<double>> vals;
    for (const Tensor& t : in) vals.push_back(ref::read_doubles_as(t, compute));
    FloatFn f = float_fn(node);
    double args[3] = {0, 0, 0};
    for_each_broadcast(shape, strides, [&](int64_t i, const std::vector<int64_t>& offs) {
      for (size_t k = 0; k < vals.size(); ++k) args[k] = vals[k][static_cast<size_t>(offs[k])];
      ref::set_double(out, i, f(args));
    });
  } else {
    std::vector<std::vector<int64_t>> vals;
    for (const Tensor& t : in) vals.push_back(ref::read_ints_as(t, compute));
    IntFn f = int_fn(node, compute);
    // A u64 result converted to a float (cast) is read unsigned, not as the int64 of its bits.
    bool u64_to_float = compute == DType::U64 && is_floating(out.dtype());
    int64_t args[3] = {0, 0, 0};
    for_each_broadcast(shape, strides, [&](int64_t i, const std::vector<int64_t>& offs) {
      for (size_t k = 0; k < vals.size(); ++k) args[k] = vals[k][static_cast<size_t>(offs[k])];
      if (u64_to_float)
        ref::set_double(out, i, ref::uint64_to_float(out.dtype(), static_cast<uint64_t>(f(args))));
      else
        ref::set_int(out, i, f(args));
    });
  }
  return out;
}

}  // namespace coil
