// Cross-check of the reference interpreter against PyTorch eager: every elementwise op,
// the reductions, softmax/log_softmax, layer_norm and rms_norm, and the linear-algebra and CNN
// ops (matmul, bmm, linear, addmm, conv2d, the pools) run on random inputs of a few shapes and
// dtypes, here and in tests/unit/torch_reference.py (one Python process for all cases), and the
// results must agree in dtype, shape and value within tight tolerances.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graph/interpreter.h"
#include "support/check.h"
#include "support/npy.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using Sizes = std::vector<int64_t>;

struct Case {
  std::string op;
  std::vector<Tensor> inputs;
  Attrs attrs = {};
  double tol = 0;  // relative tolerance; 0: the result dtype's (tolerance() below)
};

// Deterministic random inputs.
class Gen {
 public:
  /// Values uniform in [lo, hi]; integers (uniform in the integer range) for integral dtypes.
  Tensor uniform(DType dtype, Sizes shape, double lo, double hi) {
    Tensor t = Tensor::empty(dtype, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = is_floating(dtype)
                     ? std::uniform_real_distribution<double>(lo, hi)(rng_)
                     : static_cast<double>(std::uniform_int_distribution<int64_t>(
                           static_cast<int64_t>(lo), static_cast<int64_t>(hi))(rng_));
      t.set_from_double(i, v);
    }
    return t;
  }
  /// Multiples of 0.5 in [lo, hi]: exercises ties (round half to even, equal compares).
  Tensor halves(DType dtype, Sizes shape, double lo, double hi) {
    Tensor t = uniform(DType::I64, shape, 2 * lo, 2 * hi);
    Tensor r = Tensor::empty(dtype, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) r.set_from_double(i, t.item_as_double(i) / 2);
    return r;
  }
  /// A random permutation of 0 .. numel-1 (no ties, for argmax on integers).
  Tensor permutation(DType dtype, Sizes shape) {
    Tensor t = Tensor::empty(dtype, std::move(shape));
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
    std::shuffle(v.begin(), v.end(), rng_);
    for (size_t i = 0; i < v.size(); ++i) t.set_from_double(static_cast<int64_t>(i), v[i]);
    return t;
  }

 private:
  std::mt19937_64 rng_{20240601};
};

