// The code cache, the toolchain and the loader: compile, hit, corruption, concurrency (threads
// and processes), compiler errors, an unsafe cache directory.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "coil/error.h"
#include "runtime/code_cache.h"
#include "runtime/embedded_headers.h"
#include "runtime/loader.h"
#include "support/check.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Each test gets a fresh cache directory in COIL_CACHE_DIR for its duration.
class CodeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("COIL_CACHE_DIR")) saved_ = old;
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::path(COIL_BINARY_DIR) / "test-cache" / fmt::format("{}-{}", name_, ::getpid());
    fs::remove_all(dir_);
    ::setenv("COIL_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_.empty()) {
      ::unsetenv("COIL_CACHE_DIR");
    } else {
      ::setenv("COIL_CACHE_DIR", saved_.c_str(), 1);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A source that no other test, process or earlier run has compiled.
  std::string unique_source(const std::string& body = "extern \"C\" int f() { return 42; }") {
    static std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("// {} pid {} nonce {:x}\n{}\n", name_, ::getpid(), rng(), body);
  }

  static int call_f(const fs::path& so) {
    std::shared_ptr<SharedLibrary> lib = SharedLibrary::open(so);
    return lib->symbol_as<int (*)()>("f")();
  }

  // Names in the entry's shard directory (temp and corrupt dirs must not be left behind).
  static std::vector<std::string> shard_listing(const CompileResult& r) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(r.so_path.parent_path().parent_path())) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  std::string saved_;
  std::string name_;
  fs::path dir_;
};

TEST_F(CodeCacheTest, CompilesLoadsAndHits) {
  std::string source = unique_source();
  CompileResult first = compile_cached(source);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_GT(first.compile_seconds, 0.0);
  EXPECT_EQ(first.key.size(), 32u);
  EXPECT_EQ(first.so_path, cache_root() / first.key.substr(0, 2) / first.key / "module.so");
  EXPECT_EQ(call_f(first.so_path), 42);
  fs::path entry = first.so_path.parent_path();
  for (const char* f : {"source.cpp", "module.so.xxh", "command.txt"}) {
    EXPECT_TRUE(fs::exists(entry / f)) << f;
  }
  EXPECT_TRUE(contains(first.command, "-ffp-contract=off")) << first.command;

  CompileResult second = compile_cached(source);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.compile_seconds, 0.0);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(second.so_path, first.so_path);
  EXPECT_EQ(shard_listing(second), std::vector<std::string>{first.key});
}

TEST_F(CodeCacheTest, KeyDependsOnSourceAndFlagsNotOnLocation) {
  std::string source = unique_source();
  CompileResult a = compile_cached(source);
  ::setenv("COIL_CACHE_DIR", (dir_ / "elsewhere").c_str(), 1);
  CompileResult b = compile_cached(source);
  EXPECT_FALSE(b.cache_hit);
  EXPECT_EQ(a.key, b.key);
  EXPECT_NE(a.so_path, b.so_path);
  CompileResult c = compile_cached(source, CompileFlags{{"-DCOIL_UNUSED_FLAG=1"}});
  EXPECT_NE(c.key, a.key);
  EXPECT_NE(compile_cached(source + " ").key, a.key);
}

TEST_F(CodeCacheTest, ExtraFlagsReachTheCompiler) {
  std::string source = unique_source("extern \"C\" int f() { return COIL_TEST_VALUE; }");
  CompileResult r = compile_cached(source, CompileFlags{{"-DCOIL_TEST_VALUE=7"}});
  EXPECT_EQ(call_f(r.so_path), 7);
  EXPECT_TRUE(contains(r.command, "-DCOIL_TEST_VALUE=7"));
}

