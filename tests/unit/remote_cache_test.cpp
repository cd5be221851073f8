// The remote cache (runtime/remote_cache.h) against a private redis-server started by each
// test: URLs, signing, refused entries, size limits, leases, an unreachable or stopped Redis,
// and whole compiles served from it into a fresh cache directory. The fleet-level tests (CLI
// processes, no compiler on PATH, eight processes at once) are in
// tests/remote_cache/test_remote_cache.py.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "graph/text_format.h"
#include "runtime/remote_cache.h"
#include "support/check_graph.h"
#include "support/error_of.h"
#include "support/private_cache.h"
#include "support/redis_server.h"

namespace coil {
namespace {

using testing::error_of;
using testing::PrivateCache;
using testing::RedisServer;
using Kind = RemoteCache::Kind;

constexpr const char* kSecret = "a-test-secret-of-32-bytes-000000";

// Sets an environment variable for one scope (unset or restored afterwards).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// A plain client, for what a test does to Redis behind coil's back.
class RawRedis {
 public:
  explicit RawRedis(int port) : c_(redisConnect("127.0.0.1", port)) {}
  ~RawRedis() { redisFree(c_); }
  std::string get(const std::string& key) {
    auto* r = static_cast<redisReply*>(redisCommand(c_, "GET %s", key.c_str()));
    std::string v = r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "";
    freeReplyObject(r);
    return v;
  }
  void set(const std::string& key, const std::string& value, int px = 0) {
    auto* r = px ? redisCommand(c_, "SET %s %b PX %d", key.c_str(), value.data(), value.size(), px)
                 : redisCommand(c_, "SET %s %b", key.c_str(), value.data(), value.size());
    freeReplyObject(r);
  }
  bool exists(const std::string& key) {
    auto* r = static_cast<redisReply*>(redisCommand(c_, "EXISTS %s", key.c_str()));
    bool e = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return e;
  }

 private:
  redisContext* c_;
};

TEST(RemoteCacheUrl, ParsesHostPortDatabaseAndPassword) {
  RemoteCacheUrl u = parse_remote_cache_url("redis://cache.internal:7000/3");
  EXPECT_EQ(u.host, "cache.internal");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.db, 3);
  EXPECT_EQ(u.shown, "redis://cache.internal:7000/3");
  RemoteCacheUrl d = parse_remote_cache_url("redis://localhost");
  EXPECT_EQ(d.port, 6379);
  EXPECT_EQ(d.db, 0);
  RemoteCacheUrl a = parse_remote_cache_url("redis://:s3cret@10.0.0.5:6380");
  EXPECT_EQ(a.password, "s3cret");
  EXPECT_EQ(a.user, "");
  EXPECT_EQ(a.shown, "redis://:***@10.0.0.5:6380/0");  // the password never reaches a message
  RemoteCacheUrl b = parse_remote_cache_url("redis://fleet:pw@h/1");
  EXPECT_EQ(b.user, "fleet");
  EXPECT_EQ(b.db, 1);
}

TEST(RemoteCacheUrl, BadUrlsAreErrorsNamingTheUrl) {
  for (const char* bad : {"http://h:6379", "redis://", "redis://h:0", "redis://h:65536",
                          "redis://h:12ab", "redis://h/x", "redis://user@h", "redis://u:@h"}) {
    std::string e = error_of([&] { parse_remote_cache_url(bad); });
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]"), std::string::npos) << e;
  }
}

TEST(RemoteCacheSigning, HmacSha256MatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(RemoteCacheFiles, PackAndUnpackRoundTripAndTruncationIsRefused) {
  std::string binary("\0\n\xff payload\n", 12);
  std::string packed = pack_files({{"module.so", binary}, {"source.cpp", "int f();\n"}, {"e", ""}});
  auto files = unpack_files(packed);
  ASSERT_TRUE(files.has_value());
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].second, binary);
  EXPECT_EQ((*files)[1].first, "source.cpp");
  EXPECT_EQ((*files)[2].second, "");
  EXPECT_FALSE(unpack_files(packed.substr(0, packed.size() - 12)).has_value());
  EXPECT_FALSE(unpack_files("not packed").has_value());
}