void add_elementwise_cases(Gen& g, std::vector<Case>& cases) {
  const DType f32 = DType::F32;
  struct Range {
    const char* op;
    double lo, hi;
  };
  const Range unary[] = {
      {"abs", -4, 4},         {"neg", -4, 4},         {"exp", -5, 5},     {"log", 0.05, 5},
      {"log1p", -0.9, 5},     {"expm1", -3, 3},       {"sqrt", 0, 9},     {"rsqrt", 0.05, 9},
      {"reciprocal", 0.2, 4}, {"relu", -4, 4},        {"sigmoid", -8, 8}, {"tanh", -4, 4},
      {"erf", -3, 3},         {"gelu", -5, 5},        {"silu", -6, 6},    {"sin", -6, 6},
      {"cos", -6, 6},         {"logical_not", -1, 1}, {"isnan", -1, 1},
  };
  const Attrs tanh_gelu = {{"approximate", std::string("tanh")}};
  for (Sizes shape : {Sizes{17}, Sizes{3, 5}, Sizes{2, 3, 4}}) {
    for (const Range& r : unary) cases.push_back({r.op, {g.uniform(f32, shape, r.lo, r.hi)}});
    for (const char* op : {"floor", "ceil", "round", "sign", "logical_not"})
      cases.push_back({op, {g.halves(f32, shape, -3, 3)}});
    cases.push_back({"gelu", {g.uniform(f32, shape, -5, 5)}, tanh_gelu});
  }
  for (DType t : {DType::F64, DType::BF16, DType::F16}) {
    for (const char* op : {"exp", "tanh", "erf", "sigmoid", "silu", "gelu", "rsqrt", "sin"})
      cases.push_back({op, {g.uniform(t, {5, 7}, 0.1, 4)}});
    cases.push_back({"gelu", {g.uniform(t, {5, 7}, -4, 4)}, tanh_gelu});
    cases.push_back({"round", {g.halves(t, {5, 7}, -8, 8)}});
  }
  for (DType t : {DType::I16, DType::I32, DType::I64}) {
    for (const char* op : {"abs", "neg", "sign", "relu", "exp", "sqrt", "logical_not"})
      cases.push_back({op, {g.uniform(t, {4, 5}, -20, 20)}});
  }

  // Binary ops, with broadcasting.
  const std::pair<Sizes, Sizes> pairs[] = {
      {{17}, {17}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{}, {3, 5}}};
  for (const auto& [sa, sb] : pairs) {
    for (const char* op : {"add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
                           "ge", "logical_and", "logical_or"})
      cases.push_back({op, {g.halves(f32, sa, -2, 2), g.halves(f32, sb, -2, 2)}});
    cases.push_back({"div", {g.uniform(f32, sa, -5, 5), g.uniform(f32, sb, 0.5, 3)}});
    cases.push_back({"fmod", {g.uniform(f32, sa, -9, 9), g.uniform(f32, sb, 0.5, 3)}});
    cases.push_back({"fmod", {g.uniform(f32, sa, -9, 9), g.uniform(f32, sb, -3, -0.5)}});
    cases.push_back({"pow", {g.uniform(f32, sa, 0.1, 3), g.uniform(f32, sb, -2, 2)}});
    for (DType t : {DType::I16, DType::I32, DType::I64}) {
      for (const char* op :
           {"add", "sub", "mul", "maximum", "minimum", "div", "eq", "lt", "ge", "logical_and"})
        cases.push_back({op, {g.uniform(t, sa, -9, 9), g.uniform(t, sb, -9, 9)}});
      cases.push_back({"fmod", {g.uniform(t, sa, -50, 50), g.uniform(t, sb, 1, 7)}});
      cases.push_back({"fmod", {g.uniform(t, sa, -50, 50), g.uniform(t, sb, -7, -1)}});
      cases.push_back({"pow", {g.uniform(t, sa, -4, 4), g.uniform(t, sb, 0, 5)}});
    }
  }
  // Type promotion and low precision.
  cases.push_back({"add", {g.uniform(DType::I32, {3, 4}, -9, 9), g.uniform(f32, {4}, -2, 2)}});
  cases.push_back(
      {"add", {g.uniform(DType::U8, {6}, 0, 255), g.uniform(DType::I8, {6}, -128, 127)}});
  cases.push_back(
      {"mul", {g.uniform(DType::U8, {6}, 0, 255), g.uniform(DType::I16, {6}, -300, 300)}});
  // i16 wraps (torch computes int16 in int16).
  cases.push_back(
      {"add", {g.uniform(DType::I16, {6}, 30000, 32767), g.uniform(DType::I16, {6}, 1000, 5000)}});
  cases.push_back(
      {"mul", {g.uniform(DType::I16, {6}, 150, 300), g.uniform(DType::I16, {6}, -300, -150)}});
  cases.push_back({"mul", {g.uniform(DType::I64, {6}, -9, 9), g.uniform(DType::F64, {}, -2, 2)}});
  cases.push_back({"add", {g.uniform(DType::F16, {6}, -2, 2), g.uniform(f32, {}, -2, 2)}});
  cases.push_back({"add", {g.uniform(DType::F16, {6}, -2, 2), g.uniform(DType::BF16, {6}, -2, 2)}});
  for (DType t : {DType::F16, DType::BF16}) {
    for (const char* op : {"add", "sub", "mul", "div", "maximum", "lt"})
      cases.push_back({op, {g.uniform(t, {4, 6}, -3, 3), g.uniform(t, {6}, 0.5, 3)}});
  }
  cases.push_back(
      {"logical_or", {g.uniform(DType::Bool, {5}, 0, 1), g.uniform(DType::Bool, {5}, 0, 1)}});
  // where, cast, clamp.
  cases.push_back({"where",
                   {g.uniform(DType::Bool, {3, 1}, 0, 1), g.uniform(f32, {1, 4}, -1, 1),
                    g.uniform(f32, {3, 4}, -1, 1)}});
  cases.push_back({"where",
                   {g.uniform(DType::Bool, {6}, 0, 1), g.uniform(DType::I64, {6}, -9, 9),
                    g.uniform(DType::I32, {}, -9, 9)}});
  const std::pair<DType, DType> casts[] = {
      {f32, DType::I32},  {f32, DType::I8},  {f32, DType::F16},        {f32, DType::BF16},
      {f32, DType::Bool}, {f32, DType::F64}, {DType::I64, f32},        {DType::I32, DType::I64},
      {DType::Bool, f32}, {DType::F64, f32}, {DType::BF16, DType::F16}};
  for (const auto& [from, to] : casts) {
    Tensor x = from == DType::Bool ? g.uniform(from, {9}, 0, 1) : g.uniform(from, {9}, -100, 100);
    cases.push_back({"cast", {x}, {{"dtype", to}}});
  }
  cases.push_back({"clamp", {g.uniform(f32, {3, 5}, -3, 3)}, {{"min", -1.0}, {"max", 1.5}}});
  cases.push_back({"clamp", {g.uniform(f32, {3, 5}, -3, 3)}, {{"min", -0.5}}});
  cases.push_back({"clamp", {g.uniform(f32, {3, 5}, -3, 3)}, {{"max", 0.25}}});
  cases.push_back(
      {"clamp", {g.uniform(DType::I64, {9}, -9, 9)}, {{"min", int64_t{-2}}, {"max", int64_t{4}}}});
}

