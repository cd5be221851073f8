// Table tests of Analyzer::simplify, one check(input, expected) per line, grouped like the rules
// in sym/simplify_rules.cpp; then bounds, the statically_known_* proofs and strides.
#include <gtest/gtest.h>

#include "coil/error.h"
#include "sym/analyzer.h"

namespace coil::sym {
namespace {

class SimplifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    an.bind(x, 0, 1 << 20);
    an.bind(y, 0, 1 << 20);
    an.bind(n, -100, 100);
    an.bind(k, 5, 5);
    an.bind(s0, 2, Range::kPosInf);
    an.bind(s1, 2, Range::kPosInf);
    an.bind_loop_var(x0, 1024);
    an.bind_loop_var(x1, 64);
    an.bind_loop_var(x2, s0);
    an.bind_loop_var(x3, s1);
    an.bind_loop_var(r0, 4);
    an.bind_loop_var(r1, 2);
  }

  // __builtin_LINE() as a default argument reports the caller's line (GCC and Clang).
  void check(const Expr& in, const Expr& expected, int line = __builtin_LINE()) {
    Expr got = an.simplify(in);
    EXPECT_EQ(got, expected) << "line " << line << ": simplify(" << in << ") = " << got
                             << ", expected " << expected;
    EXPECT_EQ(an.simplify(got), got) << "line " << line << ": not idempotent on " << got;
  }

  Expr x = make_symbol("x"), y = make_symbol("y"), z = make_symbol("z");
  Expr n = make_symbol("n"), k = make_symbol("k");
  Expr s0 = make_symbol("s0"), s1 = make_symbol("s1");
  Expr x0 = make_symbol("x0"), x1 = make_symbol("x1"), x2 = make_symbol("x2");
  Expr x3 = make_symbol("x3"), r0 = make_symbol("r0"), r1 = make_symbol("r1");
  Analyzer an;
};

TEST_F(SimplifyTest, ConstantRange) {
  check(floordiv(x0, 1024), 0);
  check(floordiv(x0, 2048), 0);
  check(floordiv(x0 + 1024, 1024), 1);
  check(floordiv(n + 100, 256), 0);
  check(floordiv(mod(x, 8), 8), 0);
  check(min(x0, -1), -1);
  check(max(x0, 5000), 5000);
  check(k, 5);
  check(k * x + 1, 5 * x + 1);
  check(mod(x, 4) - mod(x, 4), 0);
  check(floordiv(n, 1000), floordiv(n, 1000));  // [-1, 0]: not one value
}

TEST_F(SimplifyTest, Add) {
  check(1024 * floordiv(x, 1024) + mod(x, 1024), x);
  check(4 * floordiv(x, 4) + mod(x, 4) + y, x + y);
  check(12 * floordiv(x, 4) + 3 * mod(x, 4), 3 * x);
  check(s0 * floordiv(x, s0) + mod(x, s0), x);
  check(x1 * s0 * floordiv(x, s0) + x1 * mod(x, s0), x1 * x);
  check(8 * mod(floordiv(x, 8), 4) + mod(x, 8), mod(x, 32));
  check(32 * floordiv(x, 32) + 8 * mod(floordiv(x, 8), 4) + mod(x, 8), x);
  check(2 * (8 * mod(floordiv(x, 8), 4) + mod(x, 8)), 2 * mod(x, 32));
  check(4 * floordiv(x, 8) + mod(x, 4), 4 * floordiv(x, 8) + mod(x, 4));
  check(4 * floordiv(x, 4) + mod(y, 4), 4 * floordiv(x, 4) + mod(y, 4));
  check(x0 + 1024 * x1, x0 + 1024 * x1);
}

TEST_F(SimplifyTest, FloorDivSmallDividend) {
  check(floordiv(x2, s0), 0);
  check(floordiv(mod(x, s0), s0), 0);
  check(floordiv(x2 + s0 * x3, s0 * s1), 0);
  check(floordiv(x0, s0), floordiv(x0, s0));
  check(floordiv(x0, 4), floordiv(x0, 4));
  check(floordiv(mod(x, 32), 8), floordiv(mod(x, 32), 8));
}

