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

#include <omp.h>

#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/text_format.h"
#include "support/check_graph.h"
#include "support/error_of.h"
#include "support/log.h"
#include "support/private_cache.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using testing::PrivateCache;
using testing::read_text;

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

// `coil compile MODEL -o OUT` as a child process (exec at once, so that the test's OpenMP
// threads do not meet fork), its stdout to /dev/null and its stderr (COIL_LOGS=autotune: one
// line per matmul timed or read from the cache) to `log`.
pid_t spawn_compile(const fs::path& model, const fs::path& out, const fs::path& log = "/dev/null",
                    const char* logs = "autotune") {
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(null, 1);
    ::dup2(err, 2);
    ::setenv("COIL_LOGS", logs, 1);
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

// Processes that need the same new module at once compile it once (a per-key lock in the
// cache, support/file_lock.h): the others wait for it and load the first one's entry. Before the
// lock each ran g++ and all but one threw their module away.
TEST(CompileCache, ConcurrentProcessesCompileANewModuleOnce) {
  PrivateCache cache("once");
  fs::path model = cache.dir() / "model.coil";
  fs::create_directories(cache.dir());
  std::ofstream(model) << "input x: f32[6, 11]\ny = erf(x)\nz = mean(y) {axes=[1]}\noutput z\n";
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i)
    pids.push_back(spawn_compile(model, cache.dir() / fmt::format("out{}", i),
                                 cache.dir() / fmt::format("log{}", i), "cache"));
  for (pid_t p : pids) {
    int status = wait_for(p);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  int compiles = 0;
  std::string logs;
  for (int i = 0; i < 3; ++i) {
    std::string log = read_text(cache.dir() / fmt::format("log{}", i));
    logs += log;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);)
      compiles += line.find(": compiled in ") != std::string::npos;
  }
  EXPECT_EQ(compiles, 1) << logs;
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

// ---- The whole-graph cache (driver/model_cache.h): the warm path ---------------------------

// A graph with a constant weight (matmul: autotuned and packed at load), a gather (a run-time
// check) and two outputs.
Graph warm_graph(float scale) {
  Graph g;
  int x = g.add_input("x", DType::F32, {16, 24});
  int idx = g.add_input("i", DType::I64, {5});
  Tensor w = Tensor::empty(DType::F32, {24, 8});
  for (int64_t k = 0; k < w.numel(); ++k)
    w.data_as<float>()[k] = scale * static_cast<float>(k % 7 - 3) / 8;
  int c = g.add_constant(w, "w");
  int m = g.add_node("matmul", {x, c});
  int r = g.add_node("relu", {m});
  g.add_output(r, "y");
  g.add_output(g.add_node("gather", {x, idx}), "rows");
  return g;
}

std::vector<Tensor> warm_inputs(const Graph& g) {
  std::vector<Tensor> in = testing::random_inputs(g, 3);
  const double rows[] = {0, 15, -1, 7, 3};
  for (int64_t k = 0; k < 5; ++k) in[1].set_from_double(k, rows[k]);
  return in;
}

void expect_same_outputs(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].numel() * dtype_size(a[i].dtype())), 0)
        << "output " << i;
  }
}

std::vector<std::string> stage_names(const CompileReport& r) {
  std::vector<std::string> out;
  for (const auto& [stage, s] : r.stage_seconds) out.push_back(stage);
  return out;
}

