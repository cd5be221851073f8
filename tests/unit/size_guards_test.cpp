// Size hints and the guards that heuristics record under them (sym/size_hints.h): what a
// size-generic module's explicit guards are made of (driver/dynamic_model.h).
#include <gtest/gtest.h>

#include "coil/expr.h"
#include "sym/size_hints.h"

namespace coil::sym {
namespace {

TEST(SizeGuards, DecisionsOnSymbolicSizesAreRecordedBothWays) {
  const Expr ks0 = make_symbol("ks0"), ks1 = make_symbol("ks1");
  SizeHintScope scope({{ks0, 100}, {ks1, 7}});
  EXPECT_EQ(decide_at_least(ks0 * 4, 400), true);
  EXPECT_EQ(decide_at_least(ks0 * ks1, 701), false);
  EXPECT_EQ(decide_at_least(ks0 * 4, 400), true);  // the same decision again: recorded once
  EXPECT_EQ(decide_at_least(Expr(5), 3), true);    // a constant: nothing to guard
  EXPECT_EQ(decide_at_least(make_symbol("x0"), 3), std::nullopt);  // no hint: no decision
  ASSERT_EQ(scope.guards().size(), 2u);
  EXPECT_EQ(scope.guards()[0].to_string(), "4*ks0 >= 400");
  EXPECT_EQ(scope.guards()[1].to_string(), "ks0*ks1 <= 700");
  // The guards hold where the same decisions would be made, and only there.
  EXPECT_TRUE(scope.guards()[0].holds({{ks0, 100}, {ks1, 7}}));
  EXPECT_FALSE(scope.guards()[0].holds({{ks0, 99}, {ks1, 7}}));
  EXPECT_TRUE(scope.guards()[1].holds({{ks0, 100}, {ks1, 7}}));
  EXPECT_FALSE(scope.guards()[1].holds({{ks0, 100}, {ks1, 8}}));
  EXPECT_FALSE(scope.guards()[1].holds({{ks0, 100}}));  // a symbol without a value fails
}

TEST(SizeGuards, ScopesNestAndKeepTheirOwnGuards) {
  const Expr ks0 = make_symbol("ks0");
  SizeHintScope outer({{ks0, 10}});
  {
    SizeHintScope inner({{ks0, 20}});
    EXPECT_EQ(decide_at_least(ks0, 15), true);
    EXPECT_EQ(inner.guards().size(), 1u);
  }
  EXPECT_EQ(decide_at_least(ks0, 15), false);
  ASSERT_EQ(outer.guards().size(), 1u);
  EXPECT_EQ(outer.guards()[0].to_string(), "ks0 <= 14");
  SizeGuard both{ks0, 2, 7};
  EXPECT_EQ(both.to_string(), "2 <= ks0 <= 7");
  EXPECT_EQ((SizeGuard{ks0, 3, 3}).to_string(), "ks0 == 3");
}

}  // namespace
}  // namespace coil::sym
