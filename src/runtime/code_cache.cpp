#include "runtime/code_cache.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "runtime/embedded_headers.h"
#include "runtime/remote_cache.h"
#include "support/check.h"
#include "support/env.h"
#include "support/file_lock.h"
#include "support/hash.h"
#include "support/job_pool.h"
#include "support/log.h"
#include "support/progress.h"

namespace coil {
namespace fs = std::filesystem;
namespace {

// "<pid>.<random>": unique across processes (pid) and across threads and forked children of
// one process (the per-thread generator is seeded from random_device, and a forked child that
// inherits it has another pid).
std::string unique_suffix() {
  thread_local std::mt19937_64 rng{(uint64_t{std::random_device{}()} << 32) ^
                                   std::random_device{}()};
  return fmt::format("{}.{:016x}", ::getpid(), rng());
}

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream data;
  data << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(data).str();
}

void write_file(const fs::path& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  COIL_USER_CHECK(out.good(), "cannot write {}: {}", path.string(), std::strerror(errno));
}

// mkdir with mode 0700; an existing directory is fine (another process may have made it).
void make_private_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) return;
  user_error("cannot create directory {}: {}", dir.string(), std::strerror(errno));
}

void remove_quietly(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// The header text hashed once: it is fixed for the life of the binary.
const std::string& headers_hash() {
  static const std::string hash = [] {
    KeyHasher h;
    for (const EmbeddedFile& f : embedded_kernel_headers()) {
      h.add(f.name);
      h.add(f.text);
    }
    return h.hex();
  }();
  return hash;
}

bool headers_present(const fs::path& dir) {
  for (const EmbeddedFile& f : embedded_kernel_headers()) {
    std::optional<std::string> text = read_file(dir / f.name);
    if (!text || *text != f.text) return false;
  }
  return true;
}

// Writes the embedded headers into <root>/include/<hash>/ once per process and root, through a
// temp dir and rename() like cache entries. Returns the directory for -I.
fs::path ensure_headers(const fs::path& root) {
  static std::mutex mutex;
  static std::set<fs::path> done;
  fs::path parent = root / "include";
  fs::path dir = parent / headers_hash();
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count(dir)) return dir;
  if (!headers_present(dir)) {
    make_private_dir(parent);
    if (fs::exists(dir)) {
      COIL_LOG(cache, "kernel headers in {} are damaged; rewriting them", dir.string());
      fs::path aside = dir.string() + ".corrupt." + unique_suffix();
      if (::rename(dir.c_str(), aside.c_str()) == 0) remove_quietly(aside);
    }
    fs::path tmp = dir.string() + ".tmp." + unique_suffix();
    make_private_dir(tmp);
    for (const EmbeddedFile& f : embedded_kernel_headers()) write_file(tmp / f.name, f.text);
    // A failed rename means another process installed the same (content-addressed) files.
    if (::rename(tmp.c_str(), dir.c_str()) != 0) remove_quietly(tmp);
  }
  done.insert(dir);
  return dir;
}

enum class EntryState { Valid, Missing, Corrupt };

// The source files of an entry: source.cpp for a module of one translation unit (as before
// modules were split), unit0.cpp, unit1.cpp, ... for a split one.
std::string unit_file(size_t i, size_t units) {
  return units == 1 ? "source.cpp" : fmt::format("unit{}.cpp", i);
}

EntryState verify_entry_files(const fs::path& entry, const std::vector<std::string>& units,
                              std::string& reason);

using FileIdentity = std::tuple<ino_t, off_t, int64_t, int64_t>;

// A file's identity on disk (inode, size, modification time), or nullopt without the file.
std::optional<FileIdentity> file_identity(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_tuple(st.st_ino, st.st_size, static_cast<int64_t>(st.st_mtim.tv_sec),
                         static_cast<int64_t>(st.st_mtim.tv_nsec));
}

