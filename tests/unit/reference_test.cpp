// The reference interpreter against hand-computed values: every op, the NaN and tie rules,
// broadcasting, keepdim, negative axes, integer exactness, f16/bf16 rounding, 0-size tensors,
// strided input views, and the interpreter's input checks and error messages.
// (tests/unit/reference_torch_test.cpp cross-checks the same kernels against PyTorch eager.)
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "coil/error.h"
#include "graph/decompositions.h"
#include "graph/interpreter.h"
#include "graph/op_registry.h"
#include "runtime/compare.h"
#include "support/check.h"

namespace coil {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor make(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(values.size()); ++i)
    t.set_from_double(i, values[static_cast<size_t>(i)]);
  return t;
}
Tensor f32(std::vector<int64_t> shape, const std::vector<double>& v) {
  return make(DType::F32, std::move(shape), v);
}
Tensor i64(std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DType::I64, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int64_t>()[i] = v[i];
  return t;
}
Tensor arange(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set_from_double(i, static_cast<double>(i));
  return t;
}

// One op on `inputs` (graph inputs x0, x1, ...) through the interpreter.
Tensor run(std::string_view op, const std::vector<Tensor>& inputs, Attrs attrs = {}) {
  Graph g;
  std::vector<int> ids;
  for (size_t i = 0; i < inputs.size(); ++i)
    ids.push_back(
        g.add_input(fmt::format("x{}", i), inputs[i].dtype(), make_shape(inputs[i].shape())));
  g.add_output(g.add_node(op, ids, std::move(attrs)));
  std::vector<Tensor> out = interpret(g, inputs);
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

// `t` has the dtype, shape and values (rounded to the dtype; NaN matches NaN). With rtol > 0,
// values may differ from the exact `expected` by that relative amount.
::testing::AssertionResult has_values(const Tensor& t, DType dtype, std::vector<int64_t> shape,
                                      const std::vector<double>& expected, double rtol = 0) {
  if (t.dtype() != dtype)
    return ::testing::AssertionFailure()
           << "dtype " << dtype_name(t.dtype()) << ", expected " << dtype_name(dtype);
  if (t.shape() != shape)
    return ::testing::AssertionFailure()
           << "shape " << shape_str(t.shape()) << ", expected " << shape_str(shape);
  if (t.strides() != contiguous_strides(t.shape()))
    return ::testing::AssertionFailure() << "result is not contiguous";
  Tensor want = make(dtype, shape, expected);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double a = t.item_as_double(i),
           e = rtol > 0 ? expected[static_cast<size_t>(i)] : want.item_as_double(i);
    bool ok = (std::isnan(a) && std::isnan(e)) || a == e || std::fabs(a - e) <= rtol * std::fabs(e);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << " is " << a << ", expected " << e;
  }
  return ::testing::AssertionSuccess();
}

// `f` throws a coil::Error whose message contains `message`.
template <typename F>
void expect_error(F&& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << message;
  }
}

// --- Elementwise -------------------------------------------------------------------------

struct UnaryCase {
  const char* op;
  std::vector<double> in, out;
  DType out_dtype = DType::F32;
  double rtol = 0;
  Attrs attrs = {};
};

TEST(ReferenceElementwise, UnaryFloatOps) {
  const double tol = 1e-7;  // f32 rounding of the exact value
  const UnaryCase cases[] = {
      {"abs", {-1.5, 0, 2, kNaN}, {1.5, 0, 2, kNaN}},
      {"neg", {-1.5, 0, 2, kInf}, {1.5, 0, -2, -kInf}},
      {"exp", {0, 1, -kInf, kNaN}, {1, 2.718281828459045, 0, kNaN}, DType::F32, tol},
      {"log", {1, 0, -1, 2.718281828459045}, {0, -kInf, kNaN, 1}, DType::F32, tol},
      {"log1p", {0, 1, -1}, {0, 0.6931471805599453, -kInf}, DType::F32, tol},
      {"expm1", {0, 1, -kInf}, {0, 1.718281828459045, -1}, DType::F32, tol},
      {"sqrt", {4, 2, -1, kInf}, {2, 1.4142135623730951, kNaN, kInf}, DType::F32, tol},
      {"rsqrt", {4, 0, kInf}, {0.5, kInf, 0}},
      {"reciprocal", {2, 0, -4}, {0.5, kInf, -0.25}},
      {"relu", {-1, 0, 3, kNaN, -kInf}, {0, 0, 3, kNaN, 0}},
      {"sigmoid", {0, 2, -kInf, kInf}, {0.5, 0.8807970779778823, 0, 1}, DType::F32, tol},
      {"tanh", {0, 1, kInf}, {0, 0.7615941559557649, 1}, DType::F32, tol},
      {"erf", {0, 1, -kInf}, {0, 0.8427007929497149, -1}, DType::F32, tol},
      {"gelu", {0, 1, -1}, {0, 0.8413447460685429, -0.15865525393145707}, DType::F32, tol},
      {"gelu",
       {1, -2},
       {0.8411919906082768, -0.04540230591222494},
       DType::F32,
       tol,
       {{"approximate", std::string("tanh")}}},
      {"silu", {0, 1, -kInf}, {0, 0.7310585786300049, kNaN}, DType::F32, tol},
      {"sin", {0, 1}, {0, 0.8414709848078965}, DType::F32, tol},
      {"cos", {0, 1}, {1, 0.5403023058681398}, DType::F32, tol},
      {"floor", {-1.5, 1.5, 2, kNaN}, {-2, 1, 2, kNaN}},
      {"ceil", {-1.5, 1.5, 2, kNaN}, {-1, 2, 2, kNaN}},
      {"round", {0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6}, {0, 2, 2, 0, -2, 2, 3}},
      {"sign", {-3, 0, 2, kNaN, -kInf}, {-1, 0, 1, kNaN, -1}},
      {"logical_not", {0, 2, kNaN, -0.0}, {1, 0, 0, 1}, DType::Bool},  // NaN is nonzero
      {"isnan", {kNaN, 1, kInf}, {1, 0, 0}, DType::Bool},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.op);
    auto n = static_cast<int64_t>(c.in.size());
    Tensor out = run(c.op, {f32({n}, c.in)}, c.attrs);
    EXPECT_TRUE(has_values(out, c.out_dtype, {n}, c.out, c.rtol));
  }
}

TEST(ReferenceElementwise, UnaryIntegerOps) {
  Tensor x = make(DType::I32, {4}, {-3, 0, 5, -2147483648.0});
  EXPECT_TRUE(has_values(run("abs", {x}), DType::I32, {4}, {3, 0, 5, -2147483648.0}));  // wraps
  EXPECT_TRUE(has_values(run("neg", {x}), DType::I32, {4}, {3, 0, -5, -2147483648.0}));
  EXPECT_TRUE(has_values(run("sign", {x}), DType::I32, {4}, {-1, 0, 1, -1}));
  EXPECT_TRUE(has_values(run("relu", {x}), DType::I32, {4}, {0, 0, 5, 0}));
  EXPECT_TRUE(has_values(run("floor", {x}), DType::I32, {4}, {-3, 0, 5, -2147483648.0}));
  EXPECT_TRUE(has_values(run("round", {x}), DType::I32, {4}, {-3, 0, 5, -2147483648.0}));
  EXPECT_TRUE(has_values(run("isnan", {x}), DType::Bool, {4}, {0, 0, 0, 0}));
  EXPECT_TRUE(has_values(run("logical_not", {x}), DType::Bool, {4}, {0, 1, 0, 0}));
  // Integers become f32 for floating ops.
  EXPECT_TRUE(has_values(run("exp", {make(DType::I64, {2}, {0, 1})}), DType::F32, {2},
                         {1, 2.718281828459045}, 1e-7));
  EXPECT_TRUE(has_values(run("sqrt", {make(DType::Bool, {2}, {0, 1})}), DType::F32, {2}, {0, 1}));
}