TEST_F(CodeCacheTest, CorruptEntriesAreRebuilt) {
  std::string source = unique_source();
  fs::path so = compile_cached(source).so_path;
  // Each damage is detected on lookup, the entry rebuilt, and the module still works.
  std::vector<std::pair<std::string, std::function<void()>>> damages = {
      {"overwritten bytes",
       [&] {
         std::fstream f(so, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(static_cast<std::streamoff>(fs::file_size(so) / 2));
         f.write("garbage!", 8);
       }},
      {"truncated", [&] { fs::resize_file(so, fs::file_size(so) / 3); }},
      {"missing checksum", [&] { fs::remove(so.string() + ".xxh"); }},
      {"missing module", [&] { fs::remove(so); }},
  };
  for (auto& [what, damage] : damages) {
    SCOPED_TRACE(what);
    damage();
    CompileResult r = compile_cached(source);
    EXPECT_FALSE(r.cache_hit);
    EXPECT_EQ(r.so_path, so);
    EXPECT_EQ(call_f(r.so_path), 42);
    EXPECT_TRUE(compile_cached(source).cache_hit);
    EXPECT_EQ(shard_listing(r).size(), 1u);
  }
}

TEST_F(CodeCacheTest, ConcurrentProcessesShareOneEntry) {
  std::string source = unique_source();
  Toolchain::get();  // discover once, before forking
  // The children block on the pipe until the parent closes it, so that they start together.
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(gate[1]);
      char c;
      (void)!::read(gate[0], &c, 1);
      int rc = 0;
      try {
        rc = call_f(compile_cached(source).so_path) == 42 ? 0 : 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
        rc = 1;
      }
      ::_exit(rc);  // no gtest teardown, no atexit handlers in the child
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  CompileResult r = compile_cached(source);
  EXPECT_TRUE(r.cache_hit);
  EXPECT_EQ(shard_listing(r), std::vector<std::string>{r.key});
}

TEST_F(CodeCacheTest, ConcurrentThreadsShareOneEntry) {
  std::string source = unique_source();
  std::vector<CompileResult> results(6);
  std::vector<std::string> errors(results.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        results[i] = compile_cached(source);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(errors[i], "");
    EXPECT_EQ(results[i].so_path, results[0].so_path);
  }
  EXPECT_EQ(call_f(results[0].so_path), 42);
  EXPECT_EQ(shard_listing(results[0]).size(), 1u);
}

TEST_F(CodeCacheTest, CompilerErrorIsReported) {
  std::string source = unique_source("extern \"C\" int f() { return coil_undefined_name; }");
  try {
    compile_cached(source);
    FAIL() << "expected coil::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "compiling generated code failed")) << msg;
    EXPECT_TRUE(contains(msg, "coil_undefined_name")) << msg;  // the compiler's diagnostic
    EXPECT_TRUE(contains(msg, "-ffp-contract=off")) << msg;    // the command
    EXPECT_TRUE(contains(msg, (cache_root() / "failed").string())) << msg;
  }
  // The failing source is kept for the user to look at; nothing is left in the shard.
  bool kept = false;
  for (const auto& e : fs::directory_iterator(cache_root() / "failed")) {
    if (e.path().extension() == ".cpp") {
      std::ifstream in(e.path());
      kept = std::string(std::istreambuf_iterator<char>(in), {}) == source;
    }
  }
  EXPECT_TRUE(kept);
}

TEST_F(CodeCacheTest, WorldWritableCacheDirIsRefused) {
  fs::create_directories(dir_);
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) {
        cache_root();
      } else {
        compile_cached(unique_source());
      }
      FAIL() << "expected coil::Error";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), dir_.string())) << e.what();
      EXPECT_TRUE(contains(e.what(), "world-writable")) << e.what();
    }
  }
}

