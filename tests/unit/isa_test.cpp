// runtime/isa.h: the ISA table, detection (cpuid + compile-and-run probe), the probe's disk
// cache and its speed, the COIL_CPU_ISA override and its errors, and the compile flags that put
// the ISA into the code cache key.
#include "runtime/isa.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "coil/error.h"
#include "runtime/code_cache.h"
#include "runtime/host_cpu.h"
#include "support/check.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Restores COIL_CPU_ISA, COIL_CACHE_DIR, COIL_VMATH_DIR and XDG_CACHE_HOME; a test may point
// the cache (and the per-machine probe store) at a fresh directory.
class IsaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"COIL_CPU_ISA", "COIL_CACHE_DIR", "COIL_VMATH_DIR", "XDG_CACHE_HOME"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
    ::unsetenv("COIL_CPU_ISA");
  }
  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
    std::error_code ec;
    if (!fresh_dir_.empty()) fs::remove_all(fresh_dir_, ec);
  }
  void use_fresh_cache() {
    fresh_dir_ =
        fs::path(COIL_BINARY_DIR) / "test-cache" /
        fmt::format("isa-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                    ::getpid());
    fs::remove_all(fresh_dir_);
    ::setenv("COIL_CACHE_DIR", fresh_dir_.c_str(), 1);
    // The ISA probes are kept per machine (machine_cache_root): a fresh one too.
    ::setenv("XDG_CACHE_HOME", (fresh_dir_ / "machine").c_str(), 1);
  }
  static bool x86_avx512() { return cpu_supports(isa_by_name("avx512")); }

  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  fs::path fresh_dir_;
};

TEST_F(IsaTest, TableFollowsInductorsWidths) {
  const IsaInfo& avx512 = isa_by_name("avx512");
  EXPECT_EQ(avx512.bit_width, 512);
  EXPECT_EQ(avx512.macro, "COIL_CPU_AVX512");
  EXPECT_EQ(avx512.lanes(DType::F32), 16);
  EXPECT_EQ(avx512.lanes(DType::F64), 8);
  EXPECT_EQ(avx512.lanes(DType::BF16), 32);
  EXPECT_EQ(avx512.lanes(DType::F16), 32);
  EXPECT_EQ(avx512.lanes(DType::I64), 8);
  EXPECT_EQ(avx512.lanes(DType::U8), 64);
  EXPECT_EQ(avx512.lanes(DType::Bool), 64);
  const IsaInfo& avx2 = isa_by_name("avx2");
  EXPECT_EQ(avx2.lanes(DType::F32), 8);
  EXPECT_EQ(avx2.lanes(DType::I32), 8);
  EXPECT_EQ(avx2.macro, "COIL_CPU_AVX2");
  EXPECT_EQ(isa_by_name("neon").lanes(DType::F32), 4);
  const IsaInfo& scalar = isa_by_name("scalar");
  EXPECT_TRUE(scalar.is_scalar());
  EXPECT_TRUE(scalar.macro.empty());
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I64, DType::Bool}) {
    EXPECT_EQ(scalar.lanes(t), 1);
  }
  ASSERT_EQ(all_isas().size(), 5u);
  EXPECT_EQ(all_isas()[0].name, "avx512_amx");  // detection order
  EXPECT_EQ(all_isas()[1].name, "avx512");
  EXPECT_EQ(all_isas().back().name, "scalar");
  EXPECT_TRUE(cpu_supports(scalar));
  // avx512_amx: avx512's vectors plus the tiles (and bf16, which its matmuls need).
  const IsaInfo& amx = isa_by_name("avx512_amx");
  EXPECT_EQ(amx.macro, "COIL_CPU_AVX512");
  EXPECT_EQ(amx.lanes(DType::F32), 16);
  for (const char* f : {"-mamx-tile", "-mamx-bf16", "-mavx512bf16"}) {
    EXPECT_TRUE(contains(amx.flags, f)) << f;
  }
  for (const char* f : {"amx_tile", "amx_bf16", "avx512f"}) {
    EXPECT_TRUE(contains(amx.cpu_features, f)) << f;
  }
  EXPECT_TRUE(contains(module_compile_flags(amx).extra, "-DCOIL_GEMM_PRECOMPILED"));
}

// The AMX check reads cpuid, XCR0 and asks Linux for the tile data: this machine's answer,
// and on one without AMX (the Zen 4 development machines) the ISA must never be chosen.
TEST_F(IsaTest, AmxOnlyWhereTheCpuAndKernelAllowIt) {
  const bool amx = cpu_has_feature("amx_tile") && cpu_has_feature("amx_bf16");
  std::cout << "AMX tiles usable: " << (amx ? "yes" : "no") << "\n";
  EXPECT_EQ(cpu_supports(isa_by_name("avx512_amx")),
            amx && cpu_has_feature("avx512_bf16") && x86_avx512());
  if (!amx) {
    EXPECT_NE(detect_host_isa().name, "avx512_amx");
    ::setenv("COIL_CPU_ISA", "avx512_amx", 1);
    EXPECT_THROW(detect_host_isa(), Error) << "forcing AMX on a CPU without it";
  }
}

