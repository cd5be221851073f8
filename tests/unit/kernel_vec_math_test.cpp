// coil_vec.h's math and reductions for every ISA variant (see kernel_vec_test.cpp): every unary
// and binary op against the scalar definitions of coil_kernel.h and <cmath> (bit for bit where
// the result is exact, within 2 ulp of a long double reference for SLEEF's functions, 8 ulp for
// f32 erf on avx512/avx2, which comes from libcoil_vmath), a dense f32 erf sweep, then
// horizontal and masked reductions (exact order), Welford, argmax/argmin ties and NaN, and the
// cascade sum.
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <random>

#include "kernel_vec/harness.h"
#include "kernels/coil_kernel.h"

namespace coil::vec_test {
namespace {

class KernelVecMathTest : public VecFixture {};

template <typename T>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  if constexpr (std::is_same_v<T, int32_t>) return "i32";
  return "i64";
}
template <typename T>
constexpr int type_code() {
  if constexpr (std::is_same_v<T, float>) return kF32;
  if constexpr (std::is_same_v<T, double>) return kF64;
  if constexpr (std::is_same_v<T, int32_t>) return kI32;
  return kI64;
}

template <typename T>
T true_mask() {
  return std::bit_cast<T>(~decltype(bits_of(T(0)))(0));
}

// ---- inputs ---------------------------------------------------------------------------------

template <typename T>
std::vector<T> specials() {
  if constexpr (std::is_integral_v<T>) {
    return {
        0, 1, -1, 2, -2, 7, -7, 100, std::numeric_limits<T>::max(), std::numeric_limits<T>::min()};
  } else {
    using L = std::numeric_limits<T>;
    return {T(0),      T(-0.0), L::infinity(),   -L::infinity(),   L::quiet_NaN(), -L::quiet_NaN(),
            T(1),      T(-1),   T(0.5),          T(-0.5),          T(1.5),         T(2.5),
            T(-2.5),   T(3.5),  L::denorm_min(), -L::denorm_min(), L::min(),       L::max(),
            -L::max(), T(1e-30)};
  }
}

/// Specials, then `n` values uniform in [lo, hi] (or log-uniform in [lo, hi] when `log_scale`).
template <typename T>
std::vector<T> inputs(double lo, double hi, int n = 997, bool log_scale = false) {
  std::vector<T> v = specials<T>();
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> u(log_scale ? std::log(lo) : lo,
                                           log_scale ? std::log(hi) : hi);
  for (int i = 0; i < n; ++i) {
    double x = u(rng);
    v.push_back(static_cast<T>(log_scale ? std::exp(x) : x));
  }
  if constexpr (std::is_floating_point_v<T>) {
    for (int k = -6; k <= 6; ++k) v.push_back(static_cast<T>(k + 0.5));  // rounding ties
  }
  return v;
}

// ---- unary ----------------------------------------------------------------------------------

struct UnaryRef {
  enum Kind { kExact, kExactNan, kUlp, kMask } kind;
  std::function<long double(long double)> f;  // kUlp: the exact function
  double max_ulp = 2;
};

template <typename T>
T exact_unary(const std::string& op, T x) {
  if constexpr (std::is_integral_v<T>) {
    T negated = static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(x));  // wraps
    if (op == "abs") return x < 0 ? negated : x;
    if (op == "neg") return negated;
  } else {
    if (op == "abs") return std::fabs(x);
    if (op == "neg") return -x;
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (op == "floor") return std::floor(x);
    if (op == "ceil") return std::ceil(x);
    if (op == "round") return std::nearbyint(x);
    if (op == "trunc") return std::trunc(x);
    if (op == "sqrt") return std::sqrt(x);
    if (op == "rsqrt") return T(1) / std::sqrt(x);
    if (op == "reciprocal") return T(1) / x;
  } else {
    if (op == "floor" || op == "ceil" || op == "round" || op == "trunc") return x;
  }
  if (op == "relu") return coil::relu(x);
  if (op == "sign") return coil::sign(x);
  ADD_FAILURE() << "no reference for " << op;
  return x;
}

/// The error bound of f32 erf on SIMD ISAs: libcoil_vmath's (Eigen's) erf, 7.42 ulp at worst
/// over every float (at 3.90084386; docs/numerics.md); the scalar path is std::erf.
constexpr double kVecErfF32MaxUlp = 8;

