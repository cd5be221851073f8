// The host C++ compiler that builds generated kernels into shared objects: which compiler,
// its version, and every flag it is given. All compiler knowledge lives here, so that the code
// cache (runtime/code_cache.h) only ever sees an argument vector.
//
// Discovery: $CXX if set (a name searched on PATH, or a path), else g++, else clang++, else
// clang++-14. The first line of `<cxx> --version` is recorded: it is part of the cache key.
// COIL_COMPILE_DEBUG=1 builds kernels with -O0 -g instead of -O3 (read once, at discovery).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace coil {

/// Options added to the base flags for one compile, e.g. ISA flags ("-mavx512f") or
/// "-mprefer-vector-width=512". Part of the cache key (they appear in the command line).
struct CompileFlags {
  /// Appended, in order, after the base flags. Each must start with '-'.
  std::vector<std::string> extra;

  bool operator==(const CompileFlags&) const = default;
};

/// The compiler used for generated code.
struct Toolchain {
  /// Absolute path of the compiler executable.
  std::string cxx;
  /// First line of `cxx --version`, e.g. "g++ (Debian 12.2.0-14+deb12u1) 12.2.0".
  std::string version;
  /// clang (any vendor) rather than gcc.
  bool is_clang = false;
  /// COIL_COMPILE_DEBUG=1: -O0 -g instead of -O3.
  bool debug = false;
  /// The host CPU's feature flags (/proc/cpuinfo). Kernels are built with -march=native, so a
  /// cache directory shared between machines (NFS home) must not hand one CPU's objects to
  /// another: this string is part of the cache key.
  std::string host_cpu;

  /// The process-wide toolchain, discovered on first use (thread-safe). Throws coil::Error
  /// when no compiler is found or $CXX names one that does not run.
  static const Toolchain& get();
  /// A toolchain for a given compiler (name on PATH or path), e.g. to test clang next to gcc.
  static Toolchain for_compiler(const std::string& cxx);

  /// The flags every kernel is compiled with, before CompileFlags::extra (see toolchain.cpp
  /// for why each one is there).
  std::vector<std::string> base_flags() const;

  /// The full argument vector (argv[0] = cxx) compiling `source` into the shared object
  /// `output`, with `include_dir` on the include path.
  std::vector<std::string> shared_object_command(const std::filesystem::path& source,
                                                 const std::filesystem::path& output,
                                                 const std::filesystem::path& include_dir,
                                                 const CompileFlags& flags) const;

  /// The argument vector compiling one translation unit `source` of a split module into the
  /// object `output` (-c): shared_object_command's flags without the link-only ones.
  std::vector<std::string> object_command(const std::filesystem::path& source,
                                          const std::filesystem::path& output,
                                          const std::filesystem::path& include_dir,
                                          const CompileFlags& flags) const;

  /// The argument vector linking `objects` into the shared object `output`, with every flag
  /// (the base flags carry -shared, -fopenmp and the sanitizers; `flags` the libraries).
  std::vector<std::string> link_command(const std::vector<std::filesystem::path>& objects,
                                        const std::filesystem::path& output,
                                        const CompileFlags& flags) const;
};

/// The compiler Toolchain::get() would pick ($CXX, else g++, clang++, clang++-14 on PATH),
/// identified without running it: its resolved path, size and modification time, or "" when
/// there is none (a $CXX that names no executable is an error, as for Toolchain::get). The
/// whole-graph cache (driver/model_cache.h) records it, so that a cached model is reused
/// without a compiler on PATH and rebuilt when another compiler is there.
std::string compiler_fingerprint();

/// The host CPU's feature flags, as Toolchain::host_cpu (read once).
const std::string& host_cpu_flags();

/// The host CPU's "model name" line of /proc/cpuinfo (read once; "" when there is none):
/// timings measured on one CPU model do not hold on another (the remote cache's autotune keys).
const std::string& host_cpu_model();

/// Whether a CompileFlags::extra flag only matters when linking (-Wl,..., -l..., -L...):
/// objects and precompiled headers are built without them.
bool is_link_only_flag(const std::string& flag);

/// The sanitizer flags coil was built with (-DCOIL_SANITIZE, cmake/sanitize.cmake), space
/// separated, e.g. "-fsanitize=thread -fno-omit-frame-pointer"; empty in a normal build.
/// Toolchain::base_flags() gives them to generated kernels too.
std::string_view build_sanitizer_flags();

/// What a finished child process left: its exit code (128 + signal number when killed by a
/// signal) and its stdout and stderr, interleaved as written.
struct ProcessResult {
  int status = 0;
  std::string output;
};

/// Runs argv[0] (a path; no PATH search, no shell) with argv, stdin from /dev/null, and waits
/// for it. Throws coil::Error when the program cannot be started. Output beyond 1 MiB is
/// dropped (the child is still drained so it never blocks).
ProcessResult run_process(const std::vector<std::string>& argv);

/// The argument vector as one line that a shell would run unchanged (for logs and errors).
std::string command_string(const std::vector<std::string>& argv);

}  // namespace coil