// The identities of an entry's module.so and its checksum file, or nullopt without both.
std::optional<std::pair<FileIdentity, FileIdentity>> entry_identity(const fs::path& entry) {
  auto so = file_identity(entry / "module.so"), sum = file_identity(entry / "module.so.xxh");
  if (!so || !sum) return std::nullopt;
  return std::make_pair(*so, *sum);
}

// Entries this process verified, with their files' identities then: a size-generic model finds the
// same module at every new size (a decode step at each token), and reading and hashing the
// module each time was 7% of a step's front half. An entry whose module.so or checksum
// changed since (another identity: rewritten, truncated, replaced, removed) is verified again.
std::mutex verified_mutex;
std::map<std::string, std::pair<FileIdentity, FileIdentity>> verified_entries;

// Checks an entry against its checksum (and its sources against ours, which also guards against
// a key collision). On Corrupt, `reason` says what is wrong.
EntryState verify_entry(const fs::path& entry, const std::vector<std::string>& units,
                        std::string& reason) {
  std::error_code ec;
  if (!fs::exists(entry, ec)) return EntryState::Missing;
  const auto identity = entry_identity(entry);
  {
    std::lock_guard<std::mutex> lock(verified_mutex);
    auto it = verified_entries.find(entry.string());
    if (identity && it != verified_entries.end() && it->second == *identity)
      return EntryState::Valid;
  }
  const EntryState state = verify_entry_files(entry, units, reason);
  if (state == EntryState::Valid && identity) {
    std::lock_guard<std::mutex> lock(verified_mutex);
    verified_entries[entry.string()] = *identity;
  }
  return state;
}

// verify_entry's reading of the files.
EntryState verify_entry_files(const fs::path& entry, const std::vector<std::string>& units,
                              std::string& reason) {
  std::optional<std::string> so = read_file(entry / "module.so");
  std::optional<std::string> sum = read_file(entry / "module.so.xxh");
  if (!so) {
    reason = "module.so is missing";
  } else if (!sum) {
    reason = "module.so.xxh is missing";
  } else if (sum->substr(0, sum->find('\n')) != checksum(*so)) {
    reason = "module.so checksum mismatch";
  } else {
    for (size_t i = 0; i < units.size(); ++i) {
      std::string name = unit_file(i, units.size());
      if (read_file(entry / name) != units[i]) {
        reason = name + " differs from the source being compiled";
        return EntryState::Corrupt;
      }
    }
    return EntryState::Valid;
  }
  return EntryState::Corrupt;
}

// Moves a corrupt entry aside and removes it. Another process may have replaced the corrupt
// entry with a good one between our check and the rename: then the good one is put back.
void discard_entry(const fs::path& entry, const std::vector<std::string>& units) {
  fs::path aside = entry.string() + ".corrupt." + unique_suffix();
  if (::rename(entry.c_str(), aside.c_str()) != 0) return;  // someone else moved it already
  std::string reason;
  if (verify_entry(aside, units, reason) == EntryState::Valid &&
      ::rename(aside.c_str(), entry.c_str()) == 0) {
    return;
  }
  remove_quietly(aside);
}

// Writes `text` to `path` through a temp file and rename(), so that a concurrent failure of the
// same source never leaves half a file.
void write_file_atomically(const fs::path& path, std::string_view text) {
  fs::path tmp = path.string() + ".tmp." + unique_suffix();
  write_file(tmp, text);
  if (::rename(tmp.c_str(), path.c_str()) != 0) remove_quietly(tmp);
}

std::string shown_output(const std::string& output) {
  constexpr size_t kMaxShown = 8000;
  std::string shown = output.substr(0, kMaxShown);
  if (output.size() > kMaxShown)
    shown += fmt::format("\n... ({} more bytes)", output.size() - kMaxShown);
  return shown;
}

