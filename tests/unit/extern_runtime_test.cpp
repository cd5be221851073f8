// The extern kernel runtime (src/kernels/coil_extern.h): a program built like a
// generated module (ISA flags, extern_link_flags(), the embedded headers; see
// tests/unit/extern_runtime/program.cpp) runs oneDNN's convolution and both library GEMMs,
// and every result is compared with plain double loops. Also runtime/extern_timing.h.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/code_cache.h"
#include "runtime/extern_timing.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "support/check.h"

namespace coil {
namespace {

// ---- the program --------------------------------------------------------------------------

using GemmFn = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*,
                        int64_t, bool, float*, int64_t);

struct Program {
  std::shared_ptr<SharedLibrary> lib;
  void* (*conv_create)(const int64_t*) = nullptr;
  void (*conv_run)(void*, const float*, const float*, const float*, float*) = nullptr;
  void (*conv_implementation)(void*, char*, int64_t) = nullptr;
  void (*conv_destroy)(void*) = nullptr;
  void (*conv_static_call_site)(const float*, const float*, const float*, float*) = nullptr;
  GemmFn gemm_dnnl = nullptr;
  GemmFn gemm_openblas = nullptr;
  int (*have_openblas)() = nullptr;
  int (*openblas_parallel)() = nullptr;
};

const Program& program() {
  static std::once_flag once;
  static Program p;
  std::call_once(once, [] {
    std::ifstream in(std::string(COIL_SOURCE_DIR) + "/tests/unit/extern_runtime/program.cpp");
    std::stringstream text;
    text << in.rdbuf();
    COIL_USER_CHECK(!text.str().empty(), "tests/unit/extern_runtime/program.cpp not found");
    std::string source =
        (extern_have_openblas() ? "#define COIL_HAVE_OPENBLAS 1\n" : "") + text.str();
    CompileFlags flags = isa_compile_flags(host_isa());
    for (const std::string& f : extern_link_flags()) flags.extra.push_back(f);
    p.lib = SharedLibrary::open(compile_cached(source, flags).so_path);
    p.conv_create = p.lib->symbol_as<decltype(p.conv_create)>("conv_create");
    p.conv_run = p.lib->symbol_as<decltype(p.conv_run)>("conv_run");
    p.conv_implementation =
        p.lib->symbol_as<decltype(p.conv_implementation)>("conv_implementation");
    p.conv_destroy = p.lib->symbol_as<decltype(p.conv_destroy)>("conv_destroy");
    p.conv_static_call_site =
        p.lib->symbol_as<decltype(p.conv_static_call_site)>("conv_static_call_site");
    p.gemm_dnnl = p.lib->symbol_as<GemmFn>("gemm_dnnl");
    p.gemm_openblas = p.lib->symbol_as<GemmFn>("gemm_openblas");
    p.have_openblas = p.lib->symbol_as<int (*)()>("have_openblas");
    p.openblas_parallel = p.lib->symbol_as<int (*)()>("openblas_parallel");
  });
  return p;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

/// Accumulation in float over `terms` products: the error bound gamma_n * sum |products|
/// (n + 4 for the bias, the post-op and slack), plus an absolute floor.
double tolerance(int64_t terms, double sum_abs) {
  return 1e-6 + static_cast<double>(terms + 4) * std::ldexp(1.0, -23) * sum_abs;
}

// ---- conv2d -------------------------------------------------------------------------------

struct Conv {
  int64_t N, C, H, W, OC, KH, KW;
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0, dh = 1, dw = 1, groups = 1;
  bool bias = false, relu = false;
  bool silu = false;                        // y * sigmoid(y) (relu false)
  bool src_nhwc = false, dst_nhwc = false;  // channels-last x / y

  int64_t oh() const { return (H + pt + pb - dh * (KH - 1) - 1) / sh + 1; }
  int64_t ow() const { return (W + pl + pr - dw * (KW - 1) - 1) / sw + 1; }
  size_t x_size() const { return static_cast<size_t>(N * C * H * W); }
  size_t w_size() const { return static_cast<size_t>(OC * (C / groups) * KH * KW); }
  size_t y_size() const { return static_cast<size_t>(N * OC * oh() * ow()); }
  std::string name() const {
    return fmt::format(
        "N={} C={} H={} W={} OC={} k{}x{} s{}x{} pad t{} l{} b{} r{} dil {}x{} g{}{}{}", N, C, H, W,
        OC, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, groups, bias ? " bias" : "",
        relu   ? " relu"
        : silu ? " silu"
               : "");
  }
  std::vector<int64_t> args(bool weights_constant, bool blocked) const {
    return {N,
            C,
            H,
            W,
            OC,
            KH,
            KW,
            sh,
            sw,
            pt,
            pl,
            pb,
            pr,
            dh,
            dw,
            groups,
            bias,
            relu   ? 1
            : silu ? 2
                   : 0,
            weights_constant,
            blocked,
            src_nhwc,
            dst_nhwc};
  }
};

/// Compares y with conv(x, w) + b (relu) computed in double; returns the number of mismatches.
int check_conv(const Conv& c, const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& y) {
  const int64_t cg = c.C / c.groups, ocg = c.OC / c.groups;
  int bad = 0;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t oc = 0; oc < c.OC; ++oc)
      for (int64_t i = 0; i < c.oh(); ++i)
        for (int64_t j = 0; j < c.ow(); ++j) {
          const int64_t g = oc / ocg;
          double acc = c.bias ? b[oc] : 0.0, sum_abs = c.bias ? std::fabs(b[oc]) : 0.0;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t h = i * c.sh - c.pt + kh * c.dh, v = j * c.sw - c.pl + kw * c.dw;
                if (h < 0 || h >= c.H || v < 0 || v >= c.W) continue;
                const double p =
                    static_cast<double>(x[((n * c.C + g * cg + ic) * c.H + h) * c.W + v]) *
                    w[((oc * cg + ic) * c.KH + kh) * c.KW + kw];
                acc += p;
                sum_abs += std::fabs(p);
              }
          if (c.relu) acc = std::max(acc, 0.0);
          if (c.silu) acc = acc / (1 + std::exp(-acc));
          const float got = y[((n * c.OC + oc) * c.oh() + i) * c.ow() + j];
          const double err = std::fabs(got - acc);
          if (!(err <= tolerance(cg * c.KH * c.KW, sum_abs))) {
            if (++bad <= 5)
              ADD_FAILURE() << c.name() << ": y[" << n << "," << oc << "," << i << "," << j
                            << "] = " << got << ", expected " << acc;
          }
        }
  return bad;
}