void add_reduction_cases(Gen& g, std::vector<Case>& cases) {
  const DType f32 = DType::F32;
  using A = std::vector<int64_t>;
  const Attrs axes_variants[] = {{},
                                 {{"axes", A{1}}},
                                 {{"axes", A{0, 2}}},
                                 {{"axes", A{-1}}, {"keepdim", true}},
                                 {{"keepdim", true}}};
  for (const char* op : {"sum", "mean", "max", "min", "var"}) {
    for (const Attrs& a : axes_variants)
      cases.push_back({op, {g.uniform(f32, {4, 5, 6}, -1, 1)}, a});
  }
  for (const Attrs& a : axes_variants)
    cases.push_back({"prod", {g.uniform(f32, {4, 5, 6}, 0.7, 1.4)}, a});
  for (int64_t c : {0, 2})
    cases.push_back(
        {"var", {g.uniform(f32, {4, 5, 6}, -1, 1)}, {{"axes", A{1}}, {"correction", c}}});
  cases.push_back({"sum", {g.uniform(DType::F64, {7, 9}, -1, 1)}, {{"axes", A{0}}}});
  cases.push_back({"mean", {g.uniform(DType::BF16, {7, 9}, -1, 1)}, {{"axes", A{1}}}});
  cases.push_back({"var", {g.uniform(DType::BF16, {7, 9}, -1, 1)}, {{"axes", A{1}}}});
  cases.push_back({"max", {g.uniform(DType::F16, {7, 9}, -1, 1)}, {{"axes", A{1}}}});
  for (DType t : {DType::I32, DType::I64}) {
    for (const char* op : {"sum", "max", "min"})
      cases.push_back({op, {g.uniform(t, {3, 4}, -50, 50)}, {{"axes", A{1}}}});
    cases.push_back({"prod", {g.uniform(t, {3, 4}, -3, 3)}, {{"axes", A{1}}}});
  }
  cases.push_back({"sum", {g.uniform(DType::Bool, {3, 4}, 0, 1)}, {{"axes", A{0}}}});

  const Attrs arg_variants[] = {
      {{"axis", int64_t{1}}}, {{"axis", int64_t{-1}}, {"keepdim", true}}, {}, {{"keepdim", true}}};
  for (const char* op : {"argmax", "argmin"}) {
    for (const Attrs& a : arg_variants) {
      cases.push_back({op, {g.uniform(f32, {4, 5, 6}, -1, 1)}, a});
      cases.push_back({op, {g.permutation(DType::I32, {4, 5, 6})}, a});
    }
  }
}

