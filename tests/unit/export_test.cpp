// Exported models (runtime/artifact.h, coil/runtime.h): CompiledModel::export_to writes a
// directory that ExportedModel::load runs with the runtime alone. Each model is compared with
// its CompiledModel bit for bit (the same code on the same weights) and with the reference
// interpreter; then every way an export can be wrong is an error naming the file and the
// difference. Runs of one export from several threads are in tests/concurrency; a deployment
// with no compiler on PATH, linked with libcoil_runtime alone, in tests/install.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coil/coil.h"
#include "coil/runtime.h"
#include "graph/interpreter.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "support/error_of.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A fresh directory per test (exports of one path in one process must hold one module).
fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-exports" /
                 fmt::format("{}-{}-{}", name, ::getpid(),
                             std::chrono::steady_clock::now().time_since_epoch().count());
  fs::remove_all(dir);
  return dir;
}

Tensor seeded(DType dtype, std::vector<int64_t> shape, uint64_t seed) {
  return random_tensor(dtype, shape, seed, -1.0, 1.0);
}

// y = gelu(x @ W + b) and z = sum(y, -1): W packed by the matmul template (odd sizes), two
// outputs, constants that are not matmul operands.
Graph mlp(int64_t rows, int64_t k, int64_t n) {
  Graph g;
  int x = g.add_input("x", DType::F32, make_shape({rows, k}));
  int w = g.add_constant(seeded(DType::F32, {k, n}, 11), "w");
  int b = g.add_constant(seeded(DType::F32, {n}, 12), "b");
  int y = g.add_node("gelu", {g.add_node("add", {g.add_node("matmul", {x, w}), b})});
  g.add_output(y, "y");
  g.add_output(g.add_node("sum", {y}, Attrs{{"axes", std::vector<int64_t>{-1}}}), "z");
  return g;
}

void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape());
    ASSERT_EQ(got[i].dtype(), want[i].dtype());
    size_t bytes = static_cast<size_t>(got[i].numel() * dtype_size(got[i].dtype()));
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), bytes), 0) << "output " << i;
  }
}

void expect_matches_reference(const Graph& g, const std::vector<Tensor>& got,
                              const std::vector<Tensor>& inputs) {
  std::vector<Tensor> want = interpret(g, inputs);
  for (size_t i = 0; i < got.size(); ++i) {
    CompareResult c = compare_tensors(got[i], want[i], default_tolerance(got[i].dtype()));
    EXPECT_TRUE(c.ok) << "output " << i << ": " << c.message;
  }
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

TEST(Export, MatmulModelsMatchTheCompiledModelBitForBit) {
  for (auto [rows, k, n] : {std::array<int64_t, 3>{1, 7, 5}, {13, 64, 33}, {37, 130, 97}}) {
    SCOPED_TRACE(fmt::format("{}x{} @ {}x{}", rows, k, k, n));
    Graph g = mlp(rows, k, n);
    CompiledModel m = compile(g);
    fs::path dir = fresh_dir("mlp");
    m.export_to(dir);
    for (const char* f : {"manifest.json", "module.so", "weights.bin"})
      EXPECT_TRUE(fs::exists(dir / f)) << f;
    ExportedModel e = ExportedModel::load(dir);
    EXPECT_EQ(e.inputs().size(), 1u);
    EXPECT_EQ(e.outputs().size(), 2u);
    EXPECT_EQ(e.outputs()[1].name, "z");
    EXPECT_EQ(e.info().kernels.size(), m.report().kernels.size());
    // The constants and the packed weights are in weights.bin: at least W and b.
    EXPECT_GE(e.info().weights_bytes, (k * n + n) * 4);
    std::vector<Tensor> inputs{seeded(DType::F32, {rows, k}, 3)};
    std::vector<Tensor> got = e.run(inputs);
    expect_same(got, m.run(inputs));
    expect_matches_reference(g, got, inputs);
    // A strided input is copied, as for a compiled model.
    Tensor wide = seeded(DType::F32, {rows, 2 * k}, 4);
    TensorRef strided = wide.ref();
    strided.shape = {rows, k};
    strided.strides = {2 * k, 2};
    expect_same(e.run(std::vector<TensorRef>{strided}), m.run(std::vector<TensorRef>{strided}));
  }
}

TEST(Export, RunChecksAndIntegerInputsTravelWithTheModel) {
  // An embedding lookup: the table a constant, the ids an input (a run-time check).
  Graph with_table;
  {
    Graph t;
    int table = t.add_constant(seeded(DType::F32, {10, 8}, 5), "table");
    int ids = t.add_input("ids", DType::I64, make_shape({3, 5}));
    int scale = t.add_input("scale", DType::F32, make_shape({8}));
    int y = t.add_node("gather", {table, ids}, Attrs{{"axis", int64_t{0}}});
    t.add_output(t.add_node("mul", {y, scale}), "z");
    with_table = std::move(t);
  }
  CompiledModel m = compile(with_table);
  fs::path dir = fresh_dir("embedding");
  m.export_to(dir);
  ExportedModel e = ExportedModel::load(dir);
  Tensor ids = Tensor::empty(DType::I64, {3, 5});
  for (int64_t i = 0; i < 15; ++i) ids.data_as<int64_t>()[i] = (i * 3) % 20 - 10;  // -10..9
  std::vector<Tensor> inputs{ids, seeded(DType::F32, {8}, 6)};
  std::vector<Tensor> got = e.run(inputs);
  expect_same(got, m.run(inputs));
  expect_matches_reference(with_table, got, inputs);
  ids.data_as<int64_t>()[7] = 42;
  std::string err = error_of([&] { e.run(inputs); });
  EXPECT_NE(err.find("index 42 is out of range for a dim of size 10"), std::string::npos) << err;
}

TEST(Export, ModelWithoutWeights) {
  Graph g = parse_graph("input x: f32[4, 9]\ny = softmax(x) {axis=-1}\noutput y\n");
  CompiledModel m = compile(g);
  fs::path dir = fresh_dir("softmax");
  m.export_to(dir);
  ExportedModel e = ExportedModel::load(dir);
  EXPECT_EQ(e.info().weights_bytes, 0);
  std::vector<Tensor> inputs{seeded(DType::F32, {4, 9}, 7)};
  expect_same(e.run(inputs), m.run(inputs));
}

TEST(Export, InputsAreCheckedAsACompiledModelChecksThem) {
  CompiledModel m = compile(mlp(3, 8, 4));
  fs::path dir = fresh_dir("inputs");
  m.export_to(dir);
  ExportedModel e = ExportedModel::load(dir);
  EXPECT_NE(error_of([&] { e.run(std::vector<Tensor>{}); }).find("takes 1 inputs, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.run({seeded(DType::F32, {3, 9}, 1)});
            }).find("input x: expected shape [3, 8], got [3, 9]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              e.run({seeded(DType::F64, {3, 8}, 1)});
            }).find("input x: expected dtype f32, got f64"),
            std::string::npos);
  ExportedModel empty;
  EXPECT_NE(error_of([&] { empty.run(std::vector<Tensor>{}); }).find("the model is empty"),
            std::string::npos);
}

