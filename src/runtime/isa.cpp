#include "runtime/isa.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>

#include "runtime/code_cache.h"
#include "runtime/embedded_headers.h"
#include "runtime/host_cpu.h"
#include "runtime/runtime_libraries.h"
#include "support/check.h"
#include "support/env.h"
#include "support/hash.h"
#include "support/log.h"

namespace coil {
namespace fs = std::filesystem;
namespace {

// Links shared libraries `libs` (-l names), coil's own found in vmath_dir(). With --as-needed
// (the default of some distributions) a -l placed before the source file would be dropped,
// since the code cache puts CompileFlags before the source; push-state/no-as-needed keeps them
// regardless of position. -L and -rpath go through -Wl: they stay out of the precompiled
// header's command.
std::vector<std::string> runtime_link_flags(std::initializer_list<const char*> libs) {
  std::vector<std::string> flags = {"-Wl,--push-state,--no-as-needed"};
  std::string dir = vmath_dir();
  if (!dir.empty()) {
    flags.push_back("-Wl,-L" + dir);
    flags.push_back("-Wl,-rpath," + dir);
  }
  for (const char* lib : libs) flags.push_back(std::string("-l") + lib);
  flags.push_back("-Wl,--pop-state");
  return flags;
}

// SLEEF and libcoil_vmath: what the avx512/avx2 runtime headers call; glibc's libmvec too
// where the build found its f32 functions (CMakeLists.txt: COIL_HAVE_LIBMVEC).
std::vector<std::string> simd_link_flags() {
#ifdef COIL_HAVE_LIBMVEC
  return runtime_link_flags({"coil_vmath", "sleef", "mvec"});
#else
  return runtime_link_flags({"coil_vmath", "sleef"});
#endif
}

// The avx512/avx2 compile flags: the ISA's instructions, and COIL_USE_LIBMVEC, which makes the
// runtime headers call libmvec's f32 expm1/log1p/tanh/sin/cos instead of SLEEF's.
std::vector<std::string> simd_flags(std::vector<std::string> isa_flags) {
#ifdef COIL_HAVE_LIBMVEC
  isa_flags.push_back("-DCOIL_USE_LIBMVEC");
#endif
  return isa_flags;
}

// Flags that let the avx512 probe use (and kernels be compiled with) AVX512-BF16.
const std::vector<std::string> kBf16ProbeFlags = {"-mavx512bf16", "-DCOIL_PROBE_AVX512BF16"};

std::vector<IsaInfo> make_table() {
  IsaInfo avx512{"avx512",
                 512,
                 "COIL_CPU_AVX512",
                 simd_flags({"-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma",
                             "-mprefer-vector-width=512"}),
                 simd_link_flags(),
                 {"avx512f", "avx512dq", "avx512vl", "avx512bw", "fma"}};
  // AMX (Sapphire Rapids and later): the avx512 ISA plus the tile instructions, with which
  // coil_gemm.h runs bf16 matmuls on TDPBF16PS (COIL_GEMM_HAS_AMX_KERNEL). Its own entry, so
  // that COIL_CPU_ISA=avx512 still selects the AVX512-BF16 kernel on the same machine.
  IsaInfo avx512_amx = avx512;
  avx512_amx.name = "avx512_amx";
  for (const char* f : {"-mavx512bf16", "-mamx-tile", "-mamx-bf16"}) avx512_amx.flags.push_back(f);
  for (const char* f : {"avx512_bf16", "amx_tile", "amx_bf16"}) {
    avx512_amx.cpu_features.push_back(f);
  }
  IsaInfo avx2{"avx2",
               256,
               "COIL_CPU_AVX2",
               simd_flags({"-mavx2", "-mfma", "-mf16c"}),
               simd_link_flags(),
               {"avx2", "fma", "f16c"}};
  // NEON is part of every AArch64 CPU; coil_vec.h has no NEON intrinsics yet (portable loops).
  IsaInfo neon{"neon", 128, "COIL_CPU_NEON", {}, {}, {"asimd"}};
  IsaInfo scalar{"scalar", 0, "", {}, {}, {}};
  return {avx512_amx, avx512, avx2, neon, scalar};
}

// The probe: SLEEF's exp through the vector header, a masked tail load, a bf16 round trip and
// a horizontal sum, then the lane count, which the caller compares with the table.
constexpr std::string_view kProbeSource = R"(
#include <cstdio>
#include <cstring>
#include "coil_vec.h"
#if defined(COIL_PROBE_AVX512BF16)
#include <immintrin.h>
#endif
int main() {
  using V = coil::Vectorized<float>;
  float in[3] = {1.0f, 2.0f, -0.5f};
  V v = V::loadu(in, 3);
  float e = v.exp()[0];
  coil::bfloat16 b[V::size()];
  v.store(b, 3);
  float sum = V::loadu(b, 3).reduce_add();
  float want = 0.0f;
  for (int i = 0; i < 3 && i < V::size(); ++i) want += in[i];
  if (!(e > 2.7182815f && e < 2.7182820f) || sum != want) return 1;
#if defined(COIL_PROBE_AVX512BF16)
  __m256bh h = _mm512_cvtneps_pbh(_mm512_set1_ps(1.0f));
  unsigned short bits[16];
  std::memcpy(bits, &h, sizeof bits);
  if (bits[15] != 0x3f80) return 2;
#endif
  std::printf("coil-isa-probe lanes=%d\n", V::size());
  return 0;
}
)";

std::string unique_suffix() {
  thread_local std::mt19937_64 rng{(uint64_t{std::random_device{}()} << 32) ^
                                   std::random_device{}()};
  return fmt::format("{}.{:016x}", ::getpid(), rng());
}

void make_private_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return;
  user_error("cannot create directory {}: {}", dir.string(), std::strerror(errno));
}

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  COIL_USER_CHECK(out.good(), "cannot write {}: {}", path.string(), std::strerror(errno));
}