void add_composite_cases(Gen& g, std::vector<Case>& cases) {
  const DType f32 = DType::F32;
  for (const char* op : {"softmax", "log_softmax"}) {
    cases.push_back({op, {g.uniform(f32, {4, 7}, -5, 5)}});
    cases.push_back({op, {g.uniform(f32, {2, 3, 5}, -5, 5)}, {{"axis", int64_t{1}}}});
    cases.push_back({op, {g.uniform(f32, {2, 3, 5}, -5, 5)}, {{"axis", int64_t{0}}}});
    cases.push_back({op, {g.uniform(DType::F64, {3, 8}, -20, 20)}});
    cases.push_back({op, {g.uniform(DType::BF16, {4, 7}, -5, 5)}});
    cases.push_back({op, {g.uniform(DType::F16, {4, 7}, -5, 5)}});
  }
  cases.push_back(
      {"layer_norm",
       {g.uniform(f32, {4, 8}, -2, 3), g.uniform(f32, {8}, 0.5, 2), g.uniform(f32, {8}, -1, 1)}});
  cases.push_back(
      {"layer_norm", {g.uniform(f32, {2, 3, 6}, -2, 3)}, {{"dims", int64_t{2}}, {"eps", 1e-3}}});
  cases.push_back(
      {"layer_norm", {g.uniform(DType::F64, {3, 5}, -2, 3), g.uniform(DType::F64, {5}, 0.5, 2)}});
  cases.push_back({"layer_norm", {g.uniform(DType::BF16, {3, 16}, -2, 3)}});
  cases.push_back({"rms_norm", {g.uniform(f32, {4, 8}, -2, 3), g.uniform(f32, {8}, 0.5, 2)}});
  cases.push_back(
      {"rms_norm", {g.uniform(f32, {2, 3, 6}, -2, 3)}, {{"dims", int64_t{2}}, {"eps", 1e-3}}});
  cases.push_back({"rms_norm", {g.uniform(DType::F64, {3, 5}, -2, 3)}});
  cases.push_back({"concat",
                   {g.uniform(f32, {2, 3}, -1, 1), g.uniform(f32, {2, 2}, -1, 1)},
                   {{"dim", int64_t{1}}}});
  cases.push_back(
      {"concat", {g.uniform(DType::I32, {2, 3}, -9, 9), g.uniform(f32, {1, 3}, -1, 1)}});
  // gather: embedding lookups (axis 0 of a 2-D table), other axes, negative indices.
  cases.push_back(
      {"gather", {g.uniform(f32, {10, 4}, -1, 1), g.uniform(DType::I64, {3, 5}, 0, 9)}});
  cases.push_back({"gather",
                   {g.uniform(f32, {2, 6, 3}, -1, 1), g.uniform(DType::I32, {4}, -6, 5)},
                   {{"axis", int64_t{1}}}});
  cases.push_back({"gather",
                   {g.uniform(DType::BF16, {3, 7}, -1, 1), g.uniform(DType::I64, {2, 2}, -7, 6)},
                   {{"axis", int64_t{-1}}}});
  cases.push_back(
      {"gather", {g.uniform(DType::I32, {5, 2}, -9, 9), g.uniform(DType::I32, {3}, -5, 4)}});
}

