#include "runtime/remote_cache.h"

#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "support/check.h"
#include "support/env.h"
#include "support/log.h"

namespace coil {
namespace {

constexpr std::string_view kValueMagic = "coil-remote-v1 ";
constexpr std::string_view kFilesMagic = "coil-files-v1\n";
constexpr size_t kMinSecretBytes = 16;
// A lease lapses this long after its holder stops renewing it (killed, hung, partitioned); the
// holder renews it every third of that.
constexpr int kLeaseMs = 10000;
constexpr int kRenewMs = kLeaseMs / 3;

// Only the lease's holder (its token) may renew or release it: a holder that lost its lease
// (it lapsed and another process took it) must not delete the new holder's.
constexpr const char* kRenewScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
constexpr const char* kReleaseScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

const char* kind_name(RemoteCache::Kind kind) {
  switch (kind) {
    case RemoteCache::Kind::module:
      return "module";
    case RemoteCache::Kind::model:
      return "model";
    case RemoteCache::Kind::autotune:
      return "autotune";
  }
  return "?";
}

std::string redis_key(RemoteCache::Kind kind, const std::string& key) {
  return fmt::format("coil:v1:{}:{}", kind_name(kind), key);
}

std::string lease_key(RemoteCache::Kind kind, const std::string& key) {
  return fmt::format("coil:v1:lease:{}:{}", kind_name(kind), key);
}

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

// A positive integer variable, else `fallback`; anything else is an error naming it.
int64_t positive_env(EnvVar v, int64_t fallback) {
  std::string s = env(v);
  if (s.empty()) return fallback;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  COIL_USER_CHECK(ec == std::errc() && end == s.data() + s.size() && n > 0,
                  "{}='{}' is not a positive integer", env_name(v), s);
  return n;
}

// The signing secret: COIL_REMOTE_CACHE_KEY, else the file COIL_REMOTE_CACHE_KEY_FILE names
// (its trailing newline dropped).
std::string signing_secret(const std::string& shown_url) {
  std::string secret = env(EnvVar::remote_cache_key);
  std::string file = env(EnvVar::remote_cache_key_file);
  if (secret.empty() && !file.empty()) {
    std::ifstream in(file, std::ios::binary);
    COIL_USER_CHECK(in.good(), "COIL_REMOTE_CACHE_KEY_FILE='{}' cannot be read", file);
    std::stringstream text;
    text << in.rdbuf();
    secret = text.str();
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  }
  COIL_USER_CHECK(!secret.empty(),
                  "remote cache {}: no signing key; set COIL_REMOTE_CACHE_KEY (or "
                  "COIL_REMOTE_CACHE_KEY_FILE, a file holding it) to a secret of at least {} "
                  "bytes shared by every machine of the cache: entries are code this process "
                  "would load, and only signed ones are used",
                  shown_url, kMinSecretBytes);
  COIL_USER_CHECK(secret.size() >= kMinSecretBytes,
                  "remote cache {}: the signing key has {} bytes; it needs at least {}", shown_url,
                  secret.size(), kMinSecretBytes);
  return secret;
}

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

thread_local const std::string* scoped_url = nullptr;

}  // namespace

RemoteCacheUrl parse_remote_cache_url(const std::string& url) {
  auto bad = [&](const std::string& why) -> RemoteCacheUrl {
    user_error("remote cache URL '{}': {} (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])",
               url, why);
  };
  constexpr std::string_view scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) return bad("only redis:// is supported");
  std::string rest = url.substr(scheme.size());
  RemoteCacheUrl u;
  std::string shown_auth;
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = auth.find(':');
    if (colon == std::string::npos) return bad("the part before '@' needs a ':' (USER:PASSWORD)");
    u.user = auth.substr(0, colon);
    u.password = auth.substr(colon + 1);
    if (u.password.empty()) return bad("the password is empty");
    shown_auth = u.user + ":***@";
  }
  std::string hostport = rest;
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    hostport = rest.substr(0, slash);
    std::string db = rest.substr(slash + 1);
    if (!db.empty()) {
      auto [end, ec] = std::from_chars(db.data(), db.data() + db.size(), u.db);
      if (ec != std::errc() || end != db.data() + db.size() || u.db < 0)
        return bad(fmt::format("'{}' is not a database number", db));
    }
  }
  if (size_t colon = hostport.rfind(':'); colon != std::string::npos) {
    std::string port = hostport.substr(colon + 1);
    hostport = hostport.substr(0, colon);
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), u.port);
    if (ec != std::errc() || end != port.data() + port.size() || u.port <= 0 || u.port > 65535)
      return bad(fmt::format("'{}' is not a port", port));
  }
  if (hostport.empty()) return bad("no host");
  u.host = hostport;
  u.shown = fmt::format("redis://{}{}:{}/{}", shown_auth, u.host, u.port, u.db);
  return u;
}

