// Golden files: the generated C++ for a fixed corpus of graphs (tests/golden/data/*.coil) must
// match the checked-in tests/golden/data/*.cpp byte for byte, and the generated Triton module
// for tests/golden/triton/*.coil the checked-in tests/golden/triton/*.py ("process replay": a
// refactor shows zero diff). Each Triton module must also parse as Python (triton itself is not
// installed where CI runs, so nothing is imported). When a change alters generated code on
// purpose, regenerate with
//   COIL_UPDATE_GOLDEN=1 ./build/tests/coil_golden_tests
// and say why in the commit message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "driver/pipeline.h"
#include "graph/text_format.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> corpus(const char* dir = "tests/golden/data") {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(COIL_SOURCE_DIR) / dir))
    if (e.path().extension() == ".coil") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

/// Compares `source` with the golden file (or rewrites it under COIL_UPDATE_GOLDEN).
void check_golden(const std::string& source, const fs::path& golden) {
  if (std::getenv("COIL_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden, std::ios::binary) << source;
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << "missing " << golden << "; run with COIL_UPDATE_GOLDEN=1";
  std::string expected = read_file(golden);
  if (source != expected) {
    // Point at the first differing line to make the failure readable.
    std::istringstream a(source), b(expected);
    std::string la, lb;
    int line = 1;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
    ADD_FAILURE() << golden.filename() << " differs at line " << line << ":\n  generated: " << la
                  << "\n  golden:    " << lb
                  << "\n(regenerate with COIL_UPDATE_GOLDEN=1 if intended)";
  }
}

/// Golden files are generated for AVX-512 whatever the machine, so they never depend on it.
CompileOptions golden_options() {
  CompileOptions o;
  o.isa = "avx512";
  o.autotune = false;  // golden code must not depend on timings
  return o;
}

TEST(Golden, GeneratedCppMatchesCheckedInFiles) {
  auto files = corpus();
  ASSERT_GE(files.size(), 6u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    Graph g = load_graph_file(path);
    std::string source = generate_program(g, golden_options()).module.source;
    check_golden(source, fs::path(path).replace_extension(".cpp"));
  }
}

// Size-generic modules (tests/golden/dynamic/*.coil): every size symbol stays symbolic, hinted
// at 100; the kernels take the sizes as arguments (ks0, ks1, ... in the order of the symbols'
// names) and the wrapper is coil_graph_run_sized.
TEST(Golden, SizeGenericCppMatchesCheckedInFiles) {
  auto files = corpus("tests/golden/dynamic");
  ASSERT_GE(files.size(), 1u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    Graph g = load_graph_file(path);
    SizeGeneric size_generic;
    std::map<sym::Expr, int64_t> hints;
    for (const sym::Expr& s : g.size_symbols()) {
      hints[sym::make_symbol(fmt::format("ks{}", size_generic.symbols.size()))] = 100;
      size_generic.symbols.push_back(sym::to_string(s));
    }
    sym::SizeHintScope scope(hints);
    std::string source =
        generate_program(g, golden_options(), nullptr, &size_generic).module.source;
    EXPECT_NE(source.find("coil_graph_run_sized"), std::string::npos);
    check_golden(source, fs::path(path).replace_extension(".cpp"));
  }
}

CompileOptions triton_options() {
  CompileOptions o;
  o.device = "cuda";
  return o;
}

// Size-generic Triton modules (tests/golden/triton_dynamic/*.coil): the sizes left unbound
// are kernel arguments (ks0, ... in the symbols' name order) and the wrapper binds them from the
// inputs' shapes, as generate_gpu_module writes them (generated at the representative sizes
// and checked to print the same at others).
TEST(Golden, SizeGenericTritonMatchesCheckedInFiles) {
  auto files = corpus("tests/golden/triton_dynamic");
  ASSERT_GE(files.size(), 4u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    Graph g = load_graph_file(path);
    std::string source = generate_gpu_program(g, triton_options()).triton.source;
    EXPECT_NE(source.find("SIZE_SYMBOLS = {'ks0'"), std::string::npos);
    EXPECT_NE(source.find("runtime.guard_sizes("), std::string::npos);
    check_golden(source, fs::path(path).replace_extension(".py"));
  }
}

TEST(Golden, GeneratedTritonMatchesCheckedInFiles) {
  auto files = corpus("tests/golden/triton");
  ASSERT_GE(files.size(), 12u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    Graph g = load_graph_file(path);
    std::string source = generate_program(g, triton_options()).triton.source;
    check_golden(source, fs::path(path).replace_extension(".py"));
  }
}

TEST(Golden, GeneratedTritonParsesAsPython) {
  const char* python = "/usr/bin/python3";
  if (!fs::exists(python)) GTEST_SKIP() << python << " is not installed";
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-golden-triton";
  fs::create_directories(dir);
  for (const auto& path : corpus("tests/golden/triton")) {
    SCOPED_TRACE(path.filename().string());
    fs::path py = dir / path.filename().replace_extension(".py");
    std::ofstream(py, std::ios::binary)
        << generate_program(load_graph_file(path), triton_options()).triton.source;
    std::string cmd = fmt::format(
        "{} -c \"import ast,sys; ast.parse(open(sys.argv[1]).read())\" '{}'", python, py.string());
    EXPECT_EQ(std::system(cmd.c_str()), 0) << py << " is not valid Python";
  }
}

TEST(Golden, GenerationIsDeterministic) {
  for (const auto& path : corpus()) {
    Graph g = load_graph_file(path);
    EXPECT_EQ(generate_program(g, golden_options()).module.source,
              generate_program(g, golden_options()).module.source)
        << path;
  }
}

TEST(Golden, TritonGenerationIsDeterministic) {
  for (const auto& path : corpus("tests/golden/triton")) {
    Graph g = load_graph_file(path);
    EXPECT_EQ(generate_program(g, triton_options()).triton.source,
              generate_program(g, triton_options()).triton.source)
        << path;
  }
}

}  // namespace
}  // namespace coil