/// Whether variant `v`'s f32 erf is libcoil_vmath's (the x86 SIMD ISAs).
inline bool uses_vmath_erf(const VecVariant& v) {
  return v.isa == "avx512" || v.isa == "avx2";
}

/// The error bound of f32 expm1 on SIMD ISAs: glibc libmvec's where the build found it
/// (COIL_USE_LIBMVEC), 2.35 ulp at worst over every float (docs/numerics.md); SLEEF's 1 ulp
/// otherwise. libmvec's tanh, log1p, sin and cos stay within 2 ulp.
constexpr double kVecExpm1F32MaxUlp = 2.5;

template <typename T>
void check_unary(const VecProgram& program, const VecVariant& variant) {
  using Fn = void (*)(int, const void*, void*, int64_t);
  auto name_of = program.fn<const char* (*)(int, int)>("unary_op_name");
  Fn run = program.fn<Fn>(std::string("unary_") + type_name<T>());
  std::map<std::string, std::pair<UnaryRef, std::vector<T>>> table;
  auto ulp = [](auto f, std::vector<T> in, double max_ulp = 2) {
    return std::make_pair(UnaryRef{UnaryRef::kUlp, f, max_ulp}, std::move(in));
  };
  std::vector<T> general = inputs<T>(-1e4, 1e4);
  int ops = 0;
  for (int op = 0; const char* name = name_of(type_code<T>(), op); ++op, ++ops) {
    std::string s = name;
    SCOPED_TRACE(std::string(type_name<T>()) + " " + s);
    std::pair<UnaryRef, std::vector<T>> test{UnaryRef{UnaryRef::kExact, {}}, general};
    if (s == "abs" || s == "neg" || s == "relu" || s == "sign")
      test.first.kind = UnaryRef::kExactNan;
    if (s == "isnan") test.first.kind = UnaryRef::kMask;
    if constexpr (std::is_floating_point_v<T>) {
      if (s == "exp") test = ulp([](long double x) { return std::exp(x); }, inputs<T>(-110, 110));
      if (s == "expm1") {
        double bound = std::is_same_v<T, float> && uses_vmath_erf(variant) ? kVecExpm1F32MaxUlp : 2;
        test = ulp([](long double x) { return std::expm1(x); }, inputs<T>(-20, 20), bound);
      }
      if (s == "log")
        test = ulp([](long double x) { return std::log(x); }, inputs<T>(1e-30, 1e30, 997, true));
      if (s == "log1p")
        test = ulp([](long double x) { return std::log1p(x); }, inputs<T>(-0.999, 1e6));
      if (s == "tanh") test = ulp([](long double x) { return std::tanh(x); }, inputs<T>(-20, 20));
      if (s == "erf") {
        double bound = std::is_same_v<T, float> && uses_vmath_erf(variant) ? kVecErfF32MaxUlp : 2;
        test = ulp([](long double x) { return std::erf(x); }, inputs<T>(-6, 6), bound);
      }
      if (s == "sin") test = ulp([](long double x) { return std::sin(x); }, inputs<T>(-1000, 1000));
      if (s == "cos") test = ulp([](long double x) { return std::cos(x); }, inputs<T>(-1000, 1000));
      // Three roundings (exp, +, /) after an exact reciprocal of 1 + e^-x: 3 ulp.
      if (s == "sigmoid")
        test = ulp([](long double x) { return 1 / (1 + std::exp(-x)); }, inputs<T>(-80, 80), 3);
    }
    const std::vector<T>& in = test.second;
    std::vector<T> out(in.size() + 1, T(77));
    run(op, in.data(), out.data(), static_cast<int64_t>(in.size()));
    EXPECT_EQ(out.back(), T(77)) << "wrote past the end";
    int failures = 0;
    for (size_t i = 0; i < in.size() && failures < 5; ++i) {
      T x = in[i], got = out[i];
      bool ok = true;
      std::string want;
      switch (test.first.kind) {
        case UnaryRef::kExact:
        case UnaryRef::kExactNan: {
          T w = exact_unary(s, x);
          ok = same_value(got, w, test.first.kind == UnaryRef::kExactNan);
          want = fmt::format("{}", w);
          break;
        }
        case UnaryRef::kMask: {
          T w = coil::isnan_(x) ? true_mask<T>() : T(0);
          ok = bits_of(got) == bits_of(w);
          break;
        }
        case UnaryRef::kUlp: {
          long double ref = test.first.f(static_cast<long double>(x));
          double err = ulp_error(got, ref);
          ok = err <= test.first.max_ulp;
          want = fmt::format("{} ({} ulp)", static_cast<double>(ref), err);
          break;
        }
      }
      if (!ok) {
        ++failures;
        ADD_FAILURE() << s << "(" << x << ") = " << got << ", want " << want;
      }
    }
  }
  EXPECT_GE(ops, 9);
}

