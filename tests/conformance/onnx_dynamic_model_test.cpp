// A model exported with a dynamic batch AND a dynamic sequence length (issue 20): torch's
// 2-layer nn.TransformerEncoder (tests/models/export_models.py, `encoder_dynamic`), whose
// attention reshapes to [seq, 4*batch, 16] and back from [seq*batch, 64]
// (onnx_ops_split_view.cpp). It is imported once, compiled once with no size bound (a
// size-generic model, docs/dynamic-shapes.md) and run at 20 (batch, seq) pairs against torch's
// outputs, which the export script saved for each pair; and the same encoder called with a
// padding mask (a second input), at 6 pairs.
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

// Runs tests/models/export_models.py for `name` into a fresh directory, which it returns
// (a test failure, and an empty path, when the export fails).
fs::path export_model(const std::string& name) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-models" / fmt::format("{}-{}", name, getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string cmd =
      fmt::format("'{}' '{}/tests/models/export_models.py' '{}' {} > '{}' 2>&1", COIL_PYTHON,
                  COIL_SOURCE_DIR, dir.string(), name, (dir / "export.log").string());
  int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "export failed: " << cmd;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? dir : fs::path();
}

// Exports `name`, imports it, compiles it once with no size bound and runs it at each
// (batch, seq) pair of <name>_sizes.txt on the saved inputs (<name>_<input>_<batch>x<seq>.npy,
// x [seq, batch, 64] first) against torch's outputs. Returns the number of pairs.
int run_all_sizes(const std::string& name, const std::vector<std::string>& inputs) {
  const fs::path dir = export_model(name);
  if (dir.empty()) return 0;

  Graph g = import_onnx(dir / (name + ".onnx"));
  EXPECT_EQ(g.inputs().size(), inputs.size());
  EXPECT_EQ(shape_str(g.node(g.inputs()[0]).type.shape), "[seq, batch, 64]");
  EXPECT_EQ(shape_str(g.node(g.outputs()[0].node).type.shape), "[seq, batch, 64]");

  CompiledModel m = compile(g);  // no sizes bound
  EXPECT_TRUE(m.size_generic());
  std::ifstream sizes(dir / (name + "_sizes.txt"));
  int64_t batch = 0, seq = 0;
  int pairs = 0;
  Tolerance tol{1e-3, 1e-4};  // against torch's float32 (docs/onnx.md, "Real models")
  double worst_abs = 0;
  while (sizes >> batch >> seq) {
    ++pairs;
    std::string tag = fmt::format("{}x{}", batch, seq);
    std::vector<Tensor> in;
    for (const auto& i : inputs)
      in.push_back(read_npy(dir / fmt::format("{}_{}_{}.npy", name, i, tag)));
    Tensor want = read_npy(dir / fmt::format("{}_out_{}.npy", name, tag));
    EXPECT_EQ(in[0].shape(), (std::vector<int64_t>{seq, batch, 64}));
    std::vector<Tensor> got = m.run(in);
    EXPECT_EQ(got.size(), 1u);
    CompareResult c = compare_tensors(got[0], want, tol);
    EXPECT_TRUE(c.ok) << name << " at batch " << batch << ", seq " << seq << ": " << c.message;
    worst_abs = std::max(worst_abs, c.max_abs_error);
  }
  CompiledModel::SizeStats s = m.size_stats();
  std::cout << fmt::format(
      "{}: {} (batch, seq) pairs, worst abs error {:.2g}; size_stats: sizes {}, modules {}, "
      "compiled {}, specialized {}\n",
      name, pairs, worst_abs, s.sizes, s.modules, s.compiled, s.specialized);
  EXPECT_EQ(s.sizes, pairs);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
  return pairs;
}

TEST(OnnxDynamicModel, EncoderMatchesTorchAtEverySizeWithOneCompile) {
  EXPECT_EQ(run_all_sizes("encoder_dynamic", {"in"}), 20);
}

// With src_key_padding_mask, a bool input [batch, seq]: the mask's zeros are a ConstantOfShape
// of [4*batch, 1, seq] (a broadcast value, onnx_context.h) added to the scores.
TEST(OnnxDynamicModel, EncoderWithAPaddingMaskMatchesTorch) {
  EXPECT_EQ(run_all_sizes("encoder_dynamic_mask", {"in", "pad"}), 6);
}

// A language model's decode step with a KV cache (export_models.py, `llama_decode_dynamic`:
// bench/gpu/llama_decode.py's "tiny" Llama): dynamic batch and cache length, the cache grown by
// Concat, rotary embeddings from the position input, grouped-query attention written out
// (MatMul, Softmax, MatMul over expand+reshape'd heads), whose shape arithmetic on the grown
// cache (Shape, Gather, Concat, a Reshape of the shape list to 1-D, Equal/Where fixing up
// Expand's -1) stays symbolic; the logits of the last position (a Slice [-1:] of the symbolic
// sequence). One compile, run at DECODE_SIZES (an empty cache among them) against torch.
TEST(OnnxDynamicModel, LlamaDecodeStepMatchesTorchAtEveryCacheLength) {
  const std::string name = "llama_decode_dynamic";
  const fs::path dir = export_model(name);
  ASSERT_FALSE(dir.empty());
  Graph g = import_onnx(dir / (name + ".onnx"));
  std::vector<std::string> inputs;
  for (int id : g.inputs()) inputs.push_back(g.node(id).name);
  ASSERT_EQ(inputs.size(), 6u);
  EXPECT_EQ(shape_str(g.node(g.inputs()[2]).type.shape), "[batch, 2, past, 16]");
  CompiledModel m = compile(g);
  ASSERT_TRUE(m.size_generic());
  std::ifstream sizes(dir / (name + "_sizes.txt"));
  int64_t batch = 0, past = 0;
  int pairs = 0;
  Tolerance tol{1e-3, 1e-4};
  while (sizes >> batch >> past) {
    ++pairs;
    const std::string tag = fmt::format("{}x{}", batch, past);
    std::vector<Tensor> in;
    for (const std::string& i : inputs)
      in.push_back(read_npy(dir / fmt::format("{}_{}_{}.npy", name, i, tag)));
    std::vector<Tensor> got = m.run(in);
    ASSERT_EQ(got.size(), 5u);
    for (size_t o = 0; o < got.size(); ++o) {
      Tensor want = read_npy(dir / fmt::format("{}_out{}_{}.npy", name, o, tag));
      CompareResult c = compare_tensors(got[o], want, tol);
      EXPECT_TRUE(c.ok) << "output " << o << " at batch " << batch << ", past " << past << ": "
                        << c.message;
    }
  }
  EXPECT_EQ(pairs, 10);
  CompiledModel::SizeStats s = m.size_stats();
  std::cout << fmt::format("{}: {} pairs; size_stats: sizes {}, modules {}, specialized {}\n", name,
                           pairs, s.sizes, s.modules, s.specialized);
  EXPECT_EQ(s.specialized, 0);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace coil
