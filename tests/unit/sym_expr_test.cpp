// Interning, canonical construction, printing and the traversals of coil/expr.h.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <thread>

#include "coil/error.h"
#include "coil/expr.h"

namespace coil::sym {
namespace {

class ExprTest : public ::testing::Test {
 protected:
  Expr x = make_symbol("x"), y = make_symbol("y"), z = make_symbol("z");
  Expr x0 = make_symbol("x0"), x1 = make_symbol("x1"), x2 = make_symbol("x2");
  Expr x10 = make_symbol("x10"), s0 = make_symbol("s0"), s1 = make_symbol("s1");
};

TEST_F(ExprTest, InterningGivesOneNodePerStructure) {
  EXPECT_EQ(make_symbol("x").get(), x.get());
  EXPECT_EQ((x + 1).get(), (x + 1).get());
  EXPECT_EQ(modular_indexing(x0, 4, 3), mod(floordiv(x0, 4), 3));
  EXPECT_NE(x + 1, x + 2);
  EXPECT_NE(floordiv(x, 4), mod(x, 4));
  EXPECT_EQ(make_const(123456789).get(), Expr(int64_t{123456789}).get());
  EXPECT_EQ(make_const(-3).get(), Expr(-3).get());
  EXPECT_EQ((x * y).hash(), (y * x).hash());
  EXPECT_EQ(std::hash<Expr>()(x + y), (x + y).hash());
}

TEST_F(ExprTest, InterningIsThreadSafe) {
  std::vector<std::vector<const ExprNode*>> built(8);
  std::vector<std::thread> threads;
  for (auto& out : built) {
    threads.emplace_back([&out] {
      for (int i = 0; i < 200; ++i) {
        Expr v = make_symbol(fmt::format("t{}", i));
        out.push_back((floordiv(v + 7 * i, 5) + mod(v, 100000 + i)).get());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : built) EXPECT_EQ(out, built[0]);
}

TEST_F(ExprTest, Accessors) {
  EXPECT_TRUE(Expr(5).is_const());
  EXPECT_EQ(Expr(5).const_value(), 5);
  EXPECT_EQ(Expr(5).as_const(), 5);
  EXPECT_EQ(x.as_const(), std::nullopt);
  EXPECT_TRUE(x.is_symbol());
  EXPECT_EQ(x.symbol_name(), "x");
  EXPECT_EQ((x + y).kind(), ExprKind::Add);
  EXPECT_EQ((x + y).operands().size(), 2u);
  EXPECT_TRUE(x.operands().empty());
  EXPECT_FALSE(Expr().defined());
  EXPECT_THROW(x.const_value(), InternalError);
  EXPECT_THROW(Expr(1).symbol_name(), InternalError);
}

TEST_F(ExprTest, ConstantFolding) {
  EXPECT_EQ(Expr(2) + 3, Expr(5));
  EXPECT_EQ(Expr(7) * 6, Expr(42));
  EXPECT_EQ(Expr(7) - 9, Expr(-2));
  EXPECT_EQ(-Expr(4), Expr(-4));
  EXPECT_EQ(floordiv(7, 2), Expr(3));
  EXPECT_EQ(floordiv(-7, 2), Expr(-4));  // floor, not truncation
  EXPECT_EQ(floordiv(-8, 2), Expr(-4));
  EXPECT_EQ(mod(7, 3), Expr(1));
  EXPECT_EQ(mod(-7, 3), Expr(2));  // sign of the divisor
  EXPECT_EQ(mod(-6, 3), Expr(0));
  EXPECT_EQ(min(3, 5), Expr(3));
  EXPECT_EQ(max(3, 5), Expr(5));
  EXPECT_EQ(min(min(x, 3), 5), min(x, 3));
  EXPECT_EQ(max(max(x, 3), 5), max(x, 5));
}

TEST_F(ExprTest, Identities) {
  EXPECT_EQ(x + 0, x);
  EXPECT_EQ(0 + x, x);
  EXPECT_EQ(x * 1, x);
  EXPECT_EQ(x * 0, Expr(0));
  EXPECT_EQ(x - x, Expr(0));
  EXPECT_EQ(floordiv(x, 1), x);
  EXPECT_EQ(mod(x, 1), Expr(0));
  EXPECT_EQ(floordiv(x, x), Expr(1));
  EXPECT_EQ(mod(s0, s0), Expr(0));
  EXPECT_EQ(floordiv(0, s0), Expr(0));
  EXPECT_EQ(mod(0, s0), Expr(0));
  EXPECT_EQ(min(x, x), x);
  EXPECT_EQ(max(x + 1, 1 + x), x + 1);
  EXPECT_EQ(-(-x), x);
}

TEST_F(ExprTest, FlattenSortAndCollect) {
  EXPECT_EQ(x + y, y + x);
  EXPECT_EQ((x + y) + z, x + (y + z));
  EXPECT_EQ(x * y, y * x);
  EXPECT_EQ((x * y) * z, x * (y * z));
  EXPECT_EQ(2 * x + 3 * x, 5 * x);
  EXPECT_EQ(x + y + x, 2 * x + y);
  EXPECT_EQ((x + y) - (y + x), Expr(0));
  EXPECT_EQ(2 * x * 3, 6 * x);
  EXPECT_EQ(min(x, y), min(y, x));
  EXPECT_EQ(min(min(x, y), z), min(x, min(y, z)));
  EXPECT_EQ(max(x, max(y, x)), max(x, y));
  EXPECT_EQ((x + 1).operands()[0], Expr(1));  // the constant sorts first
  EXPECT_EQ((x + y + 2 + 3).operands().size(), 3u);
  EXPECT_EQ(min(x, min(y, 4)).operands().size(), 3u);
}

TEST_F(ExprTest, ProductsDistributeOverSums) {
  EXPECT_EQ(2 * (x + 1), 2 * x + 2);
  EXPECT_EQ(s0 * (x0 + 1) - s0 * x0, s0);
  EXPECT_EQ((x + 1) * (y + 1), x * y + x + y + 1);
  EXPECT_EQ((x - y) * (x + y), x * x - y * y);
}

TEST_F(ExprTest, InvalidDivisorsAreInternalErrors) {
  EXPECT_THROW(floordiv(x, 0), InternalError);
  EXPECT_THROW(mod(x, -3), InternalError);
  EXPECT_THROW(x + Expr(), InternalError);
}

TEST_F(ExprTest, Printing) {
  EXPECT_EQ(to_string(x0 + 1024 * x1), "x0 + 1024*x1");
  EXPECT_EQ(to_string(1024 * x1 + x0), "x0 + 1024*x1");
  EXPECT_EQ(to_string(mod(floordiv(x0, 4), 3)), "(x0 // 4) % 3");
  EXPECT_EQ(to_string(min(s0, 16)), "min(s0, 16)");
  EXPECT_EQ(to_string(max(16, x0)), "max(x0, 16)");
  EXPECT_EQ(to_string(x0 - 2 * x1), "x0 - 2*x1");
  EXPECT_EQ(to_string(x0 + 1), "x0 + 1");
  EXPECT_EQ(to_string(x0 - 1), "x0 - 1");
  EXPECT_EQ(to_string(5 - 2 * x1), "-2*x1 + 5");
  EXPECT_EQ(to_string(-x0), "-x0");
  EXPECT_EQ(to_string(x0 - x1), "x0 - x1");
  EXPECT_EQ(to_string(4 * floordiv(x0, 4)), "4*(x0 // 4)");
  EXPECT_EQ(to_string(x1 + floordiv(x0, 4)), "x1 + x0 // 4");
  EXPECT_EQ(to_string(floordiv(x0 + 1, 4)), "(x0 + 1) // 4");
  EXPECT_EQ(to_string(floordiv(16 * x, 4)), "(16*x) // 4");
  EXPECT_EQ(to_string(floordiv(x, 4 * s0)), "x // (4*s0)");
  EXPECT_EQ(to_string(s1 * x1 * s0), "s0*s1*x1");
  EXPECT_EQ(to_string(-mod(x0, 4)), "-(x0 % 4)");
  EXPECT_EQ(to_string(Expr(-7)), "-7");
  EXPECT_EQ(to_string(Expr()), "<null>");
  EXPECT_EQ(to_string(256 * x0 + 16 * x1 + x2), "256*x0 + 16*x1 + x2");
  std::ostringstream os;
  os << (x + 1);
  EXPECT_EQ(os.str(), "x + 1");
}

TEST_F(ExprTest, OrderIsStructuralAndTotal) {
  EXPECT_TRUE(x2 < x10);  // natural order of names
  EXPECT_TRUE(Expr(100) < x);
  EXPECT_TRUE(x < 2 * x);
  EXPECT_TRUE(-x < x);
  std::vector<Expr> all = {x,
                           y,
                           x0,
                           x10,
                           Expr(3),
                           Expr(-1),
                           x + 1,
                           2 * x,
                           x * y,
                           floordiv(x, 4),
                           mod(x, 4),
                           min(x, y),
                           max(x, 2),
                           x0 + x1,
                           s0 * x1,
                           3 * s0 * x1,
                           floordiv(x, s0)};
  for (const Expr& a : all) {
    EXPECT_FALSE(a < a) << a;
    for (const Expr& b : all) {
      if (a != b) {
        EXPECT_NE(a < b, b < a) << a << " vs " << b;
      }
      for (const Expr& c : all) {
        if (a < b && b < c) {
          EXPECT_TRUE(a < c) << a << " < " << b << " < " << c;
        }
      }
    }
  }
  std::set<Expr> sorted(all.begin(), all.end());
  EXPECT_EQ(sorted.size(), all.size());
}

TEST_F(ExprTest, BuildOrderDoesNotChangeTheResult) {
  std::vector<Expr> terms = {3 * x2, x0, floordiv(x1, 4), 7, s0 * x1, mod(x, 3)};
  Expr forward = 0, backward = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    forward = forward + terms[i];
    backward = backward + terms[terms.size() - 1 - i];
  }
  EXPECT_EQ(forward, backward);
  // Single-factor terms first (by variable), then products; the constant last.
  EXPECT_EQ(to_string(forward), "x0 + 3*x2 + x1 // 4 + x % 3 + s0*x1 + 7");
}

TEST_F(ExprTest, Substitute) {
  EXPECT_EQ(substitute(x + y, {{x, 2}}), y + 2);
  EXPECT_EQ(substitute(floordiv(x, 4), {{x, 8}}), Expr(2));
  EXPECT_EQ(substitute(s0 * x0, {{x0, x0 + 1}}), s0 * x0 + s0);
  EXPECT_EQ(substitute(floordiv(x + 1, 4) + x, {{x + 1, z}}), floordiv(z, 4) + x);
  EXPECT_EQ(substitute(x + y, {{x, y}, {y, x}}), x + y);  // simultaneous, not sequential
  EXPECT_EQ(substitute(min(x, y), {{y, x}}), x);
  EXPECT_EQ(substitute(x, {}), x);
}

TEST_F(ExprTest, Evaluate) {
  std::map<std::string, int64_t> v = {{"x", -7}, {"y", 4}, {"s0", 3}};
  EXPECT_EQ(evaluate(floordiv(x, y), v), -2);
  EXPECT_EQ(evaluate(mod(x, y), v), 1);
  EXPECT_EQ(evaluate(x * y + 3, v), -25);
  EXPECT_EQ(evaluate(min(x, y), v), -7);
  EXPECT_EQ(evaluate(max(max(x, y), s0), v), 4);
  EXPECT_EQ(evaluate(Expr(9), {}), 9);
  EXPECT_THROW(evaluate(x + z, v), InternalError);
}

TEST_F(ExprTest, FreeSymbolsAndDependence) {
  Expr e = floordiv(x10 + x2, s0) + min(x2, 3);
  EXPECT_EQ(free_symbols(e), (std::vector<Expr>{s0, x2, x10}));
  EXPECT_TRUE(free_symbols(Expr(4)).empty());
  EXPECT_TRUE(depends_on(e, x10));
  EXPECT_TRUE(depends_on(x, x));
  EXPECT_FALSE(depends_on(e, x0));
  EXPECT_FALSE(depends_on(Expr(1), x));
}

}  // namespace
}  // namespace coil::sym