TEST_P(KernelVecMathTest, UnaryOpsMatchScalarDefinitions) {
  check_unary<float>(*program_, GetParam());
  check_unary<double>(*program_, GetParam());
  check_unary<int32_t>(*program_, GetParam());
  check_unary<int64_t>(*program_, GetParam());
}

// f32 erf densely: on avx512/avx2 it is libcoil_vmath's (Eigen's rational approximation plus
// coil's clamp and tiny-argument guards, src/kernels/vmath/vmath_common.h), elsewhere std::erf.
// Every 1021st bit pattern of both signs (all binades, denormals, the tails where erf rounds to
// +-1) and a 1e-4 grid over [-8, 8], against long double erf; |erf| <= 1; odd symmetry bit for
// bit; NaN, +-inf, +-0 exactly. Also records how far it is from the scalar path
// (std::erf(float)), which docs/numerics.md quotes.
TEST_P(KernelVecMathTest, ErfF32IsAccurateEverywhere) {
  using Fn = void (*)(int, const void*, void*, int64_t);
  auto name_of = program_->fn<const char* (*)(int, int)>("unary_op_name");
  int op = 0;
  while (name_of(kF32, op) && std::string(name_of(kF32, op)) != "erf") ++op;
  ASSERT_NE(name_of(kF32, op), nullptr) << "vec_program.cpp has no f32 erf";
  Fn run = program_->fn<Fn>("unary_f32");

  using L = std::numeric_limits<float>;
  std::vector<float> in = {0.0f,
                           -0.0f,
                           L::infinity(),
                           -L::infinity(),
                           L::quiet_NaN(),
                           -L::quiet_NaN(),
                           L::denorm_min(),
                           L::min(),
                           L::max(),
                           0x1p-14f,
                           3.6875f,
                           3.90084386f,
                           4.0f,
                           4.5f,
                           10.0f};
  for (uint32_t b = 0; b < 0x7f800000u; b += 1021) in.push_back(std::bit_cast<float>(b));
  for (int i = 0; i <= 80000; ++i) in.push_back(static_cast<float>(i) * 1e-4f);
  const size_t half = in.size();
  for (size_t i = 0; i < half; ++i) in.push_back(-in[i]);
  std::vector<float> out(in.size());
  run(op, in.data(), out.data(), static_cast<int64_t>(in.size()));

  const double bound = uses_vmath_erf(GetParam()) ? kVecErfF32MaxUlp : 2;
  double max_ulp = 0, max_abs = 0, max_ulp_vs_scalar = 0;
  float worst_x = 0;
  int failures = 0;
  for (size_t i = 0; i < in.size() && failures < 5; ++i) {
    float x = in[i], got = out[i];
    std::string what;
    if (std::isnan(x)) {
      if (!std::isnan(got)) what = "NaN must propagate";
    } else if (std::isinf(x)) {
      if (got != std::copysign(1.0f, x)) what = "want +-1 exactly";
    } else if (x == 0) {
      if (bits_of(got) != bits_of(x)) what = "want the zero itself (sign kept)";
    } else {
      long double ref = std::erf(static_cast<long double>(x));
      double err = ulp_error(got, ref);
      if (err > max_ulp) max_ulp = err, worst_x = x;
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(got - ref)));
      max_ulp_vs_scalar = std::max(max_ulp_vs_scalar, ulp_error(got, std::erf(x)));
      if (err > bound) what = fmt::format("{} ulp from {}", err, static_cast<double>(ref));
      if (std::fabs(got) > 1.0f) what = "|erf| > 1";
    }
    if (i < half && bits_of(out[i + half]) != bits_of(-got) && !std::isnan(got)) {
      what += fmt::format(" erf(-x) = {} is not -erf(x)", out[i + half]);
    }
    if (!what.empty()) {
      ++failures;
      ADD_FAILURE() << "erf(" << fmt::format("{:a}", x) << ") = " << got << ": " << what;
    }
  }
  std::cout << fmt::format(
      "f32 erf ({}): max {:.2f} ulp (at {}), max abs error {:.3g}, max {:.2f} ulp from "
      "std::erf(float), {} inputs\n",
      GetParam().name, max_ulp, worst_x, max_abs, max_ulp_vs_scalar, in.size());
}

