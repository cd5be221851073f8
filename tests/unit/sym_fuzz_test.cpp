// Fuzzes the index algebra with a fixed seed: random expressions over symbols with random ranges
// (constant and symbolic loop extents, signed and unbound symbols) are simplified and evaluated
// before and after at random points inside the ranges. Also checks that bounds() contains every
// value, and that every stride and statically_known_* claim holds at those points.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "sym/analyzer.h"

namespace coil::sym {
namespace {

using Point = std::map<std::string, int64_t>;

class Fuzzer {
 public:
  explicit Fuzzer(uint64_t seed) : rng_(seed) {}

  // A fresh analyzer with random ranges: sizes s0, s1 >= 1; loop variables x0..x2 with constant
  // or symbolic extents; a signed symbol a; an unbound symbol u (sampled in [-300, 300]).
  void new_scenario() {
    an_ = Analyzer();
    loops_.clear();
    sampled_.clear();
    for (const char* name : {"s0", "s1"}) {
      int64_t lo = pick(1, 4), hi = lo + pick(0, 60);
      an_.bind(make_symbol(name), lo, hi);
      sampled_.push_back({make_symbol(name), {lo, hi}});
    }
    int64_t lo = pick(-60, 10), hi = lo + pick(0, 120);
    an_.bind(make_symbol("a"), lo, hi);
    sampled_.push_back({make_symbol("a"), {lo, hi}});
    sampled_.push_back({make_symbol("u"), {-300, 300}});
    for (const char* name : {"x0", "x1", "x2"}) {
      static const int64_t kExtents[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 32, 64, 100};
      Expr extent = chance(0.3) ? make_symbol(chance(0.5) ? "s0" : "s1")
                                : Expr(kExtents[pick(0, std::size(kExtents) - 1)]);
      an_.bind_loop_var(make_symbol(name), extent);
      loops_.push_back({make_symbol(name), extent});
    }
  }

  Point sample() {
    Point p;
    for (const auto& [sym, r] : sampled_) p[sym.symbol_name()] = pick(r.lo, r.hi);
    for (const auto& [var, extent] : loops_) {
      p[var.symbol_name()] = pick(0, evaluate(extent, p) - 1);
    }
    return p;
  }

  Expr leaf() {
    static const char* kNames[] = {"x0", "x1", "x2", "x0", "x1", "s0", "s1", "a", "u"};
    if (chance(0.25)) return Expr(pick(-8, 40));
    return make_symbol(kNames[pick(0, std::size(kNames) - 1)]);
  }

  Expr divisor() {
    static const int64_t kDivisors[] = {1, 2, 3, 4, 8, 16, 32, 5, 12, 64};
    if (chance(0.15)) return make_symbol(chance(0.5) ? "s0" : "s1");
    return kDivisors[pick(0, std::size(kDivisors) - 1)];
  }

  Expr gen(int depth) {
    if (depth == 0 || chance(0.2)) return leaf();
    Expr e = gen(depth - 1);
    switch (pick(0, 13)) {
      case 0:
        return e + gen(depth - 1);
      case 1:
        return e - gen(depth - 1);
      case 2:
        return pick(-3, 8) * e;
      case 3:
        return depth <= 2 ? leaf() * e : e + leaf();
      case 4:
      case 5:
        return floordiv(e, divisor());
      case 6:
      case 7:
        return mod(e, divisor());
      case 8:
        return chance(0.5) ? min(e, gen(depth - 1)) : max(e, gen(depth - 1));
      case 9: {  // a view's split index, to be reassembled (and near misses of it)
        Expr d = divisor(), k = pick(1, 3);
        Expr q = std::vector<Expr>{d, k * d, Expr(1), d + 1}[pick(0, 3)];
        return q * floordiv(e, d) + k * mod(e, d) + (chance(0.5) ? leaf() : Expr(0));
      }
      case 10: {
        Expr d = divisor(), m = divisor(), k = pick(1, 3);
        Expr q = std::vector<Expr>{d, k * d, Expr(1), 2 * d}[pick(0, 3)];
        return q * mod(floordiv(e, d), m) + k * mod(e, d);
      }
      case 12:
      case 13: {  // g*t + r over g*m, with r near the edge of [0, g)
        const int64_t g = pick(2, 8), m = pick(1, 4);
        Expr r = make_symbol(chance(0.5) ? "x0" : "x1") + pick(-1, 2);
        return chance(0.5) ? floordiv(g * e + r, g * m) : mod(g * e + r, g * m);
      }
      default:  // a strided flat index
        return make_symbol("x0") + pick(1, 8) * make_symbol("x1") + pick(0, 64) * e;
    }
  }

