// i16, u16, u32 and u64 (issue 27): names, torch's promotion, and each op on values at the edges
// of the type (wrap-around, the top bit of u64, division by the largest value) through the
// compiled C++ and the reference interpreter, both checked element by element against values
// computed here with C++'s own arithmetic on the same type.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/check_graph.h"

namespace coil {
namespace {

using testing::graph_from_text;

TEST(IntDtypes, NamesSizesAndKinds) {
  struct Row {
    DType t;
    const char* name;
    int bytes;
    bool is_signed;
  };
  for (Row r : {Row{DType::I16, "i16", 2, true}, Row{DType::U16, "u16", 2, false},
                Row{DType::U32, "u32", 4, false}, Row{DType::U64, "u64", 8, false}}) {
    EXPECT_EQ(dtype_name(r.t), r.name);
    EXPECT_EQ(parse_dtype(r.name), r.t);
    EXPECT_EQ(dtype_size(r.t), r.bytes);
    EXPECT_TRUE(is_integral(r.t));
    EXPECT_FALSE(is_floating(r.t));
    EXPECT_EQ(is_signed_integer(r.t), r.is_signed) << r.name;
    EXPECT_EQ(compute_dtype(r.t), r.t);
  }
}

// torch.promote_types (torch 2.3 and later).
TEST(IntDtypes, PromotionFollowsTorch) {
  EXPECT_EQ(promote_types(DType::U8, DType::I8), DType::I16);
  EXPECT_EQ(promote_types(DType::I8, DType::U8), DType::I16);
  EXPECT_EQ(promote_types(DType::U8, DType::I16), DType::I16);
  EXPECT_EQ(promote_types(DType::I8, DType::I16), DType::I16);
  EXPECT_EQ(promote_types(DType::Bool, DType::I16), DType::I16);
  EXPECT_EQ(promote_types(DType::I16, DType::I32), DType::I32);
  EXPECT_EQ(promote_types(DType::I16, DType::F16), DType::F16);
  for (DType u : {DType::U16, DType::U32, DType::U64}) {
    EXPECT_EQ(promote_types(u, u), u);
    for (DType f : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
      EXPECT_EQ(promote_types(u, f), f);
      EXPECT_EQ(promote_types(f, u), f);
    }
    for (DType other : {DType::Bool, DType::U8, DType::I8, DType::I16, DType::I32, DType::I64,
                        DType::U16, DType::U32, DType::U64}) {
      if (other == u) continue;
      try {
        promote_types(u, other);
        ADD_FAILURE() << dtype_name(u) << " with " << dtype_name(other) << " promoted";
      } catch (const Error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find(std::string(dtype_name(u))), std::string::npos) << m;
        EXPECT_NE(m.find(std::string(dtype_name(other))), std::string::npos) << m;
      }
    }
  }
}

TEST(IntDtypes, MixedUnsignedOperandsAreAnErrorNamingTheOp) {
  try {
    graph_from_text("input a: u32[2]\ninput b: i32[2]\ny = add(a, b)\noutput y\n");
    ADD_FAILURE() << "u32 + i32 was accepted";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("u32"), std::string::npos) << m;
    EXPECT_NE(m.find("i32"), std::string::npos) << m;
  }
}

template <typename T>
Tensor tensor_of(DType t, const std::vector<T>& v) {
  Tensor x = Tensor::empty(t, {static_cast<int64_t>(v.size())});
  std::memcpy(x.data(), v.data(), v.size() * sizeof(T));
  return x;
}

template <typename T>
std::vector<T> values_of(const Tensor& x) {
  std::vector<T> v(static_cast<size_t>(x.numel()));
  std::memcpy(v.data(), x.data(), v.size() * sizeof(T));
  return v;
}