TEST(ReferenceElementwise, BinaryBroadcastAndNegativeZeroSize) {
  Tensor a = f32({2, 1}, {1, 2});
  Tensor b = f32({3}, {10, 20, 30});
  EXPECT_TRUE(has_values(run("add", {a, b}), DType::F32, {2, 3}, {11, 21, 31, 12, 22, 32}));
  EXPECT_TRUE(has_values(run("sub", {a, b}), DType::F32, {2, 3}, {-9, -19, -29, -8, -18, -28}));
  EXPECT_TRUE(has_values(run("mul", {b, a}), DType::F32, {2, 3}, {10, 20, 30, 20, 40, 60}));
  // A scalar (rank 0) broadcasts to anything, 0-size dims stay 0.
  EXPECT_TRUE(has_values(run("mul", {f32({}, {3}), f32({2}, {1, 2})}), DType::F32, {2}, {3, 6}));
  EXPECT_TRUE(
      has_values(run("add", {f32({0, 3}, {}), f32({1, 3}, {1, 2, 3})}), DType::F32, {0, 3}, {}));
  EXPECT_TRUE(has_values(run("add", {f32({}, {1}), f32({}, {2})}), DType::F32, {}, {3}));
}

TEST(ReferenceElementwise, BinaryFloatOps) {
  Tensor a = f32({4}, {7, -7, 1, kNaN});
  Tensor b = f32({4}, {2, 2, 0, 1});
  EXPECT_TRUE(has_values(run("div", {a, b}), DType::F32, {4}, {3.5, -3.5, kInf, kNaN}));
  EXPECT_TRUE(has_values(run("fmod", {a, b}), DType::F32, {4}, {1, -1, kNaN, kNaN}));
  EXPECT_TRUE(has_values(run("fmod", {f32({2}, {5.5, -5.5}), f32({2}, {-2, 2})}), DType::F32, {2},
                         {1.5, -1.5}));
  EXPECT_TRUE(has_values(run("pow", {f32({4}, {2, 4, -8, 0}), f32({4}, {3, 0.5, 0.5, 0})}),
                         DType::F32, {4}, {8, 2, kNaN, 1}));
  EXPECT_TRUE(has_values(run("maximum", {f32({3}, {1, kNaN, 3}), f32({3}, {2, 0, kNaN})}),
                         DType::F32, {3}, {2, kNaN, kNaN}));
  EXPECT_TRUE(has_values(run("minimum", {f32({3}, {1, kNaN, 3}), f32({3}, {2, 0, kNaN})}),
                         DType::F32, {3}, {1, kNaN, kNaN}));
}

TEST(ReferenceElementwise, ComparisonsAndLogical) {
  Tensor a = f32({4}, {1, 2, kNaN, 3});
  Tensor b = f32({4}, {1, 3, kNaN, 2});
  EXPECT_TRUE(has_values(run("eq", {a, b}), DType::Bool, {4}, {1, 0, 0, 0}));
  EXPECT_TRUE(has_values(run("ne", {a, b}), DType::Bool, {4}, {0, 1, 1, 1}));
  EXPECT_TRUE(has_values(run("lt", {a, b}), DType::Bool, {4}, {0, 1, 0, 0}));
  EXPECT_TRUE(has_values(run("le", {a, b}), DType::Bool, {4}, {1, 1, 0, 0}));
  EXPECT_TRUE(has_values(run("gt", {a, b}), DType::Bool, {4}, {0, 0, 0, 1}));
  EXPECT_TRUE(has_values(run("ge", {a, b}), DType::Bool, {4}, {1, 0, 0, 1}));
  Tensor p = f32({4}, {0, 0, 2, kNaN});
  Tensor q = make(DType::I32, {4}, {0, 5, 0, 1});
  EXPECT_TRUE(has_values(run("logical_and", {p, q}), DType::Bool, {4}, {0, 0, 0, 1}));
  EXPECT_TRUE(has_values(run("logical_or", {p, q}), DType::Bool, {4}, {0, 1, 1, 1}));
  // Mixed dtypes compare in the promoted type: i64 3 vs f32 3.
  EXPECT_TRUE(has_values(run("eq", {make(DType::I64, {2}, {3, 4}), f32({2}, {3, 4.5})}),
                         DType::Bool, {2}, {1, 0}));
  // i64 comparisons are exact beyond 2^53 (doubles would call these equal).
  int64_t big = int64_t{1} << 53;
  EXPECT_TRUE(has_values(run("lt", {i64({1}, {big}), i64({1}, {big + 1})}), DType::Bool, {1}, {1}));
}

TEST(ReferenceElementwise, IntegerArithmeticIsExactAndWraps) {
  Tensor a = make(DType::I32, {3}, {2147483647, -7, 7});
  Tensor b = make(DType::I32, {3}, {1, 2, -2});
  EXPECT_TRUE(has_values(run("add", {a, b}), DType::I32, {3}, {-2147483648.0, -5, 5}));
  EXPECT_TRUE(has_values(run("fmod", {a, b}), DType::I32, {3}, {0, -1, 1}));  // C truncation
  EXPECT_TRUE(has_values(run("div", {a, b}), DType::F32, {3}, {2147483647.0, -3.5, -3.5}));
  EXPECT_TRUE(has_values(run("maximum", {a, b}), DType::I32, {3}, {2147483647, 2, 7}));
  int64_t big = (int64_t{1} << 53) + 1;  // not a double
  Tensor r = run("add", {i64({2}, {big, -big}), i64({2}, {2, -2})});
  EXPECT_EQ(r.data_as<int64_t>()[0], big + 2);
  EXPECT_EQ(r.data_as<int64_t>()[1], -big - 2);
  r = run("mul", {i64({1}, {big}), i64({1}, {3})});
  EXPECT_EQ(r.data_as<int64_t>()[0], big * 3);
  // pow on integers is exact: 3^39 needs 62 bits.
  r = run("pow", {i64({3}, {3, 2, -2}), i64({3}, {39, 0, 3})});
  EXPECT_EQ(r.data_as<int64_t>()[0], 4052555153018976267);
  EXPECT_EQ(r.data_as<int64_t>()[1], 1);
  EXPECT_EQ(r.data_as<int64_t>()[2], -8);
  // bool + bool stays bool (logical or), bool * bool is and.
  Tensor t = make(DType::Bool, {3}, {1, 1, 0});
  Tensor u = make(DType::Bool, {3}, {1, 0, 0});
  EXPECT_TRUE(has_values(run("add", {t, u}), DType::Bool, {3}, {1, 1, 0}));
  EXPECT_TRUE(has_values(run("mul", {t, u}), DType::Bool, {3}, {1, 0, 0}));
}

TEST(ReferenceElementwise, IntegerErrors) {
  expect_error(
      [] {
        run("fmod", {i64({2}, {5, 3}), i64({2}, {2, 0})});
      },
      "fmod: integer division by zero");
  expect_error(
      [] {
        run("pow", {i64({1}, {2}), i64({1}, {-1})});
      },
      "pow: integers to negative integer powers are not allowed");
}