TEST_F(CodeCacheTest, NewCacheDirIsPrivate) {
  fs::path root = cache_root();
  EXPECT_EQ(root, dir_);
  struct stat st;
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(CodeCacheTest, EmbeddedHeadersAreOnTheIncludePath) {
  std::string includes;
  for (const EmbeddedFile& f : embedded_kernel_headers())
    includes += fmt::format("#include \"{}\"\n", f.name);
  ASSERT_FALSE(includes.empty());
  CompileResult r = compile_cached(unique_source(includes + "extern \"C\" int f() { return 42; }"));
  EXPECT_EQ(call_f(r.so_path), 42);
}

TEST_F(CodeCacheTest, LoaderErrors) {
  EXPECT_THROW(SharedLibrary::open(dir_ / "no-such.so"), Error);
  CompileResult r = compile_cached(unique_source());
  std::shared_ptr<SharedLibrary> lib = SharedLibrary::open(r.so_path);
  EXPECT_EQ(SharedLibrary::open(r.so_path), lib);  // one wrapper per path while open
  try {
    lib->symbol("coil_no_such_symbol");
    FAIL() << "expected coil::Error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "coil_no_such_symbol")) << e.what();
    EXPECT_TRUE(contains(e.what(), r.so_path.string())) << e.what();
  }
}

TEST(Toolchain, FlagsAndCommand) {
  const Toolchain& t = Toolchain::get();
  EXPECT_FALSE(t.version.empty());
  EXPECT_TRUE(fs::path(t.cxx).is_absolute());
  std::vector<std::string> flags = t.base_flags();
  for (const char* f : {"-O3", "-shared", "-fPIC", "-march=native", "-fopenmp", "-ffp-contract=off",
                        "-fno-math-errno", "-fno-trapping-math"}) {
    EXPECT_NE(std::find(flags.begin(), flags.end(), f), flags.end()) << f;
  }
  EXPECT_EQ(std::find(flags.begin(), flags.end(), "-ffast-math"), flags.end());
  std::vector<std::string> cmd =
      t.shared_object_command("a.cpp", "a.so", "inc", {{"-mfoo", "-mbar"}});
  ASSERT_GE(cmd.size(), 6u);
  EXPECT_EQ(cmd[0], t.cxx);
  EXPECT_EQ(std::vector<std::string>(cmd.end() - 6, cmd.end()),
            (std::vector<std::string>{"-mfoo", "-mbar", "-Iinc", "a.cpp", "-o", "a.so"}));
}

TEST(Toolchain, DebugEnvSwitchesToO0) {
  ::setenv("COIL_COMPILE_DEBUG", "1", 1);
  std::vector<std::string> flags = Toolchain::for_compiler(Toolchain::get().cxx).base_flags();
  ::unsetenv("COIL_COMPILE_DEBUG");
  EXPECT_NE(std::find(flags.begin(), flags.end(), "-O0"), flags.end());
  EXPECT_NE(std::find(flags.begin(), flags.end(), "-g"), flags.end());
  EXPECT_EQ(std::find(flags.begin(), flags.end(), "-O3"), flags.end());
}

TEST(Toolchain, RunProcessCapturesOutputAndStatus) {
  ProcessResult r = run_process({"/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 3"});
  EXPECT_EQ(r.status, 3);
  EXPECT_TRUE(contains(r.output, "to-out") && contains(r.output, "to-err")) << r.output;
  EXPECT_THROW(run_process({"/nonexistent/coil-program"}), Error);
  EXPECT_EQ(command_string({"g++", "-DX=a b", "it's"}), "g++ '-DX=a b' 'it'\\''s'");
}

// gcc and clang both build OpenMP kernels that load into this process (clang links libomp,
// which must coexist with the libgomp that a gcc-built coil uses).
TEST(Toolchain, EveryCompilerBuildsLoadableOpenMPModules) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cache" / fmt::format("omp-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "omp.cpp") << "#include <omp.h>\n"
                                    "extern \"C\" long f() {\n  long s = 0;\n"
                                    "#pragma omp parallel for reduction(+ : s)\n"
                                    "  for (long i = 0; i < 1000; ++i) s += i;\n  return s;\n}\n";
  int tested = 0;
  for (const char* cxx : {"g++", "clang++", "clang++-14"}) {
    SCOPED_TRACE(cxx);
    Toolchain t;
    try {
      t = Toolchain::for_compiler(cxx);
    } catch (const Error&) {
      continue;  // not installed
    }
    fs::path so = dir / fmt::format("omp-{}.so", cxx);
    ProcessResult r = run_process(t.shared_object_command(dir / "omp.cpp", so, dir, {}));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(SharedLibrary::open(so)->symbol_as<long (*)()>("f")(), 499500);
    ++tested;
  }
  EXPECT_GE(tested, 1);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace coil