// The command building the probe executable: the kernel flags minus -shared, then the ISA's.
std::vector<std::string> probe_command(const Toolchain& tc, const IsaInfo& isa,
                                       const std::vector<std::string>& extra,
                                       const std::string& dir) {
  std::vector<std::string> argv{tc.cxx};
  for (std::string& f : tc.base_flags()) {
    if (f != "-shared") argv.push_back(std::move(f));
  }
  for (const std::string& f : isa_compile_flags(isa).extra) argv.push_back(f);
  for (const std::string& f : extra) argv.push_back(f);
  argv.push_back("-I" + dir + "/include");
  argv.push_back(dir + "/probe.cpp");
  argv.push_back("-o");
  argv.push_back(dir + "/probe");
  // Again after the source, for linkers that resolve libraries left to right.
  for (const std::string& f : isa.link_flags) argv.push_back(f);
  return argv;
}

IsaProbe run_probe(const Toolchain& tc, const IsaInfo& isa, const std::vector<std::string>& extra,
                   const fs::path& tmp) {
  make_private_dir(tmp);
  make_private_dir(tmp / "include");
  for (const EmbeddedFile& f : embedded_kernel_headers())
    write_file(tmp / "include" / f.name, f.text);
  write_file(tmp / "probe.cpp", kProbeSource);
  std::vector<std::string> argv = probe_command(tc, isa, extra, tmp.string());
  IsaProbe probe;
  ProcessResult built = run_process(argv);
  if (built.status != 0) {
    probe.detail = fmt::format("compiling the probe failed (exit status {}): {}\n{}", built.status,
                               command_string(argv), built.output.substr(0, 4000));
    return probe;
  }
  ProcessResult ran = run_process({(tmp / "probe").string()});
  std::string expected = fmt::format("coil-isa-probe lanes={}\n", isa.lanes(DType::F32));
  if (ran.status != 0 || ran.output != expected) {
    probe.detail = fmt::format("the probe program failed (exit status {}; a signal is 128+n): {}",
                               ran.status, ran.output.substr(0, 2000));
    return probe;
  }
  probe.ok = true;
  return probe;
}

}  // namespace

int IsaInfo::lanes(DType t) const {
  if (is_scalar()) return 1;
  return bit_width / (8 * dtype_size(t));
}

const std::vector<IsaInfo>& all_isas() {
  static const std::vector<IsaInfo> table = make_table();
  return table;
}

namespace {

const IsaInfo* find_isa(std::string_view name) {
  for (const IsaInfo& isa : all_isas()) {
    if (isa.name == name) return &isa;
  }
  return nullptr;
}

std::string isa_names() {
  std::string names;
  for (const IsaInfo& isa : all_isas()) names += (names.empty() ? "" : ", ") + isa.name;
  return names;
}

}  // namespace

const IsaInfo& isa_by_name(std::string_view name) {
  const IsaInfo* isa = find_isa(name);
  COIL_USER_CHECK(isa != nullptr, "unknown vector ISA '{}'; expected one of {}", name, isa_names());
  return *isa;
}

bool cpu_supports(const IsaInfo& isa) {
  for (const std::string& f : isa.cpu_features) {
    if (!cpu_has_feature(f)) return false;
  }
  return true;
}