// A second compile of the same graph and options is served whole: no lowering, no autotuning,
// no compiler; the model runs the same kernels (bit-identical outputs), keeps its run-time
// checks and its kernel call plan (profile), and reports the same module.
TEST(ModelCache, SecondCompileIsServedWholeAndRunsTheSame) {
  PrivateCache cache("model-hit");
  Graph g = warm_graph(1.0f);
  std::vector<Tensor> in = warm_inputs(g);
  CompiledModel cold = compile(g);
  EXPECT_FALSE(cold.report().model_cache_hit);
  CompiledModel warm = compile(g);
  EXPECT_TRUE(warm.report().model_cache_hit);
  EXPECT_TRUE(warm.report().cache_hit);
  EXPECT_EQ(stage_names(warm.report()), (std::vector<std::string>{"model_cache", "load"}));
  EXPECT_EQ(warm.report().cache_key, cold.report().cache_key);
  EXPECT_EQ(warm.report().source, cold.report().source);
  EXPECT_EQ(warm.report().arena_bytes, cold.report().arena_bytes);
  ASSERT_EQ(warm.report().kernels.size(), cold.report().kernels.size());
  for (size_t k = 0; k < warm.report().kernels.size(); ++k) {
    EXPECT_EQ(warm.report().kernels[k].name, cold.report().kernels[k].name);
    EXPECT_EQ(warm.report().kernels[k].bytes_read, cold.report().kernels[k].bytes_read);
  }
  ASSERT_EQ(warm.inputs().size(), 2u);
  EXPECT_EQ(warm.inputs()[1].dtype, DType::I64);
  EXPECT_EQ(warm.outputs()[0].shape, (std::vector<int64_t>{16, 8}));
  expect_same_outputs(cold.run(in), warm.run(in));
  EXPECT_TRUE(testing::matches_reference(g, in));
  std::vector<TensorRef> refs;
  for (const Tensor& t : in) refs.push_back(t.ref());
  KernelProfile p = warm.profile(refs, 2);
  EXPECT_EQ(p.kernels.size(), warm.report().kernels.size());
  // The gather's bounds check survives the warm path.
  in[1].set_from_double(2, 16);
  std::string error = testing::error_of([&] { warm.run(in); });
  EXPECT_NE(error.find("index 16 is out of range for a dim of size 16"), std::string::npos)
      << error;
}

// The thread count is not part of the key: a compile at another count is served whole.
TEST(ModelCache, AnotherThreadCountIsServedWhole) {
  PrivateCache cache("model-threads");
  Graph g = warm_graph(1.0f);
  const int threads = omp_get_max_threads();
  set_num_threads(1);
  CompiledModel one = compile(g);
  set_num_threads(2);
  CompiledModel two = compile(g);
  set_num_threads(threads);
  EXPECT_FALSE(one.report().model_cache_hit);
  EXPECT_TRUE(two.report().model_cache_hit);
  EXPECT_EQ(two.report().source, one.report().source);
  EXPECT_TRUE(testing::matches_reference(g, warm_inputs(g)));
}

// Whatever changes the code misses: other constant data (same shapes), another option, another
// size of an input; the fresh compile is right for its own graph.
TEST(ModelCache, OtherConstantsOrOptionsMiss) {
  PrivateCache cache("model-miss");
  Graph g = warm_graph(1.0f);
  compile(g);
  Graph other = warm_graph(2.0f);
  CompiledModel m = compile(other);
  EXPECT_FALSE(m.report().model_cache_hit);
  EXPECT_TRUE(testing::matches_reference(other, warm_inputs(other)));
  CompileOptions unfused;
  unfused.fusion = false;
  EXPECT_FALSE(compile(g, unfused).report().model_cache_hit);
  EXPECT_TRUE(compile(g, unfused).report().model_cache_hit);
  CompileOptions max;
  max.mode = "max-autotune";
  EXPECT_FALSE(compile(g, max).report().model_cache_hit);
}

// An entry whose module fails its checksum, that another compiler built, or that does not parse
// is not used: the compile takes the cold path and rewrites it.
TEST(ModelCache, BadEntriesAreNotUsed) {
  PrivateCache cache("model-bad");
  Graph g = warm_graph(1.0f);
  std::vector<Tensor> in = warm_inputs(g);
  CompiledModel cold = compile(g);
  std::vector<Tensor> want = cold.run(in);
  std::vector<fs::path> entries;
  for (const auto& e : fs::recursive_directory_iterator(cache.dir() / "models"))
    if (e.path().extension() == ".json") entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 1u);
  const fs::path entry = entries[0];
  std::string good = read_text(entry);

  // Another compiler on PATH than the one recorded.
  std::string other = std::regex_replace(good, std::regex("\"compiler\":\"[^\"]*\""),
                                         "\"compiler\":\"/usr/bin/some-other-g++ size=1\"");
  ASSERT_NE(other, good);
  std::ofstream(entry) << other;
  EXPECT_FALSE(compile(g).report().model_cache_hit);
  EXPECT_TRUE(compile(g).report().model_cache_hit);  // rewritten by the cold compile

  // Truncated JSON.
  std::ofstream(entry) << good.substr(0, good.size() / 2);
  EXPECT_FALSE(compile(g).report().model_cache_hit);

  // A damaged module: the code cache rebuilds it.
  CompiledModel again = compile(g);
  ASSERT_TRUE(again.report().model_cache_hit);
  {
    std::fstream f(again.report().so_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.write("garbage!garbage!", 16);
  }
  CompiledModel rebuilt = compile(g);
  EXPECT_FALSE(rebuilt.report().model_cache_hit);
  EXPECT_FALSE(rebuilt.report().cache_hit);
  expect_same_outputs(rebuilt.run(in), want);
}