// Keeps the failing unit's source and the compiler's output under <cache>/failed/, named by the
// key (and the unit, in a split module), and throws with the command that reproduces it there.
[[noreturn]] void report_compile_failure(const fs::path& root, const std::string& key,
                                         const std::vector<std::string>& units, size_t unit,
                                         const fs::path& include_dir, const CompileFlags& flags,
                                         const ProcessResult& run) {
  fs::path failed = root / "failed";
  make_private_dir(failed);
  const bool split = units.size() > 1;
  const std::string stem = split ? fmt::format("{}.unit{}", key, unit) : key;
  fs::path kept = failed / (stem + ".cpp");
  const Toolchain& tc = Toolchain::get();
  std::vector<std::string> argv =
      split ? tc.object_command(kept, failed / (stem + ".o"), include_dir, flags)
            : tc.shared_object_command(kept, failed / (stem + ".so"), include_dir, flags);
  write_file_atomically(kept, units[unit]);
  write_file(failed / (stem + ".log." + unique_suffix()), command_string(argv) + "\n" + run.output);
  user_error(
      "compiling generated code failed{} (compiler exit status {})\n  command: {}\n"
      "  source kept at: {}\n  compiler output:\n{}",
      split ? fmt::format(" in translation unit {} of {}", unit, units.size()) : "", run.status,
      command_string(argv), kept.string(), shown_output(run.output));
}

// A split module whose objects compiled but do not link (a symbol defined twice or nowhere: a
// bug in split_translation_units): every unit is kept, with the commands that rebuild it.
[[noreturn]] void report_link_failure(const fs::path& root, const std::string& key,
                                      const std::vector<std::string>& units,
                                      const fs::path& include_dir, const CompileFlags& flags,
                                      const ProcessResult& run) {
  fs::path failed = root / "failed";
  make_private_dir(failed);
  const Toolchain& tc = Toolchain::get();
  std::string commands;
  std::vector<fs::path> objects;
  for (size_t i = 0; i < units.size(); ++i) {
    fs::path kept = failed / fmt::format("{}.unit{}.cpp", key, i);
    objects.push_back(failed / fmt::format("{}.unit{}.o", key, i));
    write_file_atomically(kept, units[i]);
    commands += command_string(tc.object_command(kept, objects.back(), include_dir, flags)) + "\n";
  }
  std::string link = command_string(tc.link_command(objects, failed / (key + ".so"), flags));
  fs::path log = failed / (key + ".log." + unique_suffix());
  write_file(log, commands + link + "\n" + run.output);
  user_error(
      "linking the {} translation units of generated code failed (linker exit status {})\n"
      "  command: {}\n  sources kept at: {}/{}.unit*.cpp (commands in {})\n  linker output:\n{}",
      units.size(), run.status, link, failed.string(), key, log.string(), shown_output(run.output));
}

// A precompiled header for gcc: the SIMD header and SLEEF's take most of a kernel's compile
// time (about 1 s of 1.3 s); with the .gch a module compiles in a fraction of that. gcc uses a
// precompiled form of the first header a source includes, looking for <include>/<header>.gch/
// (a directory) and taking the file in it whose flags match the compilation, so one file per
// flag set lives there. `header` is the source's first include: coil_vec.h, or coil_vec_gemm.h
// for modules with a matmul template. Built like cache entries (temp file, then rename), so
// concurrent processes are safe; a failure only costs speed, never correctness.
void ensure_precompiled_header(const fs::path& include_dir, const CompileFlags& flags,
                               const std::string& header) {
  const Toolchain& tc = Toolchain::get();
  if (tc.is_clang || tc.debug || !fs::exists(include_dir / header)) return;
  std::vector<std::string> argv{tc.cxx};
  for (std::string& f : tc.base_flags()) argv.push_back(std::move(f));
  for (const std::string& f : flags.extra)
    if (!is_link_only_flag(f)) argv.push_back(f);
  argv.push_back("-I" + include_dir.string());
  KeyHasher h;
  for (const std::string& a : argv) h.add(a);
  fs::path dir = include_dir / (header + ".gch");
  fs::path pch = dir / (h.hex() + ".gch");
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (fs::exists(pch)) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  FileLock other_processes(pch.string() + ".lock", /*remove_when_done=*/true);
  if (fs::exists(pch)) return;  // built by the process this one waited for
  fs::path tmp = pch.string() + ".tmp." + unique_suffix();
  argv.insert(argv.end(),
              {"-x", "c++-header", (include_dir / header).string(), "-o", tmp.string()});
  auto start = std::chrono::steady_clock::now();
  ProcessResult run = run_process(argv);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (run.status != 0 || ::rename(tmp.c_str(), pch.c_str()) != 0) {
    remove_quietly(tmp);
    COIL_LOG(cache, "precompiled header not built (kernels compile without it): {}",
             run.output.substr(0, 2000));
    return;
  }
  COIL_LOG(cache, "precompiled {} in {:.0f} ms: {}", header, seconds * 1e3, pch.string());
}