TEST(RemoteCacheConfig, NoKeyShortKeyOrBadLimitIsAnError) {
  ScopedEnv url("COIL_REMOTE_CACHE", "redis://127.0.0.1:1");
  {
    ScopedEnv key("COIL_REMOTE_CACHE_KEY", "");
    std::string e = error_of([] { RemoteCache::current(); });
    EXPECT_NE(e.find("no signing key"), std::string::npos) << e;
    EXPECT_NE(e.find("COIL_REMOTE_CACHE_KEY"), std::string::npos) << e;
  }
  {
    ScopedEnv key("COIL_REMOTE_CACHE_KEY", "short");
    std::string e = error_of([] { RemoteCache::current(); });
    EXPECT_NE(e.find("has 5 bytes; it needs at least 16"), std::string::npos) << e;
  }
  {
    ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
    ScopedEnv limit("COIL_REMOTE_CACHE_MAX_MB", "lots");
    std::string e = error_of([] { RemoteCache::current(); });
    EXPECT_NE(e.find("COIL_REMOTE_CACHE_MAX_MB='lots' is not a positive integer"),
              std::string::npos)
        << e;
  }
}

TEST(RemoteCacheConfig, KeyFromAFile) {
  RedisServer redis;
  PrivateCache cache("remote-keyfile");
  std::filesystem::path file = cache.dir() / "key";
  std::filesystem::create_directories(cache.dir());
  std::ofstream(file) << kSecret << "\n";
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY_FILE", file.string());
  RemoteCache* remote = RemoteCache::current();
  ASSERT_NE(remote, nullptr);
  ASSERT_TRUE(remote->put(Kind::model, "k", "v"));
  // The same secret given directly verifies what the file's signed (its newline dropped).
  ScopedEnv direct("COIL_REMOTE_CACHE_KEY", kSecret);
  EXPECT_EQ(RemoteCache::current()->get(Kind::model, "k"), "v");
}

TEST(RemoteCacheEntries, StoredEntriesComeBackAndBadOnesAreRefused) {
  RedisServer redis;
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  RemoteCache* remote = RemoteCache::current();
  ASSERT_NE(remote, nullptr);
  std::string payload(100000, 'x');
  payload[5] = '\0';
  ASSERT_TRUE(remote->put(Kind::module, "abc", payload));
  EXPECT_EQ(remote->get(Kind::module, "abc"), payload);
  EXPECT_EQ(remote->get(Kind::model, "abc"), std::nullopt);  // kinds are apart
  EXPECT_FALSE(remote->put(Kind::module, "abc", "other", /*only_if_absent=*/true));
  EXPECT_EQ(remote->get(Kind::module, "abc"), payload);

  RawRedis raw(redis.port());
  std::string stored = raw.get("coil:v1:module:abc");
  ASSERT_FALSE(stored.empty());
  struct Case {
    const char* what;
    std::string key, value;
  };
  std::string flipped = stored;
  flipped[flipped.size() - 1] = 'y';  // one byte of the payload
  std::string resigned = stored;
  resigned[20] = resigned[20] == '0' ? '1' : '0';  // one digit of the signature
  for (const Case& c :
       {Case{"tampered payload", "t1", flipped}, Case{"tampered signature", "t2", resigned},
        Case{"unsigned", "t3", payload}, Case{"moved from another key", "t4", stored},
        Case{"truncated", "t5", stored.substr(0, 40)}}) {
    raw.set("coil:v1:module:" + c.key, c.value);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(remote->get(Kind::module, c.key), std::nullopt) << c.what;
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("refusing coil:v1:module:" + c.key + ": its signature does not verify"),
              std::string::npos)
        << c.what << ": " << err;
  }
  // Another fleet's secret: nothing of ours verifies.
  ScopedEnv other("COIL_REMOTE_CACHE_KEY", "another-secret-of-enough-bytes!!");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RemoteCache::current()->get(Kind::module, "abc"), std::nullopt);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("signature does not verify"),
            std::string::npos);
}

