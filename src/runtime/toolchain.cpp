#include "runtime/toolchain.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

#include "support/check.h"
#include "support/env.h"

extern char** environ;

namespace coil {
namespace {

// One flag and why it is passed. The flags are kept in these tables, not spread over the code,
// so that the reason for each stays next to it.
struct Flag {
  std::string_view flag;
  std::string_view why;
};

constexpr Flag kReleaseFlags[] = {
    {"-O3",
     "kernels are hot loops; -O3 enables gcc's auto-vectorizer, which the scalar "
     "kernels rely on (keep it: no -fno-tree-loop-vectorize)"},
};

constexpr Flag kDebugFlags[] = {
    {"-O0", "COIL_COMPILE_DEBUG=1: step through generated code in a debugger"},
    {"-g", "COIL_COMPILE_DEBUG=1: debug info for the generated source"},
};

// Never -ffast-math: it assumes no NaN/inf (breaking isnan, max/min propagation and masking)
// and lets the compiler reassociate reductions, so results would drift from eager PyTorch.
constexpr Flag kCommonFlags[] = {
    {"-DNDEBUG", "assert() in the runtime headers is for their own unit tests"},
    {"-shared", "the output is dlopen()ed (runtime/loader.h)"},
    {"-fPIC", "required for a shared object"},
    {"-std=c++17",
     "generated code and runtime headers are C++17, the dialect every supported "
     "compiler accepts fully"},
    {"-march=native", "use the host's vector ISA; the host CPU flags are part of the cache key"},
    {"-fopenmp",
     "parallel outer loops (#pragma omp). gcc links libgomp; Debian's clang-14 "
     "links libomp (libomp-14-dev) and adds its RUNPATH, so the same flag works. "
     "(-fopenmp=libgomp would make clang silently ignore the pragmas.)"},
    {"-ffp-contract=off",
     "no fused multiply-add contraction: a*b+c must round twice, as in "
     "eager PyTorch (gcc's default in GNU mode is 'fast')"},
    {"-fno-math-errno",
     "sqrt/exp etc. never set errno (nobody reads it), so they inline and "
     "vectorize; values are unchanged"},
    {"-fno-trapping-math",
     "coil never unmasks FP exceptions, so the compiler may speculate "
     "and if-convert float ops; values are unchanged"},
    {"-Wno-unused-variable", "generated code declares temporaries it may not use"},
    {"-Wno-unknown-pragmas", "kernels carry pragmas meant for the other compiler"},
};

// g++ only: clang rejects these flags.
constexpr Flag kGccFlags[] = {
    {"-fno-tree-sink",
     "works around a g++ 12 wrong-code bug: when the loop vectorizer SLP-vectorizes a group of "
     "masked loads into several vectors, every vector gets the mask of the first one (a where() "
     "on a [N, 3, 2] tensor read zeros). Generated code loads "
     "unconditionally (indices are clamped), so its masked loads come only from tree-sink "
     "moving a load into the arm of the ?: that uses it; without sinking there are none. "
     "No measurable run-time cost"},
};

// A sanitizer build (-DCOIL_SANITIZE=address,undefined or thread; cmake/sanitize.cmake) passes
// the -fsanitize flags coil itself is compiled with. Kernels get them too (base_flags), so that
// an out-of-bounds access, undefined behaviour or a race inside generated code is reported like
// one in coil, with the kernel's frame in the stack. They are part of the compile command, hence
// of the code-cache key (runtime/code_cache.h) and of the ISA probe's key: a sanitized and a
// normal build never share cache entries, even in one COIL_CACHE_DIR. A kernel is dlopen()ed
// into the sanitized process, whose runtime (libasan/libubsan/libtsan) it links against.
#ifdef COIL_SANITIZE_FLAGS
constexpr std::string_view kSanitizeFlags = COIL_SANITIZE_FLAGS;
#else
constexpr std::string_view kSanitizeFlags = "";
#endif

// With kSanitizeFlags, in addition to them.
constexpr Flag kSanitizeExtraFlags[] = {
    {"-g1",
     "line tables only: sanitizer reports name the line of the kernel's source.cpp, at a "
     "fraction of -g's compile time"},
};

// Whether the sanitizer flags apply to kernels of this compiler: only to those of the compiler
// coil was built with, since the sanitizer runtime in the process is that compiler's (gcc's
// libasan and clang's differ in ABI). Kernels of the other one (tests build some with
// clang++-14) stay uninstrumented, which ASan and UBSan accept; TSan cannot see into them.
constexpr bool kBuiltWithClang =
#ifdef __clang__
    true;
#else
    false;
#endif

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// PATH lookup as execvp does it, but done up front so that the recorded compiler is a path.
std::optional<std::string> find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name)) return std::nullopt;
    return std::filesystem::absolute(name).string();
  }
  const char* path_env = std::getenv("PATH");
  std::string_view path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  while (!path.empty()) {
    size_t colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    path = colon == std::string_view::npos ? std::string_view() : path.substr(colon + 1);
    if (dir.empty()) continue;  // an empty entry means the current directory: not trusted
    std::string candidate = std::string(dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

// The line of the first CPU that starts with `field` ("flags", "model name"), or "" when
// /proc/cpuinfo is unreadable or has none.
std::string read_cpuinfo_line(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return line;
  }
  return "";
}

std::string read_host_cpu_flags() {
  return read_cpuinfo_line("flags");
}

}  // namespace

