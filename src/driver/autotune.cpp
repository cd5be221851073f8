#include "driver/autotune.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>

#include "runtime/code_cache.h"
#include "runtime/extern_timing.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "support/check.h"
#include "support/env.h"
#include "support/hash.h"
#include "support/log.h"

namespace coil {
namespace {

// The template benchmark: the runtime header under the ISA's flags, timing one product with a
// copy-out epilogue (what a template kernel without fused work does).
constexpr const char* kTemplateBenchSource = R"(// coil: matmul template benchmark (autotuning)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>
#include "coil_vec.h"
#include "coil_gemm.h"

extern "C" double coil_time_template_matmul(int64_t m, int64_t n, int64_t k, int a_transposed,
                                            int b_packed_ahead, int reps, double max_seconds) {
  std::vector<float> a(m * k), b(k * n), c(m * n);
  uint32_t s = 12345;
  for (float& v : a) v = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
  for (float& v : b) v = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
  const coil::gemm::Blocking blk = coil::gemm::choose_blocking(m, n, k, 4);
  std::vector<float> packed(coil::gemm::packed_b_elements(k, n, blk));
  const int64_t a_rs = a_transposed ? 1 : k, a_cs = a_transposed ? m : 1;
  auto run = [&] {
    if (!b_packed_ahead) coil::gemm::pack_b_parallel(b.data(), n, 1, k, n, blk, packed.data());
    coil::gemm::matmul(1, m, n, k, [&](int64_t) { return a.data(); }, a_rs, a_cs,
                       [&](int64_t) { return packed.data(); }, blk,
                       [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                           const float* acc, int64_t ld) {
                         for (int64_t i = m0; i < m1; i++)
                           std::copy(acc + (i - m0) * ld, acc + (i - m0) * ld + (n1 - n0),
                                     c.data() + i * n + n0);
                       });
  };
  if (b_packed_ahead) coil::gemm::pack_b(b.data(), n, 1, k, n, blk, packed.data());
  using clock = std::chrono::steady_clock;
  run();  // warm-up: scratch allocation, caches
  auto t0 = clock::now();
  run();
  double first = std::chrono::duration<double>(clock::now() - t0).count();
  int samples = std::max(1, std::min(reps, static_cast<int>(max_seconds / std::max(first, 1e-9))));
  std::vector<double> times{first};
  for (int i = 1; i < samples; i++) {
    t0 = clock::now();
    run();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  // The fastest sample (other work on a shared machine only adds time).
  return *std::min_element(times.begin(), times.end());
}
)";

using TemplateTimingFn = double (*)(int64_t, int64_t, int64_t, int, int, int, double);

TemplateTimingFn template_timing_fn(const IsaInfo& isa) {
  static std::mutex mu;
  static std::map<std::string, std::pair<std::shared_ptr<SharedLibrary>, TemplateTimingFn>> built;
  std::lock_guard<std::mutex> lock(mu);
  auto it = built.find(isa.name);
  if (it == built.end()) {
    CompileResult r = compile_cached(kTemplateBenchSource, module_compile_flags(isa));
    auto lib = SharedLibrary::open(r.so_path);
    auto fn = lib->symbol_as<TemplateTimingFn>("coil_time_template_matmul");
    it = built.emplace(isa.name, std::make_pair(lib, fn)).first;
  }
  return it->second.second;
}

/// The forced choice from COIL_MATMUL, or nullopt for "auto".
std::optional<MatmulImpl> forced_impl() {
  std::string s = env(EnvVar::matmul);
  if (s.empty() || s == "auto") return std::nullopt;
  if (s == "template") return MatmulImpl::Template;
  if (s == "dnnl") return MatmulImpl::Dnnl;
  if (s == "openblas") {
    COIL_SUPPORTED_CHECK(extern_have_openblas(),
                         "COIL_MATMUL=openblas: coil was built without OpenBLAS's OpenMP build");
    return MatmulImpl::OpenBlas;
  }
  user_error("COIL_MATMUL='{}': expected auto, template, dnnl or openblas", s);
}

struct Timings {
  double template_s = 0, dnnl_s = 0, openblas_s = 0;
};

std::optional<Timings> read_cached(const std::filesystem::path& path) {
  std::ifstream in(path);
  Timings t;
  std::string a, b, c;
  if (!(in >> a >> t.template_s >> b >> t.dnnl_s >> c >> t.openblas_s)) return std::nullopt;
  if (a != "template" || b != "dnnl" || c != "openblas") return std::nullopt;
  return t;
}

// Writes the timings unless the file exists: the first result written wins (link() does not
// replace), so that every process that compiles the shape decides by the same numbers. Returns
// the timings now on disk. A process killed while writing leaves only its temp file.
Timings write_cached(const std::filesystem::path& path, const Timings& t) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path tmp = path;
  tmp += fmt::format(".tmp{}", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp);
    out << fmt::format("template {:.9g}\ndnnl {:.9g}\nopenblas {:.9g}\n", t.template_s, t.dnnl_s,
                       t.openblas_s);
  }
  int linked = ::link(tmp.c_str(), path.c_str());
  fs::remove(tmp, ec);
  if (linked != 0) {
    if (auto first = read_cached(path)) return *first;
  }
  return t;
}