TEST_F(SimplifyTest, FloorDivNested) {
  check(floordiv(floordiv(x, 4), 8), floordiv(x, 32));
  check(floordiv(floordiv(x, s0), 4), floordiv(x, 4 * s0));
  check(floordiv(floordiv(floordiv(z, 2), 3), 5), floordiv(z, 30));
}

TEST_F(SimplifyTest, FloorDivExactTerms) {
  check(floordiv(1024 * x1 + x0, 1024), x1);
  check(floordiv(r0 + 4 * x1, 4), x1);
  check(floordiv(16 * x, 4), 4 * x);
  check(floordiv(x * 16, 16), x);
  check(floordiv(x + 4 * y, 4), y + floordiv(x, 4));
  check(floordiv(x + 13, 4), floordiv(x + 1, 4) + 3);
  check(floordiv(x - 3, 4), floordiv(x + 1, 4) - 1);
  check(floordiv(s0 * x1 + x2, s0), x1);
  check(floordiv(s0 * z + y, s0), z + floordiv(y, s0));
  check(floordiv(6 * s0 * x, 3 * s0), 2 * x);
  check(floordiv(1024 * x1 + x0, 32), 32 * x1 + floordiv(x0, 32));
}

TEST_F(SimplifyTest, FloorDivCommonFactor) {
  check(floordiv(4 * x, 16), floordiv(x, 4));
  check(floordiv(4 * x + 8 * y, 16), floordiv(x + 2 * y, 4));
  check(floordiv(6 * z, 4), floordiv(3 * z, 2));
  check(floordiv(4 * x + 2, 8), floordiv(x, 2));
}

TEST_F(SimplifyTest, FloorDivDropRemainder) {
  check(floordiv(2 * x1 + r1, 4), floordiv(x1, 2));
  check(floordiv(r0 + 4 * x1 + 16 * x, 16), x + floordiv(x1, 4));
  check(floordiv(r0 + 4 * x, 8), floordiv(x, 2));
  check(floordiv(x0 + 4 * x, 8), floordiv(x0 + 4 * x, 8));  // x0 may exceed 3
  check(floordiv(n + 4 * x, 8), floordiv(n + 4 * x, 8));    // n may be negative
}

TEST_F(SimplifyTest, ModSmallDividend) {
  check(mod(x0, 1024), x0);
  check(mod(x0, 2048), x0);
  check(mod(x2, s0), x2);
  check(mod(x2 + s0 * x3, s0 * s1), x2 + s0 * x3);
  check(mod(mod(x, 8), 32), mod(x, 8));
  check(mod(n, 256), mod(n, 256));
  check(mod(n + 100, 256), n + 100);
}

TEST_F(SimplifyTest, ModOnePeriod) {
  check(mod(x0 + 1024, 1024), x0);
  check(mod(x0 - 1024, 1024), x0);
  check(mod(x0 + 3072, 1024), x0);
  check(mod(r0 + 8, 4), r0);
}

TEST_F(SimplifyTest, ModNested) {
  check(mod(mod(x, 32), 8), mod(x, 8));
  check(mod(mod(x, s0), s0), mod(x, s0));
  check(mod(mod(x, 4 * s0), s0), mod(x, s0));
  check(mod(mod(x, 32), 12), mod(mod(x, 32), 12));  // 12 does not divide 32
  check(mod(floordiv(x, 8), 4), mod(floordiv(x, 8), 4));
  check(mod(floordiv(x0, 8), 128), floordiv(x0, 8));
  check(mod(floordiv(x2, 4), s0), floordiv(x2, 4));
}

