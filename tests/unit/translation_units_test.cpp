// A module split into translation units (codegen/cpp/cpp_module.h: split_translation_units;
// runtime/code_cache.h compiles them at once and links them) behaves as its one-unit form: the
// same outputs and run-time check errors, the same exported symbols. COIL_COMPILE_THREADS sets
// the unit count, a bad value is an error, and a compile error names the failing unit.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "driver/pipeline.h"
#include "runtime/code_cache.h"
#include "runtime/loader.h"
#include "runtime/toolchain.h"
#include "support/check_graph.h"
#include "support/error_of.h"
#include "support/private_cache.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

/// Sets an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A private cache directory, so that every compile below really compiles.
class TranslationUnits : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(COIL_BINARY_DIR) / "test-cache" /
        fmt::format("tu-{}-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                    ::getpid(), std::chrono::steady_clock::now().time_since_epoch().count());
    cache_ = std::make_unique<ScopedEnv>("COIL_CACHE_DIR", dir_.c_str());
  }
  void TearDown() override {
    cache_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  std::unique_ptr<ScopedEnv> cache_;
};

// Softmaxes along alternating axes (each one a kernel: the next one reduces across the rows the
// last one wrote), each followed by fused pointwise ops, then a gather with a run-time bounds
// check: a module with many kernels and with coil_run_error.
std::string many_kernels_graph(int stages) {
  std::ostringstream g;
  g << "input x: f32[24, 40]\ninput i: i64[5]\n";
  std::string h = "x";
  for (int s = 0; s < stages; ++s) {
    g << fmt::format("s{0} = softmax({1}) {{axis={2}}}\n", s, h, s % 2);
    g << fmt::format("t{0} = mul(s{0}, {1})\n", s, h);
    g << fmt::format("h{0} = relu(t{0})\n", s);
    h = fmt::format("h{}", s);
  }
  g << fmt::format("y = gather({}, i)\noutput y\n", h);
  return g.str();
}

size_t kernel_bytes(const CppModule& m) {
  size_t bytes = 0;
  for (const CppKernelSource& k : m.kernels) bytes += k.code.size();
  return bytes;
}

// The units a compiled model's cache entry was built from.
int entry_units(const CompiledModel& m) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(m.report().so_path.parent_path()))
    if (e.path().extension() == ".cpp") ++n;
  return n;
}

// The strong global symbols a shared object defines (nm -D: T, D, B, R), without the weak ones
// that inline functions of the runtime headers leave wherever the compiler kept a copy.
std::set<std::string> exported_symbols(const fs::path& so) {
  ProcessResult r = run_process({"/usr/bin/nm", "-D", "--defined-only", so.string()});
  EXPECT_EQ(r.status, 0) << r.output;
  std::set<std::string> names;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string address, type, name;
    if (fields >> address >> type >> name && type.size() == 1 &&
        std::string("TDBR").find(type[0]) != std::string::npos)
      names.insert(name);
  }
  return names;
}

TEST(TranslationUnitSplit, UnitsHoldEveryKernelOnceAndTheWrapperLast) {
  Graph g = testing::graph_from_text(many_kernels_graph(6));
  CppModule m = generate_program(g, CompileOptions{}).module;
  ASSERT_GE(m.kernels.size(), 6u);
  EXPECT_EQ(split_translation_units(m, 1), std::vector<std::string>{m.source});
  std::vector<std::string> units = split_translation_units(m, 3);
  ASSERT_EQ(units.size(), 3u);
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(units[u].rfind(m.includes, 0), 0u) << "unit " << u;
    EXPECT_EQ(units[u].find("coil_graph_run("),
              u + 1 == units.size() ? units[u].find("coil_graph_run(") : std::string::npos);
    EXPECT_EQ(units[u].find("static coil::RunError"), std::string::npos) << units[u];
  }
  EXPECT_NE(units.back().find(m.wrapper), std::string::npos);
  for (const CppKernelSource& k : m.kernels) {
    int defined = 0;
    for (const std::string& u : units) defined += u.find(k.code) != std::string::npos;
    EXPECT_EQ(defined, 1) << k.name;
  }
  // The wrapper's unit declares what the others define.
  EXPECT_NE(units.back().find(m.kernels[0].signature + ";"), std::string::npos);
  // Small modules stay one unit; the count never exceeds the threads or the kernels.
  EXPECT_EQ(translation_unit_count(m, 16),
            std::max<int>(1, std::min<int>(16, static_cast<int>(kernel_bytes(m) /
                                                                kMinTranslationUnitBytes))));
  EXPECT_EQ(translation_unit_count(m, 1), 1);
}

