// Real models exported by torch.onnx at opset 17 (tests/models/export_models.py, random weights
// with fixed seeds): a 3-layer MLP, a LayerNorm + GELU MLP block, nn.TransformerEncoderLayer
// (as primitive ops; also exported with a dynamic batch, checked at another batch than the
// traced one), torchvision's resnet18, mobilenet_v2 and squeezenet1_1 at 224x224. Each test exports
// its model into the build tree, checks what the import made of it (the input's shape, the coil
// ops), then runs `coil check` (the CLI: import, compile, run) against torch's output with
// rtol 1e-3, atol 1e-4. The first six took 18 s at -j2 with an empty code cache (3-8 s each:
// export, g++, autotuning; squeezenet1_1 12 s), so none is marked slow (docs/onnx.md, "Real
// models").
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "coil/coil.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/recognize_attention.h"

namespace coil {
namespace {
namespace fs = std::filesystem;

struct ModelCase {
  std::string name;
  std::string input;             // the imported graph's input shape
  std::vector<std::string> ops;  // coil ops the imported graph must contain
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}

std::string run_logged(const std::string& cmd, const fs::path& log, int* rc) {
  int status = std::system(fmt::format("{} > '{}' 2>&1", cmd, log.string()).c_str());
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class OnnxModels : public ::testing::TestWithParam<ModelCase> {};

TEST_P(OnnxModels, MatchesTorch) {
  const ModelCase& c = GetParam();
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-models" / fmt::format("{}-{}", c.name, getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  int rc = 0;
  std::string out = run_logged(fmt::format("'{}' '{}/tests/models/export_models.py' '{}' {}",
                                           COIL_PYTHON, COIL_SOURCE_DIR, dir.string(), c.name),
                               dir / "export.log", &rc);
  ASSERT_EQ(rc, 0) << "export failed:\n" << out;
  fs::path model = dir / (c.name + ".onnx");

  // The import: one input, every shape computation folded, the expected compute ops.
  Graph g = import_onnx(model);
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(shape_str(g.node(g.inputs()[0]).type.shape), c.input);
  std::set<std::string> ops;
  for (const auto& n : g.nodes()) ops.insert(std::string(n->op_name()));
  for (const auto& op : c.ops) EXPECT_TRUE(ops.count(op)) << op << " missing in\n" << to_text(g);
  // The transformer's written-out self-attention becomes one attention node (the flash kernel).
  int attention_rewrites = 0;
  recognize_attention(g, &attention_rewrites);
  int layers = c.name == "encoder_dynamic" ? 2 : c.name.rfind("transformer", 0) == 0 ? 1 : 0;
  EXPECT_EQ(attention_rewrites, layers);

  std::string args = fmt::format(
      "check '{}' --input x='{}' --expect y='{}' --rtol 1e-3 --atol 1e-4", model.string(),
      (dir / (c.name + "_in.npy")).string(), (dir / (c.name + "_out.npy")).string());
  out = run_logged(fmt::format("'{}' {}", COIL_CLI, args), dir / "check.log", &rc);
  EXPECT_EQ(rc, 0) << "coil " << args << "\n" << out;
  EXPECT_NE(out.find("check passed"), std::string::npos) << out;
  std::cout << out;
  if (!HasFailure()) fs::remove_all(dir);
}

std::string case_name(const ::testing::TestParamInfo<ModelCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Torch, OnnxModels,
    ::testing::Values(
        ModelCase{"mlp", "[16, 512]", {"addmm", "relu"}},
        ModelCase{"ln_gelu_mlp", "[4, 64, 256]", {"layer_norm", "matmul", "erf"}},
        ModelCase{"transformer", "[2, 64, 256]", {"layer_norm", "matmul", "softmax", "reshape"}},
        ModelCase{"resnet18", "[1, 3, 224, 224]", {"conv2d", "max_pool2d", "addmm"}},
        ModelCase{"mobilenet_v2", "[1, 3, 224, 224]", {"conv2d", "clamp", "addmm"}},
        ModelCase{"squeezenet1_1", "[1, 3, 224, 224]", {"conv2d", "max_pool2d", "concat"}},
        // Recurrent models (onnx_ops_rnn.cpp): int64 tokens into an embedding and two LSTM
        // layers; a bidirectional GRU (linear_before_reset) read at its last states; two
        // bidirectional ReLU RNN layers. GroupNorm: InstanceNormalization on [N, groups, -1].
        ModelCase{"lstm_lm", "[13, 3]", {"gather", "matmul", "sigmoid", "tanh"}},
        ModelCase{"gru_classifier", "[3, 13, 20]", {"matmul", "sigmoid", "tanh", "addmm"}},
        ModelCase{"rnn_relu", "[13, 3, 19]", {"matmul", "relu", "concat"}},
        ModelCase{"groupnorm_cnn", "[2, 3, 17, 19]", {"conv2d", "sigmoid", "addmm"}},
        // ConvTranspose, bilinear and nearest Resize, GroupNorm (InstanceNormalization).
        ModelCase{"unet", "[1, 3, 64, 64]", {"conv2d", "gather", "expand", "concat"}},
        // Exported with a dynamic batch: its shape subgraphs compute on the symbol `batch`.
        ModelCase{"transformer_dynbatch", "[batch, 64, 256]", {"layer_norm", "matmul", "softmax"}},
        // The U-Net traced at batch 1, run at batch 2: Resize and ConvTranspose keep the batch
        // symbolic.
        ModelCase{"unet_dynbatch", "[batch, 3, 64, 64]", {"conv2d", "gather", "expand", "where"}},
        // A dynamic sequence length and batch: the attention's reshapes to [seq, 4*batch, 16]
        // and back (onnx_ops_split_view.cpp); `coil check` binds both from the input.
        // onnx_dynamic_model_test.cpp runs it at 20 sizes through one size-generic model.
        ModelCase{"encoder_dynamic", "[seq, batch, 64]", {"layer_norm", "matmul", "concat"}}),
    case_name);

}  // namespace
}  // namespace coil