// An exclusive lock on `<path>.lock` for the life of the object (flock: released by the kernel
// when the process dies, even by kill -9), so that processes compiling the same shape at once
// time it once: the others wait and read the result.
class KeyLock {
 public:
  explicit KeyLock(const std::filesystem::path& path) {
    std::string lock = path.string() + ".lock";
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~KeyLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

double time_template_matmul(const IsaInfo& isa, int64_t m, int64_t n, int64_t k, bool a_transposed,
                            bool b_packed_ahead, int reps, double max_seconds) {
  return template_timing_fn(isa)(m, n, k, a_transposed ? 1 : 0, b_packed_ahead ? 1 : 0, reps,
                                 max_seconds);
}

// Timing allocates the operands: a matmul whose operands take more than this is not timed (the
// template is used), so that compiling a huge model fails neither by running out of memory nor
// by taking minutes.
constexpr double kMaxTimedBytes = double{1 << 30};

void autotune_matmuls(IrProgram& program, const IsaInfo& isa, const AutotuneOptions& options) {
  auto forced = forced_impl();
  for (ComputedBuffer& c : program.computations) {
    if (!c.matmul) continue;
    const MatmulSpec& s = *c.matmul;
    auto la = s.a.blas_layout(s.m, s.k), lb = s.b.blas_layout(s.k, s.n);
    bool eligible = s.dtype == DType::F32 && s.batch.empty() && la && lb &&
                    program.buffer(c.buffer).layout.dtype == DType::F32;
    MatmulImpl choice = MatmulImpl::Template;
    auto m = static_cast<double>(s.m), n = static_cast<double>(s.n), k = static_cast<double>(s.k);
    double bytes = 4 * (m * k + k * n + m * n);
    if (eligible && forced) {
      choice = *forced;
      COIL_LOG(autotune, "matmul {}x{}x{}: {} (COIL_MATMUL)", s.m, s.n, s.k,
               matmul_impl_name(choice));
    } else if (eligible && options.enabled && bytes > kMaxTimedBytes) {
      COIL_LOG(autotune, "matmul {}x{}x{}: template (operands of {:.1f} GiB are not timed)", s.m,
               s.n, s.k, bytes / double{1 << 30});
    } else if (eligible && options.enabled) {
      bool ta = la->transposed, tb = lb->transposed;
      bool packed_ahead = program.buffer(s.b.buffer).kind == BufferKind::Constant;
      int threads = omp_get_max_threads();
      std::string key =
          hash_fields({"matmul-autotune-v3", isa.name, std::to_string(s.m), std::to_string(s.n),
                       std::to_string(s.k), ta ? "ta" : "", tb ? "tb" : "",
                       packed_ahead ? "packed" : "", std::to_string(threads)});
      auto path = cache_root() / "autotune" / key;
      std::error_code ec;
      std::filesystem::create_directories(path.parent_path(), ec);
      // One process times a shape; the others wait for its result (issue 19: two processes
      // of one deployment must run the same kernels).
      KeyLock lock(path);
      auto cached = read_cached(path);
      Timings t;
      if (cached) {
        t = *cached;
      } else {
        t.template_s = time_template_matmul(isa, s.m, s.n, s.k, ta, packed_ahead);
        t.dnnl_s = time_sgemm_dnnl(s.m, s.n, s.k, ta, tb);
        t.openblas_s = time_sgemm_openblas(s.m, s.n, s.k, ta, tb);
        t = write_cached(path, t);
      }
      double best_lib = std::min(t.dnnl_s, t.openblas_s);
      if (best_lib * (1 + kLibraryMargin) < t.template_s)
        choice = t.dnnl_s <= t.openblas_s ? MatmulImpl::Dnnl : MatmulImpl::OpenBlas;
      auto us = [](double s) { return s * 1e6; };
      COIL_LOG(autotune,
               "matmul {}x{}x{} ({} threads{}): template {:.1f} us, dnnl {:.1f} us, openblas "
               "{:.1f} us -> {}{}",
               s.m, s.n, s.k, threads, packed_ahead ? ", B packed at load" : "", us(t.template_s),
               us(t.dnnl_s), us(t.openblas_s), matmul_impl_name(choice), cached ? " (cached)" : "");
    }
    if (choice != MatmulImpl::Template) {
      auto spec = std::make_shared<MatmulSpec>(s);
      spec->impl = choice;
      c.matmul = spec;
      c.kind = LoopKind::Extern;
    }
  }
}

}  // namespace coil
