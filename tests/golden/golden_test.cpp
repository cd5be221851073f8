// Golden files: the generated C++ for a fixed corpus of graphs (tests/golden/data/*.coil) must
// match the checked-in tests/golden/data/*.cpp byte for byte ("process replay": a refactor
// shows zero diff). When a change alters generated code on purpose, regenerate with
//   COIL_UPDATE_GOLDEN=1 ./build/tests/coil_golden_tests
// and say why in the commit message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/text_format.h"
#include "runtime/pipeline.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> corpus() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(COIL_SOURCE_DIR) / "tests/golden/data"))
    if (e.path().extension() == ".coil") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

/// Golden files are generated for AVX-512 whatever the machine, so they never depend on it.
CompileOptions golden_options() {
  CompileOptions o;
  o.isa = "avx512";
  o.autotune = false;  // golden code must not depend on timings
  return o;
}

TEST(Golden, GeneratedCppMatchesCheckedInFiles) {
  bool update = std::getenv("COIL_UPDATE_GOLDEN") != nullptr;
  auto files = corpus();
  ASSERT_GE(files.size(), 6u);
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    Graph g = load_graph_file(path);
    std::string source = generate_program(g, golden_options()).module.source;
    fs::path golden = fs::path(path).replace_extension(".cpp");
    if (update) {
      std::ofstream(golden, std::ios::binary) << source;
      continue;
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
}

TEST(Golden, GenerationIsDeterministic) {
  for (const auto& path : corpus()) {
    Graph g = load_graph_file(path);
    EXPECT_EQ(generate_program(g, golden_options()).module.source,
              generate_program(g, golden_options()).module.source)
        << path;
  }
}

}  // namespace
}  // namespace coil