// Each damaged or foreign export is refused before any of its code runs, naming what is wrong.
TEST(Export, DamagedExportsAreRefused) {
  CompiledModel m = compile(mlp(5, 16, 12));
  auto exported = [&](const std::string& name) {
    fs::path dir = fresh_dir(name);
    m.export_to(dir);
    return dir;
  };
  auto load_error = [](const fs::path& dir) { return error_of([&] { ExportedModel::load(dir); }); };

  fs::path missing = fresh_dir("missing");
  EXPECT_NE(load_error(missing).find("not a directory"), std::string::npos);
  fs::create_directories(missing);
  EXPECT_NE(load_error(missing).find("no manifest.json"), std::string::npos);

  fs::path weights = exported("weights");
  std::string w = read(weights / "weights.bin");
  w[w.size() / 2] ^= 0x40;
  write(weights / "weights.bin", w);
  std::string err = load_error(weights);
  EXPECT_NE(err.find("weights.bin: its checksum differs"), std::string::npos) << err;
  write(weights / "weights.bin", w.substr(0, w.size() - 4));
  err = load_error(weights);
  EXPECT_NE(err.find("the manifest says"), std::string::npos) << err;

  fs::path module = exported("module");
  std::string so = read(module / "module.so");
  so[so.size() - 1] ^= 1;
  write(module / "module.so", so);
  err = load_error(module);
  EXPECT_NE(err.find("module.so: its checksum differs"), std::string::npos) << err;

  auto edit_manifest = [&](const std::string& name, auto edit) {
    fs::path dir = exported(name);
    nlohmann::json j = nlohmann::json::parse(read(dir / "manifest.json"));
    edit(j);
    write(dir / "manifest.json", j.dump());
    return load_error(dir);
  };
  err = edit_manifest("version", [](nlohmann::json& j) { j["coil_version"] = "0.0.1"; });
  EXPECT_NE(err.find("exported by coil 0.0.1, this runtime is coil"), std::string::npos) << err;
  err = edit_manifest("format", [](nlohmann::json& j) { j["format"] = "coil-export-v0"; });
  EXPECT_NE(err.find("format 'coil-export-v0'"), std::string::npos) << err;
  err = edit_manifest("isa", [](nlohmann::json& j) { j["cpu_features"].push_back("amx_fp64"); });
  EXPECT_NE(err.find("needs the CPU feature 'amx_fp64', which this CPU lacks"), std::string::npos)
      << err;
  err = edit_manifest("dtype", [](nlohmann::json& j) { j["inputs"][0]["dtype"] = "f31"; });
  EXPECT_NE(err.find("not a valid manifest"), std::string::npos) << err;
  EXPECT_NE(err.find("f31"), std::string::npos) << err;
  err = edit_manifest(
      "blob", [](nlohmann::json& j) { j["weights"]["constants"][0]["offset"] = int64_t{1} << 40; });
  EXPECT_NE(err.find("lies outside weights.bin"), std::string::npos) << err;
  err = edit_manifest("json", [](nlohmann::json& j) { j.erase("arena_bytes"); });
  EXPECT_NE(err.find("arena_bytes"), std::string::npos) << err;
}

