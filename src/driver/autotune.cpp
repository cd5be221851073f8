#include "driver/autotune.h"

#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>

#include "driver/pipeline.h"
#include "runtime/code_cache.h"
#include "runtime/extern_timing.h"
#include "runtime/isa.h"
#include "runtime/loader.h"
#include "runtime/remote_cache.h"
#include "runtime/toolchain.h"
#include "support/check.h"
#include "support/env.h"
#include "support/file_lock.h"
#include "support/hash.h"
#include "support/log.h"
#include "support/progress.h"

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
  auto copy_out = [&](int64_t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
                      int64_t ld) {
    for (int64_t i = m0; i < m1; i++)
      std::copy(acc + (i - m0) * ld, acc + (i - m0) * ld + (n1 - n0), c.data() + i * n + n0);
  };
  // As the generated kernel does: a per-call B is packed inside the call by the threads that
  // read it (matmul_raw_b), a constant one ahead.
  auto run = [&] {
    if (!b_packed_ahead) {
      coil::gemm::matmul_raw_b(1, m, n, k, nullptr, [&](int64_t) { return a.data(); }, a_rs, a_cs,
                               [&](int64_t) { return b.data(); }, n, 1, blk, copy_out);
      return;
    }
    coil::gemm::matmul(1, m, n, k, [&](int64_t) { return a.data(); }, a_rs, a_cs,
                       [&](int64_t) { return packed.data(); }, blk, copy_out);
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
    // Built once per machine and compiler (not per cache directory): it depends on nothing
    // else.
    CompileResult r =
        compile_cached(kTemplateBenchSource, module_compile_flags(isa), machine_cache_root());
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

// ".tmp<pid>.<n>": a temp file name of its own per process and call (threads of one process can
// write one bucket's decision at once: they lock per shape, and a bucket holds many shapes).
std::string temp_suffix() {
  static std::atomic<unsigned> calls{0};
  return fmt::format(".tmp{}.{}", static_cast<long>(getpid()), calls++);
}

std::optional<Timings> parse_timings(const std::string& text) {
  std::istringstream in(text);
  Timings t;
  std::string a, b, c, ta, tb, tc;
  if (!(in >> a >> ta >> b >> tb >> c >> tc)) return std::nullopt;
  if (a != "template" || b != "dnnl" || c != "openblas") return std::nullopt;
  // strtod, not operator>>: a candidate the quick search does not time is written "inf".
  auto number = [](const std::string& s, double& out) {
    char* end = nullptr;
    out = std::strtod(s.c_str(), &end);
    return end != s.c_str() && *end == '\0';
  };
  if (!number(ta, t.template_s) || !number(tb, t.dnnl_s) || !number(tc, t.openblas_s))
    return std::nullopt;
  return t;
}

std::string timings_text(const Timings& t) {
  return fmt::format("template {:.9g}\ndnnl {:.9g}\nopenblas {:.9g}\n", t.template_s, t.dnnl_s,
                     t.openblas_s);
}

std::optional<Timings> read_cached(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_timings(text.str());
}

// Writes the timings unless the file exists: the first result written wins (link() does not
// replace), so that every process that compiles the shape decides by the same numbers. Returns
// the timings now on disk. A process killed while writing leaves only its temp file.
Timings write_cached(const std::filesystem::path& path, const Timings& t) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path tmp = path;
  tmp += temp_suffix();
  std::ofstream(tmp) << timings_text(t);
  int linked = ::link(tmp.c_str(), path.c_str());
  fs::remove(tmp, ec);
  if (linked != 0) {
    if (auto first = read_cached(path)) return *first;
  }
  return t;
}

// The remote cache's key (runtime/remote_cache.h) of a local autotune file: its name (shape,
// transposes, packing, ISA, threads) and the CPU model and flags it was measured on, since a
// fleet may mix machines.
std::string remote_key(const std::filesystem::path& local) {
  return hash_fields({local.filename().string(), host_cpu_model(), host_cpu_flags()});
}

// The local timings, else the remote cache's (then written locally too).
std::optional<Timings> find_timings(const std::filesystem::path& path) {
  if (auto t = read_cached(path)) return t;
  RemoteCache* remote = RemoteCache::current();
  if (!remote) return std::nullopt;
  std::optional<std::string> text = remote->get(RemoteCache::Kind::autotune, remote_key(path));
  if (!text) return std::nullopt;
  std::optional<Timings> t = parse_timings(*text);
  if (!t) return std::nullopt;
  return write_cached(path, *t);
}

