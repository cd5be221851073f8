// The graph generator's state and its op builders, shared by graph_generator.cpp (values,
// facts, elementwise ops, the main loop) and generator_ops.cpp (views, reductions, composites,
// linear algebra, convolution and pooling, sources).
#pragma once

#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "coil/graph.h"
#include "fuzz/fuzz_case.h"
#include "support/check.h"

namespace coil::fuzz {

// What the generator knows about the elements of a value. It keeps graphs inside what the
// reference and compiled code define alike (docs/numerics.md: no float-to-integer cast of NaN
// or out-of-range values, no i32/i64 overflow), and keeps discontinuous ops (comparisons,
// floor, sign, ...) away from values that fused code rounds differently from the reference.
struct Facts {
  double mag = 2;       // |x| <= mag (inf: unknown)
  bool nan = false;     // may be NaN
  bool nonneg = false;  // x >= 0 (or NaN)
  // Depends on an inexact f16/bf16 result: the reference rounds every node to its dtype, fused
  // code only where it stores, so such values differ by a rounding and a comparison of them
  // can flip (evaluate.cpp accepts either rounding for the outputs themselves).
  bool lp_taint = false;
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}
  FuzzCase run();

 private:
  // Randomness (no std distributions: their results differ between standard libraries).
  int64_t uniform(int64_t lo, int64_t hi) {
    COIL_ASSERT(lo <= hi, "fuzz generator: uniform({}, {}) is an empty range", lo, hi);
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(double p) { return static_cast<double>(rng_() >> 11) * 0x1.0p-53 < p; }
  template <typename T>
  T pick(std::initializer_list<T> v) {
    return *(v.begin() + uniform(0, static_cast<int64_t>(v.size()) - 1));
  }
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i)
      std::swap(v[i - 1], v[static_cast<size_t>(uniform(0, static_cast<int64_t>(i) - 1))]);
  }
  size_t weighted(std::initializer_list<int> weights) {
    int64_t r = uniform(0, std::accumulate(weights.begin(), weights.end(), 0) - 1);
    size_t i = 0;
    for (int w : weights) {
      if (r < w) return i;
      r -= w;
      ++i;
    }
    return 0;
  }

  // Values.
  const Node& node(int v) const { return g_.node(v); }
  DType dtype(int v) const { return node(v).type.dtype; }
  const Shape& shape(int v) const { return node(v).type.shape; }
  int64_t rank(int v) const { return node(v).type.rank(); }
  bool floating(int v) const { return is_floating(dtype(v)); }
  int64_t numel(const Shape& s) const {
    int64_t n = 1;
    for (const sym::Expr& d : s) n *= sym::evaluate(d, sizes_);
    return n;
  }
  int64_t dim_value(int v, int64_t d) const {
    return sym::evaluate(shape(v)[static_cast<size_t>(d)], sizes_);
  }
  static bool input_dim(const sym::Expr& d) { return d.is_const() || d.is_symbol(); }
  std::vector<int64_t> static_dims(int v) const {
    std::vector<int64_t> out;
    for (size_t d = 0; d < shape(v).size(); ++d)
      if (shape(v)[d].is_const()) out.push_back(static_cast<int64_t>(d));
    return out;
  }

  int add(std::string_view op, std::vector<int> in, Attrs attrs = {});
  int add_input(DType t, Shape s);
  int add_full(DType t, double value, std::vector<int64_t> dims = {});
  int add_constant(DType t, const std::vector<int64_t>& dims);
  int record(int id, Facts f);
  Facts derive(const Node& n) const;

  DType pick_dtype();
  DType pick_float_dtype();
  int64_t pick_size();
  Shape pick_shape();
  Shape partner_shape(const Shape& s);
  double pick_value_for(DType t);
  int pick(const std::function<bool(int)>& ok);
  int partner(int a);
  int ancestor(int a);

  int make_unary();
  int make_binary();
  int make_where();
  int make_cast();
  int make_clamp();
  int make_view(int a = -1);
  int make_concat();
  int make_gather();
  int make_reduction();
  int make_composite();
  int make_linalg();
  int make_conv_pool();
  int make_attention();
  int make_source();
  int step();

  std::mt19937_64 rng_;
  Graph g_;
  std::vector<Facts> facts_;  // by node id
  std::vector<bool> pooled_;  // by node id: usable as an operand and as an output
  std::vector<int> pool_;     // the pooled nodes, in creation order
  std::map<std::string, int64_t> sizes_;
  int64_t cap_ = 4096;  // most elements of one value, so that each graph runs fast
  int inputs_ = 0;
};

}  // namespace coil::fuzz