TEST_F(SimplifyTest, ModExactTerms) {
  check(mod(1024 * x1 + x0, 1024), x0);
  check(mod(16 * x, 4), 0);
  check(mod(x + 4 * y + 13, 4), mod(x + 1, 4));
  check(mod(x2 + s0 * x3, s0), x2);
  check(mod(s0 * z + y, s0), mod(y, s0));
  check(mod(floordiv(1024 * x1 + x0, 32), 32), floordiv(x0, 32));
}

TEST_F(SimplifyTest, ModCommonFactor) {
  check(mod(4 * x, 16), 4 * mod(x, 4));
  check(mod(4 * x + 8 * y, 16), 4 * mod(x + 2 * y, 4));
  check(mod(6 * z, 4), 2 * mod(3 * z, 2));
}

TEST_F(SimplifyTest, ModSplitRemainder) {
  check(mod(r0 + 4 * x1, 8), r0 + 4 * mod(x1, 2));
  check(mod(4 * x + 2, 8), 4 * mod(x, 2) + 2);
  check(mod(2 * x1 + r1, 4), 2 * mod(x1, 2) + r1);
  check(mod(x0 + 4 * x, 8), mod(x0 + 4 * x, 8));
}

TEST_F(SimplifyTest, MinMax) {
  check(min(x0, 2000), x0);
  check(min(x0, 1023), x0);
  check(min(x0, 1000), min(x0, 1000));
  check(max(x0, 0), x0);
  check(max(x0, -5), x0);
  check(max(x0, 1023), 1023);
  check(min(x2, s0), x2);
  check(max(x2, s0), s0);
  check(min(x, x + 1), x);
  check(max(x, x + 1), x + 1);
  check(min(z, z + 1), z);
  check(max(z - 2, z), z);
  check(min(x0, x0 + x1), x0);
  check(min(min(x0, 2000), x), min(x, x0));
  check(min(x, y), min(x, y));
  check(min(s0, 16), min(s0, 16));
  check(max(n, 0), max(n, 0));
}

TEST_F(SimplifyTest, Combined) {
  // A reshape [64, 1024] -> [65536] -> [64, 1024] re-splits the flat index.
  Expr flat = x0 + 1024 * x1;
  check(1024 * floordiv(flat, 1024) + mod(flat, 1024), flat);
  check(modular_indexing(flat, 1024, 64), x1);
  check(modular_indexing(flat, 1, 1024), x0);
  check(floordiv(mod(flat, 4096), 1024), mod(x1, 4));
  check(floordiv(x0 + 1024 * x1, 1024 * 64), 0);
  check(mod(x0, 1024) + floordiv(x0, 1024) * 1024, x0);
  check(min(floordiv(x0, 4), 300), floordiv(x0, 4));
  check(floordiv(min(x0, 7), 8), 0);
}

TEST_F(SimplifyTest, RebindingInvalidatesTheMemo) {
  check(floordiv(x, 1024), floordiv(x, 1024));
  an.bind(x, 0, 1000);
  check(floordiv(x, 1024), 0);
}

TEST_F(SimplifyTest, LoopRangesFollowRebindingOfTheirExtent) {
  an.bind(s0, 2, 1000);
  EXPECT_EQ(an.bounds(x2), (Range{0, 999}));
  an.bind(s0, 2, 2000);
  EXPECT_EQ(an.bounds(x2), (Range{0, 1999}));
  an.bind(x2, 5, 6);  // a plain bind replaces the loop binding, and x2 < s0 with it
  EXPECT_EQ(an.bounds(x2), (Range{5, 6}));
  check(min(x2, s0), min(x2, s0));
  EXPECT_THROW(an.bind_loop_var(x0, x0 + 1), InternalError);
}

