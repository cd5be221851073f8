// The remote tier of coil's caches: one Redis shared by a team or a fleet (issue 23).
//
// Every cache of a CPU compile is looked up locally first, then in Redis, and written to both:
//   module    a compiled module (runtime/code_cache.h): module.so, its translation units and
//             compile commands, keyed by the code-cache key
//   model     a whole-graph entry (driver/model_cache.h): the decisions and the listing, keyed
//             by the model-cache key
//   autotune  matmul timings and size-bucket decisions (driver/autotune.h), keyed by the local
//             file name plus the CPU model and flags (timings belong to the machine)
// The keys are the local caches' content keys: they carry no path, user name or cache
// directory, so machines with the same CPU, compiler and coil share every entry. Redis keys
// are "coil:v1:<kind>:<key>"; leases "coil:v1:lease:<kind>:<key>".
//
// Integrity: what a Redis entry holds is code this process would load, so every value is
// signed with HMAC-SHA256 (OpenSSL) over its Redis key and payload, with a secret from
// COIL_REMOTE_CACHE_KEY or the file named by COIL_REMOTE_CACHE_KEY_FILE (at least 16 bytes,
// the same on every machine). A value whose signature does not verify (unsigned, forged,
// truncated, moved to another key) is refused with a warning and treated as a miss: the caller
// rebuilds and overwrites it. Values over COIL_REMOTE_CACHE_MAX_MB (default 256) are neither
// stored nor read.
//
// Availability: each command has a timeout (COIL_REMOTE_CACHE_TIMEOUT_MS, default 5000; also
// the connect timeout). When Redis cannot be reached or a command fails, one warning is
// printed and the process uses its local cache only from then on: a remote cache never fails
// a compile.
//
// Compile once per fleet: claim() returns the entry when it exists; otherwise one process
// gets a lease (SET NX PX, renewed by a thread while it builds, released by a script that
// checks its token) and the others poll until the entry appears, the lease lapses (its holder
// died: they compete for it again) or COIL_REMOTE_CACHE_WAIT_S passes (default 600: then they
// build it themselves).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coil {

/// A parsed `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]` (PORT 6379, DB 0 by default).
struct RemoteCacheUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user, password;
  /// The URL with the password replaced by "***", for messages.
  std::string shown;
};

/// Parses `url`; throws coil::Error naming the URL and what is wrong with it.
RemoteCacheUrl parse_remote_cache_url(const std::string& url);

/// HMAC-SHA256 of `data` under `secret`, as 64 hex digits.
std::string hmac_sha256_hex(std::string_view secret, std::string_view data);

/// Several named byte strings as one (a module's files in one Redis value):
/// "coil-files-v1\n" then, per file, "<name>\n<size>\n<bytes>".
std::string pack_files(const std::vector<std::pair<std::string, std::string>>& files);
/// The inverse of pack_files, or nullopt when `packed` is not such a string.
std::optional<std::vector<std::pair<std::string, std::string>>> unpack_files(
    std::string_view packed);

class RemoteCache {
 public:
  enum class Kind { module, model, autotune };

  /// The remote cache of this thread's compiles: the URL of the innermost RemoteCacheScope,
  /// else COIL_REMOTE_CACHE; nullptr when neither is set or when that cache failed earlier in
  /// this process (it then stays off). Throws coil::Error when the URL does not parse or no
  /// signing key is configured.
  static RemoteCache* current();

  /// The verified payload stored under `key`, or nullopt (absent, refused, Redis failed).
  std::optional<std::string> get(Kind kind, const std::string& key);

  /// Stores `payload` under `key` (only when absent if `only_if_absent`). Returns false when it
  /// was not stored: too large, Redis failed, or (only_if_absent) a value was there first.
  bool put(Kind kind, const std::string& key, std::string_view payload,
           bool only_if_absent = false);

  /// A lease on building one entry: renewed in the background until destroyed, then released.
  class Lease;

  /// What claim() found: the entry's payload, or a lease to build it (the caller then put()s
  /// it and drops the lease), or neither (Redis failed, or the wait ran out: build without one).
  struct Claim {
    std::optional<std::string> payload;
    std::unique_ptr<Lease> lease;
  };
  /// The entry `key`, waiting while another process holds its lease (see the file comment).
  Claim claim(Kind kind, const std::string& key);

  /// The URL it talks to, password hidden.
  const std::string& shown_url() const;

  ~RemoteCache();
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  struct Impl;

 private:
  explicit RemoteCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend RemoteCache* remote_cache_for(const std::string& url);
};

class RemoteCache::Lease {
 public:
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  struct State;

 private:
  explicit Lease(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
  friend class RemoteCache;
};

/// While it lives, RemoteCache::current() on this thread uses `url` ("" keeps the outer
/// choice: COIL_REMOTE_CACHE or an enclosing scope): CompileOptions::remote_cache.
class RemoteCacheScope {
 public:
  explicit RemoteCacheScope(const std::string& url);
  ~RemoteCacheScope();
  RemoteCacheScope(const RemoteCacheScope&) = delete;
  RemoteCacheScope& operator=(const RemoteCacheScope&) = delete;

 private:
  const std::string* outer_;
  std::string url_;
  bool active_ = false;
};

}  // namespace coil