// f32 exp densely: inline on avx512 (coil_vec_avx512.h: Cody-Waite reduction, Cephes'
// polynomial, vscalefps), SLEEF's u10 on avx2, std::exp on scalar ISAs. Every 509th bit pattern
// of both signs up to |x| = 110 (past overflow at 88.72 and below the last subnormal at -103.97)
// and a 1e-4 grid over [-20, 20], against long double exp: within 1.5 ulp (the inline one
// measured 1.01 over every third pattern, docs/numerics.md); e^+-0 = 1, e^+inf = inf, e^-inf =
// 0, NaN propagates, overflow gives inf and the deep tail 0.
TEST_P(KernelVecMathTest, ExpF32IsAccurateEverywhere) {
  using Fn = void (*)(int, const void*, void*, int64_t);
  auto name_of = program_->fn<const char* (*)(int, int)>("unary_op_name");
  int op = 0;
  while (name_of(kF32, op) && std::string(name_of(kF32, op)) != "exp") ++op;
  ASSERT_NE(name_of(kF32, op), nullptr) << "vec_program.cpp has no f32 exp";
  Fn run = program_->fn<Fn>("unary_f32");
  using L = std::numeric_limits<float>;
  std::vector<float> in = {0.0f,     L::infinity(), L::quiet_NaN(), L::denorm_min(),
                           L::min(), 88.72f,        88.73f,         89.0f,
                           103.9f,   104.5f,        1e30f,          L::max()};
  for (uint32_t b = 0; b < 0x42dc0000u; b += 509) in.push_back(std::bit_cast<float>(b));  // 110
  for (int i = 0; i <= 200000; ++i) in.push_back(static_cast<float>(i) * 1e-4f);
  const size_t half = in.size();
  for (size_t i = 0; i < half; ++i) in.push_back(-in[i]);
  std::vector<float> out(in.size());
  run(op, in.data(), out.data(), static_cast<int64_t>(in.size()));
  double max_ulp = 0;
  float worst_x = 0;
  int failures = 0;
  for (size_t i = 0; i < in.size() && failures < 5; ++i) {
    const float x = in[i], got = out[i];
    std::string what;
    if (std::isnan(x)) {
      if (!std::isnan(got)) what = "NaN must propagate";
    } else if (std::isinf(x)) {
      if (got != (x > 0 ? L::infinity() : 0.0f)) what = "want inf or 0 exactly";
    } else {
      const double err = ulp_error(got, std::exp(static_cast<long double>(x)));
      if (err > max_ulp) max_ulp = err, worst_x = x;
      if (err > 1.5) what = fmt::format("{} ulp", err);
    }
    if (!what.empty()) {
      ++failures;
      ADD_FAILURE() << "exp(" << fmt::format("{:a}", x) << ") = " << got << ": " << what;
    }
  }
  std::cout << fmt::format("f32 exp ({}): max {:.2f} ulp (at {}), {} inputs\n", GetParam().name,
                           max_ulp, worst_x, in.size());
}