// Runs the binary graph `y = op(a, b)` (plus unary and reduction outputs) compiled and in the
// reference interpreter, and checks both against `expect` computed with T's own arithmetic.
template <typename T>
void check_edges(DType t, const std::vector<T>& a, const std::vector<T>& b) {
  std::string n(dtype_name(t));
  size_t len = a.size();
  std::string text = fmt::format(R"(
input a: {0}[{1}]
input b: {0}[{1}]
add_ = add(a, b)
sub_ = sub(a, b)
mul_ = mul(a, b)
neg_ = neg(a)
abs_ = abs(a)
max_ = maximum(a, b)
min_ = minimum(a, b)
fmod_ = fmod(a, b)
lt_ = lt(a, b)
ge_ = ge(a, b)
eq_ = eq(a, b)
f64_ = cast(a) {{dtype=f64}}
f32_ = cast(a) {{dtype=f32}}
i64_ = cast(a) {{dtype=i64}}
u8_ = cast(a) {{dtype=u8}}
back_ = cast(i64_) {{dtype={0}}}
sum_ = sum(a) {{axes=[0]}}
rmax_ = max(a) {{axes=[0]}}
rmin_ = min(a) {{axes=[0]}}
amax_ = argmax(a) {{axis=0}}
output add_
output sub_
output mul_
output neg_
output abs_
output max_
output min_
output fmod_
output lt_
output ge_
output eq_
output f64_
output f32_
output i64_
output u8_
output back_
output sum_
output rmax_
output rmin_
output amax_
)",
                                 n, len);
  Graph g = graph_from_text(text);
  std::vector<Tensor> in = {tensor_of(t, a), tensor_of(t, b)};
  std::vector<Tensor> got = compile(g).run(in);
  std::vector<Tensor> ref = interpret(g, in);
  ASSERT_EQ(got.size(), 20u);

  auto wrap = [](auto v) { return static_cast<T>(v); };
  std::vector<T> add, sub, mul, neg, abs, mx, mn, fm, back;
  std::vector<uint8_t> lt, ge, eq, u8;
  std::vector<double> f64;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  int64_t sum = 0;
  T rmax = a[0], rmin = a[0];
  int64_t amax = 0;
  for (size_t i = 0; i < len; ++i) {
    // Arithmetic in the unsigned type of T's width (promotion to int must not overflow).
    using U = std::make_unsigned_t<decltype(+T())>;
    add.push_back(wrap(static_cast<U>(a[i]) + static_cast<U>(b[i])));
    sub.push_back(wrap(static_cast<U>(a[i]) - static_cast<U>(b[i])));
    mul.push_back(wrap(static_cast<U>(a[i]) * static_cast<U>(b[i])));
    neg.push_back(wrap(U(0) - static_cast<U>(a[i])));
    abs.push_back(std::is_signed_v<T> && a[i] < 0 ? wrap(U(0) - static_cast<U>(a[i])) : a[i]);
    mx.push_back(a[i] > b[i] ? a[i] : b[i]);
    mn.push_back(a[i] < b[i] ? a[i] : b[i]);
    fm.push_back(wrap(static_cast<int64_t>(a[i] % b[i])));
    lt.push_back(a[i] < b[i]);
    ge.push_back(a[i] >= b[i]);
    eq.push_back(a[i] == b[i]);
    f64.push_back(static_cast<double>(a[i]));
    f32.push_back(static_cast<float>(a[i]));
    i64.push_back(static_cast<int64_t>(a[i]));
    u8.push_back(static_cast<uint8_t>(a[i]));
    back.push_back(a[i]);
    sum = static_cast<int64_t>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(a[i]));
    if (a[i] > rmax) rmax = a[i], amax = static_cast<int64_t>(i);
    if (a[i] < rmin) rmin = a[i];
  }
  for (const auto& [which, out] : {std::pair{"compiled", &got}, std::pair{"reference", &ref}}) {
    const std::vector<Tensor>& o = *out;
    SCOPED_TRACE(fmt::format("{} {}", which, n));
    EXPECT_EQ(values_of<T>(o[0]), add) << "add";
    EXPECT_EQ(values_of<T>(o[1]), sub) << "sub";
    EXPECT_EQ(values_of<T>(o[2]), mul) << "mul";
    EXPECT_EQ(values_of<T>(o[3]), neg) << "neg";
    EXPECT_EQ(values_of<T>(o[4]), abs) << "abs";
    EXPECT_EQ(values_of<T>(o[5]), mx) << "maximum";
    EXPECT_EQ(values_of<T>(o[6]), mn) << "minimum";
    EXPECT_EQ(values_of<T>(o[7]), fm) << "fmod";
    EXPECT_EQ(values_of<uint8_t>(o[8]), lt) << "lt";
    EXPECT_EQ(values_of<uint8_t>(o[9]), ge) << "ge";
    EXPECT_EQ(values_of<uint8_t>(o[10]), eq) << "eq";
    EXPECT_EQ(values_of<double>(o[11]), f64) << "cast to f64";
    EXPECT_EQ(values_of<float>(o[12]), f32) << "cast to f32";
    EXPECT_EQ(values_of<int64_t>(o[13]), i64) << "cast to i64";
    EXPECT_EQ(values_of<uint8_t>(o[14]), u8) << "cast to u8";
    EXPECT_EQ(values_of<T>(o[15]), back) << "cast back from i64";
    EXPECT_EQ(o[16].dtype(), DType::I64) << "sum of integers is i64 (torch)";
    EXPECT_EQ(values_of<int64_t>(o[16]), std::vector<int64_t>{sum}) << "sum";
    EXPECT_EQ(values_of<T>(o[17]), std::vector<T>{rmax}) << "max";
    EXPECT_EQ(values_of<T>(o[18]), std::vector<T>{rmin}) << "min";
    EXPECT_EQ(values_of<int64_t>(o[19]), std::vector<int64_t>{amax}) << "argmax";
  }
}

