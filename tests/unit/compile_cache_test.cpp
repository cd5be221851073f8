// The compiled-graph level of the code cache: a second compile of the same graph is a hit
// and loads the same object; a corrupted entry is rebuilt; two processes compiling the same
// graph at once both succeed (through the coil CLI).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "graph/text_format.h"
#include "support/check_graph.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

/// A private cache directory for one test, restored afterwards.
class PrivateCache {
 public:
  explicit PrivateCache(const std::string& name) {
    const char* old = std::getenv("COIL_CACHE_DIR");
    old_ = old ? old : "";
    dir_ = fs::path(COIL_BINARY_DIR) / "test-cache" /
           fmt::format("{}-{}-{}", name, getpid(),
                       std::chrono::steady_clock::now().time_since_epoch().count());
    setenv("COIL_CACHE_DIR", dir_.c_str(), 1);
  }
  ~PrivateCache() {
    setenv("COIL_CACHE_DIR", old_.c_str(), 1);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  std::string old_;
  fs::path dir_;
};

const char* kGraph = "input x: f32[8, 33]\ny = sigmoid(x)\nz = sum(y) {axes=[1]}\noutput z\n";

TEST(CompileCache, SecondCompileHitsAndCorruptEntryIsRebuilt) {
  PrivateCache cache("hit");
  Graph g = parse_graph(kGraph);
  CompiledModel first = compile(g);
  EXPECT_FALSE(first.report().cache_hit);
  CompiledModel second = compile(g);
  EXPECT_TRUE(second.report().cache_hit);
  EXPECT_EQ(first.report().cache_key, second.report().cache_key);
  EXPECT_EQ(first.report().so_path, second.report().so_path);

  // Corrupt the shared object: the next compile notices and rebuilds a working entry.
  fs::path so = second.report().so_path;
  {
    std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.write("garbage!garbage!", 16);
  }
  CompiledModel third = compile(g);
  EXPECT_FALSE(third.report().cache_hit);
  EXPECT_TRUE(testing::matches_reference(g));
}

// --precision on the CPU: x86 has no TF32, so "high" generates the same IEEE code as "highest"
// and shares its cache entry (the key is the code); the report says which was asked for, and
// an unknown precision is an error naming it before anything compiles.
TEST(CompileCache, PrecisionHighSharesTheIeeeEntryOnTheCpu) {
  PrivateCache cache("precision");
  Graph g = parse_graph(
      "input x: f32[16, 40]\ninput w: f32[40, 24]\nm = matmul(x, w)\ny = relu(m)\noutput y\n");
  CompileOptions highest, high;
  highest.autotune = high.autotune = false;  // the template either way: no timing runs
  high.precision = "high";
  CompiledModel a = compile(g, highest);
  CompiledModel b = compile(g, high);
  EXPECT_EQ(a.report().precision, "highest");
  EXPECT_EQ(b.report().precision, "high");
  EXPECT_EQ(a.report().cache_key, b.report().cache_key);
  EXPECT_TRUE(b.report().cache_hit);
  EXPECT_NE(b.report().to_json().find("\"precision\": \"high\""), std::string::npos);
  CompileOptions bad;
  bad.precision = "tf32";
  try {
    compile(g, bad);
    FAIL() << "precision 'tf32' was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision 'tf32': expected highest"), std::string::npos)
        << e.what();
  }
}