std::string hmac_sha256_hex(std::string_view secret, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  unsigned char* ok =
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &length);
  COIL_ASSERT(ok != nullptr && length == 32, "HMAC-SHA256 failed");
  std::string hex;
  for (unsigned i = 0; i < length; ++i) hex += fmt::format("{:02x}", mac[i]);
  return hex;
}

std::string pack_files(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out(kFilesMagic);
  for (const auto& [name, bytes] : files) {
    COIL_ASSERT(name.find('\n') == std::string::npos, "pack_files: a name with a newline");
    out += fmt::format("{}\n{}\n", name, bytes.size());
    out += bytes;
  }
  return out;
}

std::optional<std::vector<std::pair<std::string, std::string>>> unpack_files(
    std::string_view packed) {
  if (packed.substr(0, kFilesMagic.size()) != kFilesMagic) return std::nullopt;
  std::vector<std::pair<std::string, std::string>> files;
  size_t at = kFilesMagic.size();
  while (at < packed.size()) {
    size_t name_end = packed.find('\n', at);
    if (name_end == std::string_view::npos) return std::nullopt;
    size_t size_end = packed.find('\n', name_end + 1);
    if (size_end == std::string_view::npos) return std::nullopt;
    std::string_view size_text = packed.substr(name_end + 1, size_end - name_end - 1);
    size_t size = 0;
    auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size);
    if (ec != std::errc() || end != size_text.data() + size_text.size()) return std::nullopt;
    if (size > packed.size() - size_end - 1) return std::nullopt;
    files.emplace_back(std::string(packed.substr(at, name_end - at)),
                       std::string(packed.substr(size_end + 1, size)));
    at = size_end + 1 + size;
  }
  return files;
}

struct RemoteCache::Impl {
  RemoteCacheUrl url;
  std::string secret;
  size_t max_bytes = 0;
  int timeout_ms = 0;
  double wait_s = 0;

  std::mutex mutex;  // one connection, shared by the threads of the process
  redisContext* context = nullptr;
  std::atomic<bool> failed{false};

  ~Impl() {
    if (context) redisFree(context);
  }

  // Gives up on Redis for the rest of the process, with the one warning (mutex held).
  void fail(const std::string& what) {
    if (failed.exchange(true)) return;
    warn(fmt::format("remote cache {}: {}; using the local cache only from now on in this process",
                     url.shown, what));
    if (context) redisFree(context);
    context = nullptr;
  }

  bool connect() {
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    context = redisConnectWithTimeout(url.host.c_str(), url.port, tv);
    if (!context || context->err) {
      fail(fmt::format("cannot connect: {}", context ? context->errstr : "out of memory"));
      return false;
    }
    if (redisSetTimeout(context, tv) != REDIS_OK) {
      fail("cannot set the command timeout");
      return false;
    }
    if (!url.password.empty()) {
      std::vector<std::string> auth{"AUTH"};
      if (!url.user.empty()) auth.push_back(url.user);
      auth.push_back(url.password);
      if (!command_locked(auth)) return false;
    }
    if (url.db != 0 && !command_locked({"SELECT", std::to_string(url.db)})) return false;
    COIL_LOG(cache, "remote cache {} connected", url.shown);
    return true;
  }