TEST(ReferenceElementwise, TypePromotion) {
  // i32 with f32 computes in f32; u8 with i8 in i16.
  EXPECT_TRUE(has_values(run("add", {make(DType::I32, {2}, {1, 2}), f32({2}, {0.5, 0.25})}),
                         DType::F32, {2}, {1.5, 2.25}));
  EXPECT_TRUE(has_values(run("add", {make(DType::U8, {1}, {200}), make(DType::I8, {1}, {-100})}),
                         DType::I16, {1}, {100}));  // torch: u8 with i8 gives i16
  // A 0-dim f64 does not raise an f32 tensor: the result is f32.
  EXPECT_TRUE(
      has_values(run("add", {f32({1}, {1}), make(DType::F64, {}, {1e-10})}), DType::F32, {1}, {1}));
  // A 0-dim float does raise an integer tensor (higher category).
  EXPECT_TRUE(has_values(run("mul", {make(DType::I64, {2}, {1, 3}), make(DType::F64, {}, {0.5})}),
                         DType::F64, {2}, {0.5, 1.5}));
  // A 0-dim i64 is converted (wrapped) to the i32 tensor's dtype first.
  EXPECT_TRUE(
      has_values(run("add", {make(DType::I32, {1}, {1}), i64({}, {(int64_t{1} << 32) + 5})}),
                 DType::I32, {1}, {6}));
  // i64 inputs of a floating op convert to f32 with one rounding (2^53 + 1 -> 2^53 in f32).
  Tensor r = run("div", {i64({1}, {(int64_t{1} << 53) + 1}), i64({1}, {1})});
  EXPECT_EQ(r.item_as_double(0), 9007199254740992.0);
}

TEST(ReferenceElementwise, LowPrecisionRoundsOnce) {
  // bf16: 8 significant bits. 1 + 2^-8 is a tie and rounds to even (1); 1 + 3 * 2^-8 rounds up.
  Tensor a = make(DType::BF16, {2}, {1, 1});
  Tensor b = make(DType::BF16, {2}, {0.00390625, 0.01171875});
  EXPECT_TRUE(has_values(run("add", {a, b}), DType::BF16, {2}, {1, 1.015625}));
  // f16: 11 significant bits; 1 + 2^-11 ties to 1; 65520 overflows to inf.
  Tensor h = make(DType::F16, {3}, {1, 2048, 65504});
  Tensor k = make(DType::F16, {3}, {0.00048828125, 1, 16});
  EXPECT_TRUE(has_values(run("add", {h, k}), DType::F16, {3}, {1, 2048, kInf}));
  // The double result is rounded once: exp(1) in f16 is 2.71875.
  EXPECT_TRUE(has_values(run("exp", {make(DType::F16, {1}, {1})}), DType::F16, {1}, {2.71875}));
  // f16 with bf16 computes in f32.
  EXPECT_TRUE(has_values(run("add", {make(DType::F16, {1}, {1}), make(DType::BF16, {1}, {2})}),
                         DType::F32, {1}, {3}));
}

TEST(ReferenceElementwise, Where) {
  Tensor c = make(DType::Bool, {2, 1}, {1, 0});
  Tensor a = f32({3}, {1, 2, 3});
  Tensor b = make(DType::I32, {}, {-1});
  EXPECT_TRUE(has_values(run("where", {c, a, b}), DType::F32, {2, 3}, {1, 2, 3, -1, -1, -1}));
  Tensor r = run("where", {make(DType::Bool, {2}, {1, 0}), i64({2}, {(int64_t{1} << 60) + 1, 0}),
                           i64({2}, {0, -3})});
  EXPECT_EQ(r.data_as<int64_t>()[0], (int64_t{1} << 60) + 1);
  EXPECT_EQ(r.data_as<int64_t>()[1], -3);
}

TEST(ReferenceElementwise, Cast) {
  Tensor x = f32({5}, {-1.7, 1.7, 2.5, kNaN, 0});
  EXPECT_TRUE(
      has_values(run("cast", {x}, {{"dtype", DType::I32}}), DType::I32, {5}, {-1, 1, 2, 0, 0}));
  EXPECT_TRUE(
      has_values(run("cast", {x}, {{"dtype", DType::Bool}}), DType::Bool, {5}, {1, 1, 1, 1, 0}));
  EXPECT_TRUE(has_values(run("cast", {f32({1}, {0.1})}, {{"dtype", DType::F16}}), DType::F16, {1},
                         {0.0999755859375}));
  EXPECT_TRUE(has_values(run("cast", {f32({1}, {1.00390625})}, {{"dtype", DType::BF16}}),
                         DType::BF16, {1}, {1}));
  EXPECT_TRUE(has_values(run("cast", {i64({1}, {(int64_t{1} << 32) + 5})}, {{"dtype", DType::I32}}),
                         DType::I32, {1}, {5}));
  EXPECT_TRUE(has_values(run("cast", {make(DType::I32, {2}, {300, -1})}, {{"dtype", DType::U8}}),
                         DType::U8, {2}, {44, 255}));
  // i64 -> f32 rounds once (2^24 + 1 -> 2^24), i64 -> f64 exact up to 2^53.
  EXPECT_TRUE(has_values(run("cast", {i64({1}, {16777217})}, {{"dtype", DType::F32}}), DType::F32,
                         {1}, {16777216}));
  Tensor r = run("cast", {make(DType::F64, {1}, {4611686018427387904.0})}, {{"dtype", DType::I64}});
  EXPECT_EQ(r.data_as<int64_t>()[0], int64_t{1} << 62);
}

TEST(ReferenceElementwise, Clamp) {
  Tensor x = f32({4}, {-2, 0.5, 3, kNaN});
  EXPECT_TRUE(has_values(run("clamp", {x}, {{"min", 0.0}, {"max", 1.0}}), DType::F32, {4},
                         {0, 0.5, 1, kNaN}));
  EXPECT_TRUE(
      has_values(run("clamp", {x}, {{"min", int64_t{0}}}), DType::F32, {4}, {0, 0.5, 3, kNaN}));
  EXPECT_TRUE(has_values(run("clamp", {x}, {{"max", -1.0}}), DType::F32, {4}, {-2, -1, -1, kNaN}));
  // min > max: the result is max (min(max(x, lo), hi)).
  EXPECT_TRUE(has_values(run("clamp", {x}, {{"min", 2.0}, {"max", 1.0}}), DType::F32, {4},
                         {1, 1, 1, kNaN}));
  Tensor r = run("clamp", {i64({3}, {-5, (int64_t{1} << 60) + 1, 7})},
                 {{"min", int64_t{0}}, {"max", (int64_t{1} << 60) + 3}});
  EXPECT_EQ(r.data_as<int64_t>()[0], 0);
  EXPECT_EQ(r.data_as<int64_t>()[1], (int64_t{1} << 60) + 1);
  EXPECT_EQ(r.data_as<int64_t>()[2], 7);
}