TEST_F(SimplifyTest, Bounds) {
  EXPECT_EQ(an.bounds(x0), (Range{0, 1023}));
  EXPECT_EQ(an.bounds(x0 + 1024 * x1), (Range{0, 1024 * 63 + 1023}));
  EXPECT_EQ(an.bounds(s0), (Range{2, Range::kPosInf}));
  EXPECT_EQ(an.bounds(-s0), (Range{Range::kNegInf, -2}));
  EXPECT_EQ(an.bounds(s0 * x), (Range{0, Range::kPosInf}));
  EXPECT_EQ(an.bounds(z), Range{});
  EXPECT_EQ(an.bounds(z * 0 + 3), (Range{3, 3}));
  EXPECT_EQ(an.bounds(floordiv(x0, 4)), (Range{0, 255}));
  EXPECT_EQ(an.bounds(mod(x0, 7)), (Range{0, 6}));
  EXPECT_EQ(an.bounds(mod(n, 8)), (Range{0, 7}));
  EXPECT_EQ(an.bounds(floordiv(n, 8)), (Range{-13, 12}));
  EXPECT_EQ(an.bounds(floordiv(n, s0)), (Range{-50, 50}));
  EXPECT_EQ(an.bounds(mod(x, s0)), (Range{0, 1 << 20}));
  EXPECT_EQ(an.bounds(mod(z, 5)), (Range{0, 4}));
  EXPECT_EQ(an.bounds(min(x0, 5)), (Range{0, 5}));
  EXPECT_EQ(an.bounds(max(n, 3)), (Range{3, 100}));
  EXPECT_EQ(an.bounds(x2), (Range{0, Range::kPosInf}));
  EXPECT_EQ(an.bounds(s0 - x2), (Range{1, Range::kPosInf}));  // x2 < s0, symbolically
  EXPECT_EQ(an.bounds(x1 - x0), (Range{-1023, 63}));
}

TEST_F(SimplifyTest, BoundsSaturateInsteadOfOverflowing) {
  Expr big = make_symbol("big");
  an.bind(big, 0, int64_t{1} << 62);
  EXPECT_EQ(an.bounds(big * big), (Range{0, Range::kPosInf}));
  EXPECT_EQ(an.bounds(4 * big), (Range{0, Range::kPosInf}));
  EXPECT_EQ(an.bounds(-4 * big), (Range{Range::kNegInf, 0}));
  EXPECT_EQ(an.bounds(big + big * 2 + 3 * big * big), (Range{0, Range::kPosInf}));
  EXPECT_EQ(an.bounds(big - 4 * big * big), (Range{Range::kNegInf, int64_t{1} << 62}));
  EXPECT_EQ(an.bounds(floordiv(4 * big, 8)), (Range{0, Range::kPosInf}));
  EXPECT_FALSE(an.bounds(big * big * big).is_constant());
}

TEST_F(SimplifyTest, StaticallyKnown) {
  EXPECT_TRUE(an.statically_known_equal(floordiv(1024 * x1 + x0, 1024), x1));
  EXPECT_TRUE(an.statically_known_equal(x + y, y + x));
  EXPECT_FALSE(an.statically_known_equal(x, y));
  EXPECT_TRUE(an.statically_known_leq(x0, 1023));
  EXPECT_FALSE(an.statically_known_leq(x0, 1022));
  EXPECT_TRUE(an.statically_known_leq(x2, s0));
  EXPECT_TRUE(an.statically_known_lt(x0, 1024));
  EXPECT_FALSE(an.statically_known_lt(x0, 1023));
  EXPECT_TRUE(an.statically_known_lt(x2, s0));
  EXPECT_TRUE(an.statically_known_lt(x2 + s0 * x3, s0 * s1));
  EXPECT_FALSE(an.statically_known_lt(x2 + s0 * x3, s0 * s1 - 1));
  EXPECT_TRUE(an.statically_known_nonnegative(1023 - x0 + floordiv(x1, 2)));
  EXPECT_FALSE(an.statically_known_nonnegative(x0 - floordiv(x0, 2)));  // intervals forget x0 = x0
  EXPECT_TRUE(an.statically_known_nonnegative(mod(n, 3)));
  EXPECT_FALSE(an.statically_known_nonnegative(n));
  EXPECT_FALSE(an.statically_known_nonnegative(z));
}

