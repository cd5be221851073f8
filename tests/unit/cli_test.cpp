// The `coil` command-line tool end to end: compile writes its files, run writes .npy files
// numpy reads, check compares with the reference and with --expect files, bench prints JSON;
// --version and --help say what they should; the COIL_* variables coil knows are README's.
// (Every documented mistake and its exit code: tests/error/cli_errors_test.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "support/check_graph.h"
#include "support/env.h"
#include "support/npy.h"
#include "support/suggest.h"

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
  /// Runs the CLI with `args`; returns the exit code and fills `out` with stdout; ("NAME=VALUE ")
  /// is put before the command.
  int coil(const std::string& args, std::string* out = nullptr, const std::string& env = "") {
    fs::path log = dir / "stdout.txt";
    int rc = std::system(
        fmt::format("{}'{}' {} > '{}' 2>&1", env, COIL_CLI, args, log.string()).c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    if (out) *out = ss.str();
    return WEXITSTATUS(rc);
  }
};

TEST_F(Cli, CompileWritesSourceObjectAndReport) {
  std::string out;
  // An empty cache of its own: a whole-graph cache hit from an earlier run would report only
  // the model_cache and load stages.
  ASSERT_EQ(coil(fmt::format("compile '{}' --size s0=6 -o '{}'", (dir / "model.coil").string(),
                             (dir / "out").string()),
                 &out, "COIL_CACHE_DIR='" + (dir / "cache").string() + "' "),
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

// `coil compile` with a size left unbound writes one size-generic module: its kernels take the
// size as an argument (ks0), sizes.json says which symbol that is, where it was compiled (a
// prime above 1 that is no constant dim) and checked, and its guards; the source is the same
// each time. With
// --size the module has no size argument.
TEST_F(Cli, CompileWithoutSizeIsSizeGeneric) {
  std::string out, model = (dir / "model.coil").string();
  ASSERT_EQ(coil(fmt::format("compile '{}' -o '{}'", model, (dir / "g1").string()), &out), 0)
      << out;
  EXPECT_NE(out.find("size-generic: the kernels take the sizes as arguments (ks0 = s0); this "
                     "module serves every size that passes its guards: ks0 >= 2"),
            std::string::npos)
      << out;
  auto sizes = nlohmann::json::parse(std::ifstream(dir / "g1/sizes.json"));
  EXPECT_EQ(sizes["size_generic"], true);
  EXPECT_EQ(sizes["size_arguments"]["ks0"], "s0");
  EXPECT_EQ(sizes["compiled_at"]["s0"], 97);
  EXPECT_EQ(sizes["checked_at"]["s0"], 98);
  EXPECT_EQ(sizes["guards"].get<std::string>().rfind("ks0 >= 2", 0), 0u) << sizes.dump();
  auto read = [](const fs::path& p) {
    std::stringstream ss;
    ss << std::ifstream(p).rdbuf();
    return ss.str();
  };
  const std::string source = read(dir / "g1/module.cpp");
  EXPECT_TRUE(std::regex_search(source, std::regex("const int64_t ks0"))) << source;
  EXPECT_TRUE(fs::exists(dir / "g1/module.so"));
  ASSERT_EQ(coil(fmt::format("compile '{}' -o '{}'", model, (dir / "g2").string()), &out), 0);
  EXPECT_EQ(read(dir / "g2/module.cpp"), source);
  ASSERT_EQ(
      coil(fmt::format("compile '{}' --size s0=5 -o '{}'", model, (dir / "s").string()), &out), 0);
  EXPECT_EQ(read(dir / "s/module.cpp").find("ks0"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "s/sizes.json"));
}

// `coil export` writes the three files; `coil run DIR` runs them with the same results as
// `coil run MODEL`, random inputs seeded alike; compile options are refused for an export.
TEST_F(Cli, ExportThenRunTheExport) {
  std::string model = (dir / "model.coil").string(), exp = (dir / "exp").string(), out;
  ASSERT_EQ(coil(fmt::format("export '{}' --size s0=7 -o '{}'", model, exp), &out), 0) << out;
  EXPECT_NE(out.find("exported"), std::string::npos) << out;
  for (const char* f : {"manifest.json", "module.so", "weights.bin"})
    EXPECT_TRUE(fs::exists(dir / "exp" / f)) << f;
  auto manifest = nlohmann::json::parse(std::ifstream(dir / "exp/manifest.json"));
  EXPECT_EQ(manifest["format"], "coil-export-v1");
  EXPECT_EQ(manifest["inputs"][0]["shape"], nlohmann::json::array({7, 16}));
  ASSERT_EQ(
      coil(fmt::format("run '{}' --seed 4 --output-dir '{}'", exp, (dir / "a").string()), &out), 0)
      << out;
  ASSERT_EQ(coil(fmt::format("run '{}' --size s0=7 --seed 4 --output-dir '{}'", model,
                             (dir / "b").string()),
                 &out),
            0)
      << out;
  for (const char* f : {"z.npy", "m.npy"}) {
    Tensor a = read_npy(dir / "a" / f), b = read_npy(dir / "b" / f);
    ASSERT_EQ(a.shape(), b.shape()) << f;
    EXPECT_TRUE(compare_tensors(a, b, Tolerance{0, 0}).ok) << f;
  }
  EXPECT_EQ(coil(fmt::format("run '{}' --size s0=8", exp), &out), 2) << out;
  EXPECT_NE(out.find("--size: an exported model"), std::string::npos) << out;
  // A GPU export needs the GPU (and a Python with torch and triton): here a clear error.
  ::setenv("COIL_PYTHON", COIL_PYTHON, 1);
  int rc = coil(
      fmt::format("export '{}' --size s0=7 --device cuda -o '{}'", model, (dir / "gpu").string()),
      &out);
  ::unsetenv("COIL_PYTHON");
  EXPECT_TRUE(rc == 2 || rc == 3) << rc << out;
  EXPECT_TRUE(out.find("no CUDA device") != std::string::npos ||
              out.find("triton") != std::string::npos)
      << out;
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

TEST_F(Cli, VersionNamesCommitCompilersAndIsa) {
  std::string out;
  ASSERT_EQ(coil("--version", &out), 0) << out;
  for (const char* line : {"coil ", "(commit ", "built with:", "kernel compiler:", "host ISA:"})
    EXPECT_NE(out.find(line), std::string::npos) << line << " in\n" << out;
  // The source tree is a git checkout here, so the commit is known.
  if (fs::exists(fs::path(COIL_SOURCE_DIR) / ".git")) {
    EXPECT_EQ(out.find("not built from a git checkout"), std::string::npos) << out;
  }
}

TEST_F(Cli, HelpShowsEachDefault) {
  std::string out;
  ASSERT_EQ(coil("demo --help", &out), 0) << out;
  EXPECT_NE(out.find("--runs INT=20"), std::string::npos) << out;
  ASSERT_EQ(coil("check --help", &out), 0) << out;
  EXPECT_NE(out.find("--rtol FLOAT=per dtype"), std::string::npos) << out;
  EXPECT_NE(out.find("--device cpu|cuda=cpu"), std::string::npos) << out;
  ASSERT_EQ(coil("--help", &out), 0) << out;
  EXPECT_NE(out.find("--version"), std::string::npos) << out;
  EXPECT_EQ(out.find("debug-internal-error"), std::string::npos) << out;  // hidden
}

// README.md's environment tables name exactly the variables of COIL_ENV_VARS (support/env.h).
TEST(CliEnv, ReadmeListsExactlyTheKnownVariables) {
  std::ifstream in(fs::path(COIL_SOURCE_DIR) / "README.md");
  std::set<std::string> readme, known;
  // The first cell of each row that starts with a variable: "| `COIL_X=1` |", "| `COIL_A`, `COIL_B`
  // |".
  static const std::regex name("COIL_[A-Z0-9_]+");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `COIL_", 0) != 0) continue;
    std::string cell = line.substr(0, line.find(" |", 2));
    for (std::sregex_iterator it(cell.begin(), cell.end(), name), end; it != end; ++it)
      readme.insert(it->str());
  }
  for (const EnvVarInfo& e : known_env_vars()) {
    known.insert(std::string(e.name));
    EXPECT_FALSE(e.doc.empty()) << e.name;
    EXPECT_EQ(env_name(e.id), e.name);
  }
  for (const auto& n : known) EXPECT_TRUE(readme.count(n)) << n << " is missing from README.md";
  for (const auto& n : readme) EXPECT_TRUE(known.count(n)) << n << " is not in COIL_ENV_VARS";
}

TEST(CliEnv, UnknownVariablesAreNamedWithTheNearestKnownOne) {
  EXPECT_EQ(unknown_env_vars_message({"PATH", "COIL_LOGS", "COIL_SLOW_TESTS", "HOME"}), "");
  std::string m = unknown_env_vars_message({"COIL_LGOS", "PATH", "COIL_CACHE_DIR"});
  EXPECT_NE(m.find("unknown environment variable COIL_LGOS (did you mean 'COIL_LOGS'?)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("coil reads COIL_LOGS, COIL_CACHE_DIR"), std::string::npos) << m;
  EXPECT_EQ(m.find(" PATH"), std::string::npos) << m;  // not a COIL_ variable
  m = unknown_env_vars_message({"COIL_ZZZZZZZZ", "COIL_MATMULL"});
  EXPECT_NE(m.find("variables COIL_ZZZZZZZZ, COIL_MATMULL (did you mean 'COIL_MATMUL'?)"),
            std::string::npos)
      << m;
}

// The CLI warns at startup, and compiling (which warns on its first call) does not repeat it.
TEST_F(Cli, WarnsOnceOfUnknownEnvVars) {
  fs::path err = dir / "stderr.txt";
  int rc = std::system(fmt::format("COIL_LGOS=ir '{}' check '{}' --size s0=2 > /dev/null 2> '{}'",
                                   COIL_CLI, (dir / "model.coil").string(), err.string())
                           .c_str());
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  EXPECT_EQ(WEXITSTATUS(rc), 0) << text;
  std::string warning = "coil: warning: unknown environment variable COIL_LGOS";
  EXPECT_EQ(text.rfind(warning, 0), 0u) << text;
  EXPECT_EQ(text.find(warning, 1), std::string::npos) << text;
}

TEST(CliSuggest, NearestNameWithinAFewEdits) {
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("COIL_LGOS", "COIL_LOGS"), 1u);  // a swap is one edit
  EXPECT_EQ(edit_distance("check", "chek"), 1u);
  std::vector<std::string> options = {"--size", "--seed", "--input", "--device"};
  EXPECT_EQ(nearest("--sze", options), "--size");
  EXPECT_EQ(nearest("--devce", options), "--device");
  EXPECT_EQ(nearest("--bogus", options), "");
  EXPECT_EQ(did_you_mean("--inptu", options), " (did you mean '--input'?)");
  EXPECT_EQ(did_you_mean("frob", {"demo", "ops", "run"}), "");
}

}  // namespace
}  // namespace coil