// Matrix products and convolutions mostly take multiples of 0.5 (halves), whose products and
// sums are exact in f32: torch's f32/f16/bf16 kernels then agree with the double reference up
// to the final rounding, whatever their summation order. Uniform values run in f64, and in f32
// with a tolerance for torch's f32 accumulation.
void add_linalg_cases(Gen& g, std::vector<Case>& cases) {
  const DType f32 = DType::F32;
  using A = std::vector<int64_t>;
  auto h = [&](Sizes s, DType t = DType::F32) { return g.halves(t, std::move(s), -2, 2); };
  const std::pair<Sizes, Sizes> matmuls[] = {
      {{3, 4}, {4, 5}},         {{17}, {17}},        {{17}, {17, 3}},           {{2, 3, 17}, {17}},
      {{1, 1}, {1, 1}},         {{1, 5}, {5, 1}},    {{2, 1, 3, 4}, {5, 4, 3}}, {{3, 4}, {2, 4, 5}},
      {{7, 1, 3, 17}, {17, 1}}, {{4, 3, 0}, {0, 2}}, {{1, 17, 3}, {3, 3, 5}}};
  for (const auto& [sa, sb] : matmuls) cases.push_back({"matmul", {h(sa), h(sb)}});
  cases.push_back(
      {"matmul",
       {g.uniform(DType::F64, {5, 17}, -1, 1), g.uniform(DType::F64, {2, 17, 3}, -1, 1)}});
  cases.push_back(
      {"matmul", {g.uniform(f32, {17, 33}, -1, 1), g.uniform(f32, {33, 9}, -1, 1)}, {}, 1e-5});
  for (DType t : {DType::BF16, DType::F16})
    cases.push_back({"matmul", {h({3, 17}, t), h({2, 17, 5}, t)}});
  cases.push_back({"bmm", {h({2, 3, 4}), h({2, 4, 5})}});
  cases.push_back({"bmm", {h({1, 17, 3}), h({1, 3, 1})}});
  cases.push_back({"bmm", {h({3, 5, 7}, DType::BF16), h({3, 7, 2}, DType::BF16)}});

  cases.push_back({"linear", {h({2, 3, 17}), h({5, 17}), h({5})}});
  cases.push_back({"linear", {h({17}), h({3, 17})}});
  cases.push_back({"linear", {h({4, 8}), h({1, 8}), h({1})}});
  cases.push_back({"linear",
                   {g.uniform(DType::F64, {3, 9}, -1, 1), g.uniform(DType::F64, {4, 9}, -1, 1),
                    g.uniform(DType::F64, {4}, -1, 1)}});
  cases.push_back(
      {"linear", {h({3, 9}, DType::BF16), h({4, 9}, DType::BF16), h({4}, DType::BF16)}});
  cases.push_back({"addmm", {h({3, 5}), h({3, 4}), h({4, 5})}});
  cases.push_back({"addmm", {h({5}), h({3, 17}), h({17, 5})}, {{"alpha", 0.5}, {"beta", 2.0}}});
  cases.push_back({"addmm", {h({3, 1}), h({3, 4}), h({4, 1})}, {{"beta", 0.0}}});
  cases.push_back({"addmm", {h({}), h({1, 4}), h({4, 3})}, {{"alpha", -1.5}}});
  cases.push_back({"addmm",
                   {g.uniform(DType::F64, {1, 6}, -1, 1), g.uniform(DType::F64, {4, 5}, -1, 1),
                    g.uniform(DType::F64, {5, 6}, -1, 1)},
                   {{"alpha", 0.3}, {"beta", -0.7}}});

  // conv2d: groups, stride, padding, dilation, odd sizes, no bias.
  auto conv = [&](Sizes x, Sizes w, bool bias, Attrs a, DType t = DType::F32) {
    std::vector<Tensor> in{h(x, t), h(w, t)};
    if (bias) in.push_back(h({w[0]}, t));
    cases.push_back({"conv2d", in, std::move(a)});
  };
  conv({1, 3, 5, 5}, {4, 3, 3, 3}, true, {});
  conv({2, 4, 7, 9}, {6, 2, 3, 2}, true,
       {{"groups", int64_t{2}}, {"stride", A{2, 1}}, {"padding", A{1, 0}}, {"dilation", A{1, 2}}});
  conv({1, 3, 17, 17}, {3, 1, 3, 3}, true,
       {{"groups", int64_t{3}}, {"stride", int64_t{2}}, {"padding", int64_t{1}}});
  conv({2, 1, 1, 1}, {1, 1, 1, 1}, true, {});
  conv({1, 2, 6, 5}, {2, 2, 2, 3}, false, {{"dilation", A{2, 2}}, {"padding", A{2, 1}}});
  conv({1, 6, 3, 17}, {4, 3, 1, 5}, false,
       {{"groups", int64_t{2}}, {"stride", A{1, 3}}, {"padding", A{0, 2}}});
  conv({1, 2, 5, 6}, {3, 2, 3, 3}, true, {{"padding", A{1, 1}}}, DType::BF16);
  conv({1, 2, 5, 6}, {3, 2, 3, 3}, true, {{"padding", A{1, 1}}}, DType::F16);
  cases.push_back({"conv2d",
                   {g.uniform(DType::F64, {2, 3, 6, 7}, -1, 1),
                    g.uniform(DType::F64, {4, 3, 3, 2}, -1, 1), g.uniform(DType::F64, {4}, -1, 1)},
                   {{"stride", A{2, 2}}, {"padding", A{1, 1}}}});

  // Pools: padding, stride, dilation, ceil_mode (incl. a dropped last window), rank 3 and 5.
  struct Pool {
    Sizes x;
    Attrs a;
  };
  const Pool pools[] = {
      {{1, 3, 7, 7}, {{"kernel", A{3, 3}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}}},
      {{2, 3, 8, 7},
       {{"kernel", A{3, 3}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}, {"ceil_mode", true}}},
      {{1, 1, 17, 13},
       {{"kernel", A{2, 3}}, {"stride", A{3, 2}}, {"padding", A{1, 1}}, {"ceil_mode", true}}},
      {{3, 5, 5}, {{"kernel", int64_t{2}}}},
      {{2, 2, 1, 9, 9}, {{"kernel", A{1, 3}}, {"stride", A{1, 1}}}},
      {{1, 2, 5, 6},
       {{"kernel", A{2, 2}}, {"stride", A{3, 3}}, {"padding", A{1, 1}}, {"ceil_mode", true}}},
      {{1, 1, 1, 1}, {{"kernel", A{1, 1}}}},
  };
  for (const Pool& p : pools) {
    cases.push_back({"max_pool2d", {g.uniform(f32, p.x, -3, 3)}, p.a});
    for (bool include : {true, false}) {
      Attrs a = p.a;
      a.set("count_include_pad", include);
      cases.push_back({"avg_pool2d", {g.uniform(f32, p.x, -3, 3)}, a});
    }
  }
  cases.push_back({"max_pool2d",
                   {g.uniform(f32, {1, 1, 17, 13}, -3, 3)},
                   {{"kernel", A{3, 2}},
                    {"stride", A{2, 3}},
                    {"padding", A{1, 1}},
                    {"dilation", A{2, 3}},
                    {"ceil_mode", true}}});
  Tensor with_nan = g.uniform(f32, {1, 2, 5, 5}, -3, 3);
  with_nan.set_from_double(7, std::nan(""));
  cases.push_back(
      {"max_pool2d", {with_nan}, {{"kernel", A{3, 3}}, {"padding", A{1, 1}}, {"stride", A{1, 1}}}});
  cases.push_back({"max_pool2d",
                   {g.uniform(f32, {2, 3, 5}, -3, 3)},
                   {{"kernel", A{2, 2}}, {"padding", A{1, 1}}}});
  for (DType t : {DType::F64, DType::BF16, DType::F16}) {
    Attrs a{{"kernel", A{3, 3}}, {"stride", A{2, 2}}, {"padding", A{1, 1}}, {"ceil_mode", true}};
    cases.push_back({"max_pool2d", {g.uniform(t, {1, 2, 8, 9}, -3, 3)}, a});
    cases.push_back({"avg_pool2d", {g.uniform(t, {1, 2, 8, 9}, -3, 3)}, a});
  }
  cases.push_back({"global_avg_pool2d", {g.uniform(f32, {2, 3, 5, 7}, -3, 3)}});
  cases.push_back({"global_avg_pool2d", {g.uniform(f32, {3, 1, 1}, -3, 3)}});
  cases.push_back({"global_avg_pool2d", {g.uniform(DType::F64, {2, 17, 3}, -3, 3)}});
  cases.push_back({"global_avg_pool2d", {g.uniform(DType::BF16, {1, 4, 6, 6}, -3, 3)}});
}

