// A model exported with a dynamic batch AND a dynamic sequence length (issue 20): torch's
// 2-layer nn.TransformerEncoder (tests/models/export_models.py, `encoder_dynamic`), whose
// attention reshapes to [seq, 4*batch, 16] and back from [seq*batch, 64]
// (onnx_ops_split_view.cpp). It is imported once, compiled once with no size bound (a
// size-generic model, docs/dynamic-shapes.md) and run at 20 (batch, seq) pairs against torch's
// outputs, which the export script saved for each pair.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "coil/coil.h"
#include "frontend/onnx/onnx_import.h"
#include "runtime/compare.h"
#include "support/npy.h"

namespace coil {
namespace {
namespace fs = std::filesystem;

TEST(OnnxDynamicModel, EncoderMatchesTorchAtEverySizeWithOneCompile) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-models" / fmt::format("encoder-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string cmd =
      fmt::format("'{}' '{}/tests/models/export_models.py' '{}' encoder_dynamic > '{}' 2>&1",
                  COIL_PYTHON, COIL_SOURCE_DIR, dir.string(), (dir / "export.log").string());
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "export failed: " << cmd;

  Graph g = import_onnx(dir / "encoder_dynamic.onnx");
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(shape_str(g.node(g.inputs()[0]).type.shape), "[seq, batch, 64]");
  EXPECT_EQ(shape_str(g.node(g.outputs()[0].node).type.shape), "[seq, batch, 64]");

  CompiledModel m = compile(g);  // no sizes bound
  ASSERT_TRUE(m.size_generic());
  std::ifstream sizes(dir / "encoder_dynamic_sizes.txt");
  int64_t batch = 0, seq = 0;
  int pairs = 0;
  Tolerance tol{1e-3, 1e-4};  // against torch's float32 (docs/onnx.md, "Real models")
  double worst_abs = 0;
  while (sizes >> batch >> seq) {
    ++pairs;
    std::string tag = fmt::format("{}x{}", batch, seq);
    Tensor x = read_npy(dir / fmt::format("encoder_dynamic_in_{}.npy", tag));
    Tensor want = read_npy(dir / fmt::format("encoder_dynamic_out_{}.npy", tag));
    ASSERT_EQ(x.shape(), (std::vector<int64_t>{seq, batch, 64}));
    std::vector<Tensor> got = m.run({x});
    ASSERT_EQ(got.size(), 1u);
    CompareResult c = compare_tensors(got[0], want, tol);
    EXPECT_TRUE(c.ok) << "batch " << batch << ", seq " << seq << ": " << c.message;
    worst_abs = std::max(worst_abs, c.max_abs_error);
  }
  EXPECT_EQ(pairs, 20);
  CompiledModel::SizeStats s = m.size_stats();
  std::cout << fmt::format(
      "encoder_dynamic: {} (batch, seq) pairs, worst abs error {:.2g}; size_stats: sizes {}, "
      "modules {}, compiled {}, specialized {}\n",
      pairs, worst_abs, s.sizes, s.modules, s.compiled, s.specialized);
  EXPECT_EQ(s.sizes, pairs);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace coil