TEST(CompileCache, ConcurrentProcessesCompileTheSameGraph) {
  PrivateCache cache("concurrent");
  fs::path model = cache.dir() / "model.coil";
  fs::create_directories(cache.dir());
  std::ofstream(model) << "input x: f32[5, 7]\ny = tanh(x)\nw = max(y) {axes=[0]}\noutput w\n";
  std::string cmd = fmt::format("'{}' check '{}' > /dev/null", COIL_CLI, model.string());
  // Two coil processes at once, same fresh cache directory; both must succeed.
  std::string script =
      fmt::format("bash -c \"{0} & p1=\\$!; {0} & p2=\\$!; wait \\$p1 && wait \\$p2\"", cmd);
  EXPECT_EQ(std::system(script.c_str()), 0);
  EXPECT_EQ(std::system(cmd.c_str()), 0);  // and a third run hits the cache
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `coil compile MODEL -o OUT` as a child process (exec at once, so that the test's OpenMP
// threads do not meet fork), its stdout to /dev/null and its stderr (COIL_LOGS=autotune: one
// line per matmul timed or read from the cache) to `log`.
pid_t spawn_compile(const fs::path& model, const fs::path& out, const fs::path& log = "/dev/null") {
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(null, 1);
    ::dup2(err, 2);
    ::setenv("COIL_LOGS", "autotune", 1);
    ::execl(COIL_CLI, "coil", "compile", model.c_str(), "-o", out.c_str(), nullptr);
    ::_exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Issue 19, one answer per graph: processes that compile the same new graph with a matmul at
// once autotune it once (a per-shape lock; the first timings written win) and so generate the
// same kernels: the same cache key in every report.json.
TEST(CompileCache, ConcurrentProcessesPickTheSameKernels) {
  PrivateCache cache("same-kernels");
  fs::create_directories(cache.dir());
  fs::path model = cache.dir() / "model.coil";
  std::ofstream(model) << "input a: f32[96, 80]\ninput b: f32[80, 72]\nm = matmul(a, b)\n"
                          "y = relu(m)\noutput y\n";
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i)
    pids.push_back(spawn_compile(model, cache.dir() / fmt::format("out{}", i),
                                 cache.dir() / fmt::format("log{}", i)));
  for (pid_t p : pids) {
    int status = wait_for(p);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::set<std::string> keys;
  const std::regex key_re("\"cache_key\":\\s*\"([0-9a-f]+)\"");
  for (int i = 0; i < 4; ++i) {
    std::string report = read_text(cache.dir() / fmt::format("out{}", i) / "report.json");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(report, m, key_re)) << report;
    keys.insert(m[1]);
  }
  EXPECT_EQ(keys.size(), 1u) << "processes compiled different kernels for one graph";
  // One process timed the matmul; the three others read its result.
  int timed = 0, cached = 0;
  for (int i = 0; i < 4; ++i) {
    std::istringstream log(read_text(cache.dir() / fmt::format("log{}", i)));
    for (std::string line; std::getline(log, line);) {
      if (line.find("matmul 96x72x80") == std::string::npos) continue;
      ++(line.find("(cached)") != std::string::npos ? cached : timed);
    }
  }
  EXPECT_EQ(timed, 1);
  EXPECT_EQ(cached, 3);
  // One timing file for the one shape, and no temp file left behind.
  int results = 0;
  for (const auto& e : fs::directory_iterator(cache.dir() / "autotune")) {
    std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
    if (name.find('.') == std::string::npos) ++results;
  }
  EXPECT_EQ(results, 1);
}

// A process killed (kill -9) at any moment of a compile leaves nothing that a later process
// loads: entries appear by rename() of a finished directory, and a later compile checks the
// shared object's checksum. Kills land before, during and after g++.
TEST(CompileCache, KillMinus9DuringACompileLeavesNoLoadableBadEntry) {
  PrivateCache cache("kill9");
  fs::create_directories(cache.dir());
  fs::path model = cache.dir() / "model.coil";
  std::ofstream(model) << "input a: f32[40, 24]\ninput b: f32[24, 56]\nm = matmul(a, b)\n"
                          "s = softmax(m) {axis=1}\noutput s\n";
  for (int delay_ms : {0, 10, 30, 60, 100, 200, 350, 500, 800, 1200}) {
    pid_t p = spawn_compile(model, cache.dir() / "out");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(p, SIGKILL);
    wait_for(p);
    // Every entry directory (named by its key alone) is complete.
    for (const auto& shard : fs::directory_iterator(cache.dir())) {
      if (!shard.is_directory() || shard.path().filename().string().size() != 2) continue;
      for (const auto& entry : fs::directory_iterator(shard.path())) {
        if (entry.path().filename().string().find('.') != std::string::npos) continue;
        EXPECT_TRUE(fs::exists(entry.path() / "module.so")) << entry.path() << " " << delay_ms;
        EXPECT_TRUE(fs::exists(entry.path() / "module.so.xxh")) << entry.path();
      }
    }
  }
  // A later process compiles (or loads) and gets the right answer.
  std::string check = fmt::format("'{}' check '{}' > /dev/null", COIL_CLI, model.string());
  EXPECT_EQ(std::system(check.c_str()), 0);
}

}  // namespace
}  // namespace coil
