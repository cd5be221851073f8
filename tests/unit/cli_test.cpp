// The `coil` command-line tool end to end: compile writes its files, run writes .npy files
// numpy reads, check compares with the reference and with --expect files, bench prints JSON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/check_graph.h"
#include "support/npy.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

struct Cli : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::path(COIL_BINARY_DIR) / "test-cli" /
          fmt::format("{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                      getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "model.coil") << "input x: f32[s0, 16]\ninput b: f32[16]\n"
                                         "y = add(x, b)\nz = softmax(y)\nm = argmax(z) {axis=1}\n"
                                         "output z\noutput m\n";
  }
  void TearDown() override { fs::remove_all(dir); }
  /// Runs the CLI with `args`; returns the exit code and fills `out` with stdout.
  int coil(const std::string& args, std::string* out = nullptr) {
    fs::path log = dir / "stdout.txt";
    int rc = std::system(fmt::format("'{}' {} > '{}' 2>&1", COIL_CLI, args, log.string()).c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    if (out) *out = ss.str();
    return WEXITSTATUS(rc);
  }
};

TEST_F(Cli, CompileWritesSourceObjectAndReport) {
  std::string out;
  ASSERT_EQ(coil(fmt::format("compile '{}' --size s0=6 -o '{}'", (dir / "model.coil").string(),
                             (dir / "out").string()),
                 &out),
            0)
      << out;
  EXPECT_TRUE(fs::exists(dir / "out/module.cpp"));
  EXPECT_TRUE(fs::exists(dir / "out/module.so"));
  auto report = nlohmann::json::parse(std::ifstream(dir / "out/report.json"));
  EXPECT_GE(report["kernels"].size(), 1u);
  EXPECT_EQ(report["kernels"][0]["device"], "cpu");
  EXPECT_TRUE(report["kernels"][0].contains("bytes_read"));
  EXPECT_TRUE(report.contains("arena_bytes"));
  EXPECT_TRUE(report["compile_seconds"].contains("codegen"));
  EXPECT_TRUE(report["cache"] == "hit" || report["cache"] == "miss");
}

TEST_F(Cli, RunWritesNpyThatNumpyReadsAndCheckPasses) {
  Tensor x = random_tensor(DType::F32, {5, 16}, 1), b = random_tensor(DType::F32, {16}, 2);
  write_npy(dir / "x.npy", x);
  write_npy(dir / "b.npy", b);
  std::string model = (dir / "model.coil").string();
  std::string out;
  ASSERT_EQ(
      coil(fmt::format("run '{}' --input x='{}' --input b='{}' --output-dir '{}'", model,
                       (dir / "x.npy").string(), (dir / "b.npy").string(), (dir / "res").string()),
           &out),
      0)
      << out;
  // numpy reads what coil wrote; rows of a softmax sum to 1.
  std::string py = fmt::format(
      "{} -c \"import numpy as n; z=n.load('{}'); m=n.load('{}'); "
      "assert z.shape==(5,16) and z.dtype==n.float32 and m.dtype==n.int64; "
      "assert abs(z.sum(1)-1).max()<1e-5; assert (z.argmax(1)==m).all()\"",
      COIL_PYTHON, (dir / "res/z.npy").string(), (dir / "res/m.npy").string());
  EXPECT_EQ(std::system(py.c_str()), 0);
  // check against the reference, then against the files just written.
  EXPECT_EQ(coil(fmt::format("check '{}' --size s0=9", model), &out), 0) << out;
  EXPECT_NE(out.find("check passed"), std::string::npos) << out;
  EXPECT_EQ(
      coil(fmt::format("check '{}' --input x='{}' --input b='{}' --expect z='{}' --expect m='{}'",
                       model, (dir / "x.npy").string(), (dir / "b.npy").string(),
                       (dir / "res/z.npy").string(), (dir / "res/m.npy").string()),
           &out),
      0)
      << out;
  // A wrong expectation fails with a non-zero exit and names the output.
  Tensor wrong = read_npy(dir / "res/z.npy");
  wrong.set_from_double(3, wrong.item_as_double(3) + 0.5);
  write_npy(dir / "wrong.npy", wrong);
  EXPECT_EQ(
      coil(fmt::format("check '{}' --input x='{}' --input b='{}' --expect z='{}' --expect m='{}'",
                       model, (dir / "x.npy").string(), (dir / "b.npy").string(),
                       (dir / "wrong.npy").string(), (dir / "res/m.npy").string()),
           &out),
      1);
  EXPECT_NE(out.find("MISMATCH"), std::string::npos) << out;
}

TEST_F(Cli, BenchJsonAndErrors) {
  std::string out;
  ASSERT_EQ(coil(fmt::format("bench '{}' --size s0=64 --runs 5 --threads 1 --json",
                             (dir / "model.coil").string()),
                 &out),
            0)
      << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  for (const char* key : {"compile_s", "median_ms", "min_ms", "max_ms", "runs", "threads"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["runs"], 5);
  EXPECT_EQ(j["threads"], 1);
  // Errors are reported, with exit code 2.
  EXPECT_EQ(coil(fmt::format("run '{}'", (dir / "model.coil").string()), &out), 2);
  EXPECT_NE(out.find("size 's0' is not bound"), std::string::npos) << out;
  EXPECT_EQ(coil("run /nonexistent.coil", &out), 2);
}

TEST_F(Cli, DemoPasses) {
  std::string out;
  EXPECT_EQ(coil("demo --runs 2", &out), 0) << out;
  EXPECT_NE(out.find("demo passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace coil