IsaProbe probe_isa(const IsaInfo& isa, const Toolchain& toolchain,
                   const std::vector<std::string>& extra_flags) {
  std::vector<std::string> fields{"coil-isa-probe-v1", toolchain.version, toolchain.host_cpu,
                                  std::string(kProbeSource)};
  for (std::string& arg : probe_command(toolchain, isa, extra_flags, "{dir}")) {
    fields.push_back(std::move(arg));
  }
  for (const EmbeddedFile& f : embedded_kernel_headers()) {
    fields.emplace_back(f.name);
    fields.emplace_back(f.text);
  }
  std::string key = hash_fields(fields);
  // Per machine, not per cache directory: the key already holds the compiler, the CPU's flags
  // and the command (code_cache.h, machine_cache_root).
  fs::path dir = machine_cache_root() / "isa";
  make_private_dir(dir);
  fs::path result = dir / (key + ".txt");

  IsaProbe probe;
  std::ifstream in(result);
  std::string status;
  if (in && std::getline(in, status) && (status == "ok" || status == "fail")) {
    probe.ok = status == "ok";
    probe.cached = true;
    std::ostringstream rest;
    rest << in.rdbuf();
    probe.detail = rest.str();
    return probe;
  }

  fs::path tmp = dir / (key + ".tmp." + unique_suffix());
  try {
    probe = run_probe(toolchain, isa, extra_flags, tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  // Written through rename, so a concurrent reader sees all of it or nothing.
  fs::path partial = tmp.string() + ".txt";
  write_file(partial, (probe.ok ? "ok\n" : "fail\n") + probe.detail);
  if (::rename(partial.c_str(), result.c_str()) != 0) fs::remove(partial);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  COIL_LOG(cache, "isa probe {}{}: {}", isa.name, extra_flags.empty() ? "" : " (+extensions)",
           probe.ok ? "ok" : probe.detail);
  return probe;
}

namespace {

// The table entry plus the optional extensions the CPU has and the probe confirms.
IsaInfo with_extensions(const IsaInfo& isa, const Toolchain& tc) {
  IsaInfo out = isa;
  if (isa.name == "avx512" && cpu_has_feature("avx512_bf16") &&
      probe_isa(isa, tc, kBf16ProbeFlags).ok) {
    out.flags.push_back("-mavx512bf16");
    // The module may then use the instructions: a machine that runs it needs them too
    // (cpu_supports, and an exported model's manifest).
    out.cpu_features.push_back("avx512_bf16");
  }
  return out;
}

}  // namespace

IsaInfo detect_host_isa() {
  const Toolchain& tc = Toolchain::get();
  std::string forced = env(EnvVar::cpu_isa);
  if (!forced.empty()) {
    const IsaInfo* found = find_isa(forced);
    COIL_USER_CHECK(found != nullptr,
                    "COIL_CPU_ISA='{}' is not a vector ISA coil knows; expected one of {}", forced,
                    isa_names());
    if (found->is_scalar()) return *found;
    for (const std::string& f : found->cpu_features) {
      COIL_USER_CHECK(cpu_has_feature(f),
                      "COIL_CPU_ISA={} asks for an ISA this machine cannot run: the CPU lacks "
                      "'{}' (needs {})",
                      forced, f, fmt::join(found->cpu_features, ", "));
    }
    IsaProbe probe = probe_isa(*found, tc);
    COIL_USER_CHECK(probe.ok, "COIL_CPU_ISA={}: this machine cannot build or run {} kernels: {}",
                    forced, found->name, probe.detail);
    return with_extensions(*found, tc);
  }
  for (const IsaInfo& isa : all_isas()) {
    if (isa.is_scalar()) return isa;
    if (!cpu_supports(isa)) continue;
    IsaProbe probe = probe_isa(isa, tc);
    if (probe.ok) return with_extensions(isa, tc);
    warn(fmt::format(
        "the CPU supports {} but its probe failed, so kernels will not use it (set COIL_CPU_ISA "
        "to choose; delete {} to probe again): {}",
        isa.name, (cache_root() / "isa").string(), probe.detail));
  }
  COIL_UNREACHABLE("the ISA table has no scalar entry");
}

const IsaInfo& host_isa() {
  static const IsaInfo isa = detect_host_isa();
  return isa;
}

CompileFlags isa_compile_flags(const IsaInfo& isa) {
  CompileFlags flags;
  flags.extra = isa.flags;
  if (!isa.macro.empty()) flags.extra.push_back("-D" + isa.macro);
  for (const std::string& f : isa.link_flags) flags.extra.push_back(f);
  return flags;
}

CompileFlags module_compile_flags(const IsaInfo& isa) {
  CompileFlags flags = isa_compile_flags(isa);
  // Testing only: bf16 matmuls of an avx512 module on emulated AMX tiles (coil_amx.h), so that
  // whole bf16 models exercise the AMX kernel on CPUs without AMX. The emulated kernel has no
  // precompiled copy in libcoil_vmath: the module compiles its matmul loops itself
  // (coil_gemm_driver.h), the rest (attention) still links the library's. (Such modules once
  // shared one scratch pool across shared objects and corrupted the heap in long runs; the
  // scratch is module-private since.)
  if (isa.name == "avx512" && env(EnvVar::testing_amx_emulate) == "1") {
    flags.extra.push_back("-DCOIL_AMX_EMULATE");
  }
  if (isa.name == "avx512" || isa.name == "avx512_amx" || isa.name == "avx2") {
    flags.extra.push_back("-DCOIL_GEMM_PRECOMPILED");
  }
  return flags;
}

std::vector<std::string> extern_link_flags() {
  // libcoil_extern links oneDNN and OpenBLAS itself (its runpath names OpenBLAS's OpenMP
  // build), so a module needs only it; from the same directory as libcoil_vmath.
  return runtime_link_flags({"coil_extern"});
}

bool extern_have_openblas() {
#ifdef COIL_OPENBLAS_OPENMP_DIR
  return true;
#else
  return false;
#endif
}

}  // namespace coil