// f32 tanh, expm1, log1p, sin and cos densely: on avx512/avx2 they come from glibc's libmvec
// where the build found it (COIL_USE_LIBMVEC; log1p only for vectors whose lanes are all above
// -1, SLEEF's for the others), else from SLEEF; std:: on scalar ISAs. Every 4093rd bit
// pattern of both signs (all binades, denormals, the saturated tails, sin/cos arguments up to
// FLT_MAX, past libmvec's fast range) and a 1e-3 grid over [-20, 20], against long double:
// within 2 ulp (2.5 for expm1 on SIMD ISAs and for tanh); NaN, +-inf and +-0 as std:: gives
// them (the sign of a zero included). Prints the measured errors, which docs/numerics.md quotes.
TEST_P(KernelVecMathTest, LibmvecF32FunctionsAreAccurateEverywhere) {
  using Fn = void (*)(int, const void*, void*, int64_t);
  auto name_of = program_->fn<const char* (*)(int, int)>("unary_op_name");
  Fn run = program_->fn<Fn>("unary_f32");
  using L = std::numeric_limits<float>;
  std::vector<float> in = {
      0.0f, L::infinity(), L::quiet_NaN(), L::denorm_min(), L::min(), L::max(), 88.7f, 89.0f, 1e4f,
      3e4f, 1e6f};
  for (uint32_t b = 0; b < 0x7f800000u; b += 4093) in.push_back(std::bit_cast<float>(b));
  for (int i = 0; i <= 20000; ++i) in.push_back(static_cast<float>(i) * 1e-3f);
  const size_t half = in.size();
  for (size_t i = 0; i < half; ++i) in.push_back(-in[i]);
  std::vector<float> out(in.size());

  struct Fn1 {
    const char* name;
    long double (*exact)(long double);
    float (*scalar)(float);
    double bound;
  };
  const bool simd = uses_vmath_erf(GetParam());
  const Fn1 fns[] = {
      // glibc's scalar tanhf (the scalar ISAs) is 2.07 ulp off at 0x1.ddf1fep-3.
      {"tanh", [](long double x) { return std::tanh(x); }, [](float x) { return std::tanh(x); },
       2.5},
      {"expm1", [](long double x) { return std::expm1(x); }, [](float x) { return std::expm1(x); },
       simd ? kVecExpm1F32MaxUlp : 2},
      {"log1p", [](long double x) { return std::log1p(x); }, [](float x) { return std::log1p(x); },
       2},
      {"sin", [](long double x) { return std::sin(x); }, [](float x) { return std::sin(x); }, 2},
      {"cos", [](long double x) { return std::cos(x); }, [](float x) { return std::cos(x); }, 2},
  };
  for (const Fn1& f : fns) {
    SCOPED_TRACE(f.name);
    int op = 0;
    while (name_of(kF32, op) && std::string(name_of(kF32, op)) != f.name) ++op;
    ASSERT_NE(name_of(kF32, op), nullptr) << "vec_program.cpp has no f32 " << f.name;
    run(op, in.data(), out.data(), static_cast<int64_t>(in.size()));
    double max_ulp = 0;
    float worst_x = 0;
    int failures = 0;
    for (size_t i = 0; i < in.size() && failures < 5; ++i) {
      float x = in[i], got = out[i];
      std::string what;
      if (std::isnan(x) || std::isinf(x) || x == 0) {
        if (!same_value(got, f.scalar(x))) what = fmt::format("want {}", f.scalar(x));
      } else {
        long double ref = f.exact(static_cast<long double>(x));
        double err = ulp_error(got, ref);
        if (err > max_ulp) max_ulp = err, worst_x = x;
        if (err > f.bound) what = fmt::format("{} ulp from {}", err, static_cast<double>(ref));
      }
      if (!what.empty()) {
        ++failures;
        ADD_FAILURE() << f.name << "(" << fmt::format("{:a}", x) << ") = " << got << ": " << what;
      }
    }
    std::cout << fmt::format("f32 {} ({}): max {:.2f} ulp (at {}), {} inputs\n", f.name,
                             GetParam().name, max_ulp, worst_x, in.size());
  }
}

// ---- binary ---------------------------------------------------------------------------------