std::vector<Conv> conv_cases() {
  std::vector<Conv> v;
  // resnet-like 3x3, small spatial size
  v.push_back({1, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, true});
  // odd sizes, C=3 (an image stem), no bias
  v.push_back({2, 3, 7, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, false});
  // stride 2, asymmetric padding, non-square kernel and image
  v.push_back({1, 4, 9, 11, 6, 3, 2, 2, 2, 0, 1, 2, 1, 1, 1, 1, true, false});
  // dilation 2 (and 3 along w), padding 2
  v.push_back({1, 5, 10, 12, 7, 3, 3, 1, 1, 2, 2, 2, 2, 2, 3, 1, true, true});
  // groups 2
  v.push_back({2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, false});
  // depthwise, and depthwise with a channel multiplier of 2
  v.push_back({1, 16, 13, 13, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 16, true, true});
  v.push_back({1, 8, 7, 9, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 8, false, false});
  // 1x1, stride 1 and 2
  v.push_back({1, 32, 9, 9, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, true, true});
  v.push_back({2, 16, 7, 7, 8, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, false, false});
  // 1x1 image, 5x5 kernel larger than the input thanks to padding
  v.push_back({1, 3, 1, 1, 4, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, true, false});
  // 7x7 stride-2 stem (C=3), odd size
  v.push_back({1, 3, 23, 23, 8, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, true, true});
  // silu post-ops (efficientnet's): a 3x3, a depthwise and a 1x1 without bias
  for (size_t i : {0, 5, 8}) {
    Conv c = v[i];
    c.relu = false, c.silu = true;
    v.push_back(c);
  }
  return v;
}

class ExternConv2dTest : public ::testing::TestWithParam<bool> {};  // blocked layout or plain

