// A content-addressed disk cache of compiled kernel shared objects.
//
// Directory (cache_root()): $COIL_CACHE_DIR, else $XDG_CACHE_HOME/coil, else $HOME/.cache/coil,
// else /tmp/coil-<uid>. Created with mode 0700; a directory that is world-writable or owned by
// another user is refused (anyone who can write there can make coil load their code).
//
// Layout:
//   <default cache>/include/<headers-hash>/  the embedded kernel runtime headers
//                                    (embedded_headers.h) and their precompiled forms
//                                    (<header>.gch/<flags-hash>.gch), per machine whatever
//                                    COIL_CACHE_DIR says (machine_cache_root)
//   <cache>/<key[0:2]>/<key>/        source.cpp (a module of several translation units: unit0.cpp,
//                                    unit1.cpp, ...), module.so, module.so.xxh (XXH3-128 of the
//                                    .so), command.txt (the compile commands, one per line: a
//                                    shell reruns them)
//   <cache>/failed/<key>.cpp, .log   sources the compiler rejected, with its output (a unit of a
//                                    split module: <key>.unit<i>.cpp, .log)
//   <default cache>/isa/<key>.txt    the ISA probes' results, per machine and compiler whatever
//                                    COIL_CACHE_DIR says (machine_cache_root, runtime/isa.h)
// key = XXH3-128 over the source (every unit's), the compile commands (with placeholder paths),
// the compiler version, the host CPU flags and the headers' contents.
//
// Translation units: a large module is split into several (codegen/cpp/cpp_module.h:
// split_translation_units) that are compiled to objects at once by a pool of
// compile_threads() threads, each with the precompiled header of its flags, and then linked
// into module.so; a module of one unit is compiled and linked by one compiler run.
//
// Remote cache (runtime/remote_cache.h, COIL_REMOTE_CACHE): a local miss looks the key up in
// Redis (waiting while another machine holds its lease) and installs what it finds as a local
// entry; an entry built here is stored there too (module.so, the units, and command.txt with
// the entry and include paths as {entry} and {include}: the installing machine puts its own).
//
// Concurrency: an entry is built in a private temp dir and rename()d into place, so readers only
// ever see complete entries; when two processes (or threads) build the same key, the rename of
// the second fails and it uses the first one's entry. Entries are never modified after that,
// only moved aside and removed when their checksum no longer matches (then rebuilt).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runtime/toolchain.h"

namespace coil {

/// Where a compiled module lives and how it got there.
struct CompileResult {
  /// <cache>/<key[0:2]>/<key>/module.so
  std::filesystem::path so_path;
  /// 32 hex digits.
  std::string key;
  /// True when an existing entry was used and nothing was compiled.
  bool cache_hit = false;
  /// Wall time of the compiler (0 on a hit).
  double compile_seconds = 0;
  /// The compile command, shell-quoted, with the paths of the cache entry (several units: one
  /// line per unit's compile, then the link).
  std::string command;
  /// Translation units the module was compiled from.
  int units = 1;
  /// True when the entry came from the remote cache (runtime/remote_cache.h) into this
  /// machine's cache on this call (cache_hit is then true as well).
  bool remote_hit = false;
};

/// Compiles `source` into a shared object with Toolchain::get(), or finds it in the cache.
/// Thread-safe and safe across processes. Throws coil::Error when the compiler fails (with the
/// command, its output and the path of the kept source) or the cache directory is unusable.
/// `cache`: the cache directory to use instead of cache_root() (machine_cache_root() for
/// what belongs to the machine, e.g. the autotuner's benchmark module).
CompileResult compile_cached(const std::string& source, const CompileFlags& flags = {},
                             const std::filesystem::path& cache = {});

/// The entry `key` (CompileResult::key) if it exists and its module.so matches its checksum,
/// else nullopt; runs no compiler (the whole-graph cache's warm path, driver/model_cache.h).
/// A local miss is looked up in the remote cache, if there is one.
std::optional<CompileResult> find_cached_module(const std::string& key);

/// Compiles the translation units `units` (at least one; they share no internal symbols) into
/// one shared object, in parallel, or finds it in the cache. A compiler error names the unit.
CompileResult compile_cached(const std::vector<std::string>& units, const CompileFlags& flags = {},
                             const std::filesystem::path& cache = {});

/// The threads that compile a module's translation units: COIL_COMPILE_THREADS, else the cores
/// this process may use. Throws coil::Error when the variable is not a positive integer.
int compile_threads();

/// The cache directory, created (0700) and checked on each call, since COIL_CACHE_DIR may change
/// between calls (tests do this).
std::filesystem::path cache_root();

/// Where what belongs to the machine and its compiler rather than to a cache lives (the ISA
/// probes, runtime/isa.h): the default cache directory ($XDG_CACHE_HOME/coil, else
/// $HOME/.cache/coil, else /tmp/coil-<uid>) whatever COIL_CACHE_DIR says, so that a fresh
/// COIL_CACHE_DIR (a test, a benchmark's cold compile) does not probe the CPU again. Created and
/// checked as cache_root() is.
std::filesystem::path machine_cache_root();

}  // namespace coil