  // One command (mutex held); nullptr after a failure, which has then turned the cache off.
  Reply command_locked(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    Reply reply(static_cast<redisReply*>(
        redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data())));
    if (!reply) {
      fail(
          fmt::format("{} failed: {}", args[0], context->errstr[0] ? context->errstr : "no reply"));
      return nullptr;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      fail(fmt::format("{} failed: {}", args[0], reply->str));
      return nullptr;
    }
    return reply;
  }

  Reply command(const std::vector<std::string>& args) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failed) return nullptr;
    if (!context && !connect()) return nullptr;
    return command_locked(args);
  }

  std::string sign(const std::string& rkey, std::string_view payload) const {
    std::string data = rkey;
    data += '\0';
    data += payload;
    return hmac_sha256_hex(secret, data);
  }
};

struct RemoteCache::Lease::State {
  RemoteCache::Impl* impl = nullptr;
  std::string key, token;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::thread renewer;
};

RemoteCache::Lease::Lease(std::shared_ptr<State> state) : state_(std::move(state)) {
  std::shared_ptr<State> s = state_;
  s->renewer = std::thread([s] {
    std::unique_lock<std::mutex> lock(s->mutex);
    while (!s->wake.wait_for(lock, std::chrono::milliseconds(kRenewMs), [&] { return s->stop; })) {
      lock.unlock();
      Reply r =
          s->impl->command({"EVAL", kRenewScript, "1", s->key, s->token, std::to_string(kLeaseMs)});
      lock.lock();
      if (!r) return;
      if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
        COIL_LOG(cache, "lease {} lapsed before it was renewed", s->key);
        return;
      }
    }
  });
}

RemoteCache::Lease::~Lease() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_all();
  state_->renewer.join();
  state_->impl->command({"EVAL", kReleaseScript, "1", state_->key, state_->token});
}

RemoteCache::RemoteCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteCache::~RemoteCache() = default;

const std::string& RemoteCache::shown_url() const {
  return impl_->url.shown;
}

RemoteCache* remote_cache_for(const std::string& url) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<RemoteCache>> caches;
  // The key's source is part of the identity: a test (or a long-lived process) that changes
  // it gets a new client.
  std::string id =
      url + "\n" + env(EnvVar::remote_cache_key) + "\n" + env(EnvVar::remote_cache_key_file);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = caches.find(id);
  if (it != caches.end()) return it->second.get();
  auto impl = std::make_unique<RemoteCache::Impl>();
  impl->url = parse_remote_cache_url(url);
  impl->secret = signing_secret(impl->url.shown);
  impl->max_bytes = static_cast<size_t>(positive_env(EnvVar::remote_cache_max_mb, 256)) << 20;
  impl->timeout_ms = static_cast<int>(positive_env(EnvVar::remote_cache_timeout_ms, 5000));
  impl->wait_s = static_cast<double>(positive_env(EnvVar::remote_cache_wait_s, 600));
  auto cache = std::unique_ptr<RemoteCache>(new RemoteCache(std::move(impl)));
  return caches.emplace(id, std::move(cache)).first->second.get();
}

RemoteCache* RemoteCache::current() {
  std::string url = scoped_url ? *scoped_url : env(EnvVar::remote_cache);
  if (url.empty()) return nullptr;
  RemoteCache* cache = remote_cache_for(url);
  return cache->impl_->failed ? nullptr : cache;
}