TEST_F(IsaTest, UnknownNameIsAnError) {
  try {
    isa_by_name("sse9");
    FAIL() << "expected coil::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "unknown vector ISA 'sse9'; expected one of avx512_amx, avx512, avx2, neon, scalar");
  }
}

TEST_F(IsaTest, CompileFlagsCarryTheMacroAndSleef) {
  CompileFlags avx512 = isa_compile_flags(isa_by_name("avx512"));
  for (const char* f : {"-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma",
                        "-mprefer-vector-width=512", "-DCOIL_CPU_AVX512", "-lsleef"}) {
    EXPECT_TRUE(contains(avx512.extra, f)) << f;
  }
  CompileFlags avx2 = isa_compile_flags(isa_by_name("avx2"));
  for (const char* f : {"-mavx2", "-mfma", "-mf16c", "-DCOIL_CPU_AVX2", "-lsleef"}) {
    EXPECT_TRUE(contains(avx2.extra, f)) << f;
  }
  // libcoil_vmath (vector erf) from the build's lib/, by -L and rpath.
  for (const CompileFlags& flags : {avx512, avx2}) {
    EXPECT_TRUE(contains(flags.extra, "-lcoil_vmath"));
    EXPECT_TRUE(contains(flags.extra, "-Wl,-rpath," + vmath_dir()));
  }
  // Scalar vectors use <cmath>: no macro, no library.
  EXPECT_TRUE(isa_compile_flags(isa_by_name("scalar")).extra.empty());
  // Different ISAs, different command lines, different code cache keys.
  EXPECT_NE(avx512, avx2);
}

TEST_F(IsaTest, VmathDirIsTheBuildsLibUnlessOverridden) {
  ::unsetenv("COIL_VMATH_DIR");
  EXPECT_EQ(fs::path(vmath_dir()), fs::path(COIL_BINARY_DIR) / "lib");
  EXPECT_TRUE(fs::exists(fs::path(vmath_dir()) / "libcoil_vmath.so"));
  use_fresh_cache();
  fs::path copy = fresh_dir_ / "vmath";
  fs::create_directories(copy);
  ::setenv("COIL_VMATH_DIR", copy.c_str(), 1);
  EXPECT_THROW(vmath_dir(), Error) << "a directory without the library is a user error";
  fs::copy_file(fs::path(COIL_BINARY_DIR) / "lib" / "libcoil_vmath.so", copy / "libcoil_vmath.so");
  EXPECT_EQ(fs::path(vmath_dir()), copy);
}

TEST_F(IsaTest, DetectsTheBestIsaThisMachineRuns) {
  IsaInfo isa = detect_host_isa();
  if (cpu_supports(isa_by_name("avx512_amx"))) {
    EXPECT_EQ(isa.name, "avx512_amx");
  } else if (x86_avx512()) {
    EXPECT_EQ(isa.name, "avx512");
  } else if (cpu_supports(isa_by_name("avx2"))) {
    EXPECT_EQ(isa.name, "avx2");
  }
  EXPECT_TRUE(cpu_supports(isa));
  EXPECT_EQ(&host_isa(), &host_isa());
  std::string flags;
  for (const std::string& f : isa.flags) flags += " " + f;
  std::cout << "host ISA: " << isa.name << flags << "\n";
}

