// The compiled-graph level of the code cache: a second compile of the same graph is a hit
// and loads the same object; a corrupted entry is rebuilt; two processes compiling the same
// graph at once both succeed (through the coil CLI).
#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace coil