/// The header named by the first `#include "..."` of a source ("" if none).
std::string first_include(const std::string& source) {
  size_t at = source.find("#include \"");
  if (at == std::string::npos) return "";
  size_t begin = at + 10, end = source.find('"', begin);
  return end == std::string::npos ? "" : source.substr(begin, end - begin);
}

struct Built {
  double seconds = 0;
  /// False when another process installed the entry first (our temp dir is then removed).
  bool installed = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Compiles the units into a fresh temp dir and renames it to `entry`. One unit is compiled and
// linked by one compiler run, as always; several are compiled to objects in parallel (each with
// the precompiled header, since they all start with the same include) and then linked.
Built build_entry(const fs::path& root, const fs::path& entry, const std::string& key,
                  const std::vector<std::string>& units, const fs::path& include_dir,
                  const CompileFlags& flags, const std::string& final_commands) {
  fs::path tmp = entry.string() + ".tmp." + unique_suffix();
  COIL_USER_CHECK(::mkdir(tmp.c_str(), 0700) == 0, "cannot create directory {}: {}", tmp.string(),
                  std::strerror(errno));
  struct RemoveUnlessKept {
    fs::path path;
    bool keep = false;
    ~RemoveUnlessKept() {
      if (!keep) remove_quietly(path);
    }
  } cleanup{tmp};

  const size_t n = units.size();
  for (size_t i = 0; i < n; ++i) write_file(tmp / unit_file(i, n), units[i]);
  std::string header = first_include(units[0]);
  if (header == "coil_vec.h" || header == "coil_vec_gemm.h")
    ensure_precompiled_header(include_dir, flags, header);
  const Toolchain& tc = Toolchain::get();
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> argv;
  if (n == 1) {
    argv = tc.shared_object_command(tmp / unit_file(0, 1), tmp / "module.so", include_dir, flags);
    ProcessResult run = run_process(argv);
    if (run.status != 0) report_compile_failure(root, key, units, 0, include_dir, flags, run);
  } else {
    std::vector<fs::path> objects;
    for (size_t i = 0; i < n; ++i) objects.push_back(tmp / fmt::format("unit{}.o", i));
    std::vector<double> unit_seconds(n);
    std::atomic<size_t> done{0};
    run_jobs(n, compile_threads(), [&](size_t i) {
      auto unit_start = std::chrono::steady_clock::now();
      ProcessResult run =
          run_process(tc.object_command(tmp / unit_file(i, n), objects[i], include_dir, flags));
      unit_seconds[i] = seconds_since(unit_start);
      if (run.status != 0) report_compile_failure(root, key, units, i, include_dir, flags, run);
      progress_note(fmt::format("compiled {} of {} translation units", ++done, n));
    });
    progress_note("linking");
    double compiled = seconds_since(start);
    argv = tc.link_command(objects, tmp / "module.so", flags);
    ProcessResult run = run_process(argv);
    if (run.status != 0) report_link_failure(root, key, units, include_dir, flags, run);
    std::string each;
    for (double u : unit_seconds) each += fmt::format("{}{:.0f}", each.empty() ? "" : " ", u * 1e3);
    COIL_LOG(cache, "{} translation units compiled in {:.0f} ms (each: {} ms), linked in {:.0f} ms",
             n, compiled * 1e3, each, (seconds_since(start) - compiled) * 1e3);
    // The objects served the link only; command.txt rebuilds them.
    for (const fs::path& o : objects) remove_quietly(o);
  }
  double seconds = seconds_since(start);

  std::optional<std::string> so = read_file(tmp / "module.so");
  COIL_USER_CHECK(so.has_value(),
                  "the compiler exited with status 0 but wrote no {}\n  command: {}",
                  (tmp / "module.so").string(), command_string(argv));
  write_file(tmp / "module.so.xxh", checksum(*so) + "\n");
  write_file(tmp / "command.txt", final_commands + "\n");
  if (::rename(tmp.c_str(), entry.c_str()) == 0) {
    cleanup.keep = true;
    return {seconds, true};
  }
  if (errno == EEXIST || errno == ENOTEMPTY) return {seconds, false};
  user_error("cannot move {} to {}: {}", tmp.string(), entry.string(), std::strerror(errno));
}

// Replaces every occurrence of `from` in `text` with `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// The remote form of a local entry (runtime/remote_cache.h): module.so, the sources, and the
// compile commands with this machine's paths as placeholders.
std::optional<std::string> pack_entry(const fs::path& entry, const fs::path& include_dir) {
  std::vector<std::pair<std::string, std::string>> files;
  std::optional<std::string> so = read_file(entry / "module.so");
  if (!so) return std::nullopt;
  files.emplace_back("module.so", std::move(*so));
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(entry, ec)) {
    std::string name = f.path().filename().string();
    if (f.path().extension() != ".cpp") continue;
    if (std::optional<std::string> text = read_file(f.path())) files.emplace_back(name, *text);
  }
  if (std::optional<std::string> command = read_file(entry / "command.txt"))
    files.emplace_back("command.txt", replace_all(replace_all(*command, entry.string(), "{entry}"),
                                                  include_dir.string(), "{include}"));
  return pack_files(files);
}