// dlopen keeps the first module loaded from a path: a directory exported again with another
// model, while this process holds the old one, is refused instead of running the old code.
TEST(Export, AnotherModelAtALoadedPathIsRefused) {
  fs::path dir = fresh_dir("replaced");
  CompiledModel a = compile(mlp(2, 8, 4));
  a.export_to(dir);
  ExportedModel first = ExportedModel::load(dir);
  a.export_to(dir);  // the same model again: same module, loads
  ExportedModel again = ExportedModel::load(dir);
  compile(mlp(2, 8, 6)).export_to(dir);
  std::string err = error_of([&] { ExportedModel::load(dir); });
  EXPECT_NE(err.find("loaded another module from this path"), std::string::npos) << err;
}

TEST(Export, ThreadsRunOneExport) {
  Graph g = mlp(9, 40, 24);
  CompiledModel m = compile(g);
  fs::path dir = fresh_dir("threads");
  m.export_to(dir);
  ExportedModel e = ExportedModel::load(dir);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) {
        std::vector<Tensor> in{seeded(DType::F32, {9, 40}, 100 + 10 * t + r)};
        std::vector<Tensor> got = e.run(in), want = m.run(in);
        for (size_t i = 0; i < got.size(); ++i)
          if (std::memcmp(got[i].data(), want[i].data(), static_cast<size_t>(got[i].numel()) * 4) !=
              0)
            errors[t] = fmt::format("thread {} run {} output {} differs", t, r, i);
      }
    });
  for (auto& th : threads) th.join();
  for (const std::string& s : errors) EXPECT_EQ(s, "");
}

}  // namespace
}  // namespace coil

namespace coil {
namespace {

// GPU exports run only where a GPU is (bench/gpu/aot.sh on the GPU machine); here, what a
// machine without one (or without the export) gets: clear errors, never a crash.
TEST(GpuExport, ErrorsWhereThereIsNoGpuOrNoExport) {
  fs::path dir = fresh_dir("gpu");
  fs::create_directories(dir);
  std::string err = error_of([&] { GpuExportedModel::load(dir); });
  EXPECT_NE(err.find("no gpu_manifest.json"), std::string::npos) << err;
  write(dir / "gpu_manifest.json",
        R"({"format": "coil-gpu-export-v1", "device": "NVIDIA H200", "capability": [9, 0],
            "inputs": [{"name": "x", "dtype": "f32", "shape": [4]}],
            "outputs": [{"name": "y", "dtype": "f32", "shape": [4]}],
            "buffers": [], "kernels": [], "launches": [], "weights_bytes": 0})");
  err = error_of([&] { GpuExportedModel::load(dir); });
  // The manifest is checked before the driver is loaded: its input has no buffer.
  EXPECT_NE(err.find("input 0 has no buffer"), std::string::npos) << err;
  write(dir / "gpu_manifest.json",
        R"({"format": "coil-gpu-export-v1", "device": "NVIDIA H200", "capability": [9, 0],
            "inputs": [{"name": "x", "dtype": "f32", "shape": [4]}],
            "outputs": [{"name": "y", "dtype": "f32", "shape": [4]}],
            "buffers": [{"kind": "input", "index": 0, "bytes": 16},
                        {"kind": "output", "index": 0, "bytes": 16}],
            "kernels": [], "launches": [], "weights_bytes": 0})");
  err = error_of([&] { GpuExportedModel::load(dir); });
  // No NVIDIA driver (CI), or a driver without that GPU: either way a message, not a crash.
  EXPECT_TRUE(err.find("libcuda.so.1") != std::string::npos ||
              err.find("CUDA error") != std::string::npos ||
              err.find("compute capability") != std::string::npos ||
              err.find("does not exist") != std::string::npos)
      << err;
  write(dir / "gpu_manifest.json", R"({"format": "coil-gpu-export-v0"})");
  err = error_of([&] { GpuExportedModel::load(dir); });
  EXPECT_NE(err.find("format \"coil-gpu-export-v0\", this runtime reads coil-gpu-export-v1"),
            std::string::npos)
      << err;
  GpuExportedModel empty;
  EXPECT_NE(error_of([&] { empty.launch(); }).find("the model is empty"), std::string::npos);
}

}  // namespace
}  // namespace coil