TEST_F(SimplifyTest, MultipleOf) {
  EXPECT_TRUE(an.statically_known_multiple_of(16 * s0 + 32, 16));
  EXPECT_FALSE(an.statically_known_multiple_of(16 * s0 + 8, 16));
  EXPECT_TRUE(an.statically_known_multiple_of(16 * s0 + 8, 8));
  EXPECT_TRUE(an.statically_known_multiple_of(Expr(8), 4));
  EXPECT_TRUE(an.statically_known_multiple_of(Expr(0), 5));
  EXPECT_TRUE(an.statically_known_multiple_of(4 * x * s0 + 8, -4));
  EXPECT_TRUE(an.statically_known_multiple_of(2 * x * 3 * y, 6));
  EXPECT_TRUE(an.statically_known_multiple_of(mod(8 * x, 16), 8));
  EXPECT_TRUE(an.statically_known_multiple_of(min(4 * x, 8 * y), 4));
  EXPECT_TRUE(an.statically_known_multiple_of(k * x, 5));               // k is bound to 5
  EXPECT_TRUE(an.statically_known_multiple_of(floordiv(x0, 2048), 7));  // it is 0
  EXPECT_TRUE(an.statically_known_multiple_of(x, 1));
  EXPECT_FALSE(an.statically_known_multiple_of(s0, 2));
  EXPECT_FALSE(an.statically_known_multiple_of(floordiv(8 * x, 3), 2));
  EXPECT_FALSE(an.statically_known_multiple_of(x0, 0));
  EXPECT_TRUE(an.statically_known_multiple_of(x0 - x0, 0));
}

TEST_F(SimplifyTest, LinearStride) {
  EXPECT_EQ(an.linear_stride(x0 + 1024 * x1, x1), Expr(1024));
  EXPECT_EQ(an.linear_stride(x0 + 1024 * x1, x0), Expr(1));
  EXPECT_EQ(an.linear_stride(x0 + 1024 * x1, x2), Expr(0));
  EXPECT_EQ(an.linear_stride(x0 + s0 * x1, x1), s0);
  EXPECT_EQ(an.linear_stride(3 * x1 + s0 * x1 + floordiv(x0, 4), x1), s0 + 3);
  EXPECT_EQ(an.linear_stride(floordiv(1024 * x1 + x0, 1024), x1), Expr(1));
  EXPECT_EQ(an.linear_stride(floordiv(x, 4), x), std::nullopt);
  EXPECT_EQ(an.linear_stride(x1 * x1, x1), std::nullopt);
  EXPECT_EQ(an.linear_stride(min(x1, 5), x1), std::nullopt);
}

TEST_F(SimplifyTest, Stride) {
  EXPECT_EQ(an.stride(x0 + 1024 * x1, x0), Expr(1));
  EXPECT_EQ(an.stride(x0 + 1024 * x1, x1), Expr(1024));
  EXPECT_EQ(an.stride(floordiv(x0 + 4 * x1, 4), x1), Expr(1));
  EXPECT_EQ(an.stride(floordiv(z + 4 * x1, 4), x1), Expr(1));
  EXPECT_EQ(an.stride(floordiv(x0, 2048), x0), Expr(0));
  EXPECT_EQ(an.stride(s0 * x2 + x3, x2), s0);
  EXPECT_EQ(an.stride(x1 * x1, x1), std::nullopt);
  EXPECT_EQ(an.stride(floordiv(x, 4), x), std::nullopt);
  EXPECT_EQ(an.stride(mod(x0, 16), x0), std::nullopt);
  EXPECT_EQ(an.stride(min(x0, 5), x0), std::nullopt);
}

TEST_F(SimplifyTest, BindChecksItsArguments) {
  EXPECT_THROW(an.bind(x + 1, 0, 1), InternalError);
  EXPECT_THROW(an.bind(x, 2, 1), InternalError);
}

}  // namespace
}  // namespace coil::sym