// Installs a remote entry's files as the local entry `entry` (through a temp dir and rename(),
// as build_entry does); false when the payload is not a module's. The checksum is computed
// here, of the bytes received.
bool install_entry(const fs::path& entry, const std::string& payload, const fs::path& include_dir) {
  auto files = unpack_files(payload);
  if (!files) return false;
  bool has_so = false;
  for (const auto& [name, bytes] : *files) {
    has_so = has_so || name == "module.so";
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') return false;
  }
  if (!has_so) return false;
  fs::path tmp = entry.string() + ".tmp." + unique_suffix();
  if (::mkdir(tmp.c_str(), 0700) != 0) return false;
  for (const auto& [name, bytes] : *files) {
    if (name == "command.txt") {
      write_file(tmp / name, replace_all(replace_all(bytes, "{entry}", entry.string()), "{include}",
                                         include_dir.string()));
    } else {
      write_file(tmp / name, bytes);
    }
    if (name == "module.so") write_file(tmp / "module.so.xxh", checksum(bytes) + "\n");
  }
  if (::rename(tmp.c_str(), entry.c_str()) != 0) remove_quietly(tmp);  // another one installed
  std::error_code ec;
  return fs::exists(entry, ec);
}

/// `dir`, else the default root (XDG_CACHE_HOME/coil, ~/.cache/coil, /tmp/coil-<uid>), made
/// absolute, created (0700) and checked.
fs::path checked_root(const std::string& dir) {
  fs::path root;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (!dir.empty()) {
    root = dir;
  } else if (xdg && *xdg) {
    root = fs::path(xdg) / "coil";
  } else if (home && *home) {
    root = fs::path(home) / ".cache" / "coil";
  } else {
    root = fmt::format("/tmp/coil-{}", ::geteuid());
  }
  root = fs::absolute(root).lexically_normal();
  if (!root.has_filename()) root = root.parent_path();  // drop a trailing '/'

  fs::path prefix;
  for (const fs::path& part : root) {
    prefix /= part;
    struct stat st;
    if (::stat(prefix.c_str(), &st) != 0) make_private_dir(prefix);
  }
  struct stat st;
  COIL_USER_CHECK(::stat(root.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
                  "cache directory {} is not a directory", root.string());
  COIL_USER_CHECK(st.st_uid == ::geteuid(),
                  "cache directory {} is owned by uid {}, not by the current user (uid {}); "
                  "set COIL_CACHE_DIR to a directory of your own",
                  root.string(), st.st_uid, ::geteuid());
  COIL_USER_CHECK((st.st_mode & S_IWOTH) == 0,
                  "cache directory {} is world-writable, so another user could plant code that "
                  "coil would load; run 'chmod o-w' on it or set COIL_CACHE_DIR",
                  root.string());
  return root;
}

}  // namespace