TEST_F(IsaTest, ProbeResultIsCachedAndACachedLookupIsFast) {
  use_fresh_cache();
  auto seconds = [](auto&& f) {
    auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  IsaInfo first, second;
  double cold = seconds([&] { first = detect_host_isa(); });
  double warm = seconds([&] { second = detect_host_isa(); });
  std::cout << "detect_host_isa: " << cold * 1e3 << " ms with probes, " << warm * 1e3
            << " ms from the cache\n";
  EXPECT_EQ(first.name, second.name);
  EXPECT_EQ(first.flags, second.flags);
  EXPECT_LT(warm, 0.050);
  if (!first.is_scalar()) {
    IsaProbe probe = probe_isa(isa_by_name(first.name));
    EXPECT_TRUE(probe.ok);
    EXPECT_TRUE(probe.cached);
    EXPECT_TRUE(fs::exists(machine_cache_root() / "isa"));
  }
}

TEST_F(IsaTest, OverrideChoosesTheIsa) {
  ::setenv("COIL_CPU_ISA", "scalar", 1);
  EXPECT_EQ(detect_host_isa().name, "scalar");
  if (cpu_supports(isa_by_name("avx2"))) {
    ::setenv("COIL_CPU_ISA", "avx2", 1);
    IsaInfo isa = detect_host_isa();
    EXPECT_EQ(isa.name, "avx2");
    EXPECT_TRUE(contains(isa_compile_flags(isa).extra, "-DCOIL_CPU_AVX2"));
  }
  if (cpu_supports(isa_by_name("avx512_amx"))) {
    // On an AMX machine avx512 still means the AVX512-BF16 kernel, without tiles.
    ::setenv("COIL_CPU_ISA", "avx512", 1);
    IsaInfo isa = detect_host_isa();
    EXPECT_EQ(isa.name, "avx512");
    EXPECT_TRUE(contains(isa.flags, "-mavx512bf16"));
    EXPECT_FALSE(contains(isa.flags, "-mamx-tile"));
  }
}

TEST_F(IsaTest, OverrideWithAnIsaTheMachineCannotRunIsAnError) {
  // The ISA of the other architecture: never runnable here.
#if defined(__x86_64__)
  const char* foreign = "neon";
  const char* missing = "the CPU lacks 'asimd'";
#else
  const char* foreign = "avx512";
  const char* missing = "the CPU lacks 'avx512f'";
#endif
  ::setenv("COIL_CPU_ISA", foreign, 1);
  try {
    detect_host_isa();
    FAIL() << "expected coil::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::string("COIL_CPU_ISA=") + foreign +
                                         " asks for an ISA this machine cannot run"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  ::setenv("COIL_CPU_ISA", "avx1024", 1);
  EXPECT_THROW(
      {
        try {
          detect_host_isa();
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(),
                       "COIL_CPU_ISA='avx1024' is not a vector ISA coil knows; expected one of "
                       "avx512_amx, avx512, avx2, neon, scalar");
          throw;
        }
      },
      Error);
}

TEST_F(IsaTest, AFailedProbeIsReportedAndCached) {
  use_fresh_cache();
  const IsaInfo& scalar = isa_by_name("scalar");
  IsaProbe bad = probe_isa(scalar, Toolchain::get(), {"-Dmain=("});
  EXPECT_FALSE(bad.ok);
  EXPECT_FALSE(bad.cached);
  EXPECT_NE(bad.detail.find("compiling the probe failed"), std::string::npos) << bad.detail;
  IsaProbe again = probe_isa(scalar, Toolchain::get(), {"-Dmain=("});
  EXPECT_FALSE(again.ok);
  EXPECT_TRUE(again.cached);
  // The scalar build itself probes fine (any CPU runs it).
  EXPECT_TRUE(probe_isa(scalar).ok);
}

// A probe's result belongs to the machine and compiler, not to the cache directory (issue 25):
// a new COIL_CACHE_DIR finds it, where it is not copied.
TEST_F(IsaTest, ProbeResultsAreKeptPerMachineNotPerCacheDirectory) {
  use_fresh_cache();
  const IsaInfo& scalar = isa_by_name("scalar");
  const std::vector<std::string> flags = {"-DCOIL_PER_MACHINE_PROBE_TEST=1"};
  IsaProbe first = probe_isa(scalar, Toolchain::get(), flags);
  EXPECT_TRUE(first.ok) << first.detail;
  EXPECT_FALSE(first.cached);
  fs::path other = fresh_dir_ / "another-cache";
  ::setenv("COIL_CACHE_DIR", other.c_str(), 1);
  IsaProbe second = probe_isa(scalar, Toolchain::get(), flags);
  EXPECT_TRUE(second.ok);
  EXPECT_TRUE(second.cached) << "a new COIL_CACHE_DIR probed again";
  EXPECT_FALSE(fs::exists(other / "isa")) << "probe results went into the cache directory";
  EXPECT_TRUE(fs::exists(machine_cache_root() / "isa"));
}

TEST_F(IsaTest, ClangBuildsAndRunsTheProbe) {
  if (::access("/usr/bin/clang++-14", X_OK) != 0) GTEST_SKIP() << "clang++-14 not installed";
  Toolchain clang = Toolchain::for_compiler("clang++-14");
  for (const IsaInfo& isa : all_isas()) {
    if (isa.name == "neon" || !cpu_supports(isa)) continue;
    // In a sanitizer build (-DCOIL_SANITIZE) clang's kernels are not instrumented (toolchain.cpp:
    // the runtime in the process is gcc's), but the vector ISAs' probe links this build's
    // instrumented libcoil_vmath, and an uninstrumented executable cannot load the sanitizer
    // runtime late (ASan aborts: "runtime does not come first"). The scalar probe links nothing.
    if (!build_sanitizer_flags().empty() && !isa.is_scalar()) continue;
    IsaProbe probe = probe_isa(isa, clang);
    EXPECT_TRUE(probe.ok) << isa.name << ": " << probe.detail;
  }
}

}  // namespace
}  // namespace coil