// Timings `measure` takes, measured once per fleet: with a remote cache, the machine holding the
// shape's lease measures and the others wait and use its numbers; the first result stored there
// wins, as locally.
Timings measure_once(const std::filesystem::path& path, const std::function<Timings()>& measure) {
  RemoteCache* remote = RemoteCache::current();
  if (!remote) return write_cached(path, measure());
  std::string key = remote_key(path);
  RemoteCache::Claim claim = remote->claim(RemoteCache::Kind::autotune, key);
  if (claim.payload) {
    if (auto theirs = parse_timings(*claim.payload)) return write_cached(path, *theirs);
  }
  Timings t = measure();
  if (!remote->put(RemoteCache::Kind::autotune, key, timings_text(t), /*only_if_absent=*/true)) {
    if (auto text = remote->get(RemoteCache::Kind::autotune, key))
      if (auto theirs = parse_timings(*text)) t = *theirs;
  }
  return write_cached(path, t);
}

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

namespace {

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// The decision of a measured shape for its whole bucket (each size rounded up to a power of
// two, the same transposes, packing, ISA and threads), written by every measurement and read
// by default-mode compiles of unmeasured shapes of the bucket. One line, the implementation's
// name and the shape measured; the first written wins (link()), as for timings.
std::filesystem::path bucket_path(const std::string& key) {
  return cache_root() / "autotune-buckets" / key;
}

std::optional<std::pair<MatmulImpl, std::string>> parse_bucket(const std::string& text) {
  std::istringstream in(text);
  std::string name, shape;
  if (!(in >> name >> shape)) return std::nullopt;
  for (MatmulImpl impl : {MatmulImpl::Template, MatmulImpl::Dnnl, MatmulImpl::OpenBlas})
    if (name == matmul_impl_name(impl)) return std::make_pair(impl, shape);
  return std::nullopt;
}

void write_bucket_file(const std::filesystem::path& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fs::path tmp = path;
  tmp += temp_suffix();
  std::ofstream(tmp) << text;
  (void)::link(tmp.c_str(), path.c_str());  // an existing decision stays
  fs::remove(tmp, ec);
}

// The bucket's decision: local, else the remote cache's (then written locally too).
std::optional<std::pair<MatmulImpl, std::string>> read_bucket(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (auto local = parse_bucket(text.str())) return local;
  RemoteCache* remote = RemoteCache::current();
  if (!remote) return std::nullopt;
  std::optional<std::string> shared = remote->get(RemoteCache::Kind::autotune, remote_key(path));
  if (!shared) return std::nullopt;
  auto decided = parse_bucket(*shared);
  if (decided) write_bucket_file(path, *shared);
  return decided;
}

void write_bucket(const std::filesystem::path& path, MatmulImpl impl, const std::string& shape) {
  std::string text = fmt::format("{} {}\n", matmul_impl_name(impl), shape);
  write_bucket_file(path, text);
  if (RemoteCache* remote = RemoteCache::current())
    remote->put(RemoteCache::Kind::autotune, remote_key(path), text, /*only_if_absent=*/true);
}

MatmulImpl choose(const Timings& t, double margin) {
  double best_lib = std::min(t.dnnl_s, t.openblas_s);
  if (best_lib * (1 + margin) < t.template_s)
    return t.dnnl_s <= t.openblas_s ? MatmulImpl::Dnnl : MatmulImpl::OpenBlas;
  return MatmulImpl::Template;
}

}  // namespace