fs::path cache_root() {
  return checked_root(env(EnvVar::cache_dir));
}

fs::path machine_cache_root() {
  return checked_root("");
}

std::optional<CompileResult> find_cached_module(const std::string& key) {
  if (key.size() != 32 || key.find_first_not_of("0123456789abcdef") != std::string::npos)
    return std::nullopt;
  fs::path entry = cache_root() / key.substr(0, 2) / key;
  std::optional<std::string> so = read_file(entry / "module.so");
  std::optional<std::string> sum = read_file(entry / "module.so.xxh");
  bool remote_hit = false;
  if (!so || !sum || sum->substr(0, sum->find('\n')) != checksum(*so)) {
    RemoteCache* remote = RemoteCache::current();
    if (!remote) return std::nullopt;
    std::optional<std::string> payload = remote->get(RemoteCache::Kind::module, key);
    if (!payload) return std::nullopt;
    make_private_dir(entry.parent_path());
    if (fs::exists(entry)) discard_entry(entry, {});
    if (!install_entry(entry, *payload, ensure_headers(machine_cache_root()))) return std::nullopt;
    so = read_file(entry / "module.so");
    sum = read_file(entry / "module.so.xxh");
    if (!so || !sum || sum->substr(0, sum->find('\n')) != checksum(*so)) return std::nullopt;
    remote_hit = true;
  }
  std::optional<std::string> command = read_file(entry / "command.txt");
  CompileResult r;
  r.remote_hit = remote_hit;
  r.key = key;
  r.so_path = entry / "module.so";
  r.cache_hit = true;
  if (command) r.command = command->substr(0, command->rfind('\n'));
  return r;
}

int compile_threads() {
  const std::string v = env(EnvVar::compile_threads);
  if (v.empty()) return available_cores();
  int n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  COIL_USER_CHECK(ec == std::errc() && end == v.data() + v.size() && n > 0,
                  "COIL_COMPILE_THREADS='{}' is not a positive integer (the number of threads "
                  "that compile a module's translation units; unset: one per core)",
                  v);
  return n;
}

CompileResult compile_cached(const std::string& source, const CompileFlags& flags,
                             const std::filesystem::path& cache) {
  return compile_cached(std::vector<std::string>{source}, flags, cache);
}

