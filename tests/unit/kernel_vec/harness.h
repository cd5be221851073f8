// Shared by kernel_vec_test.cpp and kernel_vec_math_test.cpp: builds
// tests/unit/kernel_vec/vec_program.cpp for one ISA variant (once per process, cached on disk),
// opens it, and offers the helpers the tests compare lanes with (ulps, bit patterns, a buffer
// that ends at a PROT_NONE page).
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/code_cache.h"
#include "runtime/embedded_headers.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "support/check.h"

namespace coil::vec_test {

namespace fs = std::filesystem;

// Type codes of vec_program.cpp.
enum TypeCode { kF32 = 0, kF64 = 1, kI32 = 2, kI64 = 3, kFloatLanesCode = 4 };

/// One way of building the program: an ISA from runtime/isa.h and a compiler ("" = the default
/// toolchain, through compile_cached).
struct VecVariant {
  std::string name;
  std::string isa;
  std::string compiler;
  /// Flags after the ISA table's. -march=native turns on every extension of this CPU (e.g.
  /// AVX512-BF16, which selects vcvtneps2bf16 in coil_vec_avx512.h); -mno-... tests the code a
  /// CPU without it runs.
  std::vector<std::string> extra = {};
};

inline std::vector<VecVariant> vec_variants() {
  return {{"avx512", "avx512", ""},
          {"avx512_nobf16", "avx512", "", {"-mno-avx512bf16"}},
          {"avx2", "avx2", ""},
          {"scalar", "scalar", ""},
          {"generic4", "neon", ""},
          {"avx512_clang", "avx512", "clang++-14"},
          {"scalar_clang", "scalar", "clang++-14"}};
}

// gtest prints parameters in test names and failures.
inline void PrintTo(const VecVariant& v, std::ostream* os) {
  *os << v.name;
}

inline std::string variant_name(const ::testing::TestParamInfo<VecVariant>& info) {
  return info.param.name;
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// compile_cached only uses the process's toolchain; another compiler gets a small cache of its
// own under the test cache directory, keyed like compile_cached.
inline fs::path compile_with(const Toolchain& tc, const std::string& source,
                             const CompileFlags& flags) {
  std::string key_text = tc.version + "\n" + source;
  for (const std::string& f : flags.extra) key_text += "\n" + f;
  for (const EmbeddedFile& f : embedded_kernel_headers()) key_text += std::string(f.text);
  XXH128_hash_t h = XXH3_128bits(key_text.data(), key_text.size());
  fs::path entry = cache_root() / "kernel_vec" / fmt::format("{:016x}{:016x}", h.high64, h.low64);
  if (fs::exists(entry / "module.so")) return entry / "module.so";
  fs::path tmp = entry.string() + ".tmp." + std::to_string(::getpid());
  fs::create_directories(tmp / "include");
  for (const EmbeddedFile& f : embedded_kernel_headers()) {
    std::ofstream(tmp / "include" / f.name) << f.text;
  }
  std::ofstream(tmp / "source.cpp") << source;
  std::vector<std::string> argv =
      tc.shared_object_command(tmp / "source.cpp", tmp / "module.so", tmp / "include", flags);
  ProcessResult r = run_process(argv);
  COIL_USER_CHECK(r.status == 0, "{} failed:\n{}", command_string(argv), r.output.substr(0, 4000));
  std::error_code ec;
  fs::rename(tmp, entry, ec);  // another process may have won: its entry is as good
  if (ec) fs::remove_all(tmp, ec);
  return entry / "module.so";
}

/// vec_program.cpp built for one variant.
class VecProgram {
 public:
  static std::shared_ptr<VecProgram> get(const VecVariant& v) {
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<VecProgram>> built;
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = built[v.name];
    if (slot) return slot;
    std::string source =
        read_text(fs::path(COIL_SOURCE_DIR) / "tests/unit/kernel_vec/vec_program.cpp");
    COIL_USER_CHECK(!source.empty(), "vec_program.cpp not found");
    CompileFlags flags = isa_compile_flags(isa_by_name(v.isa));
    flags.extra.insert(flags.extra.end(), v.extra.begin(), v.extra.end());
    fs::path so = v.compiler.empty()
                      ? compile_cached(source, flags).so_path
                      : compile_with(Toolchain::for_compiler(v.compiler), source, flags);
    slot = std::shared_ptr<VecProgram>(new VecProgram(SharedLibrary::open(so)));
    return slot;
  }

  template <typename Fn>
  Fn fn(const std::string& name) const {
    return lib_->symbol_as<Fn>(name);
  }
  int lanes(int type) const { return fn<int (*)(int)>("vec_lanes")(type); }

 private:
  explicit VecProgram(std::shared_ptr<SharedLibrary> lib) : lib_(std::move(lib)) {}
  std::shared_ptr<SharedLibrary> lib_;
};

/// Base fixture: skips variants this machine cannot run, builds the program.
class VecFixture : public ::testing::TestWithParam<VecVariant> {
 protected:
  void SetUp() override {
    const VecVariant& v = GetParam();
    const IsaInfo& isa = isa_by_name(v.isa);
    // The NEON variant is portable C++ (coil_vec_generic.h) and runs anywhere.
    if (isa.name != "neon" && !cpu_supports(isa)) GTEST_SKIP() << "this CPU cannot run " << v.isa;
    if (!v.compiler.empty() && ::access(("/usr/bin/" + v.compiler).c_str(), X_OK) != 0) {
      GTEST_SKIP() << v.compiler << " is not installed";
    }
    program_ = VecProgram::get(v);
    float_lanes_ = program_->lanes(kFloatLanesCode);
  }
  std::shared_ptr<VecProgram> program_;
  int float_lanes_ = 1;
};

// ---- comparing lanes ----------------------------------------------------------------------

template <typename T>
auto bits_of(T x) {
  if constexpr (sizeof(T) == 8) {
    return std::bit_cast<uint64_t>(x);
  } else if constexpr (sizeof(T) == 4) {
    return std::bit_cast<uint32_t>(x);
  } else if constexpr (sizeof(T) == 2) {
    return std::bit_cast<uint16_t>(x);
  } else {
    return std::bit_cast<uint8_t>(x);
  }
}

/// The distance between `got` and the exact value `ref`, in units of the last place of T at
/// ref (subnormal spacing below the normal range). Infinite/NaN refs: 0 when got is the same
/// class, else infinity.
template <typename T>
double ulp_error(T got, long double ref) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : INFINITY;
  T rounded = static_cast<T>(ref);
  if (std::isinf(rounded) || std::isinf(got)) return got == rounded ? 0 : INFINITY;
  int exp = 0;
  std::frexp(static_cast<T>(rounded == 0 ? std::numeric_limits<T>::min() : rounded), &exp);
  int min_exp = std::numeric_limits<T>::min_exponent;
  long double ulp = std::ldexp(1.0L, std::max(exp, min_exp) - std::numeric_limits<T>::digits);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / ulp);
}

/// Bitwise equality, with any NaN equal to any NaN unless `exact_nan`.
template <typename T>
bool same_value(T a, T b, bool exact_nan = false) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!exact_nan && std::isnan(a) && std::isnan(b)) return true;
  }
  return bits_of(a) == bits_of(b);
}

/// `bytes` of memory directly followed by an inaccessible page: a read or write past the end
/// faults.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) {
    size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    usable_ = (bytes + page - 1) / page * page + page;
    size_ = usable_ + page;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    COIL_USER_CHECK(p != MAP_FAILED, "mmap failed");
    base_ = static_cast<char*>(p);
    COIL_USER_CHECK(::mprotect(base_ + usable_, page, PROT_NONE) == 0, "mprotect failed");
  }
  ~GuardedBuffer() { ::munmap(base_, size_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  /// The start of `n` elements of T that end at the guard page.
  template <typename T>
  T* tail(size_t n) {
    return reinterpret_cast<T*>(base_ + usable_ - n * sizeof(T));
  }

 private:
  char* base_ = nullptr;
  size_t usable_ = 0;
  size_t size_ = 0;
};

}  // namespace coil::vec_test