TEST(RemoteCacheEntries, ValuesOverTheLimitAreNeitherStoredNorRead) {
  RedisServer redis;
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  std::string big(3 << 20, 'b');
  {
    ScopedEnv limit("COIL_REMOTE_CACHE_MAX_MB", "2");
    RemoteCache* remote = RemoteCache::current();
    EXPECT_FALSE(remote->put(Kind::module, "big", big));
    EXPECT_FALSE(RawRedis(redis.port()).exists("coil:v1:module:big"));
  }
  // Stored by a process with a higher limit, refused by one with a lower.
  ScopedEnv limit("COIL_REMOTE_CACHE_MAX_MB", "8");
  ScopedEnv key2("COIL_REMOTE_CACHE_KEY", std::string(kSecret) + "2");  // a new client
  ASSERT_TRUE(RemoteCache::current()->put(Kind::module, "big", big));
  ScopedEnv lower("COIL_REMOTE_CACHE_MAX_MB", "2");
  ScopedEnv key3("COIL_REMOTE_CACHE_KEY_FILE", "/nonexistent");  // another new client, same key
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RemoteCache::current()->get(Kind::module, "big"), std::nullopt);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("over COIL_REMOTE_CACHE_MAX_MB"),
            std::string::npos);
}

TEST(RemoteCacheLeases, OneBuildsWhileTheOtherWaitsAndGetsItsEntry) {
  RedisServer redis;
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  RemoteCache* remote = RemoteCache::current();
  RemoteCache::Claim first = remote->claim(Kind::module, "m");
  ASSERT_FALSE(first.payload.has_value());
  ASSERT_NE(first.lease, nullptr);
  EXPECT_TRUE(RawRedis(redis.port()).exists("coil:v1:lease:module:m"));

  std::atomic<bool> waiter_done{false};
  std::optional<std::string> waited;
  bool waiter_had_lease = false;
  std::thread waiter([&] {
    RemoteCache::Claim second = remote->claim(Kind::module, "m");
    waited = second.payload;
    waiter_had_lease = second.lease != nullptr;
    waiter_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(waiter_done) << "the second claim must wait while the lease is held";
  ASSERT_TRUE(remote->put(Kind::module, "m", "built once"));
  first.lease.reset();
  waiter.join();
  EXPECT_EQ(waited, "built once");
  EXPECT_FALSE(waiter_had_lease);
  EXPECT_FALSE(RawRedis(redis.port()).exists("coil:v1:lease:module:m"));  // released
}

TEST(RemoteCacheLeases, ALeaseWhoseHolderDiedLapsesAndIsTakenOver) {
  RedisServer redis;
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  // A holder that took the lease and died: nobody renews it.
  RawRedis(redis.port()).set("coil:v1:lease:module:d", "dead-holder", 400);
  auto start = std::chrono::steady_clock::now();
  RemoteCache::Claim claim = RemoteCache::current()->claim(Kind::module, "d");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(claim.lease, nullptr);
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

TEST(RemoteCacheLeases, AHeldLeaseIsRenewedPastItsTimeToLive) {
  RedisServer redis;
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  RemoteCache::Claim claim = RemoteCache::current()->claim(Kind::autotune, "slow");
  ASSERT_NE(claim.lease, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(11000));  // past the 10 s lease
  EXPECT_TRUE(RawRedis(redis.port()).exists("coil:v1:lease:autotune:slow"));
}

TEST(RemoteCacheAvailability, RedisStoppedWhileWaitingForALeaseEndsTheWait) {
  RedisServer redis;
  ScopedEnv url("COIL_REMOTE_CACHE", redis.url());
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  // Another machine holds the lease for a minute; Redis dies while this one waits.
  RawRedis(redis.port()).set("coil:v1:lease:module:w", "other-machine", 60000);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    redis.stop();
  });
  ::testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  RemoteCache::Claim claim = RemoteCache::current()->claim(Kind::module, "w");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stopper.join();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(claim.payload.has_value());
  EXPECT_EQ(claim.lease, nullptr);  // build it without one
  EXPECT_LT(waited, 5.0);
  EXPECT_NE(err.find("using the local cache only"), std::string::npos) << err;
  EXPECT_EQ(RemoteCache::current(), nullptr);
}

TEST(RemoteCacheAvailability, UnreachableRedisWarnsOnceAndTurnsItselfOff) {
  RedisServer redis;
  std::string url_text = redis.url();
  redis.stop();  // a port nobody listens on now
  ScopedEnv url("COIL_REMOTE_CACHE", url_text);
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  ::testing::internal::CaptureStderr();
  RemoteCache* remote = RemoteCache::current();
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(remote->get(Kind::module, "x"), std::nullopt);
  EXPECT_FALSE(remote->put(Kind::module, "x", "y"));
  RemoteCache::Claim claim = remote->claim(Kind::module, "x");
  EXPECT_FALSE(claim.payload.has_value());
  EXPECT_EQ(claim.lease, nullptr);
  EXPECT_EQ(RemoteCache::current(), nullptr);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot connect"), std::string::npos) << err;
  EXPECT_NE(err.find("using the local cache only"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning"), err.rfind("warning")) << "one warning only:\n" << err;
}

const char* kGraphA = "input x: f32[16, 40]\ny = sigmoid(x)\nz = sum(y) {axes=[1]}\noutput z\n";
const char* kGraphB = "input x: f32[9, 31]\ny = tanh(x)\nz = mul(y, y)\noutput z\n";
const char* kGraphC = "input x: f32[5, 7]\ny = exp(x)\noutput y\n";

TEST(RemoteCacheCompile, AFreshCacheDirectoryIsServedFromRedis) {
  RedisServer redis;
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  CompileOptions options;
  options.remote_cache = redis.url();
  Graph g = parse_graph(kGraphA);
  std::vector<Tensor> inputs = testing::random_inputs(g);
  std::vector<Tensor> want;
  {
    PrivateCache first("remote-first");
    CompiledModel m = compile(g, options);
    EXPECT_EQ(m.report().remote_cache, "miss");
    EXPECT_FALSE(m.report().cache_hit);
    want = m.run(inputs);
  }
  PrivateCache second("remote-second");
  CompiledModel m = compile(g, options);
  EXPECT_EQ(m.report().remote_cache, "hit");
  EXPECT_TRUE(m.report().model_cache_hit);
  EXPECT_TRUE(m.report().cache_hit);
  std::vector<Tensor> got = m.run(inputs);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got[0].data(), want[0].data(),
                        static_cast<size_t>(got[0].numel()) * sizeof(float)),
            0);
  EXPECT_TRUE(testing::matches_reference(g, inputs, options));
  // The warm path wrote a whole local entry: the next compile is a local hit.
  CompiledModel again = compile(g, options);
  EXPECT_TRUE(again.report().model_cache_hit);
}

TEST(RemoteCacheCompile, WithoutOptionsNothingIsRemote) {
  PrivateCache cache("remote-off");
  CompiledModel m = compile(parse_graph(kGraphC));
  EXPECT_EQ(m.report().remote_cache, "off");
  EXPECT_NE(m.report().to_json().find("\"remote_cache\": \"off\""), std::string::npos);
}

TEST(RemoteCacheCompile, RedisStoppedInTheMiddleOfARunCostsOneWarning) {
  auto redis = std::make_unique<RedisServer>();
  ScopedEnv key("COIL_REMOTE_CACHE_KEY", kSecret);
  PrivateCache cache("remote-stopped");
  CompileOptions options;
  options.remote_cache = redis->url();
  ::testing::internal::CaptureStderr();
  CompiledModel a = compile(parse_graph(kGraphA), options);
  EXPECT_EQ(a.report().remote_cache, "miss");
  redis->stop();
  // Both compile locally and are right; one warning for the process.
  Graph b = parse_graph(kGraphB), c = parse_graph(kGraphC);
  EXPECT_TRUE(testing::matches_reference(b, testing::random_inputs(b), options));
  EXPECT_TRUE(testing::matches_reference(c, testing::random_inputs(c), options));
  CompiledModel again = compile(c, options);
  EXPECT_EQ(again.report().remote_cache, "off");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("using the local cache only"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning"), err.rfind("warning")) << "one warning only:\n" << err;
}

TEST(RemoteCacheCompile, TheGpuPathRefusesTheOption) {
  CompileOptions options;
  options.device = "cuda";
  options.remote_cache = "redis://127.0.0.1:1";
  std::string e = error_of([&] { generate_gpu_module(parse_graph(kGraphC), options); });
  EXPECT_NE(e.find("serves CPU compiles only"), std::string::npos) << e;
}

}  // namespace
}  // namespace coil