CompileResult compile_cached(const std::vector<std::string>& units, const CompileFlags& flags,
                             const std::filesystem::path& cache) {
  COIL_ASSERT(!units.empty(), "compile_cached needs at least one translation unit");
  const Toolchain& toolchain = Toolchain::get();
  fs::path root = cache.empty() ? cache_root() : checked_root(cache.string());
  // The headers and their precompiled forms belong to the machine and compiler, not to a cache:
  // a fresh COIL_CACHE_DIR (a test, a benchmark's cold compile, a new deployment) would
  // otherwise pay seconds precompiling them again.
  fs::path include_dir = ensure_headers(machine_cache_root());
  const size_t n = units.size();

  // Placeholder paths: the key must not depend on where the cache or the temp dir is. One unit
  // hashes as it did before modules were split, so existing entries stay valid.
  KeyHasher hasher;
  hasher.add("coil-code-cache-v1");
  if (n == 1) {
    hasher.add(units[0]);
    for (const std::string& arg :
         toolchain.shared_object_command("{source}", "{output}", "{include}", flags)) {
      hasher.add(arg);
    }
  } else {
    hasher.add(fmt::format("translation units: {}", n));
    for (const std::string& unit : units) hasher.add(unit);
    for (const std::string& arg :
         toolchain.object_command("{source}", "{object}", "{include}", flags)) {
      hasher.add(arg);
    }
    for (const std::string& arg : toolchain.link_command({"{objects}"}, "{output}", flags)) {
      hasher.add(arg);
    }
  }
  hasher.add(toolchain.version);
  hasher.add(toolchain.host_cpu);
  hasher.add(headers_hash());

  CompileResult result;
  result.key = hasher.hex();
  result.units = static_cast<int>(n);
  fs::path shard = root / result.key.substr(0, 2);
  make_private_dir(shard);
  fs::path entry = shard / result.key;
  result.so_path = entry / "module.so";
  if (n == 1) {
    result.command = command_string(toolchain.shared_object_command(
        entry / unit_file(0, 1), result.so_path, include_dir, flags));
  } else {
    // One line per compiler run, in order: a shell rebuilds the module with them.
    std::vector<fs::path> objects;
    for (size_t i = 0; i < n; ++i) {
      objects.push_back(entry / fmt::format("unit{}.o", i));
      result.command += command_string(
          toolchain.object_command(entry / unit_file(i, n), objects.back(), include_dir, flags));
      result.command += "\n";
    }
    result.command += command_string(toolchain.link_command(objects, result.so_path, flags));
  }

  bool compiled = false, asked_remote = false;
  // <shard>/<key>.lock, taken before building: processes that need the same new module at once
  // (the ranks of a DDP job, test runners, a service's workers) compile it once.
  std::optional<FileLock> build_lock;
  // Each round either returns or saw the entry vanish or go bad under it; more than a few rounds
  // means something keeps destroying the directory.
  for (int round = 0; round < 5; ++round) {
    std::string reason;
    EntryState state = verify_entry(entry, units, reason);
    if (state == EntryState::Valid) {
      result.cache_hit = !compiled;
      if (result.cache_hit && !result.remote_hit)
        COIL_LOG(cache, "hit {} ({})", result.key, result.so_path.string());
      return result;
    }
    if (!build_lock) {  // look again once locked: another process may have built it meanwhile
      build_lock.emplace(shard / (result.key + ".lock"), /*remove_when_done=*/true);
      continue;
    }
    if (state == EntryState::Corrupt) {
      COIL_LOG(cache, "corrupt entry {}: {}; rebuilding", entry.string(), reason);
      discard_entry(entry, units);
    }
    // The fleet's copy, or a lease to build it while the other machines wait (once per call:
    // an installed entry that fails verification is built here).
    RemoteCache* remote = asked_remote ? nullptr : RemoteCache::current();
    std::unique_ptr<RemoteCache::Lease> lease;
    if (remote) {
      asked_remote = true;
      RemoteCache::Claim claim = remote->claim(RemoteCache::Kind::module, result.key);
      if (claim.payload && install_entry(entry, *claim.payload, include_dir)) {
        COIL_LOG(cache, "remote hit {}: installed as {}", result.key, result.so_path.string());
        result.remote_hit = true;
        continue;  // the next round verifies it against our sources
      }
      lease = std::move(claim.lease);
    }
    result.remote_hit = false;
    Built built = build_entry(root, entry, result.key, units, include_dir, flags, result.command);
    compiled = true;
    result.compile_seconds += built.seconds;
    if (remote) {
      if (std::optional<std::string> packed = pack_entry(entry, include_dir))
        remote->put(RemoteCache::Kind::module, result.key, *packed);
    }
    lease.reset();  // after the put: the waiting machines find the entry when the lease goes
    if (built.installed) {
      COIL_LOG(cache, "miss {}: compiled in {:.2f}s ({})", result.key, built.seconds,
               result.so_path.string());
      return result;
    }
    // Another process installed the same key first: use its entry (checked on the next round).
    COIL_LOG(cache, "miss {}: compiled in {:.2f}s, but another process installed it first",
             result.key, built.seconds);
  }
  user_error(
      "code cache entry {} was removed or damaged repeatedly while compiling; is another "
      "process deleting {}?",
      entry.string(), root.string());
}

}  // namespace coil