  /// How often each claim was made, to show that the fuzzer exercises the rules.
  struct Stats {
    int simplified = 0, leq = 0, multiple = 0, stride = 0;
  };
  Stats stats;

  // Runs one expression; returns false on the first mismatch (after reporting it).
  bool check(const Expr& e) {
    Expr s = an_.simplify(e);
    Range b = an_.bounds(e), bs = an_.bounds(s);
    Expr other = gen(2);
    const int64_t m = std::vector<int64_t>{2, 3, 4, 8, 16}[pick(0, 4)];
    const bool leq = an_.statically_known_leq(e, other), lt = an_.statically_known_lt(e, other);
    const bool nonneg = an_.statically_known_nonnegative(e);
    const bool multiple = an_.statically_known_multiple_of(e, m);
    const auto& [var, extent] = loops_[pick(0, loops_.size() - 1)];
    auto stride = an_.stride(e, var);
    auto linear = an_.linear_stride(e, var);
    stats.simplified += s != e;
    stats.leq += leq;
    stats.multiple += multiple;
    stats.stride += stride.has_value();
    for (int i = 0; i < 6; ++i) {
      Point p = sample();
      int64_t v = evaluate(e, p), vo = evaluate(other, p);
      auto fail = [&](const std::string& what) {
        std::string where;
        for (const auto& [k, x] : p) where += k + "=" + std::to_string(x) + " ";
        ADD_FAILURE() << what << "\n  e = " << e << "\n  simplify(e) = " << s << "\n  value = " << v
                      << " at " << where;
        return false;
      };
      if (evaluate(s, p) != v) return fail("simplify changed the value");
      if (v < b.lo || v > b.hi) return fail("bounds(e) excludes the value");
      if (v < bs.lo || v > bs.hi) return fail("bounds(simplify(e)) excludes the value");
      if ((leq && v > vo) || (lt && v >= vo))
        return fail("wrong leq/lt proof vs " + to_string(other));
      if (nonneg && v < 0) return fail("wrong nonnegative proof");
      if (multiple && v % m != 0) return fail("wrong multiple_of proof, m=" + std::to_string(m));
      Point next = p;
      if (++next[var.symbol_name()] < evaluate(extent, p)) {
        int64_t step = evaluate(e, next) - v;
        if (stride && evaluate(*stride, p) != step)
          return fail("wrong stride " + to_string(*stride));
        if (linear && evaluate(*linear, p) != step) return fail("wrong linear_stride");
      }
    }
    return true;
  }

  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

 private:
  std::mt19937_64 rng_;
  Analyzer an_;
  std::vector<std::pair<Expr, Expr>> loops_;     // loop variable, extent
  std::vector<std::pair<Expr, Range>> sampled_;  // sizes and free symbols, with sample ranges
};

TEST(SymFuzzTest, SimplifyBoundsAndProofsHoldAtRandomPoints) {
  // COIL_SYM_FUZZ_SEEDS=n runs n seeds instead of one, for a longer hunt by hand.
  const char* env = std::getenv("COIL_SYM_FUZZ_SEEDS");
  const int seeds = env ? std::atoi(env) : 1;
  for (int seed = 0; seed < seeds && !HasFailure(); ++seed) {
    Fuzzer fuzz(20240611 + static_cast<uint64_t>(seed));
    int checked = 0;
    for (int scenario = 0; scenario < 50 && !HasFailure(); ++scenario) {
      fuzz.new_scenario();
      for (int i = 0; i < 80 && fuzz.check(fuzz.gen(static_cast<int>(fuzz.pick(1, 4)))); ++i) {
        ++checked;
      }
    }
    if (seed == 0) {
      EXPECT_EQ(checked, 4000);
      // Enough claims are made that a wrong rule would be caught.
      EXPECT_GT(fuzz.stats.simplified, 1000);
      EXPECT_GT(fuzz.stats.leq, 100);
      EXPECT_GT(fuzz.stats.multiple, 100);
      EXPECT_GT(fuzz.stats.stride, 500);
    }
    std::printf("seed %d: %d simplified, %d leq, %d multiple_of, %d strides\n", seed,
                fuzz.stats.simplified, fuzz.stats.leq, fuzz.stats.multiple, fuzz.stats.stride);
  }
}

}  // namespace
}  // namespace coil::sym