// 17 elements: past one SIMD vector of any width, so vectorized loops and their tails both run.
TEST(IntDtypes, I16EdgesMatchCpp) {
  std::vector<int16_t> a = {0,  1, -1, 32767, -32768, 300, -300, 181,   7,
                            -7, 7, -7, 12345, -2,     2,   100,  -32767};
  std::vector<int16_t> b = {1, -1, -1, 2, -1, 301, 7, 182, 2, 2, -2, -2, -3, 32767, -32768, 3, 1};
  check_edges<int16_t>(DType::I16, a, b);
}

TEST(IntDtypes, U16EdgesMatchCpp) {
  std::vector<uint16_t> a = {0, 1,     65535, 65535, 32768, 300,   40000, 256, 7,
                             9, 65534, 2,     12345, 255,   65535, 100,   1};
  std::vector<uint16_t> b = {1, 65535, 65535, 2, 2,   301, 40000, 256,  2,
                             4, 3,     65535, 3, 257, 1,   7,     65535};
  check_edges<uint16_t>(DType::U16, a, b);
}

TEST(IntDtypes, U32EdgesMatchCpp) {
  const uint32_t M = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> a = {0, 1,     M, M,          2147483648u, 300, 4000000000u, 65536, 7,
                             9, M - 1, 2, 123456789u, 255,         M,   100,         1};
  std::vector<uint32_t> b = {1, M, M, 2, 2, 301, 4000000000u, 65536, 2, 4, 3, M, 3, 257, 1, 7, M};
  check_edges<uint32_t>(DType::U32, a, b);
}

TEST(IntDtypes, U64EdgesMatchCpp) {
  const uint64_t M = std::numeric_limits<uint64_t>::max(), H = uint64_t{1} << 63;
  std::vector<uint64_t> a = {0,   1, M,          M, H,     H + 5, (uint64_t{1} << 53) + 1,
                             7,   9, M - 1,      2, 12345, H - 1, M,
                             100, 1, 4000000000u};
  std::vector<uint64_t> b = {1, M, M, 2, 2, H, 3, 2, 4, 3, M, 3, H, 1, 7, M, 4000000000u};
  check_edges<uint64_t>(DType::U64, a, b);
}

