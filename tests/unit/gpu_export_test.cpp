// GPU exports (runtime/gpu_export.cpp) where there is no GPU: the manifest is read and checked
// before the driver is loaded, so a wrong manifest (a convolution, a product of another dtype, a
// buffer out of range) gets its own message on any machine; the libraries a model needs (cuDNN,
// cuBLAS, the driver's graph entry points) fail with messages that say what was tried. The GPU
// runs are bench/gpu/aot.sh's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coil/runtime.h"
#include "runtime/cuda_driver.h"
#include "support/error_of.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-exports" /
                 fmt::format("gpu-{}-{}-{}", name, ::getpid(),
                             std::chrono::steady_clock::now().time_since_epoch().count());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A valid manifest: y = conv2d(x, w, b) through cuDNN, then z = y @ m (bf16 would be another
// model: the dtype of one product is what the cases below change).
json manifest() {
  json conv = {{"x", {{"buffer", 0}, {"offset", 0}}},
               {"w", {{"buffer", 2}, {"offset", 0}}},
               {"bias", {{"buffer", 3}, {"offset", 0}}},
               {"out", {{"buffer", 4}, {"offset", 0}}},
               {"x_shape", {1, 4, 8, 8}},
               {"x_strides", {256, 64, 8, 1}},
               {"w_shape", {6, 2, 3, 3}},
               {"out_shape", {1, 6, 8, 8}},
               {"stride", {1, 1}},
               {"padding", {1, 1}},
               {"dilation", {1, 1}},
               {"groups", 2},
               {"dtype", "f32"},
               {"tf32", false}};
  auto operand = [](int buffer, int64_t rows, int64_t cols) {
    return json{{"buffer", buffer},   {"offset", 0},     {"rows", rows}, {"cols", cols},
                {"row_stride", cols}, {"col_stride", 1}, {"batch", 1},   {"batch_stride", 0}};
  };
  json gemm = {{"a", operand(4, 48, 8)},
               {"b", operand(1, 8, 5)},
               {"out", operand(5, 48, 5)},
               {"dtype", "f32"},
               {"math", 0}};
  return {{"format", "coil-gpu-export-v1"},
          {"device", "NVIDIA H200"},
          {"capability", {9, 0}},
          {"inputs",
           {{{"name", "x"}, {"dtype", "f32"}, {"shape", {1, 4, 8, 8}}},
            {{"name", "m"}, {"dtype", "f32"}, {"shape", {8, 5}}}}},
          {"outputs", {{{"name", "z"}, {"dtype", "f32"}, {"shape", {48, 5}}}}},
          {"buffers",
           {{{"kind", "input"}, {"index", 0}, {"bytes", 1024}},
            {{"kind", "input"}, {"index", 1}, {"bytes", 160}},
            {{"kind", "constant"}, {"offset", 0}, {"bytes", 432}},
            {{"kind", "constant"}, {"offset", 512}, {"bytes", 24}},
            {{"kind", "temp"}, {"bytes", 1536}},
            {{"kind", "output"}, {"index", 0}, {"bytes", 960}}}},
          {"kernels", json::array()},
          {"launches", {{{"conv", conv}}, {{"gemm", gemm}}}},
          {"weights_bytes", 536}};
}

std::string load_error(const json& m) {
  fs::path dir = fresh_dir("manifest");
  std::ofstream(dir / "gpu_manifest.json") << m.dump(1);
  return error_of([&] { GpuExportedModel::load(dir); });
}

// What a machine without a driver (CI) or without that GPU says once the manifest is fine.
bool is_device_error(const std::string& err) {
  return err.find("libcuda.so.1") != std::string::npos ||
         err.find("CUDA error") != std::string::npos ||
         err.find("compute capability") != std::string::npos ||
         err.find("does not exist") != std::string::npos;
}

TEST(GpuExport, AValidManifestWithConvolutionsAndProductsGetsAsFarAsTheDevice) {
  std::string err = load_error(manifest());
  EXPECT_TRUE(is_device_error(err)) << err;
  GpuLoadOptions graphs;
  graphs.cuda_graph = true;
  fs::path dir = fresh_dir("graph");
  std::ofstream(dir / "gpu_manifest.json") << manifest().dump(1);
  err = error_of([&] { GpuExportedModel::load(dir, graphs); });
  EXPECT_TRUE(is_device_error(err)) << err;
  GpuExportedModel empty;
  EXPECT_FALSE(empty.uses_cuda_graph());
  EXPECT_NE(error_of([&] { empty.run(std::vector<Tensor>{}); }).find("the model is empty"),
            std::string::npos);
}

TEST(GpuExport, WrongConvolutionsAndProductsAreNamedBeforeTheDeviceIsTouched) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* message;
  };
  std::vector<Case> cases = {
      {"f64 conv", [](json& m) { m["launches"][0]["conv"]["dtype"] = "f64"; },
       "a convolution of dtype f64: cuDNN convolutions are f32, bf16 or f16"},
      {"groups", [](json& m) { m["launches"][0]["conv"]["groups"] = 3; },
       "a convolution of 3 groups with input channels 4 and weight 6x2x3x3"},
      {"3-D conv",
       [](json& m) {
         m["launches"][0]["conv"]["stride"] = {1, 1, 1};
       },
       "a convolution that is not 2-D"},
      {"conv buffer", [](json& m) { m["launches"][0]["conv"]["w"]["buffer"] = 9; },
       "a convolution's weight in buffer 9 (6 buffers)"},
      {"conv field", [](json& m) { m["launches"][0]["conv"].erase("x_strides"); },
       "not a valid manifest"},
      {"conv shape",
       [](json& m) {
         m["launches"][0]["conv"]["out_shape"] = {1, 6, 7, 7};
       },
       "a convolution of input [1, 4, 8, 8] and weight [6, 2, 3, 3] into [1, 6, 7, 7]: its "
       "window gives [1, 6, 8, 8]"},
      {"conv extent", [](json& m) { m["launches"][0]["conv"]["x"]["offset"] = 4; },
       "a convolution's input reaches byte 1028 of buffer 0, which has 1024"},
      {"conv stride",
       [](json& m) {
         m["launches"][0]["conv"]["stride"] = {0, 1};
       },
       "a convolution of stride [0, 1], padding [1, 1], dilation [1, 1]"},
      {"product shapes", [](json& m) { m["launches"][1]["gemm"]["b"]["rows"] = 7; },
       "a matmul of [48x8] (batch 1) and [7x5] (batch 1) into [48x5] (batch 1)"},
      {"product extent", [](json& m) { m["launches"][1]["gemm"]["out"]["offset"] = 8; },
       "a matmul operand reaches byte 968 of buffer 5, which has 960"},
      {"i32 product", [](json& m) { m["launches"][1]["gemm"]["dtype"] = "i32"; },
       "a matmul of dtype i32: cuBLAS products are f32, bf16 or f16"},
      {"product buffer", [](json& m) { m["launches"][1]["gemm"]["b"]["buffer"] = -1; },
       "a matmul operand in buffer -1"},
      {"input index", [](json& m) { m["buffers"][1]["index"] = 5; },
       "input buffer of index 5 (2 inputs)"},
      {"constant", [](json& m) { m["buffers"][3]["offset"] = 520; },
       "a constant lies outside weights.bin"},
      {"capability", [](json& m) { m["capability"] = {9}; },
       "capability [9]: expected [major, minor]"},
      {"kernel",
       [](json& m) {
         m["launches"].push_back({{"kernel", 0}, {"grid", {1}}});
       },
       "a launch of kernel 0"},
  };
  for (const Case& c : cases) {
    json m = manifest();
    c.edit(m);
    std::string err = load_error(m);
    EXPECT_NE(err.find(c.message), std::string::npos) << c.what << ": " << err;
    EXPECT_FALSE(is_device_error(err)) << c.what << ": " << err;
  }
  // The unchanged manifest's bf16 and f16 products read fine.
  for (const char* dt : {"bf16", "f16"}) {
    json m = manifest();
    m["launches"][1]["gemm"]["dtype"] = dt;
    EXPECT_TRUE(is_device_error(load_error(m))) << dt;
  }
}