// The expected lane for binary op `s`; `lane` is the position in its vector (for set3).
template <typename T>
T binary_ref(const std::string& s, T a, T b, int lane) {
  auto mask = [](bool m) { return m ? true_mask<T>() : T(0); };
  auto bits = [](auto x) { return std::bit_cast<T>(x); };
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // integer lanes wrap
    if (s == "add") return static_cast<T>(U(a) + U(b));
    if (s == "sub") return static_cast<T>(U(a) - U(b));
    if (s == "mul") return static_cast<T>(U(a) * U(b));
    if (s == "div") return b == 0 ? T(0) : b == T(-1) ? static_cast<T>(U(0) - U(a)) : T(a / b);
  } else {
    if (s == "add") return a + b;
    if (s == "sub") return a - b;
    if (s == "mul") return a * b;
    if (s == "div") return a / b;
  }
  if (s == "maximum") return coil::maximum(a, b);
  if (s == "minimum") return coil::minimum(a, b);
  if (s == "fmod") {
    if constexpr (std::is_integral_v<T>) {
      return (b == 0 || b == T(-1)) ? T(0) : T(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
  if (s == "pow") {
    if constexpr (std::is_integral_v<T>) return coil::ipow(a, b);
  }
  if (s == "eq") return mask(a == b);
  if (s == "ne") return mask(a != b);
  if (s == "lt") return mask(a < b);
  if (s == "le") return mask(a <= b);
  if (s == "gt") return mask(a > b);
  if (s == "ge") return mask(a >= b);
  if (s == "bit_and") return bits(bits_of(a) & bits_of(b));
  if (s == "bit_or") return bits(bits_of(a) | bits_of(b));
  if (s == "bit_xor") return bits(bits_of(a) ^ bits_of(b));
  if (s == "bit_not") return bits(decltype(bits_of(a))(~bits_of(a)));
  if (s == "where_lt") return a < b ? a : b;
  if (s == "blendv_gt") return a > b ? b : a;
  if (s == "set3") return lane < 3 ? b : a;
  ADD_FAILURE() << "no reference for " << s;
  return a;
}

template <typename T>
void check_binary(const VecProgram& program, int lanes) {
  using Fn = void (*)(int, const void*, const void*, void*, int64_t);
  auto name_of = program.fn<const char* (*)(int)>("binary_op_name");
  Fn run = program.fn<Fn>(std::string("binary_") + type_name<T>());
  // Every pair of specials (equal values and NaN on either side), then random pairs.
  std::vector<T> a, b;
  std::vector<T> sp = specials<T>();
  for (T x : sp) {
    for (T y : sp) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  std::vector<T> r1 = inputs<T>(-1e3, 1e3, 500), r2 = inputs<T>(-50, 50, 500);
  for (size_t i = 0; i < r1.size(); ++i) {
    a.push_back(r1[i]);
    b.push_back(i % 7 == 0 ? r1[i] : r2[i]);
  }
  // pow: positive bases with moderate exponents, and whole exponents of negative bases.
  std::vector<T> pa = a, pb = b;
  if constexpr (std::is_integral_v<T>) {
    for (size_t i = 0; i < pa.size(); ++i) {
      pa[i] = static_cast<T>(static_cast<int64_t>(i % 11) - 5);
      pb[i] = static_cast<T>(static_cast<int64_t>(i % 13) - 2);
    }
  } else {
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> base(0, 10), ex(-5, 5);
    for (size_t i = sp.size() * sp.size(); i < pa.size(); ++i) {
      pa[i] = static_cast<T>(i % 5 == 0 ? -base(rng) : base(rng));
      pb[i] = static_cast<T>(i % 5 == 0 ? std::round(ex(rng)) : ex(rng));
    }
  }
  for (int op = 0; const char* name = name_of(op); ++op) {
    std::string s = name;
    SCOPED_TRACE(std::string(type_name<T>()) + " " + s);
    const std::vector<T>& x = s == "pow" ? pa : a;
    const std::vector<T>& y = s == "pow" ? pb : b;
    std::vector<T> out(x.size() + 1, T(77));
    run(op, x.data(), y.data(), out.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(out.back(), T(77)) << "wrote past the end";
    int failures = 0;
    for (size_t i = 0; i < x.size() && failures < 5; ++i) {
      bool ok;
      std::string want;
      if constexpr (std::is_floating_point_v<T>) {
        if (s == "pow") {
          long double ref =
              std::pow(static_cast<long double>(x[i]), static_cast<long double>(y[i]));
          ok = ulp_error(out[i], ref) <= 2;
          want = fmt::format("{}", static_cast<double>(ref));
        } else {
          T w = binary_ref(s, x[i], y[i], static_cast<int>(i % lanes));
          bool exact_nan = s == "maximum" || s == "minimum" || s.rfind("bit_", 0) == 0 ||
                           s == "where_lt" || s == "blendv_gt" || s == "set3" || s == "eq" ||
                           s == "ne" || s == "lt" || s == "le" || s == "gt" || s == "ge";
          ok = same_value(out[i], w, exact_nan);
          want = fmt::format("{}", w);
        }
      } else {
        T w = binary_ref(s, x[i], y[i], static_cast<int>(i % lanes));
        ok = out[i] == w;
        want = fmt::format("{}", w);
      }
      if (!ok) {
        ++failures;
        ADD_FAILURE() << s << "(" << x[i] << ", " << y[i] << ") = " << out[i] << ", want " << want;
      }
    }
  }
}

TEST_P(KernelVecMathTest, BinaryOpsMatchScalarDefinitions) {
  check_binary<float>(*program_, float_lanes_);
  check_binary<double>(*program_, float_lanes_);
  check_binary<int32_t>(*program_, float_lanes_);
  check_binary<int64_t>(*program_, float_lanes_);
}

// ---- reductions -----------------------------------------------------------------------------

// What reduce_<T>(op, in, n) must return: per-lane accumulation (tail lanes < count only),
// then lane i meets lane i + L/2, recursively.
template <typename T>
T reduce_ref(int op, const std::vector<T>& in, int lanes) {
  auto combine = [op](T a, T b) -> T {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      if (op == 0) return static_cast<T>(U(a) + U(b));
      if (op == 1) return static_cast<T>(U(a) * U(b));
    } else {
      if (op == 0) return a + b;
      if (op == 1) return a * b;
    }
    return op == 2 ? coil::maximum(a, b) : coil::minimum(a, b);
  };
  T init = op == 0 ? T(0) : op == 1 ? T(1) : op == 2 ? coil::lowest<T>() : coil::highest<T>();
  std::vector<T> acc(lanes, init);
  for (size_t i = 0; i < in.size(); ++i) acc[i % lanes] = combine(acc[i % lanes], in[i]);
  for (int width = lanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) acc[i] = combine(acc[i], acc[i + width]);
  }
  return acc[0];
}

template <typename T>
void check_reduce(const VecProgram& program, int lanes) {
  using Fn = void (*)(int, const void*, int64_t, void*);
  Fn run = program.fn<Fn>(std::string("reduce_") + type_name<T>());
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (int n : {0, 1, lanes - 1, lanes, lanes + 1, 5 * lanes + 3, 1000}) {
    for (int with_nan = 0; with_nan < (std::is_integral_v<T> ? 1 : 2); ++with_nan) {
      std::vector<T> in(n);
      for (T& x : in) x = static_cast<T>(std::is_integral_v<T> ? u(rng) * 100 - 100 : u(rng));
      if (with_nan && n > 2) in[n / 2] = std::numeric_limits<T>::quiet_NaN();
      for (int op = 0; op < 4; ++op) {
        T got = T(0);
        run(op, in.data(), n, &got);
        T want = reduce_ref(op, in, lanes);
        EXPECT_TRUE(same_value(got, want)) << type_name<T>() << " op " << op << " n " << n
                                           << " nan " << with_nan << ": " << got << " vs " << want;
      }
    }
  }
}

TEST_P(KernelVecMathTest, ReductionsFollowTheDocumentedOrder) {
  check_reduce<float>(*program_, float_lanes_);
  check_reduce<double>(*program_, float_lanes_);
  check_reduce<int32_t>(*program_, float_lanes_);
  check_reduce<int64_t>(*program_, float_lanes_);
}

template <typename T>
void check_welford(const VecProgram& program, const std::string& name, double rtol) {
  auto run = program.fn<void (*)(const T*, int64_t, int64_t, T*)>(name);
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(3.0, 2.0);
  for (auto [n, split] : std::vector<std::pair<int, int>>{
           {0, 0}, {1, 1}, {3, 1}, {17, 0}, {17, 17}, {100, 37}, {1000, 500}, {4099, 1234}}) {
    std::vector<T> in(n);
    for (T& x : in) x = static_cast<T>(normal(rng));
    long double mean = 0, m2 = 0;
    for (T x : in) mean += x;
    if (n > 0) mean /= n;
    for (T x : in) m2 += (x - mean) * (x - mean);
    T out[3] = {T(-1), T(-1), T(-1)};
    run(in.data(), n, split, out);
    SCOPED_TRACE(fmt::format("{} n {} split {}", name, n, split));
    EXPECT_EQ(out[2], T(n));
    EXPECT_NEAR(out[0], static_cast<double>(mean),
                rtol * (1 + std::fabs(static_cast<double>(mean))));
    EXPECT_NEAR(out[1], static_cast<double>(m2), rtol * (1 + static_cast<double>(m2)));
  }
}

TEST_P(KernelVecMathTest, WelfordMatchesTwoPassVariance) {
  check_welford<float>(*program_, "welford_f32", 1e-5);
  check_welford<double>(*program_, "welford_f64", 1e-12);
}

template <typename T>
void check_arg(const VecProgram& program, int lanes) {
  using Fn = void (*)(int, const void*, int64_t, int64_t*, void*);
  Fn run = program.fn<Fn>(std::string("arg_") + type_name<T>());
  std::mt19937 rng(9);
  std::vector<std::vector<T>> cases;
  for (int n : {0, 1, 3, lanes, 2 * lanes + 5, 300}) {
    std::vector<T> v(n);
    for (T& x : v) x = static_cast<T>(static_cast<int>(rng() % 7) - 3);  // many ties
    cases.push_back(v);
  }
  cases.push_back(std::vector<T>(2 * lanes + 3, T(5)));  // all equal: index 0
  if constexpr (std::is_floating_point_v<T>) {
    T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
    std::vector<T> v(3 * lanes + 1, T(1));
    v[lanes + 2] = nan;  // the first NaN wins, even over a later larger lane position
    v[2] = T(9);
    v[2 * lanes] = nan;
    cases.push_back(v);
    cases.push_back(std::vector<T>(lanes + 3, -inf));  // argmax over -inf: index 0
    cases.push_back(std::vector<T>(lanes + 3, inf));
    std::vector<T> w(lanes * 2 + 4, T(0));
    w[lanes + 1] = nan;
    w[3] = nan;
    cases.push_back(w);
  }
  for (const std::vector<T>& in : cases) {
    for (int is_min = 0; is_min < 2; ++is_min) {
      IndexValue<T> want{T(0), -1};
      for (size_t i = 0; i < in.size(); ++i) {
        if (is_min) {
          argmin_combine(want, in[i], static_cast<int64_t>(i));
        } else {
          argmax_combine(want, in[i], static_cast<int64_t>(i));
        }
      }
      int64_t index = -7;
      T value = T(0);
      run(is_min, in.data(), static_cast<int64_t>(in.size()), &index, &value);
      EXPECT_EQ(index, want.index)
          << type_name<T>() << (is_min ? " argmin" : " argmax") << " n " << in.size();
      if (want.index >= 0) {
        EXPECT_TRUE(same_value(value, want.value));
      }
    }
  }
}

TEST_P(KernelVecMathTest, ArgmaxArgminPickTheFirstIndexAndNaN) {
  check_arg<float>(*program_, float_lanes_);
  check_arg<double>(*program_, float_lanes_);
  check_arg<int32_t>(*program_, float_lanes_);
  check_arg<int64_t>(*program_, float_lanes_);
}

TEST_P(KernelVecMathTest, CascadeSumKeepsLongSumsAccurate) {
  const int64_t n = 3'000'017;
  std::vector<float> in(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  long double exact = 0;
  for (float& x : in) {
    x = u(rng);
    exact += x;
  }
  auto cascade = program_->fn<float (*)(const float*, int64_t)>("cascade_sum_f32");
  auto naive = program_->fn<float (*)(const float*, int64_t)>("naive_sum_f32");
  float got = cascade(in.data(), n);
  double rel = std::fabs(static_cast<double>((got - exact) / exact));
  double naive_rel = std::fabs(static_cast<double>((naive(in.data(), n) - exact) / exact));
  EXPECT_LT(rel, 1e-6) << "naive summation's error: " << naive_rel;
  EXPECT_EQ(bits_of(cascade(in.data(), n)), bits_of(got)) << "not deterministic";
}

INSTANTIATE_TEST_SUITE_P(KernelVec, KernelVecMathTest, ::testing::ValuesIn(vec_variants()),
                         variant_name);

}  // namespace
}  // namespace coil::vec_test