nlohmann::json attrs_json(const Attrs& attrs) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, v] : attrs.items()) {
    std::visit(
        [&, &name = name](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, DType>)
            j[name] = std::string(dtype_name(x));
          else
            j[name] = x;
        },
        v);
  }
  return j;
}

Tensor interpret_case(const Case& c) {
  Graph g;
  std::vector<int> ids;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    ids.push_back(
        g.add_input(fmt::format("x{}", i), c.inputs[i].dtype(), make_shape(c.inputs[i].shape())));
  g.add_output(g.add_node(c.op, ids, c.attrs));
  return interpret(g, c.inputs).at(0);
}

std::string describe(const Case& c) {
  std::vector<std::string> ins;
  for (const Tensor& t : c.inputs)
    ins.push_back(fmt::format("{}{}", dtype_name(t.dtype()), shape_str(t.shape())));
  return fmt::format("{}({}) {}", c.op, fmt::join(ins, ", "), attrs_json(c.attrs).dump());
}

// Tolerance of a result dtype: about one or two units in the last place, since torch computes
// f32 in float (vectorized, up to 1 ulp off) and we round the double result once.
double tolerance(DType t) {
  switch (t) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1e-6;
    case DType::F16:
      return 1e-3;
    case DType::BF16:
      return 8e-3;
    default:
      return 0;
  }
}