TEST_P(ExternConv2dTest, MatchesDoubleLoops) {
  const Program& p = program();
  const bool blocked = GetParam();
  uint32_t seed = 1;
  for (const Conv& c : conv_cases()) {
    for (bool wconst : {true, false}) {
      SCOPED_TRACE(c.name() + (wconst ? " constant weights" : " weights reordered per run"));
      std::vector<float> x = random_floats(c.x_size(), seed++);
      std::vector<float> w = random_floats(c.w_size(), seed++);
      std::vector<float> b = random_floats(static_cast<size_t>(c.OC), seed++);
      std::vector<float> y(c.y_size(), NAN);
      std::vector<int64_t> args = c.args(wconst, blocked);
      void* conv = p.conv_create(args.data());
      p.conv_run(conv, x.data(), w.data(), c.bias ? b.data() : nullptr, y.data());
      EXPECT_EQ(check_conv(c, x, w, b, y), 0);
      // A second run (weights cached or reordered again) gives the same.
      std::vector<float> y2(c.y_size(), NAN);
      p.conv_run(conv, x.data(), w.data(), c.bias ? b.data() : nullptr, y2.data());
      EXPECT_EQ(y, y2);
      p.conv_destroy(conv);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ExternLayouts, ExternConv2dTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Blocked" : "Plain");
                         });

TEST(ExternConv2d, ConstantWeightsAreKeyedOnThePointer) {
  const Program& p = program();
  const Conv c{1, 8, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, false};
  std::vector<float> x = random_floats(c.x_size(), 11), b = random_floats(8, 12);
  std::vector<float> w1 = random_floats(c.w_size(), 13), w2 = random_floats(c.w_size(), 14);
  std::vector<float> y(c.y_size());
  for (bool wconst : {true, false}) {
    SCOPED_TRACE(wconst ? "weights_constant" : "weights not constant");
    std::vector<int64_t> args = c.args(wconst, true);
    void* conv = p.conv_create(args.data());
    p.conv_run(conv, x.data(), w1.data(), b.data(), y.data());
    EXPECT_EQ(check_conv(c, x, w1, b, y), 0);
    p.conv_run(conv, x.data(), w2.data(), b.data(), y.data());  // another pointer: reordered
    EXPECT_EQ(check_conv(c, x, w2, b, y), 0);
    p.conv_run(conv, x.data(), w1.data(), b.data(), y.data());  // and back
    EXPECT_EQ(check_conv(c, x, w1, b, y), 0);
    if (!wconst) {  // not constant: new contents behind the same pointer are seen
      std::vector<float> saved = w1;
      for (float& f : w1) f = -f;
      p.conv_run(conv, x.data(), w1.data(), b.data(), y.data());
      EXPECT_EQ(check_conv(c, x, w1, b, y), 0);
      w1 = saved;
    }
    p.conv_destroy(conv);
  }
}

TEST(ExternConv2d, FollowsTheThreadCount) {
  const Program& p = program();
  const Conv c{2, 16, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, true};
  std::vector<float> x = random_floats(c.x_size(), 21), w = random_floats(c.w_size(), 22);
  std::vector<float> b = random_floats(16, 23), y(c.y_size());
  std::vector<int64_t> args = c.args(true, true);
  void* conv = p.conv_create(args.data());
  const int saved = omp_get_max_threads();
  for (int t : {1, 2, 1}) {
    omp_set_num_threads(t);  // the primitive is rebuilt for the new count
    std::fill(y.begin(), y.end(), NAN);
    p.conv_run(conv, x.data(), w.data(), b.data(), y.data());
    EXPECT_EQ(check_conv(c, x, w, b, y), 0) << t << " threads";
  }
  omp_set_num_threads(saved);
  char impl[128] = {};
  p.conv_implementation(conv, impl, sizeof impl);
  EXPECT_NE(std::string(impl), "") << "oneDNN names its implementation";
  p.conv_destroy(conv);
}

TEST(ExternConv2d, StaticCallSiteAsGeneratedCodeWritesIt) {
  const Program& p = program();
  // program.cpp: Conv2d conv(2, 6, 9, 7, 4, 3, 3, {2, 1}, {1, 0, 2, 1}, {1, 2}, 2, bias, relu)
  const Conv c{2, 6, 9, 7, 4, 3, 3, 2, 1, 1, 0, 2, 1, 1, 2, 2, true, true};
  std::vector<float> x = random_floats(c.x_size(), 31), w = random_floats(c.w_size(), 32);
  std::vector<float> b = random_floats(4, 33), y(c.y_size(), NAN);
  for (int i = 0; i < 2; ++i) {
    p.conv_static_call_site(x.data(), w.data(), b.data(), y.data());
    EXPECT_EQ(check_conv(c, x, w, b, y), 0);
  }
}

TEST_P(ExternConv2dTest, ReluKeepsNanAndGivesPlusZero) {
  // relu as a post-op is elu(alpha 0) then 1 * y + 0 (extern_kernels.cpp): where the plain
  // convolution gives NaN the relu'd one must too (oneDNN's relu post-op gives 0), -inf and
  // every y <= 0 become +0 (not -0), and y > 0 is kept. Compared with the same primitive shape
  // without the post-op, on inputs with NaN, -inf and +inf. Shapes: a resnet 3x3, stride 2 with
  // odd channel counts and batch 2, a 7x7 stem, a strided 1x1, and a 1-channel 1x1 (y = x).
  const Program& p = program();
  const bool blocked = GetParam();
  const Conv cases[] = {
      {1, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, true},
      {2, 5, 9, 11, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, true, true},
      {1, 3, 23, 23, 8, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, false, true},
      {2, 24, 8, 8, 40, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, true, true},
      {1, 1, 6, 9, 17, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, false, true},
  };
  uint32_t seed = 71;
  for (const Conv& c : cases) {
    SCOPED_TRACE(c.name());
    std::vector<float> x = random_floats(c.x_size(), seed++);
    std::vector<float> w = random_floats(c.w_size(), seed++);
    std::vector<float> b = random_floats(static_cast<size_t>(c.OC), seed++);
    if (c.C == 1) std::fill(w.begin(), w.end(), 1.0f);  // y = x in every output channel
    const float specials[] = {NAN, -INFINITY, INFINITY, -0.0f, 0.0f, -1e30f};
    for (size_t i = 0; i < 6; ++i) x[(i * 7919) % x.size()] = specials[i];
    Conv plain = c;
    plain.relu = false;
    std::vector<float> z(c.y_size()), y(c.y_size());
    std::vector<int64_t> zargs = plain.args(true, blocked), yargs = c.args(true, blocked);
    void* zconv = p.conv_create(zargs.data());
    void* yconv = p.conv_create(yargs.data());
    p.conv_run(zconv, x.data(), w.data(), c.bias ? b.data() : nullptr, z.data());
    p.conv_run(yconv, x.data(), w.data(), c.bias ? b.data() : nullptr, y.data());
    p.conv_destroy(zconv);
    p.conv_destroy(yconv);
    int nans = 0, zeros = 0, bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      bool ok;
      if (std::isnan(z[i])) {
        ok = std::isnan(y[i]);
        ++nans;
      } else if (!(z[i] > 0)) {
        ok = y[i] == 0.0f && !std::signbit(y[i]);
        ++zeros;
      } else {
        ok = std::fabs(y[i] - z[i]) <= 1e-5f * std::max(1.0f, std::fabs(z[i])) ||
             (std::isinf(z[i]) && y[i] == z[i]);
      }
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << "y[" << i << "] = " << y[i] << " where the plain conv gives " << z[i];
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(nans, 0) << "the case has no NaN output to check";
    EXPECT_GT(zeros, 0) << "the case has no negative output to check";
  }
}

TEST_P(ExternConv2dTest, ChannelsLastInputAndOutput) {
  // x and / or y in NHWC (lower/conv_layouts.cpp passes a tensor between two calls this way):
  // the same values as NCHW, transposed. Shapes: a resnet 3x3 with relu, stride 2 with odd
  // channel counts and batch 2, a strided 1x1, grouped.
  const Program& p = program();
  const bool blocked = GetParam();
  const Conv cases[] = {
      {1, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, true},
      {2, 5, 9, 11, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, true, false},
      {2, 24, 8, 8, 40, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, false, true},
      {1, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, false},
  };
  uint32_t seed = 91;
  // NCHW [N, C, H, W] <-> NHWC
  auto to_nhwc = [](const std::vector<float>& v, int64_t N, int64_t C, int64_t H, int64_t W) {
    std::vector<float> t(v.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < H * W; ++i) t[(n * H * W + i) * C + c] = v[(n * C + c) * H * W + i];
    return t;
  };
  auto to_nchw = [](const std::vector<float>& t, int64_t N, int64_t C, int64_t H, int64_t W) {
    std::vector<float> v(t.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < H * W; ++i) v[(n * C + c) * H * W + i] = t[(n * H * W + i) * C + c];
    return v;
  };
  for (Conv c : cases) {
    std::vector<float> x = random_floats(c.x_size(), seed++);
    std::vector<float> w = random_floats(c.w_size(), seed++);
    std::vector<float> b = random_floats(static_cast<size_t>(c.OC), seed++);
    for (int flags = 1; flags < 4; ++flags) {
      c.src_nhwc = flags & 1, c.dst_nhwc = flags & 2;
      SCOPED_TRACE(c.name() + (c.src_nhwc ? " x NHWC" : "") + (c.dst_nhwc ? " y NHWC" : ""));
      std::vector<float> xin = c.src_nhwc ? to_nhwc(x, c.N, c.C, c.H, c.W) : x;
      std::vector<float> y(c.y_size(), NAN);
      std::vector<int64_t> args = c.args(true, blocked);
      void* conv = p.conv_create(args.data());
      p.conv_run(conv, xin.data(), w.data(), c.bias ? b.data() : nullptr, y.data());
      p.conv_destroy(conv);
      if (c.dst_nhwc) y = to_nchw(y, c.N, c.OC, c.oh(), c.ow());
      EXPECT_EQ(check_conv(c, x, w, b, y), 0);
    }
  }
}

TEST(ExternConv2d, BadParametersAndLibraryErrorsThrowWithContext) {
  const Program& p = program();
  Conv c{1, 6, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, true, false};  // 4 divides neither C
  std::vector<int64_t> args = c.args(true, true);
  try {
    p.conv_create(args.data());
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("groups must divide"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("conv2d N=1 C=6"), std::string::npos) << e.what();
  }
  c = Conv{1, 2, 3, 3, 2, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1, false, false};  // empty output
  args = c.args(true, true);
  EXPECT_THROW(p.conv_create(args.data()), std::runtime_error);
  // oneDNN's own status: a leading dimension smaller than the row it holds.
  std::vector<float> a(64, 1.0f), bm(64, 1.0f), cm(64);
  try {
    p.gemm_dnnl(4, 4, 4, a.data(), 2, false, bm.data(), 4, false, cm.data(), 4);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("dnnl_sgemm failed: oneDNN status"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("sgemm_dnnl(M=4, N=4, K=4, lda=2"), std::string::npos)
        << e.what();
  }
  if (p.have_openblas()) {
    EXPECT_THROW(p.gemm_openblas(4, 4, 4, a.data(), 2, false, bm.data(), 4, false, cm.data(), 4),
                 std::runtime_error);
  }
}

// ---- sgemm --------------------------------------------------------------------------------

void check_gemm(GemmFn gemm, const char* name) {
  struct Shape {
    int64_t m, n, k;
  };
  const std::vector<Shape> shapes = {{1, 1, 1},     {7, 13, 5},  {33, 17, 65},  {64, 64, 64},
                                     {100, 3, 250}, {3, 100, 1}, {129, 67, 31}, {1, 300, 77}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (int64_t pad : {0, 3}) {
          SCOPED_TRACE(fmt::format("{} M={} N={} K={}{}{} ld pad {}", name, s.m, s.n, s.k,
                                   ta ? " transA" : "", tb ? " transB" : "", pad));
          // Stored shapes: A [M,K] or [K,M]; B [K,N] or [N,K]; rows padded by `pad`.
          const int64_t a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
          const int64_t b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
          const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = s.n + pad;
          std::vector<float> A = random_floats(static_cast<size_t>(a_rows * lda), seed++);
          std::vector<float> B = random_floats(static_cast<size_t>(b_rows * ldb), seed++);
          std::vector<float> C(static_cast<size_t>(s.m * ldc), NAN);
          gemm(s.m, s.n, s.k, A.data(), lda, ta, B.data(), ldb, tb, C.data(), ldc);
          int bad = 0;
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double acc = 0, sum_abs = 0;
              for (int64_t k = 0; k < s.k; ++k) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
                sum_abs += std::fabs(a * b);
              }
              const float got = C[i * ldc + j];
              if (!(std::fabs(got - acc) <= tolerance(s.k, sum_abs)) && ++bad <= 3)
                ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", expected " << acc;
              // Padding between rows is left alone.
              for (int64_t j2 = s.n; j2 < ldc && j == 0; ++j2)
                if (!std::isnan(C[i * ldc + j2]) && ++bad <= 3)
                  ADD_FAILURE() << "wrote the padding of row " << i;
            }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
  // K = 0: C = 0 (beta is 0), whatever C held; M = 0 or N = 0: nothing is touched.
  std::vector<float> C(6, NAN), none;
  gemm(2, 3, 0, none.data(), 1, false, none.data(), 3, false, C.data(), 3);
  for (float f : C) EXPECT_EQ(f, 0.0f);
  std::fill(C.begin(), C.end(), NAN);
  gemm(0, 3, 4, none.data(), 4, false, none.data(), 3, false, C.data(), 3);
  for (float f : C) EXPECT_TRUE(std::isnan(f));
}

TEST(ExternSgemm, DnnlMatchesDoubleLoops) {
  check_gemm(program().gemm_dnnl, "sgemm_dnnl");
}

TEST(ExternSgemm, OpenblasMatchesDoubleLoops) {
  const Program& p = program();
  if (!extern_have_openblas()) GTEST_SKIP() << "libcoil was built without OpenBLAS";
  ASSERT_EQ(p.have_openblas(), 1);
  check_gemm(p.gemm_openblas, "sgemm_openblas");
}

TEST(ExternSgemm, LinkFlagsNameCoilExtern) {
  std::vector<std::string> flags = extern_link_flags();
  EXPECT_NE(std::find(flags.begin(), flags.end(), "-lcoil_extern"), flags.end());
  for (const std::string& f : flags) EXPECT_EQ(f[0], '-') << f;
}

// libcoil_extern links OpenBLAS's OpenMP build by its directory; the plain libopenblas.so.0
// usually names the pthread build, whose thread pool fights OpenMP's.
TEST(ExternSgemm, ModulesLoadTheOpenmpOpenblas) {
  if (!extern_have_openblas()) GTEST_SKIP() << "libcoil was built without OpenBLAS";
  EXPECT_EQ(program().openblas_parallel(), 2) << "openblas_get_parallel(): 2 is OpenMP";
}

// ---- extern_timing ------------------------------------------------------------------------

TEST(ExternTiming, ReturnsPositiveFiniteTimes) {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case& c : {Case{8, 8, 8, false, false}, Case{64, 48, 32, true, false},
                        Case{128, 128, 128, false, true}, Case{33, 1, 70, true, true}}) {
    SCOPED_TRACE(fmt::format("M={} N={} K={}", c.m, c.n, c.k));
    double d = time_sgemm_dnnl(c.m, c.n, c.k, c.ta, c.tb, 5);
    EXPECT_TRUE(std::isfinite(d) && d > 0) << d;
    EXPECT_LT(d, 1.0);
    double o = time_sgemm_openblas(c.m, c.n, c.k, c.ta, c.tb, 5);
    if (extern_have_openblas()) {
      EXPECT_TRUE(std::isfinite(o) && o > 0) << o;
      EXPECT_LT(o, 1.0);
    } else {
      EXPECT_TRUE(std::isinf(o));
    }
  }
  EXPECT_EQ(time_sgemm_dnnl(0, 5, 5, false, false), 0.0);
  EXPECT_THROW(time_sgemm_dnnl(-1, 5, 5, false, false), Error);
}

TEST(ExternTiming, CapsTheTotalTime) {
  // 512^3 is ~1-10 ms here; 1000 requested samples under a 30 ms cap must stop early.
  auto start = std::chrono::steady_clock::now();
  double t = time_sgemm_dnnl(512, 512, 512, false, false, 1000, 0.03);
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(std::isfinite(t) && t > 0);
  EXPECT_LT(elapsed, 0.03 + 3 * t + 0.5);  // cap + warm-up and calibration calls + slack
}

}  // namespace
}  // namespace coil