// The same model compiled as one unit and as several: the same outputs bit for bit, the same
// exported symbols (coil_run_error stays hidden), the same run-time check error; the unit count
// follows COIL_COMPILE_THREADS.
TEST_F(TranslationUnits, SplitModuleMatchesTheSingleUnit) {
  Graph g = testing::graph_from_text(many_kernels_graph(40));
  CppModule module = generate_program(g, CompileOptions{}).module;
  ASSERT_GE(kernel_bytes(module), 3 * kMinTranslationUnitBytes)
      << "the graph is too small to be split into 3 units; make it larger";
  std::vector<Tensor> in = testing::random_inputs(g);
  for (int64_t j = 0; j < in[1].numel(); ++j) in[1].set_from_double(j, static_cast<double>(j * 4));

  std::vector<std::vector<Tensor>> outputs;
  std::vector<std::set<std::string>> symbols;
  std::vector<std::string> errors;
  for (const char* threads : {"1", "3"}) {
    SCOPED_TRACE(fmt::format("COIL_COMPILE_THREADS={}", threads));
    ScopedEnv env("COIL_COMPILE_THREADS", threads);
    // A cache of its own: the whole-graph cache would serve the second compile the first one's
    // module (the unit count does not change what the module computes, so it is not in its key).
    testing::PrivateCache cache(fmt::format("tu-split-{}", threads));
    CompiledModel m = compile(g);
    EXPECT_EQ(entry_units(m), std::atoi(threads));
    outputs.push_back(m.run(in));
    symbols.push_back(exported_symbols(m.report().so_path));
    std::vector<Tensor> bad = in;
    bad[1] = in[1].clone();
    bad[1].set_from_double(2, 1000.0);
    errors.push_back(testing::error_of([&] { m.run(bad); }));
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (size_t o = 0; o < outputs[0].size(); ++o) {
    const Tensor &a = outputs[0][o], &b = outputs[1][o];
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(
        std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())), 0)
        << "output " << o << " differs";
  }
  EXPECT_EQ(symbols[0], symbols[1]);
  EXPECT_FALSE(symbols[1].count("coil_run_error"));
  for (const std::string& s : symbols[1])
    EXPECT_TRUE(s.rfind("coil_graph_", 0) == 0 || s.rfind("cpp_", 0) == 0) << s;
  EXPECT_NE(errors[0].find("index 1000"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[0], errors[1]);
}

// A split module is served whole by the whole-graph cache like any other: the listing of the
// second compile is the first one's (kept beside the entry: the code cache holds the units).
TEST_F(TranslationUnits, SplitModuleIsServedByTheModelCache) {
  Graph g = testing::graph_from_text(many_kernels_graph(40));
  ScopedEnv env("COIL_COMPILE_THREADS", "3");
  testing::PrivateCache cache("tu-model-cache");
  std::vector<Tensor> in = testing::random_inputs(g);
  for (int64_t j = 0; j < in[1].numel(); ++j) in[1].set_from_double(j, static_cast<double>(j * 4));
  CompiledModel cold = compile(g);
  ASSERT_EQ(entry_units(cold), 3);
  CompiledModel warm = compile(g);
  EXPECT_TRUE(warm.report().model_cache_hit);
  EXPECT_EQ(warm.report().source, cold.report().source);
  EXPECT_EQ(warm.report().so_path, cold.report().so_path);
  std::vector<Tensor> a = cold.run(in), b = warm.run(in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o)
    EXPECT_EQ(std::memcmp(a[o].data(), b[o].data(),
                          static_cast<size_t>(a[o].numel()) * dtype_size(a[o].dtype())),
              0);
}