TEST(ReferenceElementwise, StridedInputs) {
  Tensor base = arange(DType::F32, {3, 4});
  // Transposed view [4, 3] with strides [1, 4].
  Tensor t = base.strided({4, 3}, {1, 4});
  EXPECT_TRUE(has_values(run("neg", {t}), DType::F32, {4, 3},
                         {-0, -4, -8, -1, -5, -9, -2, -6, -10, -3, -7, -11}));
  // Every other element of row 1, starting at an offset.
  Tensor s = base.strided({2}, {2}, 5);
  EXPECT_TRUE(has_values(run("add", {s, f32({1}, {100})}), DType::F32, {2}, {105, 107}));
  // A broadcast (stride 0) view as input.
  Tensor e = base.strided({2, 4}, {0, 1});
  EXPECT_TRUE(has_values(run("mul", {e, f32({2, 1}, {1, -1})}), DType::F32, {2, 4},
                         {0, 1, 2, 3, -0, -1, -2, -3}));
}

// Every elementwise op of the registry has a floating and an integer reference rule (a new
// op without one fails here rather than deep inside a correctness test).
TEST(ReferenceElementwise, EveryRegisteredOpRunsOnEveryDtypeKind) {
  for (const OpDef& op : all_ops()) {
    if (op.kind != OpKind::Elementwise) continue;
    for (DType t : {DType::F32, DType::I32, DType::Bool}) {
      if (t == DType::Bool && (op.dtype_rule == DTypeRule::NotBool || op.name == "clamp")) continue;
      SCOPED_TRACE(fmt::format("{} on {}", op.name, dtype_name(t)));
      std::vector<Tensor> in;
      for (int i = 0; i < op.min_inputs; ++i) in.push_back(make(t, {2}, {1, 2}));
      Attrs attrs;
      if (op.name == "where") in[0] = make(DType::Bool, {2}, {1, 0});
      if (op.name == "cast") attrs.set("dtype", DType::F16);
      if (op.name == "clamp") attrs.set("min", 1.5);
      EXPECT_NO_THROW(run(op.name, in, attrs));
    }
  }
}

// --- Views and concat ------------------------------------------------------------------