// Floats into the new types where the value is in range: truncation toward zero, as C++ and
// torch convert; f32 -> u64 above 2^63 too (not through int64).
TEST(IntDtypes, FloatToIntegerCastsInRange) {
  Graph g = graph_from_text(R"(
input x: f64[6]
a = cast(x) {dtype=i16}
b = cast(x) {dtype=u16}
c = cast(x) {dtype=u32}
d = cast(x) {dtype=u64}
output a
output b
output c
output d
)");
  std::vector<double> x = {0.0, 1.9, 255.5, 32767.0, 32766.75, 12345.6};
  std::vector<Tensor> in = {tensor_of(DType::F64, x)};
  for (const auto& o : {compile(g).run(in), interpret(g, in)}) {
    EXPECT_EQ(values_of<int16_t>(o[0]), (std::vector<int16_t>{0, 1, 255, 32767, 32766, 12345}));
    EXPECT_EQ(values_of<uint16_t>(o[1]), (std::vector<uint16_t>{0, 1, 255, 32767, 32766, 12345}));
    EXPECT_EQ(values_of<uint32_t>(o[2]), (std::vector<uint32_t>{0, 1, 255, 32767, 32766, 12345}));
    EXPECT_EQ(values_of<uint64_t>(o[3]), (std::vector<uint64_t>{0, 1, 255, 32767, 32766, 12345}));
  }
  Graph big = graph_from_text("input x: f64[2]\ny = cast(x) {dtype=u64}\noutput y\n");
  std::vector<double> xb = {9223372036854775808.0 * 1.5, 18446744073709549568.0};
  std::vector<Tensor> inb = {tensor_of(DType::F64, xb)};
  for (const auto& o : {compile(big).run(inb), interpret(big, inb)})
    EXPECT_EQ(values_of<uint64_t>(o[0]),
              (std::vector<uint64_t>{13835058055282163712ull, 18446744073709549568ull}));
}

// The text format reads and prints u64 constants beyond int64, and refuses out-of-range ones.
TEST(IntDtypes, TextFormatConstants) {
  Graph g = graph_from_text(R"(
input x: u64[2]
const c: u64[2] = [18446744073709551615, 9223372036854775808]
y = add(x, c)
output y
)");
  std::string printed = to_text(g);
  EXPECT_NE(printed.find("18446744073709551615"), std::string::npos) << printed;
  std::vector<Tensor> in = {tensor_of<uint64_t>(DType::U64, {1, 1})};
  for (const auto& o : {compile(g).run(in), interpret(g, in)})
    EXPECT_EQ(values_of<uint64_t>(o[0]), (std::vector<uint64_t>{0, 9223372036854775809ull}));
  for (const char* bad :
       {"u16[1] = [65536]", "u16[1] = [-1]", "i16[1] = [32768]", "u32[1] = [4294967296]",
        "u64[1] = [-1]", "u64[1] = [18446744073709551616]"}) {
    try {
      graph_from_text(fmt::format("const c: {}\ny = neg(c)\noutput y\n", bad));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
}

// 64-bit integers compare exactly: 2^60 and 2^60 + 1 are the same double.
TEST(IntDtypes, CompareSeesEveryBitOf64BitIntegers) {
  for (DType t : {DType::I64, DType::U64}) {
    uint64_t big = uint64_t{1} << 60;
    Tensor a = tensor_of<uint64_t>(t, {big, 5}), b = tensor_of<uint64_t>(t, {big + 1, 5});
    CompareResult same = compare_tensors(a, a.clone(), default_tolerance(t));
    CompareResult differ = compare_tensors(a, b, default_tolerance(t));
    EXPECT_TRUE(same.ok) << same.message;
    EXPECT_FALSE(differ.ok) << dtype_name(t);
    EXPECT_EQ(differ.mismatches, 1);
    EXPECT_EQ(differ.worst_index, 0);
  }
}

}  // namespace
}  // namespace coil