std::string compiler_fingerprint() {
  std::optional<std::string> path;
  const char* env = std::getenv("CXX");
  if (env && *env) {
    // As Toolchain::get: an explicit choice that does not exist is an error, even where no
    // compile is needed.
    path = find_program(env);
    COIL_USER_CHECK(path.has_value(),
                    "the C++ compiler named by CXX ('{}') is not an executable on PATH", env);
  } else {
    for (const char* name : {"g++", "clang++", "clang++-14"})
      if ((path = find_program(name))) break;
  }
  if (!path) return "";
  std::error_code ec;
  std::filesystem::path real = std::filesystem::canonical(*path, ec);
  if (ec) real = *path;
  struct stat st;
  if (::stat(real.c_str(), &st) != 0) return "";
  return fmt::format("{} size={} mtime={}.{:09d}", real.string(),
                     static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
                     st.st_mtim.tv_nsec);
}

const std::string& host_cpu_flags() {
  static const std::string flags = read_host_cpu_flags();
  return flags;
}

const std::string& host_cpu_model() {
  static const std::string model = read_cpuinfo_line("model name");
  return model;
}

const Toolchain& Toolchain::get() {
  static const Toolchain toolchain = [] {
    const char* env = std::getenv("CXX");
    if (env && *env) {
      // An explicit choice is not second-guessed: a bad $CXX is an error, not a fallback.
      COIL_USER_CHECK(find_program(env).has_value(),
                      "the C++ compiler named by CXX ('{}') is not an executable on PATH", env);
      return for_compiler(env);
    }
    for (const char* name : {"g++", "clang++", "clang++-14"}) {
      if (find_program(name)) return for_compiler(name);
    }
    user_error(
        "no C++ compiler found on PATH (tried g++, clang++, clang++-14); install one or "
        "set CXX");
  }();
  return toolchain;
}

Toolchain Toolchain::for_compiler(const std::string& cxx) {
  std::optional<std::string> path = find_program(cxx);
  COIL_USER_CHECK(path.has_value(), "C++ compiler '{}' is not an executable on PATH", cxx);
  Toolchain t;
  t.cxx = *path;
  ProcessResult r = run_process({t.cxx, "--version"});
  COIL_USER_CHECK(r.status == 0, "'{} --version' failed (exit status {}): {}", t.cxx, r.status,
                  r.output.substr(0, 2000));
  t.version = r.output.substr(0, r.output.find('\n'));
  t.is_clang = t.version.find("clang") != std::string::npos;
  t.debug = env(EnvVar::compile_debug) == "1";
  t.host_cpu = read_host_cpu_flags();
  return t;
}