TEST_F(TranslationUnits, CompileErrorNamesTheUnit) {
  CompileResult ok = compile_cached(std::vector<std::string>{
      "extern \"C\" __attribute__((visibility(\"hidden\"))) int coil_tu_g();\n"
      "extern \"C\" int f() { return coil_tu_g() + 1; }\n",
      "extern \"C\" __attribute__((visibility(\"hidden\"))) int coil_tu_g() { return 41; }\n"});
  EXPECT_EQ(ok.units, 2);
  EXPECT_EQ(SharedLibrary::open(ok.so_path)->symbol_as<int (*)()>("f")(), 42);
  fs::path entry = ok.so_path.parent_path();
  EXPECT_TRUE(fs::exists(entry / "unit0.cpp") && fs::exists(entry / "unit1.cpp"));
  EXPECT_FALSE(fs::exists(entry / "unit0.o")) << "objects are not kept";
  EXPECT_EQ(std::count(ok.command.begin(), ok.command.end(), '\n'), 2) << ok.command;
  EXPECT_TRUE(exported_symbols(ok.so_path).count("f"));
  EXPECT_FALSE(exported_symbols(ok.so_path).count("coil_tu_g"));
  EXPECT_TRUE(
      compile_cached(std::vector<std::string>{
                         "extern \"C\" __attribute__((visibility(\"hidden\"))) int coil_tu_g();\n"
                         "extern \"C\" int f() { return coil_tu_g() + 1; }\n",
                         "extern \"C\" __attribute__((visibility(\"hidden\"))) int coil_tu_g() { "
                         "return 41; }\n"})
          .cache_hit);

  const std::string bad = "int g() { return coil_tu_undefined_name; }\n";
  std::string msg = testing::error_of([&] {
    compile_cached(
        std::vector<std::string>{"int f() { return 1; }\n", bad, "int h() { return 2; }\n"});
  });
  EXPECT_NE(msg.find("compiling generated code failed in translation unit 1 of 3"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("coil_tu_undefined_name"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" -c "), std::string::npos) << msg;  // the command compiles the one unit
  const fs::path failed = cache_root() / "failed";
  bool kept = false;
  for (const auto& e : fs::directory_iterator(failed)) {
    std::string name = e.path().filename().string();
    if (name.size() > 10 && name.substr(name.size() - 10) == ".unit1.cpp") {
      EXPECT_NE(msg.find(e.path().string()), std::string::npos) << msg;
      std::ifstream f(e.path());
      kept = std::string(std::istreambuf_iterator<char>(f), {}) == bad;
    }
  }
  EXPECT_TRUE(kept) << "failed/ keeps the failing unit's source";
}

TEST(CompileThreads, ReadsThePositiveIntegerOfTheVariable) {
  {
    ScopedEnv env("COIL_COMPILE_THREADS", nullptr);
    EXPECT_GE(compile_threads(), 1);
  }
  {
    ScopedEnv env("COIL_COMPILE_THREADS", "5");
    EXPECT_EQ(compile_threads(), 5);
  }
  for (const char* bad : {"0", "-2", "two", "3x", " 4", "99999999999"}) {
    ScopedEnv env("COIL_COMPILE_THREADS", bad);
    std::string msg = testing::error_of([] { compile_threads(); });
    EXPECT_NE(msg.find(fmt::format("COIL_COMPILE_THREADS='{}' is not a positive integer", bad)),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace coil