// Compiles that must show every stage bypass the cache: a debug directory, a log channel that
// prints what the stages do.
TEST(ModelCache, DebuggingCompilesBypassIt) {
  PrivateCache cache("model-bypass");
  Graph g = warm_graph(1.0f);
  compile(g);
  ASSERT_TRUE(compile(g).report().model_cache_hit);
  CompileOptions debug;
  debug.debug_dir = cache.dir() / "debug";
  EXPECT_FALSE(compile(g, debug).report().model_cache_hit);
  EXPECT_TRUE(fs::exists(debug.debug_dir));
  for (const char* var : {"COIL_LOGS=fusion", "COIL_LOGS=perf,output_code"}) {
    std::string s(var);
    std::string name = s.substr(0, s.find('=')), value = s.substr(s.find('=') + 1);
    ::setenv(name.c_str(), value.c_str(), 1);
    bool hit = compile(g).report().model_cache_hit;
    ::unsetenv(name.c_str());
    EXPECT_FALSE(hit) << var;
  }
  ::setenv("COIL_LOGS", "perf", 1);  // timing the stages: the warm path is what is timed
  EXPECT_TRUE(compile(g).report().model_cache_hit);
  ::unsetenv("COIL_LOGS");
  // Channels turned on in the process (the CLI and tests call set_log_channels), not through
  // the environment: Fusion.ReadingAcrossRowsIsRefusedAndLogged got no fusion log from a warm
  // second run of its binary before they counted.
  set_log_channels("fusion");
  bool hit = compile(g).report().model_cache_hit;
  set_log_channels("cache");
  bool cache_channel_hit = compile(g).report().model_cache_hit;
  set_log_channels("");
  EXPECT_FALSE(hit);
  EXPECT_TRUE(cache_channel_hit);
}

// A deployment without a compiler: a new process (the CLI) with no C++ compiler on PATH loads a
// model that an earlier process compiled, and refuses to compile a new one with a clear error.
TEST(ModelCache, WarmProcessNeedsNoCompilerOnPath) {
  PrivateCache cache("model-no-compiler");
  fs::create_directories(cache.dir());
  fs::path model = cache.dir() / "model.coil";
  std::ofstream(model) << "input a: f32[32, 20]\nconst w: f32[2, 2] = [1.0, 2.0, 3.0, 4.0]\n"
                          "t = reshape(a) {shape=[320, 2]}\nm = matmul(t, w)\ny = tanh(m)\n"
                          "output y\n";
  fs::path empty_bin = cache.dir() / "empty-bin";
  fs::create_directories(empty_bin);
  auto run_cli = [&](const std::string& path_env, const fs::path& out) {
    std::string cmd = fmt::format(
        "env -u CXX -u COIL_LOGS PATH='{}' '{}' compile '{}' -o '{}' "
        ">'{}/log' 2>&1",
        path_env, COIL_CLI, model.string(), out.string(), cache.dir().string());
    return std::system(cmd.c_str());
  };
  // No compiler and nothing cached: a clear error.
  EXPECT_NE(run_cli(empty_bin.string(), cache.dir() / "out0"), 0);
  EXPECT_NE(read_text(cache.dir() / "log").find("no C++ compiler found on PATH"), std::string::npos)
      << read_text(cache.dir() / "log");
  ASSERT_EQ(run_cli(std::getenv("PATH"), cache.dir() / "out1"), 0)
      << read_text(cache.dir() / "log");
  ASSERT_EQ(run_cli(empty_bin.string(), cache.dir() / "out2"), 0) << read_text(cache.dir() / "log");
  std::string report = read_text(cache.dir() / "out2" / "report.json");
  EXPECT_NE(report.find("\"model_cache\": \"hit\""), std::string::npos) << report;
  EXPECT_EQ(read_text(cache.dir() / "out1" / "module.cpp"),
            read_text(cache.dir() / "out2" / "module.cpp"));
}

}  // namespace
}  // namespace coil