void autotune_matmuls(IrProgram& program, const IsaInfo& isa, const AutotuneOptions& options) {
  check_mode(options.mode);
  const bool full_search = options.mode == "max-autotune";
  auto forced = forced_impl();
  int matmuls = 0, seen = 0;
  for (const ComputedBuffer& c : program.computations) matmuls += c.matmul ? 1 : 0;
  for (ComputedBuffer& c : program.computations) {
    if (!c.matmul) continue;
    const MatmulSpec& s = *c.matmul;
    progress_note(
        fmt::format("autotuning matmul {} of {} ({}x{}x{})", ++seen, matmuls, s.m, s.n, s.k));
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
      auto shape_fields = [&](const char* version, int64_t mm, int64_t nn, int64_t kk) {
        return hash_fields({version, isa.name, std::to_string(mm), std::to_string(nn),
                            std::to_string(kk), ta ? "ta" : "", tb ? "tb" : "",
                            packed_ahead ? "packed" : "", std::to_string(threads)});
      };
      std::string shape = fmt::format("{}x{}x{}", s.m, s.n, s.k);
      std::string where = fmt::format("matmul {} ({} threads{})", shape, threads,
                                      packed_ahead ? ", B packed at load" : "");
      auto us = [](double sec) { return sec * 1e6; };
      auto dir = cache_root() / "autotune";
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      // The full search's timings: used by both modes whenever they exist.
      auto full_path = dir / shape_fields("matmul-autotune-v3", s.m, s.n, s.k);
      // One process times a shape; the others wait for its result (issue 19: two processes
      // of one deployment must run the same kernels).
      FileLock lock(full_path.string() + ".lock");  // processes time one shape once
      auto full = find_timings(full_path);
      // The quick search's timings (default mode).
      auto quick_path = dir / shape_fields("matmul-autotune-quick-v1", s.m, s.n, s.k);
      auto bucket = bucket_path(
          shape_fields("matmul-bucket-v1", next_pow2(s.m), next_pow2(s.n), next_pow2(s.k)));
      if (full || full_search) {
        Timings t;
        if (full) {
          t = *full;
        } else {
          t = measure_once(full_path, [&] {
            Timings measured;
            measured.template_s = time_template_matmul(isa, s.m, s.n, s.k, ta, packed_ahead);
            measured.dnnl_s = time_sgemm_dnnl(s.m, s.n, s.k, ta, tb);
            measured.openblas_s = time_sgemm_openblas(s.m, s.n, s.k, ta, tb);
            return measured;
          });
        }
        choice = choose(t, kLibraryMargin);
        write_bucket(bucket, choice, shape);
        COIL_LOG(autotune, "{}: template {:.1f} us, dnnl {:.1f} us, openblas {:.1f} us -> {}{}",
                 where, us(t.template_s), us(t.dnnl_s), us(t.openblas_s), matmul_impl_name(choice),
                 full ? " (cached)" : "");
      } else if (auto quick = find_timings(quick_path)) {
        choice = choose(*quick, kLibraryMargin);
        COIL_LOG(
            autotune,
            "{}: template {:.1f} us, dnnl {:.1f} us (quick: best of 3 samples each) -> {} (cached)",
            where, us(quick->template_s), us(quick->dnnl_s), matmul_impl_name(choice));
      } else if (auto decided = read_bucket(bucket)) {
        choice = decided->first;
        COIL_LOG(autotune, "{}: {} (cached: measured on {} of its size bucket)", where,
                 matmul_impl_name(choice), decided->second);
      } else if (packed_ahead && threads <= kTemplateUntimedMaxThreads) {
        COIL_LOG(autotune,
                 "{}: template (heuristic: B is a constant, packed once at load, and the "
                 "epilogue fuses; at {} threads not timed)",
                 where, threads);
      } else if (!packed_ahead && s.m <= kPerCallPackMaxRows &&
                 s.k * s.n >= kPerCallPackMinElements) {
        choice = MatmulImpl::Dnnl;
        COIL_LOG(autotune,
                 "{}: dnnl (heuristic: {} row(s) of A against a B the template would pack per "
                 "call; not timed)",
                 where, s.m);
      } else if (2 * m * n * k < kQuickTimingMinFlops) {
        COIL_LOG(autotune, "{}: template (heuristic: a product of {:.2f} MFLOP is not timed)",
                 where, 2 * m * n * k / 1e6);
      } else {
        // The quick search: the template against oneDNN (which OpenBLAS rarely beats here),
        // the fastest of kQuickSamples samples each after a warm-up (one sample alone misjudged
        // a GPT block's 256x768x256 on 16 threads by 40%: 117 against 84 us).
        Timings t = measure_once(quick_path, [&] {
          Timings measured;
          measured.template_s =
              time_template_matmul(isa, s.m, s.n, s.k, ta, packed_ahead, kQuickSamples, 0.05);
          measured.dnnl_s = time_sgemm_dnnl(s.m, s.n, s.k, ta, tb, kQuickSamples, 0.05);
          measured.openblas_s = std::numeric_limits<double>::infinity();
          return measured;
        });
        choice = choose(t, kLibraryMargin);
        write_bucket(bucket, choice, shape);
        COIL_LOG(autotune,
                 "{}: template {:.1f} us, dnnl {:.1f} us (quick: best of 3 samples each) -> {}",
                 where, us(t.template_s), us(t.dnnl_s), matmul_impl_name(choice));
      }
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