// Empty when `ours` matches `theirs`; else what differs.
std::string compare(const Tensor& ours, const Tensor& theirs, double case_tol) {
  if (ours.dtype() != theirs.dtype())
    return fmt::format("dtype {} vs torch {}", dtype_name(ours.dtype()),
                       dtype_name(theirs.dtype()));
  if (ours.shape() != theirs.shape())
    return fmt::format("shape {} vs torch {}", shape_str(ours.shape()), shape_str(theirs.shape()));
  double tol = case_tol > 0 ? case_tol : tolerance(ours.dtype());
  for (int64_t i = 0; i < ours.numel(); ++i) {
    double a = ours.item_as_double(i), b = theirs.item_as_double(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b || std::fabs(a - b) <= tol * (1 + std::fabs(b))) continue;
    return fmt::format("element {}: {} vs torch {}", i, a, b);
  }
  return "";
}

TEST(ReferenceTorch, MatchesEager) {
  Gen g;
  std::vector<Case> cases;
  add_elementwise_cases(g, cases);
  add_reduction_cases(g, cases);
  add_composite_cases(g, cases);
  add_linalg_cases(g, cases);

  fs::path dir = fs::temp_directory_path() / fmt::format("coil_reference_torch_{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json manifest = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t k = 0; k < cases[i].inputs.size(); ++k)
      write_npy(dir / fmt::format("c{}_in{}.npy", i, k), cases[i].inputs[k]);
    manifest.push_back({{"op", cases[i].op},
                        {"attrs", attrs_json(cases[i].attrs)},
                        {"inputs", cases[i].inputs.size()}});
  }
  std::ofstream(dir / "manifest.json") << manifest.dump(1);

  std::string cmd = fmt::format("'{}' '{}/tests/unit/torch_reference.py' '{}' 2>&1", COIL_PYTHON,
                                COIL_SOURCE_DIR, dir.string());
  int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << "torch_reference.py failed: " << cmd;

  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string diff;
    try {
      diff = compare(interpret_case(cases[i]), read_npy(dir / fmt::format("c{}_out.npy", i)),
                     cases[i].tol);
    } catch (const std::exception& e) {
      diff = fmt::format("threw: {}", e.what());
    }
    if (!diff.empty() && ++failures <= 30)
      ADD_FAILURE() << "case " << i << " " << describe(cases[i]) << ": " << diff;
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases; inputs and torch results are in "
                         << dir.string();
  if (failures == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace coil
