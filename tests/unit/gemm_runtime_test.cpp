// coil_gemm.h (the matmul runtime of generated CPU kernels) built for every ISA this machine runs
// (AVX-512 with and without the bf16 kernel, AVX2, portable C++, and with clang), compared with
// a double-precision reference matmul: odd and tiny shapes around the micro-tile, K = 0 and 1,
// transposed A and B, batches with per-batch and shared (broadcast) operands, small and default
// blockings, bf16 inputs; the epilogue must see every element exactly once, and 1, 2 and 3
// threads (and any blocking) must give bitwise identical results. The program under test is
// tests/unit/kernel_gemm/gemm_program.cpp. The AMX bf16 kernel runs twice: on emulated tiles
// (COIL_AMX_EMULATE, any AVX-512 CPU: the development machines have no AMX) and, on a CPU with
// AMX, on the real ones (the avx512_amx ISA; skipped elsewhere).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "kernel_vec/harness.h"
#include "kernels/coil_types.h"

namespace coil::gemm_test {
namespace {

using vec_test::GuardedBuffer;

// Mirrors GemmArgs in gemm_program.cpp.
struct GemmArgs {
  int64_t batch, M, N, K;
  int64_t a_rs, a_cs, a_batch_stride;
  int64_t b_rs, b_cs, b_batch_stride;
  int64_t mc, nc, kc;
  int32_t threads;
  int32_t mode;
};

struct GemmVariant {
  std::string name;
  std::string isa;
  std::string compiler;            // "" = the default toolchain
  std::vector<std::string> extra;  // flags after the ISA's
  bool needs_bf16 = false;         // skip unless the CPU has AVX512-BF16
  bool amx = false;                // bf16 runs on AMX tiles (real or emulated)
};

std::vector<GemmVariant> gemm_variants() {
  return {{"avx512", "avx512", "", {"-mavx512bf16"}, true},
          {"avx512_nobf16", "avx512", "", {"-mno-avx512bf16"}, false},
          {"avx512_amx_emulated", "avx512", "", {"-DCOIL_AMX_EMULATE"}, false, true},
          {"avx512_amx", "avx512_amx", "", {}, false, true},
          {"avx2", "avx2", "", {}, false},
          {"scalar", "scalar", "", {}, false},
          {"avx512_clang", "avx512", "clang++-14", {}, false},
          {"scalar_clang", "scalar", "clang++-14", {}, false}};
}

void PrintTo(const GemmVariant& v, std::ostream* os) {
  *os << v.name;
}

std::string variant_name(const ::testing::TestParamInfo<GemmVariant>& info) {
  return info.param.name;
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

class GemmProgram {
 public:
  static std::shared_ptr<GemmProgram> get(const GemmVariant& v) {
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<GemmProgram>> built;
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = built[v.name];
    if (slot) return slot;
    // COIL_TEST_SOURCE_DIR: the tree when the binary runs elsewhere (bench/amx/run_device.sh).
    const char* src_dir = std::getenv("COIL_TEST_SOURCE_DIR");
    std::string source =
        vec_test::read_text(std::filesystem::path(src_dir ? src_dir : COIL_SOURCE_DIR) /
                            "tests/unit/kernel_gemm/gemm_program.cpp");
    COIL_USER_CHECK(!source.empty(), "gemm_program.cpp not found");
    CompileFlags flags = isa_compile_flags(isa_by_name(v.isa));
    for (const std::string& f : v.extra) flags.extra.push_back(f);
    std::filesystem::path so =
        v.compiler.empty()
            ? compile_cached(source, flags).so_path
            : vec_test::compile_with(Toolchain::for_compiler(v.compiler), source, flags);
    slot = std::shared_ptr<GemmProgram>(new GemmProgram(SharedLibrary::open(so)));
    return slot;
  }
  template <typename Fn>
  Fn fn(const std::string& name) const {
    return lib_->symbol_as<Fn>(name);
  }
  int64_t info(int what) const { return fn<int64_t (*)(int)>("gemm_info")(what); }

 private:
  explicit GemmProgram(std::shared_ptr<SharedLibrary> lib) : lib_(std::move(lib)) {}
  std::shared_ptr<SharedLibrary> lib_;
};

// One problem: operands in the layouts the args describe, a result and the reference.
template <typename T>
struct Problem {
  GemmArgs args{};
  std::vector<T> a, b;  // A lives in `a_guard` instead (ending at a PROT_NONE page)
  std::unique_ptr<GuardedBuffer> a_guard;
  T* a_data = nullptr;
  int64_t a_size = 0;

  double a_at(int64_t bt, int64_t i, int64_t k) const {
    return static_cast<float>(a_data[bt * args.a_batch_stride + i * args.a_rs + k * args.a_cs]);
  }
  double b_at(int64_t bt, int64_t k, int64_t j) const {
    return static_cast<float>(b[bt * args.b_batch_stride + k * args.b_rs + j * args.b_cs]);
  }
};

struct Shape {
  int64_t batch, M, N, K;
  bool a_t = false, b_t = false;            // transposed storage
  bool a_shared = false, b_shared = false;  // one operand for every batch
  int64_t spread = 1;                       // distance of neighbours along a run (1: dense)
  int64_t pad = 0;                          // extra elements between runs
};

// Values: small integers (every product and sum exact in f32, so results must be exact) or
// uniform in [-1, 1] (rounded to bf16 for bf16 problems).
template <typename T>
Problem<T> make_problem(const Shape& s, bool integers, uint32_t seed) {
  Problem<T> p;
  GemmArgs& g = p.args;
  g.batch = s.batch;
  g.M = s.M;
  g.N = s.N;
  g.K = s.K;
  // Runs of `spread`-spaced elements, `pad` more between runs: rows of A (columns when
  // transposed), rows of B (columns when transposed).
  g.a_rs = s.a_t ? s.spread : s.K * s.spread + s.pad;
  g.a_cs = s.a_t ? s.M * s.spread + s.pad : s.spread;
  g.b_rs = s.b_t ? s.spread : s.N * s.spread + s.pad;
  g.b_cs = s.b_t ? s.K * s.spread + s.pad : s.spread;
  int64_t a_stride = s.a_t ? s.K * g.a_cs : s.M * g.a_rs;
  int64_t b_stride = s.b_t ? s.N * g.b_cs : s.K * g.b_rs;
  g.a_batch_stride = s.a_shared ? 0 : a_stride;
  g.b_batch_stride = s.b_shared ? 0 : b_stride;
  g.threads = 2;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  auto value = [&]() -> T { return T(integers ? static_cast<float>(small(rng)) : real(rng)); };
  // A ends right after its last element, at the guard page.
  int64_t a_batches = s.a_shared ? 1 : s.batch;
  p.a_size =
      s.M * s.K == 0 ? 0 : (a_batches - 1) * a_stride + (s.M - 1) * g.a_rs + (s.K - 1) * g.a_cs + 1;
  p.a_guard = std::make_unique<GuardedBuffer>(p.a_size * sizeof(T) + 1);
  p.a_data = p.a_guard->template tail<T>(p.a_size);
  for (int64_t i = 0; i < p.a_size; ++i) p.a_data[i] = value();
  p.b.resize((s.b_shared ? 1 : s.batch) * b_stride);
  for (T& x : p.b) x = value();
  return p;
}

struct Result {
  std::vector<float> c;
  std::vector<int32_t> hits;
};

class GemmRuntimeTest : public ::testing::TestWithParam<GemmVariant> {
 protected:
  void SetUp() override {
    const GemmVariant& v = GetParam();
    if (!cpu_supports(isa_by_name(v.isa))) GTEST_SKIP() << "this CPU cannot run " << v.isa;
    if (v.needs_bf16 && !cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
    if (!v.compiler.empty() && ::access(("/usr/bin/" + v.compiler).c_str(), X_OK) != 0) {
      GTEST_SKIP() << v.compiler << " is not installed";
    }
    program_ = GemmProgram::get(v);
    mr_ = program_->info(0);
    nr_ = program_->info(1);
    bmr_ = program_->info(6);
    bnr_ = program_->info(7);
  }

  template <typename T>
  Result run(const Problem<T>& p, const GemmArgs& args) const {
    Result r;
    int64_t size = args.batch * args.M * args.N;
    r.c.assign(size + 1, -7.0f);
    r.hits.assign(size + 1, 0);
    using Fn = int (*)(const GemmArgs*, const T*, const T*, float*, int32_t*);
    const char* name = std::is_same_v<T, float> ? "gemm_f32" : "gemm_bf16";
    int status = program_->fn<Fn>(name)(&args, p.a_data, p.b.data(), r.c.data(), r.hits.data());
    EXPECT_EQ(status, 0) << "an epilogue block was out of range";
    EXPECT_EQ(r.c[size], -7.0f) << "wrote past C";
    for (int64_t i = 0; i < size; ++i) {
      if (r.hits[i] != 1) {
        ADD_FAILURE() << "element " << i << " was written " << r.hits[i] << " times";
        break;
      }
    }
    r.c.resize(size);
    return r;
  }

  // Runs `other` and `plain` on p's f32 problem: `other` must be right (check) and give
  // plain's bits, element by element.
  void expect_same_bits(const Problem<float>& p, const GemmArgs& plain, const GemmArgs& other,
                        const std::string& what) const {
    Result want = run(p, plain), got = run(p, other);
    check(p, got, false, what);
    ASSERT_EQ(want.c.size(), got.c.size());
    for (size_t i = 0; i < got.c.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(want.c[i]), std::bit_cast<uint32_t>(got.c[i]))
          << what << ": element " << i;
  }

  // Compares with the double reference. Every element is one chain of K multiply-adds in f32
  // (bf16 products are exact in f32), with at most two roundings per step (the portable kernel
  // does not fuse), so |got - exact| <= gamma(2K) * sum_k |a b|, gamma(n) = n u / (1 - n u),
  // u = 2^-24. Integer problems must be exact.
  template <typename T>
  void check(const Problem<T>& p, const Result& r, bool exact, const std::string& what) const {
    const GemmArgs& g = p.args;
    double u = std::ldexp(1.0, -24), n = 2.0 * g.K;
    double gamma = n * u / (1 - n * u);
    int failures = 0;
    for (int64_t bt = 0; bt < g.batch && failures < 5; ++bt) {
      int64_t ab = g.a_batch_stride ? bt : 0, bb = g.b_batch_stride ? bt : 0;
      for (int64_t i = 0; i < g.M && failures < 5; ++i) {
        for (int64_t j = 0; j < g.N && failures < 5; ++j) {
          double sum = 0, abs_sum = 0;
          for (int64_t k = 0; k < g.K; ++k) {
            double prod = p.a_at(ab, i, k) * p.b_at(bb, k, j);
            sum += prod;
            abs_sum += std::fabs(prod);
          }
          double got = r.c[(bt * g.M + i) * g.N + j];
          double tol = exact ? 0.0 : gamma * abs_sum;
          if (!(std::fabs(got - sum) <= tol)) {
            ++failures;
            ADD_FAILURE() << what << ": C[" << bt << "][" << i << "][" << j << "] = " << got
                          << ", want " << sum << " (tolerance " << tol << ")";
          }
        }
      }
    }
  }

  template <typename T>
  void check_shape(const Shape& s, bool integers, int64_t mc, int64_t nc, int64_t kc, uint32_t seed,
                   int mode = 0) {
    Problem<T> p = make_problem<T>(s, integers, seed);
    GemmArgs args = p.args;
    args.mc = mc;
    args.nc = nc;
    args.kc = kc;
    args.mode = mode;
    std::string what =
        fmt::format("{} batch={} M={} N={} K={}{}{}{}{} blocking={}x{}x{} mode {}",
                    std::is_same_v<T, float> ? "f32" : "bf16", s.batch, s.M, s.N, s.K,
                    s.a_t ? " A^T" : "", s.b_t ? " B^T" : "", s.a_shared ? " shared A" : "",
                    s.b_shared ? " shared B" : "", mc, nc, kc, mode);
    SCOPED_TRACE(what);
    check(p, run(p, args), integers, what);
  }

  // Shapes around the micro-tile and the blocks: 1, 3, 17, tile +- 1, 257.
  std::vector<int64_t> sizes() const { return {1, 3, 17, mr_ + 1, nr_ - 1, nr_ + 1, 257}; }

  std::shared_ptr<GemmProgram> program_;
  int64_t mr_ = 1, nr_ = 1;
  int64_t bmr_ = 1, bnr_ = 1;  // the bf16 micro-tile (32 x 32 on AMX)
};

TEST_P(GemmRuntimeTest, TileAndBf16ModeMatchTheIsa) {
  const GemmVariant& v = GetParam();
  EXPECT_GE(mr_, 1);
  EXPECT_GE(nr_, 1);
  bool native = (v.isa == "avx512" && v.extra != std::vector<std::string>{"-mno-avx512bf16"} &&
                 cpu_has_avx512_bf16()) ||
                v.amx;
  EXPECT_EQ(program_->info(2), native ? 1 : 0);
  EXPECT_EQ(program_->info(5), v.amx ? 1 : 0);
  // 3 x 5: one panel of one vector of columns, K rounded up to a pair (native) or widened to
  // float (two bfloat16 per float); on AMX one tile of 16 columns, K rounded up to 32.
  int64_t lanes = program_->info(4);
  EXPECT_EQ(nr_ % lanes, 0);
  EXPECT_EQ(program_->info(3), v.amx ? 16 * 32 : native ? 4 * lanes : 2 * 3 * lanes);
  EXPECT_EQ(bmr_, v.amx ? 32 : mr_);
  EXPECT_EQ(bnr_, v.amx ? 32 : nr_);
}

TEST_P(GemmRuntimeTest, BlockingIsMadeOfWholeTiles) {
  auto blocking = program_->fn<void (*)(int64_t, int64_t, int64_t, int, int64_t*)>("gemm_blocking");
  for (int bytes : {4, 2}) {
    for (int64_t n : {1, 3, 64, 257, 1024, 4096, 100000}) {
      int64_t blk[3];
      blocking(n, n + 1, n + 2, bytes, blk);
      EXPECT_GT(blk[0], 0);
      EXPECT_EQ(blk[0] % (bytes == 2 ? bmr_ : mr_), 0) << n;
      EXPECT_EQ(blk[1] % (bytes == 2 ? bnr_ : nr_), 0) << n;
      if (bytes == 2 && GetParam().amx) EXPECT_EQ(blk[2] % 32, 0) << "kc in whole AMX steps";
      EXPECT_GE(blk[2], 1) << n;
      EXPECT_EQ(blk[2] % 2, 0) << "kc must keep bf16 pairs whole";
    }
  }
}

TEST_P(GemmRuntimeTest, F32ExactOnIntegersForOddShapes) {
  int index = 0;
  for (int64_t M : sizes()) {
    for (int64_t N : sizes()) {
      for (int64_t K : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{257}}) {
        ++index;
        Shape s{1, M, N, K, index % 2 == 1, index % 4 >= 2};
        // Alternately the default blocking and one tile per block with kc = 8 (many K slices).
        if (index % 3 == 0) {
          check_shape<float>(s, true, mr_, nr_, 8, index);
        } else {
          check_shape<float>(s, true, 0, 0, 0, index);
        }
      }
    }
  }
}

TEST_P(GemmRuntimeTest, F32RandomWithinTheRoundingBound) {
  int index = 0;
  for (Shape s : {Shape{1, 257, 257, 257}, Shape{1, 64, 256, 256}, Shape{1, 3, 300, 1000, true},
                  Shape{1, 200, 5, 700, false, true}, Shape{1, 130, 97, 513, true, true}}) {
    check_shape<float>(s, false, 0, 0, 0, ++index);
    check_shape<float>(s, false, 2 * mr_, 3 * nr_, 40, ++index);
  }
}

TEST_P(GemmRuntimeTest, KZeroGivesZerosAndKOneWorks) {
  check_shape<float>({2, 5, 7, 0}, true, 0, 0, 0, 1);
  check_shape<float>({2, 19, 33, 1, true, true}, true, 0, 0, 0, 2);
  check_shape<bfloat16>({2, 5, 7, 0}, true, 0, 0, 0, 3);
  check_shape<bfloat16>({2, 19, 33, 1}, true, 0, 0, 0, 4);
}

TEST_P(GemmRuntimeTest, BatchesWithOwnAndSharedOperands) {
  int index = 0;
  for (bool a_shared : {false, true}) {
    for (bool b_shared : {false, true}) {
      Shape s{3, 37, 41, 29, index % 2 == 0, index >= 2, a_shared, b_shared};
      check_shape<float>(s, true, 0, 0, 0, ++index);
      check_shape<float>(s, true, mr_, nr_, 8, ++index);
      check_shape<float>({5, 70, 130, 90, false, false, a_shared, b_shared}, false, 0, 0, 0,
                         ++index);
      check_shape<bfloat16>(s, true, 0, 0, 0, ++index);
      check_shape<bfloat16>({4, 33, 65, 31, true, false, a_shared, b_shared}, false, bmr_, bnr_, 6,
                            ++index);
    }
  }
}

// Views: row pitches larger than the rows, and elements spread out (every other column).
TEST_P(GemmRuntimeTest, StridedOperands) {
  int index = 0;
  for (bool a_t : {false, true}) {
    for (bool b_t : {false, true}) {
      for (int64_t spread : {1, 2}) {
        Shape s{2, 2 * mr_ + 3, nr_ + 9, 35, a_t, b_t, false, false, spread, 3};
        check_shape<float>(s, true, 0, 0, 0, ++index);
        check_shape<float>(s, true, mr_, nr_, 8, ++index);
        check_shape<bfloat16>(s, true, 0, 0, 0, ++index);
        check_shape<bfloat16>(s, true, bmr_, bnr_, 8, ++index);
      }
    }
  }
}

// A packed ahead (pack_a_all, the load-time copy of a constant weight) against the reference
// and bit for bit against packing A per call: odd shapes around the tile, transposed and strided
// A, a batch sharing A, small blocks (several kc slices and row blocks read from the packed
// panels), K = 0 and 1, and several threads. The packed buffer starts as NaN bits, so padding
// rows pack_a_all forgets to write would show.
TEST_P(GemmRuntimeTest, APackedAheadMatchesPerCallPackingBitForBit) {
  int index = 0;
  for (int64_t m : sizes())
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{17}, int64_t{130}}) {
      for (bool a_t : {false, true}) {
        Shape s{3, m, nr_ + 5, k, a_t, false, true, index % 2 == 0, a_t ? 1 : 2};
        Problem<float> p = make_problem<float>(s, false, 300 + index++);
        for (int64_t kc : {int64_t{0}, int64_t{8}}) {
          GemmArgs plain = p.args, packed = p.args;
          plain.mc = packed.mc = kc ? mr_ : 0;
          plain.nc = packed.nc = kc ? nr_ : 0;
          plain.kc = packed.kc = kc;
          packed.mode = 3;
          packed.threads = kc ? 3 : 1;
          const std::string what = fmt::format("M={} K={}{} kc={}", m, k, a_t ? " A^T" : "", kc);
          SCOPED_TRACE(what);
          expect_same_bits(p, plain, packed, what);
          if (HasFatalFailure()) return;
        }
      }
    }
}

// matmul_raw_b: B packed inside the call (each thread its own column panels, or whole first
// when a thread's share passes kLocalBBytes: K = 1100, N = 600 on one thread) gives the bits
// of B packed ahead, at 1 to 3 threads, A per call or packed ahead, B row-major or transposed,
// one B per batch or one shared.
TEST_P(GemmRuntimeTest, RawBPackedByTheThreadsMatchesPackedBBitForBit) {
  int index = 0;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{5, nr_ + 1, 17},
                         {2 * mr_ + 3, 49, 130},
                         {mr_, 3 * nr_ + 5, 1},
                         {37, 600, 1100}}) {
    for (bool b_t : {false, true}) {
      for (bool shared_b : {false, true}) {
        Shape s{2, m, n, k, false, b_t, true, shared_b, 1};
        Problem<float> p = make_problem<float>(s, false, 700 + index++);
        for (int mode : {4, 5}) {
          for (int threads : {1, 2, 3}) {
            GemmArgs plain = p.args, raw = p.args;
            raw.mode = mode;
            plain.threads = raw.threads = threads;
            const std::string what =
                fmt::format("M={} N={} K={}{}{} mode {} threads {}", m, n, k, b_t ? " B^T" : "",
                            shared_b ? " shared B" : "", mode, threads);
            SCOPED_TRACE(what);
            expect_same_bits(p, plain, raw, what);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST_P(GemmRuntimeTest, PackBParallelAndCallsFromInsideAParallelRegion) {
  for (int mode : {1, 2}) {
    check_shape<float>({4, 45, 150, 70, false, true}, true, 0, 0, 0, mode, mode);
    check_shape<bfloat16>({4, 45, 150, 70, true, false}, true, 0, 0, 0, mode, mode);
  }
}

TEST_P(GemmRuntimeTest, Bf16ExactOnIntegersForOddShapes) {
  int index = 0;
  // Around the bf16 tile (and AMX's 16-row/16-column tiles and 32-deep steps).
  for (int64_t M : {int64_t{1}, int64_t{3}, int64_t{17}, bmr_ + 1, int64_t{257}}) {
    for (int64_t N : {int64_t{1}, bnr_ - 1, int64_t{17}, int64_t{257}}) {
      for (int64_t K : {int64_t{1}, int64_t{2}, int64_t{17}, int64_t{33}, int64_t{257}}) {
        ++index;
        Shape s{1, M, N, K, index % 2 == 1, index % 4 >= 2};
        if (index % 3 == 0) {
          check_shape<bfloat16>(s, true, bmr_, bnr_, 8, index);
        } else {
          check_shape<bfloat16>(s, true, 0, 0, 0, index);
        }
      }
    }
  }
}

// bf16 inputs (values rounded to bf16 before the reference sees them), f32 sums: the f32
// bound of check() applies to the exact sum of the bf16 products.
TEST_P(GemmRuntimeTest, Bf16RandomWithinTheRoundingBound) {
  int index = 0;
  for (Shape s : {Shape{1, 257, 257, 257}, Shape{1, 64, 256, 256}, Shape{1, 5, 77, 1001, true},
                  Shape{1, 130, 97, 513, false, true}}) {
    check_shape<bfloat16>(s, false, 0, 0, 0, ++index);
    check_shape<bfloat16>(s, false, bmr_, 2 * bnr_, 30, ++index);
  }
}

// Every C element is one f32 chain in increasing k whoever computes it: 1, 2 and 3 threads and
// any blocking give the same bits.
TEST_P(GemmRuntimeTest, ThreadsAndBlockingDoNotChangeBits) {
  auto same_bits = [](const Result& x, const Result& y, const std::string& what) {
    ASSERT_EQ(x.c.size(), y.c.size());
    for (size_t i = 0; i < x.c.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(x.c[i]), std::bit_cast<uint32_t>(y.c[i]))
          << what << " differs at element " << i;
    }
  };
  // Large enough for the parallel path (kParallelMinFlops); threads split M, or N (few rows).
  for (Shape s : {Shape{1, 257, 300, 130}, Shape{3, 67, 100, 150, true, true, false, true},
                  Shape{1, 20, 2000, 40}}) {
    Problem<float> pf = make_problem<float>(s, false, 11);
    Problem<bfloat16> pb = make_problem<bfloat16>(s, false, 12);
    GemmArgs one = pf.args;
    one.threads = 1;
    Result f1 = run(pf, one), b1 = run(pb, one);
    for (int threads : {2, 3}) {
      GemmArgs args = pf.args;
      args.threads = threads;
      same_bits(f1, run(pf, args), fmt::format("f32 with {} threads", threads));
      same_bits(b1, run(pb, args), fmt::format("bf16 with {} threads", threads));
    }
    GemmArgs small = pf.args;
    small.mc = mr_;
    small.nc = nr_;
    small.kc = 8;
    same_bits(f1, run(pf, small), "f32 with small blocks");
    small.mc = bmr_;
    small.nc = bnr_;
    same_bits(b1, run(pb, small), "bf16 with small blocks");
  }
}

// On a CPU with AMX: the real tiles next to the emulation (both already checked against the
// reference above). Whether they agree bit for bit says whether coil_amx.h's reading of the
// SDM's TDPBF16PS pseudo-code is the silicon's order; reported, not required (the hardware's
// internal summation order is not documented). Integer problems must agree exactly.
TEST_P(GemmRuntimeTest, RealAmxAgainstTheEmulation) {
  if (GetParam().name != "avx512_amx") GTEST_SKIP() << "only for the real AMX variant";
  GemmVariant emulated;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.name == "avx512_amx_emulated") emulated = v;
  }
  std::shared_ptr<GemmProgram> real = program_;
  std::shared_ptr<GemmProgram> emu = GemmProgram::get(emulated);
  int64_t equal = 0, total = 0;
  double worst_rel = 0;
  int index = 0;
  for (Shape s : {Shape{1, 257, 257, 257}, Shape{1, 64, 256, 1000}, Shape{2, 33, 65, 31, true},
                  Shape{1, 100, 130, 513, false, true}}) {
    for (bool integers : {true, false}) {
      Problem<bfloat16> p = make_problem<bfloat16>(s, integers, ++index);
      program_ = real;
      Result r = run(p, p.args);
      program_ = emu;
      Result e = run(p, p.args);
      program_ = real;
      for (size_t i = 0; i < r.c.size(); ++i) {
        if (integers) ASSERT_EQ(r.c[i], e.c[i]) << "integer problem " << index << " element " << i;
        equal += std::bit_cast<uint32_t>(r.c[i]) == std::bit_cast<uint32_t>(e.c[i]);
        ++total;
        double d = std::fabs(static_cast<double>(r.c[i]) - e.c[i]);
        double m = std::max(std::fabs(static_cast<double>(e.c[i])), 1e-30);
        worst_rel = std::max(worst_rel, d / m);
      }
    }
  }
  std::cout << "AMX real vs emulated: " << equal << " of " << total
            << " elements bitwise equal; largest relative difference " << worst_rel << "\n";
}

// A module of the avx512_amx ISA (module_compile_flags: the tile instructions and
// COIL_GEMM_PRECOMPILED) builds on any AVX-512 machine and links libcoil_vmath's AMX
// run_matmul (the library is loaded, so an instance missing there fails here); its constants
// say AMX. Nothing runs a tile instruction, so this holds on CPUs without AMX too.
TEST(GemmAmxModule, BuildsAndLinksThePrecompiledKernelWithoutAmx) {
  if (!cpu_supports(isa_by_name("avx512"))) GTEST_SKIP() << "this CPU cannot run avx512";
  std::string source = vec_test::read_text(std::filesystem::path(COIL_SOURCE_DIR) /
                                           "tests/unit/kernel_gemm/gemm_program.cpp");
  CompileFlags flags = module_compile_flags(isa_by_name("avx512_amx"));
  ASSERT_NE(std::find(flags.extra.begin(), flags.extra.end(), "-DCOIL_GEMM_PRECOMPILED"),
            flags.extra.end());
  auto lib = SharedLibrary::open(compile_cached(source, flags).so_path);
  auto info = lib->symbol_as<int64_t (*)(int)>("gemm_info");
  EXPECT_EQ(info(5), 1) << "bf16 on AMX";
  EXPECT_EQ(info(6), 32);
  EXPECT_EQ(info(7), 32);
  EXPECT_EQ(info(3), 16 * 32) << "a 3 x 5 B: one tile of columns, K rounded up to 32";
}

INSTANTIATE_TEST_SUITE_P(GemmRuntime, GemmRuntimeTest, ::testing::ValuesIn(gemm_variants()),
                         variant_name);

}  // namespace
}  // namespace coil::gemm_test