TEST(ReferenceViews, ReshapeAndFlatten) {
  Tensor x = arange(DType::F32, {2, 3});
  EXPECT_TRUE(has_values(run("reshape", {x}, {{"shape", std::vector<int64_t>{3, -1}}}), DType::F32,
                         {3, 2}, {0, 1, 2, 3, 4, 5}));
  Tensor y = arange(DType::I64, {2, 3, 4});
  Tensor f = run("flatten", {y}, {{"start_dim", int64_t{1}}, {"end_dim", int64_t{2}}});
  EXPECT_EQ(f.shape(), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(f.item_as_double(13), 13);
  EXPECT_TRUE(has_values(run("flatten", {f32({}, {7})}), DType::F32, {1}, {7}));
  // Reshape of a strided (transposed) input follows its logical row-major order.
  Tensor t = x.strided({3, 2}, {1, 3});
  EXPECT_TRUE(has_values(run("reshape", {t}, {{"shape", std::vector<int64_t>{6}}}), DType::F32, {6},
                         {0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(has_values(run("reshape", {f32({0, 3}, {})}, {{"shape", std::vector<int64_t>{3, 0}}}),
                         DType::F32, {3, 0}, {}));
}

TEST(ReferenceViews, PermuteTranspose) {
  Tensor x = arange(DType::F32, {2, 3});
  EXPECT_TRUE(has_values(run("permute", {x}, {{"dims", std::vector<int64_t>{1, 0}}}), DType::F32,
                         {3, 2}, {0, 3, 1, 4, 2, 5}));
  // out[k][i][0] = in[i][0][k]
  Tensor y = arange(DType::F32, {2, 1, 3});
  EXPECT_TRUE(has_values(run("permute", {y}, {{"dims", std::vector<int64_t>{-1, 0, 1}}}),
                         DType::F32, {3, 2, 1}, {0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(has_values(run("transpose", {x}, {{"dim0", int64_t{-1}}, {"dim1", int64_t{0}}}),
                         DType::F32, {3, 2}, {0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(has_values(run("transpose", {x}), DType::F32, {3, 2}, {0, 3, 1, 4, 2, 5}));
}

TEST(ReferenceViews, Expand) {
  Tensor x = f32({3, 1}, {1, 2, 3});
  Tensor e = run("expand", {x}, {{"shape", std::vector<int64_t>{2, -1, 4}}});
  std::vector<double> want;
  for (int r = 0; r < 2; ++r)
    for (double v : {1, 2, 3})
      for (int c = 0; c < 4; ++c) want.push_back(v);
  EXPECT_TRUE(has_values(e, DType::F32, {2, 3, 4}, want));
  EXPECT_TRUE(has_values(run("expand", {x}, {{"shape", std::vector<int64_t>{3, 0}}}), DType::F32,
                         {3, 0}, {}));
}

TEST(ReferenceViews, Slice) {
  Tensor x = arange(DType::I32, {10});
  EXPECT_TRUE(has_values(
      run("slice", {x}, {{"start", int64_t{-8}}, {"end", int64_t{9}}, {"step", int64_t{3}}}),
      DType::I32, {3}, {2, 5, 8}));
  EXPECT_TRUE(has_values(run("slice", {x}, {{"start", int64_t{5}}, {"end", int64_t{2}}}),
                         DType::I32, {0}, {}));
  EXPECT_TRUE(has_values(run("slice", {x}, {{"end", int64_t{100}}, {"step", int64_t{4}}}),
                         DType::I32, {3}, {0, 4, 8}));
  Tensor y = arange(DType::F32, {2, 3});
  EXPECT_TRUE(has_values(run("slice", {y}, {{"dim", int64_t{1}}, {"start", int64_t{1}}}),
                         DType::F32, {2, 2}, {1, 2, 4, 5}));
  EXPECT_TRUE(has_values(run("slice", {y}, {{"dim", int64_t{-2}}, {"start", int64_t{-1}}}),
                         DType::F32, {1, 3}, {3, 4, 5}));
}

TEST(ReferenceViews, SqueezeUnsqueeze) {
  Tensor x = f32({1, 3, 1}, {1, 2, 3});
  EXPECT_TRUE(has_values(run("squeeze", {x}), DType::F32, {3}, {1, 2, 3}));
  EXPECT_TRUE(has_values(run("squeeze", {x}, {{"dims", std::vector<int64_t>{-1}}}), DType::F32,
                         {1, 3}, {1, 2, 3}));
  EXPECT_TRUE(has_values(run("unsqueeze", {f32({3}, {1, 2, 3})}, {{"dim", int64_t{-1}}}),
                         DType::F32, {3, 1}, {1, 2, 3}));
  EXPECT_TRUE(has_values(run("unsqueeze", {f32({3}, {1, 2, 3})}, {{"dim", int64_t{0}}}), DType::F32,
                         {1, 3}, {1, 2, 3}));
  EXPECT_TRUE(
      has_values(run("unsqueeze", {f32({}, {5})}, {{"dim", int64_t{0}}}), DType::F32, {1}, {5}));
}

TEST(ReferenceViews, ViewsKeepExactI64) {
  int64_t big = (int64_t{1} << 62) + 1;
  Tensor r = run("transpose", {i64({1, 2}, {big, -big})});
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r.data_as<int64_t>()[0], big);
  EXPECT_EQ(r.data_as<int64_t>()[1], -big);
}

TEST(ReferenceViews, Concat) {
  Tensor a = make(DType::I32, {2}, {1, 2});
  Tensor b = f32({3}, {0.5, 1.5, 2.5});
  EXPECT_TRUE(has_values(run("concat", {a, b}), DType::F32, {5}, {1, 2, 0.5, 1.5, 2.5}));
  Tensor c = arange(DType::F32, {2, 2});
  Tensor d = f32({2, 1}, {10, 20});
  Tensor e = f32({2, 0}, {});
  EXPECT_TRUE(has_values(run("concat", {c, e, d}, {{"dim", int64_t{-1}}}), DType::F32, {2, 3},
                         {0, 1, 10, 2, 3, 20}));
  // A strided input and exact i64 values.
  Tensor t = c.strided({2, 2}, {1, 2});  // transpose
  EXPECT_TRUE(has_values(run("concat", {t, c}), DType::F32, {4, 2}, {0, 2, 1, 3, 0, 1, 2, 3}));
  int64_t big = (int64_t{1} << 55) + 3;
  Tensor r = run("concat", {i64({1}, {big}), make(DType::I32, {1}, {-1})});
  EXPECT_EQ(r.dtype(), DType::I64);
  EXPECT_EQ(r.data_as<int64_t>()[0], big);
  EXPECT_EQ(r.data_as<int64_t>()[1], -1);
}

// --- Reductions --------------------------------------------------------------------------

TEST(ReferenceReductions, SumProdAxesKeepdim) {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  using V = std::vector<int64_t>;
  EXPECT_TRUE(has_values(run("sum", {x}, {{"axes", V{1}}}), DType::F32, {2}, {6, 15}));
  EXPECT_TRUE(has_values(run("sum", {x}, {{"axes", V{1}}, {"keepdim", true}}), DType::F32, {2, 1},
                         {6, 15}));
  EXPECT_TRUE(has_values(run("sum", {x}, {{"axes", V{-2}}}), DType::F32, {3}, {5, 7, 9}));
  EXPECT_TRUE(has_values(run("sum", {x}), DType::F32, {}, {21}));
  EXPECT_TRUE(has_values(run("sum", {x}, {{"keepdim", true}}), DType::F32, {1, 1}, {21}));
  // An empty axes list reduces every dim, as torch.sum(x, dim=[]) does.
  EXPECT_TRUE(has_values(run("sum", {x}, {{"axes", V{}}}), DType::F32, {}, {21}));
  EXPECT_TRUE(has_values(run("prod", {x}, {{"axes", V{0}}}), DType::F32, {3}, {4, 10, 18}));
  EXPECT_TRUE(has_values(run("prod", {x}, {{"axes", V{1, 0}}}), DType::F32, {}, {720}));
  EXPECT_TRUE(has_values(run("sum", {f32({}, {4})}), DType::F32, {}, {4}));
  // Strided input: the transpose of x.
  EXPECT_TRUE(has_values(run("sum", {x.strided({3, 2}, {1, 3})}, {{"axes", V{1}}}), DType::F32, {3},
                         {5, 7, 9}));
}

TEST(ReferenceReductions, EmptyReductions) {
  using V = std::vector<int64_t>;
  Tensor z = f32({0, 3}, {});
  EXPECT_TRUE(has_values(run("sum", {z}, {{"axes", V{0}}}), DType::F32, {3}, {0, 0, 0}));
  EXPECT_TRUE(has_values(run("prod", {z}, {{"axes", V{0}}}), DType::F32, {3}, {1, 1, 1}));
  EXPECT_TRUE(has_values(run("mean", {z}, {{"axes", V{0}}}), DType::F32, {3}, {kNaN, kNaN, kNaN}));
  EXPECT_TRUE(has_values(run("sum", {z}, {{"axes", V{1}}}), DType::F32, {0}, {}));
  EXPECT_TRUE(has_values(run("max", {z}, {{"axes", V{1}}}), DType::F32, {0}, {}));
}

TEST(ReferenceReductions, IntegerSumsAreExact) {
  using V = std::vector<int64_t>;
  Tensor x = make(DType::I32, {2}, {2147483647, 2147483647});
  EXPECT_TRUE(has_values(run("sum", {x}), DType::I64, {}, {4294967294.0}));
  Tensor r = run("sum", {i64({2}, {int64_t{1} << 53, 1})});
  EXPECT_EQ(r.data_as<int64_t>()[0], (int64_t{1} << 53) + 1);
  r = run("prod", {i64({2}, {(int64_t{1} << 40) + 1, 3})});
  EXPECT_EQ(r.data_as<int64_t>()[0], ((int64_t{1} << 40) + 1) * 3);
  EXPECT_TRUE(has_values(run("sum", {make(DType::Bool, {3}, {1, 0, 1})}), DType::I64, {}, {2}));
  EXPECT_TRUE(has_values(run("prod", {make(DType::U8, {2, 2}, {2, 3, 200, 2})}, {{"axes", V{1}}}),
                         DType::I64, {2}, {6, 400}));
  r = run("max", {i64({2}, {(int64_t{1} << 53) + 1, int64_t{1} << 53})});
  EXPECT_EQ(r.dtype(), DType::I64);
  EXPECT_EQ(r.data_as<int64_t>()[0], (int64_t{1} << 53) + 1);
  EXPECT_TRUE(has_values(run("min", {make(DType::I8, {3}, {5, -128, 7})}), DType::I8, {}, {-128}));
  EXPECT_TRUE(
      has_values(run("mean", {make(DType::I32, {4}, {1, 2, 3, 5})}), DType::F32, {}, {2.75}));
}

TEST(ReferenceReductions, MaxMinPropagateNaN) {
  using V = std::vector<int64_t>;
  Tensor x = f32({2, 3}, {1, kNaN, 3, 4, -kInf, 6});
  EXPECT_TRUE(has_values(run("max", {x}, {{"axes", V{1}}}), DType::F32, {2}, {kNaN, 6}));
  EXPECT_TRUE(has_values(run("min", {x}, {{"axes", V{1}}}), DType::F32, {2}, {kNaN, -kInf}));
  EXPECT_TRUE(has_values(run("max", {x}, {{"axes", V{0}}}), DType::F32, {3}, {4, kNaN, 6}));
  EXPECT_TRUE(has_values(run("sum", {x}, {{"axes", V{0}}}), DType::F32, {3}, {5, kNaN, 9}));
}

TEST(ReferenceReductions, MeanVar) {
  using V = std::vector<int64_t>;
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 6, 8});
  EXPECT_TRUE(has_values(run("mean", {x}), DType::F32, {}, {4}));
  EXPECT_TRUE(has_values(run("mean", {x}, {{"axes", V{-1}}, {"keepdim", true}}), DType::F32, {2, 1},
                         {2, 6}));
  EXPECT_TRUE(has_values(run("var", {x}, {{"axes", V{1}}}), DType::F32, {2}, {1, 4}));
  EXPECT_TRUE(has_values(run("var", {x}, {{"axes", V{1}}, {"correction", 0.0}}), DType::F32, {2},
                         {2.0 / 3, 8.0 / 3}, 1e-7));
  EXPECT_TRUE(has_values(run("var", {x}, {{"axes", V{1}}, {"correction", int64_t{2}}}), DType::F32,
                         {2}, {2, 8}));
  // count - correction <= 0: 0 / 0 = NaN, m2 / 0 = inf (torch clamps the divisor at 0).
  EXPECT_TRUE(has_values(run("var", {f32({1}, {5})}), DType::F32, {}, {kNaN}));
  EXPECT_TRUE(has_values(run("var", {f32({2}, {1, 3})}, {{"correction", int64_t{3}}}), DType::F32,
                         {}, {kInf}));
  // Two-pass in double: no cancellation around a large mean.
  EXPECT_TRUE(has_values(run("var", {make(DType::F64, {3}, {1e9 + 1, 1e9 + 2, 1e9 + 3})}),
                         DType::F64, {}, {1}));
  EXPECT_TRUE(has_values(run("mean", {make(DType::F16, {2}, {65504, 65504})}), DType::F16, {},
                         {65504}));  // accumulates in double, no f16 overflow
}

TEST(ReferenceReductions, ArgmaxArgmin) {
  Tensor x = f32({2, 3}, {1, 3, 3, 5, 2, 5});
  EXPECT_TRUE(has_values(run("argmax", {x}), DType::I64, {}, {3}));  // flattened, first tie
  EXPECT_TRUE(has_values(run("argmax", {x}, {{"axis", int64_t{1}}}), DType::I64, {2}, {1, 0}));
  EXPECT_TRUE(has_values(run("argmin", {x}, {{"axis", int64_t{-2}}, {"keepdim", true}}), DType::I64,
                         {1, 3}, {0, 1, 0}));
  EXPECT_TRUE(has_values(run("argmin", {x}, {{"keepdim", true}}), DType::I64, {1, 1}, {0}));
  // NaN is the maximum for argmax and the minimum for argmin; the first NaN wins.
  Tensor n = f32({5}, {1, kNaN, -kInf, kNaN, 9});
  EXPECT_TRUE(has_values(run("argmax", {n}), DType::I64, {}, {1}));
  EXPECT_TRUE(has_values(run("argmin", {n}), DType::I64, {}, {1}));
  EXPECT_TRUE(has_values(run("argmin", {f32({3}, {2, -1, -1})}), DType::I64, {}, {1}));
  // Integers compare exactly.
  EXPECT_TRUE(has_values(run("argmax", {i64({2}, {int64_t{1} << 53, (int64_t{1} << 53) + 1})}),
                         DType::I64, {}, {1}));
  EXPECT_TRUE(has_values(run("argmax", {f32({}, {4})}), DType::I64, {}, {0}));
  // A strided input: argmax along dim 0 of the transpose of x = along dim 1 of x.
  EXPECT_TRUE(has_values(run("argmax", {x.strided({3, 2}, {1, 3})}, {{"axis", int64_t{0}}}),
                         DType::I64, {2}, {1, 0}));
}

// --- Composites --------------------------------------------------------------------------

TEST(ReferenceComposites, Softmax) {
  const double tol = 1e-7;
  Tensor x = f32({3}, {1, 2, 3});
  EXPECT_TRUE(has_values(run("softmax", {x}), DType::F32, {3},
                         {0.09003057317038046, 0.24472847105479764, 0.6652409557748219}, tol));
  EXPECT_TRUE(has_values(run("log_softmax", {x}), DType::F32, {3},
                         {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806}, tol));
  Tensor y = f32({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(has_values(
      run("softmax", {y}, {{"axis", int64_t{0}}}), DType::F32, {2, 2},
      {0.11920292202211755, 0.11920292202211755, 0.8807970779778823, 0.8807970779778823}, tol));
  // Max subtraction: no overflow; -inf gets 0.
  EXPECT_TRUE(has_values(run("softmax", {f32({2}, {1000, 1000})}), DType::F32, {2}, {0.5, 0.5}));
  EXPECT_TRUE(has_values(run("softmax", {f32({2}, {-kInf, 0})}), DType::F32, {2}, {0, 1}));
  EXPECT_TRUE(has_values(run("log_softmax", {f32({2}, {-kInf, 0})}), DType::F32, {2}, {-kInf, 0}));
  EXPECT_TRUE(has_values(run("softmax", {f32({2}, {kNaN, 0})}), DType::F32, {2}, {kNaN, kNaN}));
  EXPECT_TRUE(
      has_values(run("softmax", {make(DType::I32, {2}, {0, 0})}), DType::F32, {2}, {0.5, 0.5}));
  EXPECT_TRUE(
      has_values(run("softmax", {make(DType::F16, {2}, {0, 0})}), DType::F16, {2}, {0.5, 0.5}));
  EXPECT_TRUE(has_values(run("softmax", {f32({2, 0}, {})}), DType::F32, {2, 0}, {}));
  EXPECT_TRUE(has_values(run("softmax", {f32({}, {3})}), DType::F32, {}, {1}));
}

TEST(ReferenceComposites, LayerNorm) {
  const double tol = 1e-6;
  Tensor x = f32({2, 3}, {1, 2, 3, 5, 5, 5});
  EXPECT_TRUE(has_values(run("layer_norm", {x}, {{"eps", 0.0}}), DType::F32, {2, 3},
                         {-1.224744871391589, 0, 1.224744871391589, kNaN, kNaN, kNaN}, tol));
  // Default eps 1e-5 keeps a constant row finite (0).
  Tensor w = f32({3}, {1, 2, 3});
  Tensor b = f32({3}, {0, 1, 0});
  EXPECT_TRUE(has_values(run("layer_norm", {x, w, b}), DType::F32, {2, 3},
                         {-1.2247356859083902, 1, 3.6742070577251704, 0, 1, 0}, tol));
  Tensor y = f32({1, 2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(has_values(
      run("layer_norm", {y}, {{"dims", int64_t{2}}, {"eps", 0.0}}), DType::F32, {1, 2, 2},
      {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738}, tol));
}

TEST(ReferenceComposites, RmsNorm) {
  const double tol = 1e-6;
  Tensor x = f32({1, 2}, {3, 4});
  EXPECT_TRUE(has_values(run("rms_norm", {x}, {{"eps", 0.0}}), DType::F32, {1, 2},
                         {0.8485281374238571, 1.131370849898476}, tol));
  EXPECT_TRUE(has_values(run("rms_norm", {x, f32({2}, {2, 0.5})}, {{"eps", 0.0}}), DType::F32,
                         {1, 2}, {1.697056274847714, 0.565685424949238}, tol));
  Tensor y = f32({2, 2}, {1, 1, 3, 4});
  EXPECT_TRUE(has_values(
      run("rms_norm", {y}, {{"dims", int64_t{2}}, {"eps", 0.0}}), DType::F32, {2, 2},
      {0.3849001794597505, 0.3849001794597505, 1.1547005383792515, 1.539600717839002}, tol));
}

// --- Linear algebra and CNN ops ----------------------------------------------------------

TEST(ReferenceLinalg, Matmul) {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3, 2}, {1, 0, 0, 1, 1, 1});
  EXPECT_TRUE(has_values(run("matmul", {a, b}), DType::F32, {2, 2}, {4, 5, 10, 11}));
  Tensor v = f32({3}, {1, -1, 2});
  EXPECT_TRUE(has_values(run("matmul", {v, v}), DType::F32, {}, {6}));       // dot
  EXPECT_TRUE(has_values(run("matmul", {a, v}), DType::F32, {2}, {5, 11}));  // matrix-vector
  EXPECT_TRUE(has_values(run("matmul", {v, b}), DType::F32, {2}, {3, 1}));   // vector-matrix
  Tensor batch = f32({2, 1, 3}, {1, 0, 0, 0, 0, 1});
  EXPECT_TRUE(has_values(run("matmul", {batch, b}), DType::F32, {2, 1, 2}, {1, 0, 1, 1}));
  EXPECT_TRUE(has_values(run("bmm", {batch, f32({2, 3, 1}, {1, 2, 3, 4, 5, 6})}), DType::F32,
                         {2, 1, 1}, {1, 6}));
  // K = 0: zeros. bf16 rounds once: 1 + 3 * 2^-8 rounds to 1 + 2^-6, where rounding each
  // partial sum would stay at 1.
  EXPECT_TRUE(has_values(run("matmul", {f32({2, 0}, {}), f32({0, 3}, {})}), DType::F32, {2, 3},
                         {0, 0, 0, 0, 0, 0}));
  Tensor h = make(DType::BF16, {1, 4}, {1, 0.00390625, 0.00390625, 0.00390625});
  EXPECT_TRUE(has_values(run("matmul", {h, make(DType::BF16, {4}, {1, 1, 1, 1})}), DType::BF16, {1},
                         {1.015625}));
}

TEST(ReferenceLinalg, Conv2d) {
  // 1x1x3x3 input, 2x2 kernel of ones, padding 1: sums of the windows over the padded input.
  Tensor x = f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  EXPECT_TRUE(has_values(
      run("conv2d", {x, w, f32({1}, {0.5})}, {{"padding", int64_t{1}}, {"stride", int64_t{2}}}),
      DType::F32, {1, 1, 2, 2}, {1.5, 5.5, 11.5, 28.5}));
  // groups=2: each output channel sees its own input channel; dilation 2 picks the corners.
  Tensor x2 =
      make(DType::F32, {1, 2, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  Tensor w2 = f32({2, 1, 2, 2}, {1, 1, 1, 1, 1, 2, 3, 4});
  EXPECT_TRUE(
      has_values(run("conv2d", {x2, w2}, {{"groups", int64_t{2}}, {"dilation", int64_t{2}}}),
                 DType::F32, {1, 2, 1, 1}, {20, 10}));
}

TEST(ReferenceLinalg, Pools) {
  Tensor x = f32({1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  using A = std::vector<int64_t>;
  Attrs k2{{"kernel", A{2, 2}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}};
  EXPECT_TRUE(has_values(run("max_pool2d", {x}, k2), DType::F32, {1, 2, 2}, {1, 3, 7, 9}));
  // count_include_pad: every window counts 4; without: the taps inside the input.
  EXPECT_TRUE(has_values(run("avg_pool2d", {x}, k2), DType::F32, {1, 2, 2}, {0.25, 1.25, 2.75, 7}));
  Attrs k2x = k2;
  k2x.set("count_include_pad", false);
  EXPECT_TRUE(has_values(run("avg_pool2d", {x}, k2x), DType::F32, {1, 2, 2}, {1, 2.5, 5.5, 7}));
  // ceil_mode: a last window clipped by the input's end counts only what it covers, even with
  // count_include_pad (torch clips at the padded input's end).
  Attrs c{{"kernel", A{2, 2}}, {"ceil_mode", true}};
  EXPECT_TRUE(has_values(run("avg_pool2d", {x}, c), DType::F32, {1, 2, 2}, {3, 4.5, 7.5, 9}));
  EXPECT_TRUE(has_values(run("max_pool2d", {x}, c), DType::F32, {1, 2, 2}, {5, 6, 8, 9}));
  // NaN wins over everything; padding never does.
  Tensor n = f32({1, 2, 2}, {-5, kNaN, -7, -8});
  EXPECT_TRUE(has_values(
      run("max_pool2d", {n}, {{"kernel", A{2, 2}}, {"stride", A{1, 1}}, {"padding", A{1, 1}}}),
      DType::F32, {1, 3, 3}, {-5, kNaN, kNaN, -5, kNaN, kNaN, -7, -7, -8}));
  EXPECT_TRUE(has_values(run("max_pool2d", {make(DType::I8, {1, 2, 2}, {-5, -128, -7, -8})},
                             {{"kernel", A{2, 2}}, {"stride", A{1, 1}}, {"padding", A{1, 1}}}),
                         DType::I8, {1, 3, 3}, {-5, -5, -128, -5, -5, -8, -7, -7, -8}));
  EXPECT_TRUE(has_values(run("global_avg_pool2d", {x}), DType::F32, {1, 1, 1}, {5}));
}

// The composites' decompositions (interpreted) agree with their direct reference kernels.
TEST(ReferenceLinalg, DecompositionsMatchTheOps) {
  struct Comp {
    const char* op;
    std::vector<Tensor> in;
    Attrs attrs;
  };
  auto r = [](DType t, std::vector<int64_t> s, uint64_t seed) {
    return random_tensor(t, std::move(s), seed);
  };
  Tensor nan_bias = f32({3}, {1, kNaN, 2});
  std::vector<Comp> comps = {
      {"linear",
       {r(DType::F32, {2, 3, 5}, 1), r(DType::F32, {4, 5}, 2), r(DType::F32, {4}, 3)},
       {}},
      {"linear", {r(DType::F64, {5}, 4), r(DType::F64, {3, 5}, 5)}, {}},
      {"linear",
       {r(DType::BF16, {3, 8}, 6), r(DType::BF16, {2, 8}, 7), r(DType::BF16, {2}, 8)},
       {}},
      {"addmm", {r(DType::F32, {3}, 9), r(DType::F32, {2, 4}, 10), r(DType::F32, {4, 3}, 11)}, {}},
      {"addmm",
       {r(DType::F32, {2, 1}, 12), r(DType::F32, {2, 4}, 13), r(DType::F32, {4, 3}, 14)},
       {{"alpha", 0.5}, {"beta", -2.0}}},
      {"addmm",
       {nan_bias, r(DType::F32, {2, 4}, 15), r(DType::F32, {4, 3}, 16)},
       {{"alpha", 3.0}, {"beta", 0.0}}},
      {"addmm",
       {r(DType::F16, {2, 3}, 17), r(DType::F16, {2, 4}, 18), r(DType::F16, {4, 3}, 19)},
       {{"beta", 0.25}}},
      {"global_avg_pool2d", {r(DType::F32, {2, 3, 5, 7}, 20)}, {}},
      {"global_avg_pool2d", {r(DType::BF16, {4, 3, 3}, 21)}, {}},
  };
  for (const Comp& c : comps) {
    Graph g;
    std::vector<int> ids;
    for (size_t i = 0; i < c.in.size(); ++i)
      ids.push_back(
          g.add_input(fmt::format("x{}", i), c.in[i].dtype(), make_shape(c.in[i].shape())));
    g.add_output(g.add_node(c.op, ids, c.attrs), "y");
    Graph d = decompose_and_bind(g, {});
    for (const auto& n : d.nodes()) EXPECT_NE(n->op->kind, OpKind::Composite) << n->op_name();
    Tensor want = interpret(g, c.in)[0], got = interpret(d, c.in)[0];
    SCOPED_TRACE(to_text(d));
    ASSERT_EQ(got.dtype(), want.dtype());
    ASSERT_EQ(got.shape(), want.shape());
    // f16/bf16: the decompositions round the product before adding the bias.
    double tol = is_low_precision(want.dtype()) ? 1e-2 : 1e-6;
    for (int64_t i = 0; i < want.numel(); ++i) {
      double a = got.item_as_double(i), e = want.item_as_double(i);
      if (std::isnan(e)) {
        EXPECT_TRUE(std::isnan(a)) << i;
        continue;
      }
      EXPECT_FALSE(std::isnan(a)) << i;  // beta = 0 drops a NaN bias
      EXPECT_LE(std::fabs(a - e), tol * (1 + std::fabs(e))) << c.op << " element " << i;
    }
  }
}

// --- Sources -----------------------------------------------------------------------------

Tensor run_source(std::string_view op, Attrs attrs) {
  Graph g;
  g.add_output(g.add_node(op, {}, std::move(attrs)));
  return interpret(g, {}).at(0);
}

TEST(ReferenceSources, FullIotaConstant) {
  using V = std::vector<int64_t>;
  EXPECT_TRUE(has_values(run_source("full", {{"shape", V{2, 2}}, {"value", 1.5}}), DType::F32,
                         {2, 2}, {1.5, 1.5, 1.5, 1.5}));
  int64_t big = (int64_t{1} << 60) + 1;
  Tensor f = run_source("full", {{"shape", V{1}}, {"value", big}, {"dtype", DType::I64}});
  EXPECT_EQ(f.data_as<int64_t>()[0], big);
  EXPECT_TRUE(
      has_values(run_source("full", {{"shape", V{}}, {"value", 0.1}, {"dtype", DType::BF16}}),
                 DType::BF16, {}, {0.10009765625}));
  EXPECT_TRUE(
      has_values(run_source("full", {{"shape", V{0, 2}}, {"value", 1.0}}), DType::F32, {0, 2}, {}));
  EXPECT_TRUE(
      has_values(run_source("iota", {{"size", int64_t{4}}}), DType::I64, {4}, {0, 1, 2, 3}));
  EXPECT_TRUE(has_values(
      run_source("iota", {{"size", int64_t{4}}, {"start", int64_t{2}}, {"step", int64_t{-3}}}),
      DType::I64, {4}, {2, -1, -4, -7}));
  EXPECT_TRUE(has_values(
      run_source("iota",
                 {{"size", int64_t{3}}, {"start", 0.5}, {"step", 0.25}, {"dtype", DType::F32}}),
      DType::F32, {3}, {0.5, 0.75, 1}));
  EXPECT_TRUE(has_values(run_source("iota", {{"size", int64_t{0}}}), DType::I64, {0}, {}));

  Graph g;
  Tensor c = f32({2}, {1, 2});
  int k = g.add_constant(c, "w");
  g.add_output(k);
  g.add_output(g.add_node("add", {k, k}), "twice");
  std::vector<Tensor> out = interpret(g, {});
  EXPECT_TRUE(has_values(out[0], DType::F32, {2}, {1, 2}));
  EXPECT_TRUE(has_values(out[1], DType::F32, {2}, {2, 4}));
  out[0].set_from_double(0, 99);  // outputs are copies: the constant is unchanged
  EXPECT_TRUE(has_values(interpret(g, {})[0], DType::F32, {2}, {1, 2}));
}

// --- The interpreter ---------------------------------------------------------------------

sym::Expr S(const char* name) {
  return sym::make_symbol(name);
}

TEST(Interpreter, MultiNodeGraphWithSymbols) {
  // y = sum(exp(x) * w, axis 1) + b, with x: f32[s0, 3]
  Graph g;
  int x = g.add_input("x", DType::F32, {S("s0"), 3});
  int w = g.add_input("w", DType::F32, {3});
  int b = g.add_input("b", DType::F32, {S("s0")});
  int e = g.add_node("exp", {x});
  int m = g.add_node("mul", {e, w});
  int s = g.add_node("sum", {m}, {{"axes", std::vector<int64_t>{1}}});
  g.add_output(g.add_node("add", {s, b}), "y");
  g.add_output(x, "x_out");  // an input as output comes back contiguous
  Tensor xv = f32({2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor base = f32({3, 2}, {0, 0, 0, 0, 0, 0});
  std::vector<Tensor> out =
      interpret(g, {base.strided({2, 3}, {1, 2}), f32({3}, {1, 2, 3}), f32({2}, {10, 20})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(has_values(out[0], DType::F32, {2}, {16, 26}));
  EXPECT_TRUE(has_values(out[1], DType::F32, {2, 3}, {0, 0, 0, 0, 0, 0}));
  // Another binding of s0.
  out = interpret(g, {f32({1, 3}, {0, 0, 0}), f32({3}, {1, 1, 1}), f32({1}, {0})});
  EXPECT_TRUE(has_values(out[0], DType::F32, {1}, {3}));
  // s0 bound to 0: empty results.
  out = interpret(g, {f32({0, 3}, {}), f32({3}, {1, 1, 1}), f32({0}, {})});
  EXPECT_TRUE(has_values(out[0], DType::F32, {0}, {}));
}

TEST(Interpreter, SqueezeKeepsSymbolicDimBoundToOne) {
  Graph g;
  int x = g.add_input("x", DType::F32, {S("s0"), 1, 3});
  g.add_output(g.add_node("squeeze", {x}));
  std::vector<Tensor> out = interpret(g, {f32({1, 1, 3}, {1, 2, 3})});
  EXPECT_TRUE(has_values(out[0], DType::F32, {1, 3}, {1, 2, 3}));
}

TEST(Interpreter, InputChecks) {
  Graph g;
  int x = g.add_input("x", DType::F32, {4, S("s0")});
  int y = g.add_input("y", DType::F32, {S("s0")});
  g.add_output(g.add_node("add", {x, y}));
  Tensor x43 = f32({4, 3}, std::vector<double>(12, 0));
  expect_error([&] { interpret(g, {x43}); }, "the graph has 2 inputs, got 1 tensors");
  expect_error(
      [&] {
        interpret(g, {f32({4, 3, 2}, std::vector<double>(24, 0)), f32({3}, {0, 0, 0})});
      },
      "input x: expected shape [4, s0], got [4, 3, 2]");
  expect_error(
      [&] {
        interpret(g, {f32({5, 3}, std::vector<double>(15, 0)), f32({3}, {0, 0, 0})});
      },
      "input x: expected shape [4, s0], got [5, 3]");
  expect_error(
      [&] {
        interpret(g, {x43, make(DType::F64, {3}, {0, 0, 0})});
      },
      "input y: expected dtype f32, got f64");
  expect_error(
      [&] {
        interpret(g, {x43, f32({2}, {0, 0})});
      },
      "input y: expected shape [s0] with s0 = 3 (bound by input x), got [2]");
  expect_error([&] { interpret(g, {x43, Tensor()}); }, "input y: the tensor is undefined");
}

TEST(Interpreter, RuntimeErrorsAndDeadNodes) {
  Graph g;
  int x = g.add_input("x", DType::I64, {S("n")});
  int z = g.add_node(
      "full", {},
      {{"shape", std::vector<int64_t>{1}}, {"value", int64_t{0}}, {"dtype", DType::I64}});
  g.add_node("fmod", {x, z});  // dead: never evaluated, so its error never surfaces
  int m = g.add_node("max", {x}, {{"axes", std::vector<int64_t>{0}}});
  g.add_output(m);
  EXPECT_TRUE(has_values(interpret(g, {i64({2}, {4, 9})})[0], DType::I64, {}, {9}));
  expect_error([&] { interpret(g, {i64({0}, {})}); },
               "max: reduction over dim 0 of extent 0 has no identity");

  Graph h;
  int a = h.add_input("a", DType::F32, {S("n")});
  h.add_output(h.add_node("argmax", {a}, {{"axis", int64_t{0}}}));
  expect_error([&] { interpret(h, {f32({0}, {})}); },
               "argmax: reduction over dim 0 of extent 0 has no result");
}

}  // namespace
}  // namespace coil