std::vector<std::string> Toolchain::base_flags() const {
  std::vector<std::string> flags;
  auto append = [&](const auto& table) {
    for (const Flag& f : table) flags.emplace_back(f.flag);
  };
  if (debug) {
    append(kDebugFlags);
  } else {
    append(kReleaseFlags);
  }
  append(kCommonFlags);
  if (!is_clang) append(kGccFlags);
  if (!kSanitizeFlags.empty() && is_clang == kBuiltWithClang) {
    std::string_view rest = kSanitizeFlags;
    while (!rest.empty()) {
      size_t space = rest.find(' ');
      std::string_view f = rest.substr(0, space);
      if (!f.empty()) flags.emplace_back(f);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    }
    append(kSanitizeExtraFlags);
  }
  return flags;
}

std::string_view build_sanitizer_flags() {
  return kSanitizeFlags;
}

namespace {

// The compile command of one source: into a shared object, or (`object`) into an object file of
// a split module, which leaves the link-only flags to the link.
std::vector<std::string> compile_command(const Toolchain& tc, const std::filesystem::path& source,
                                         const std::filesystem::path& output,
                                         const std::filesystem::path& include_dir,
                                         const CompileFlags& flags, bool object) {
  std::vector<std::string> argv{tc.cxx};
  for (std::string& f : tc.base_flags()) argv.push_back(std::move(f));
  for (const std::string& f : flags.extra) {
    COIL_ASSERT(!f.empty() && f[0] == '-', "compile flag '{}' does not start with '-'", f);
    if (!object || !is_link_only_flag(f)) argv.push_back(f);
  }
  argv.push_back("-I" + include_dir.string());
  if (object) argv.push_back("-c");
  argv.push_back(source.string());
  argv.push_back("-o");
  argv.push_back(output.string());
  return argv;
}

}  // namespace

std::vector<std::string> Toolchain::shared_object_command(const std::filesystem::path& source,
                                                          const std::filesystem::path& output,
                                                          const std::filesystem::path& include_dir,
                                                          const CompileFlags& flags) const {
  return compile_command(*this, source, output, include_dir, flags, false);
}

std::vector<std::string> Toolchain::object_command(const std::filesystem::path& source,
                                                   const std::filesystem::path& output,
                                                   const std::filesystem::path& include_dir,
                                                   const CompileFlags& flags) const {
  return compile_command(*this, source, output, include_dir, flags, true);
}

std::vector<std::string> Toolchain::link_command(const std::vector<std::filesystem::path>& objects,
                                                 const std::filesystem::path& output,
                                                 const CompileFlags& flags) const {
  std::vector<std::string> argv{cxx};
  for (std::string& f : base_flags()) argv.push_back(std::move(f));
  // The objects before the libraries they call, as a linker that drops unneeded libraries
  // (--as-needed) requires.
  for (const std::filesystem::path& o : objects) argv.push_back(o.string());
  for (const std::string& f : flags.extra) {
    COIL_ASSERT(!f.empty() && f[0] == '-', "compile flag '{}' does not start with '-'", f);
    argv.push_back(f);
  }
  argv.push_back("-o");
  argv.push_back(output.string());
  return argv;
}

bool is_link_only_flag(const std::string& flag) {
  return flag.rfind("-Wl,", 0) == 0 || flag.rfind("-l", 0) == 0 || flag.rfind("-L", 0) == 0;
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  COIL_ASSERT(!argv.empty(), "run_process needs a program");
  constexpr size_t kMaxOutput = size_t{1} << 20;
  // O_CLOEXEC so that a child spawned concurrently by another thread does not inherit the
  // write end and keep our read() from ever seeing EOF.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    user_error("cannot create a pipe to run '{}': {}", argv[0], std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    user_error("cannot run '{}': {}", argv[0], std::strerror(rc));
  }
  ProcessResult result;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    size_t room = kMaxOutput - std::min(kMaxOutput, result.output.size());
    result.output.append(buf, std::min(room, static_cast<size_t>(n)));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) user_error("waiting for '{}' failed: {}", argv[0], std::strerror(errno));
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string command_string(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                                   "VWXYZ0123456789-_=+./:,@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace coil