std::optional<std::string> RemoteCache::get(Kind kind, const std::string& key) {
  std::string rkey = redis_key(kind, key);
  // STRLEN first: a value over the limit is not transferred at all.
  Reply length = impl_->command({"STRLEN", rkey});
  if (!length || length->type != REDIS_REPLY_INTEGER) return std::nullopt;
  if (length->integer == 0) {
    COIL_LOG(cache, "remote miss {}", rkey);
    return std::nullopt;
  }
  if (static_cast<size_t>(length->integer) > impl_->max_bytes + 128) {
    warn(fmt::format("remote cache {}: refusing {}: {} bytes is over COIL_REMOTE_CACHE_MAX_MB",
                     impl_->url.shown, rkey, length->integer));
    return std::nullopt;
  }
  Reply value = impl_->command({"GET", rkey});
  if (!value || value->type != REDIS_REPLY_STRING) return std::nullopt;  // gone in between
  std::string_view text(value->str, value->len);
  std::string_view mac, payload;
  if (text.substr(0, kValueMagic.size()) == kValueMagic && text.size() >= kValueMagic.size() + 65 &&
      text[kValueMagic.size() + 64] == '\n') {
    mac = text.substr(kValueMagic.size(), 64);
    payload = text.substr(kValueMagic.size() + 65);
  }
  std::string expected = impl_->sign(rkey, payload);
  if (mac.size() != 64 || CRYPTO_memcmp(mac.data(), expected.data(), 64) != 0) {
    warn(fmt::format(
        "remote cache {}: refusing {}: its signature does not verify (unsigned, tampered with, "
        "or signed with another COIL_REMOTE_CACHE_KEY); building it here instead",
        impl_->url.shown, rkey));
    return std::nullopt;
  }
  COIL_LOG(cache, "remote hit {} ({} bytes)", rkey, payload.size());
  return std::string(payload);
}

bool RemoteCache::put(Kind kind, const std::string& key, std::string_view payload,
                      bool only_if_absent) {
  std::string rkey = redis_key(kind, key);
  if (payload.size() > impl_->max_bytes) {
    COIL_LOG(cache, "remote: not storing {}: {} bytes is over COIL_REMOTE_CACHE_MAX_MB", rkey,
             payload.size());
    return false;
  }
  std::string value(kValueMagic);
  value += impl_->sign(rkey, payload);
  value += '\n';
  value += payload;
  std::vector<std::string> args{"SET", rkey, std::move(value)};
  if (only_if_absent) args.push_back("NX");
  Reply r = impl_->command(args);
  bool stored = r && r->type == REDIS_REPLY_STATUS;
  if (stored) COIL_LOG(cache, "remote stored {} ({} bytes)", rkey, payload.size());
  return stored;
}

RemoteCache::Claim RemoteCache::claim(Kind kind, const std::string& key) {
  const std::string lkey = lease_key(kind, key);
  auto start = std::chrono::steady_clock::now();
  double pause_ms = 20;
  bool said = false;
  while (true) {
    if (auto payload = get(kind, key)) return {std::move(payload), nullptr};
    auto state = std::make_shared<Lease::State>();
    state->impl = impl_.get();
    state->key = lkey;
    state->token = random_token();
    Reply r = impl_->command({"SET", lkey, state->token, "NX", "PX", std::to_string(kLeaseMs)});
    if (!r) return {};
    if (r->type == REDIS_REPLY_STATUS) {
      auto lease = std::unique_ptr<Lease>(new Lease(std::move(state)));
      // The last holder may have stored the entry and released its lease between our GET and
      // our SET.
      if (auto payload = get(kind, key)) return {std::move(payload), nullptr};
      COIL_LOG(cache, "remote lease {} taken: building it here", lkey);
      return {std::nullopt, std::move(lease)};
    }
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > impl_->wait_s) {
      COIL_LOG(cache, "remote: waited {:.0f} s for {}: building it here", waited, lkey);
      return {};
    }
    if (!said) COIL_LOG(cache, "remote lease {} held by another process: waiting", lkey);
    said = true;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(pause_ms));
    pause_ms = std::min(pause_ms * 1.5, 250.0);
  }
}

RemoteCacheScope::RemoteCacheScope(const std::string& url) : outer_(scoped_url), url_(url) {
  if (url_.empty()) return;
  scoped_url = &url_;
  active_ = true;
}

RemoteCacheScope::~RemoteCacheScope() {
  if (active_) scoped_url = outer_;
}

}  // namespace coil