TEST(GpuExport, LibrariesThatDoNotLoadSayWhatWasTried) {
  std::string err = error_of([] {
    cuda::open_library("/nonexistent/libcudnn.so.9", {"libcudnn.so.9", "libcudnn.so.8"},
                       "a GPU model with convolutions needs cuDNN", "set COIL_CUDNN");
  });
  // A named library or nothing: the list is not tried.
  EXPECT_NE(err.find("a GPU model with convolutions needs cuDNN, and none loads here (tried "
                     "/nonexistent/libcudnn.so.9 ("),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("libcudnn.so.8"), std::string::npos) << err;
  EXPECT_NE(err.find("): set COIL_CUDNN"), std::string::npos) << err;
  err = error_of([] {
    cuda::open_library("", {"libcoil-no-such.so.9", "libcoil-no-such.so.8"}, "X needs Y", "Z");
  });
  EXPECT_NE(err.find("tried libcoil-no-such.so.9 ("), std::string::npos) << err;
  EXPECT_NE(err.find(", libcoil-no-such.so.8 ("), std::string::npos) << err;
  EXPECT_NE(cuda::open_library("", {"libcoil-no-such.so", "libc.so.6"}, "X", "Z"), nullptr);

  // This machine's own: cuDNN and cuBLAS load (a GPU machine) or say how to point at them; the
  // driver's graph entry points are there or named.
  std::string dnn = error_of([] { cuda::dnn(); });
  EXPECT_TRUE(dnn.empty() || dnn.find("needs cuDNN, and none loads here") != std::string::npos)
      << dnn;
  if (!dnn.empty()) {
    EXPECT_NE(dnn.find("COIL_CUDNN"), std::string::npos) << dnn;
  }
  std::string blas = error_of([] { cuda::blas(); });
  EXPECT_TRUE(blas.empty() || blas.find("COIL_CUBLAS") != std::string::npos) << blas;
  std::string graphs = error_of([] { cuda::require_graphs(); });
  EXPECT_TRUE(graphs.empty() || graphs.find("libcuda.so.1") != std::string::npos) << graphs;
}

}  // namespace
}  // namespace coil
