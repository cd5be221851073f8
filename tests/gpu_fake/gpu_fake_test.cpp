// coil::GpuExportedModel on a fake CUDA stack (tests/gpu_fake/fake_gpu.cpp, loaded as
// libcuda.so.1, COIL_CUBLAS and COIL_CUDNN: tests/CMakeLists.txt sets the environment): a model
// with a cuDNN convolution (a strided view of an input, groups, a bias), a kernel reading its
// output, a bf16 batched cuBLAS product with a transposed operand and an f32 product, run with
// launches and as a CUDA graph, through run() and run_device(); every output against a
// reference computed here, bit for bit. What the real GPU does is bench/gpu/aot.sh's; this checks
// the runtime's side: descriptors, operands, argument slots, copies, the capture and replay.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "coil/runtime.h"

namespace {

namespace fs = std::filesystem;

struct Stats {
  int graph_launches = 0, captured_ops = 0, direct_ops = 0, set_stream_while_capturing = 0;
};
Stats stats() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(lib, nullptr) << "the fake driver is not loaded";
  auto fn = reinterpret_cast<void (*)(int*, int*, int*, int*)>(
      lib ? ::dlsym(lib, "coil_fake_gpu_stats") : nullptr);
  Stats s;
  if (fn) fn(&s.graph_launches, &s.captured_ops, &s.direct_ops, &s.set_stream_while_capturing);
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

float bf16_value(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// The model: x f32[1, 4, 6, 6], p bf16[2, 3, 5], q bf16[2, 4, 5], m f32[3, 7]; constants
// w f32[6, 2, 3, 3], bias f32[6], e f32[2, 7] (stored transposed);
//   y0 = relu(conv2d(x[:, :, 1:, 1:], w, bias, stride 2, padding 1, groups 2))  f32[1, 6, 3, 3]
//   y1 = p @ q^T (batched)                                                        bf16[2, 3, 4]
//   y2 = m @ e^T                                                                  f32[3, 2]
struct Model {
  std::vector<float> w, bias, e;
};

std::string manifest(const std::string& kernel) {
  return R"({"format": "coil-gpu-export-v1", "device": "Fake GPU", "capability": [9, 0],
 "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 4, 6, 6]},
            {"name": "p", "dtype": "bf16", "shape": [2, 3, 5]},
            {"name": "q", "dtype": "bf16", "shape": [2, 4, 5]},
            {"name": "m", "dtype": "f32", "shape": [3, 7]}],
 "outputs": [{"name": "y0", "dtype": "f32", "shape": [1, 6, 3, 3]},
             {"name": "y1", "dtype": "bf16", "shape": [2, 3, 4]},
             {"name": "y2", "dtype": "f32", "shape": [3, 2]}],
 "buffers": [{"kind": "input", "index": 0, "bytes": 576},
             {"kind": "input", "index": 1, "bytes": 60},
             {"kind": "input", "index": 2, "bytes": 80},
             {"kind": "input", "index": 3, "bytes": 84},
             {"kind": "constant", "offset": 0, "bytes": 432},
             {"kind": "constant", "offset": 512, "bytes": 24},
             {"kind": "constant", "offset": 768, "bytes": 56},
             {"kind": "temp", "bytes": 216},
             {"kind": "output", "index": 0, "bytes": 216},
             {"kind": "output", "index": 1, "bytes": 48},
             {"kind": "output", "index": 2, "bytes": 24}],
 "kernels": [{"name": ")" +
         kernel + R"(", "cubin": "kernels/k.cubin", "function": "k", "num_warps": 4,
              "shared": 0}],
 "launches": [
  {"conv": {"x": {"buffer": 0, "offset": 28}, "x_shape": [1, 4, 5, 5],
            "x_strides": [144, 36, 6, 1], "w": {"buffer": 4, "offset": 0},
            "w_shape": [6, 2, 3, 3], "bias": {"buffer": 5, "offset": 0},
            "out": {"buffer": 7, "offset": 0}, "out_shape": [1, 6, 3, 3], "stride": [2, 2],
            "padding": [1, 1], "dilation": [1, 1], "groups": 2, "dtype": "f32", "tf32": false}},
  {"kernel": 0, "grid": [1, 1, 1], "args": [{"buffer": 7, "offset": 0},
                                            {"buffer": 8, "offset": 0},
                                            {"type": "i32", "value": 54}]},
  {"gemm": {"a": {"buffer": 1, "offset": 0, "rows": 3, "cols": 5, "row_stride": 5,
                  "col_stride": 1, "batch": 2, "batch_stride": 15},
            "b": {"buffer": 2, "offset": 0, "rows": 5, "cols": 4, "row_stride": 1,
                  "col_stride": 5, "batch": 2, "batch_stride": 20},
            "out": {"buffer": 9, "offset": 0, "rows": 3, "cols": 4, "row_stride": 4,
                    "col_stride": 1, "batch": 2, "batch_stride": 12},
            "dtype": "bf16", "math": 0}},
  {"gemm": {"a": {"buffer": 3, "offset": 0, "rows": 3, "cols": 7, "row_stride": 7,
                  "col_stride": 1, "batch": 1, "batch_stride": 0},
            "b": {"buffer": 6, "offset": 0, "rows": 7, "cols": 2, "row_stride": 1,
                  "col_stride": 7, "batch": 1, "batch_stride": 0},
            "out": {"buffer": 10, "offset": 0, "rows": 3, "cols": 2, "row_stride": 2,
                    "col_stride": 1, "batch": 1, "batch_stride": 0}}}],
 "weights_bytes": 824})";
}

fs::path write_model(const Model& md, const std::string& kernel) {
  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-exports" /
                 ("gpu-fake-" + std::to_string(::getpid()) + "-" +
                  std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  fs::create_directories(dir / "kernels");
  std::ofstream(dir / "gpu_manifest.json") << manifest(kernel);
  std::ofstream(dir / "kernels" / "k.cubin") << kernel;
  std::string weights(824, '\0');
  std::memcpy(weights.data(), md.w.data(), 432);
  std::memcpy(weights.data() + 512, md.bias.data(), 24);
  std::memcpy(weights.data() + 768, md.e.data(), 56);
  std::ofstream(dir / "weights.bin", std::ios::binary) << weights;
  return dir;
}

std::vector<float> randoms(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct Inputs {
  std::vector<float> x, m;
  std::vector<uint16_t> p, q;
  std::vector<coil::Tensor> tensors() const {
    auto t = [](coil::DType dt, std::vector<int64_t> shape, const void* data, size_t bytes) {
      coil::Tensor r = coil::Tensor::empty(dt, shape);
      std::memcpy(r.data(), data, bytes);
      return r;
    };
    return {t(coil::DType::F32, {1, 4, 6, 6}, x.data(), 576),
            t(coil::DType::BF16, {2, 3, 5}, p.data(), 60),
            t(coil::DType::BF16, {2, 4, 5}, q.data(), 80),
            t(coil::DType::F32, {3, 7}, m.data(), 84)};
  }
};

Inputs make_inputs(std::mt19937& rng) {
  Inputs in;
  in.x = randoms(144, rng);
  in.m = randoms(21, rng);
  for (float f : randoms(30, rng)) in.p.push_back(to_bf16(f));
  for (float f : randoms(40, rng)) in.q.push_back(to_bf16(f));
  return in;
}

// The outputs as bytes, computed here in the order cuDNN's and cuBLAS's definitions give (one
// fp32 accumulation per element, the bias added after the convolution).
std::vector<std::string> reference(const Model& md, const Inputs& in) {
  std::vector<float> y0(54);
  for (int k = 0; k < 6; ++k)
    for (int oh = 0; oh < 3; ++oh)
      for (int ow = 0; ow < 3; ++ow) {
        float acc = 0;
        int g = k / 3;
        for (int c = 0; c < 2; ++c)
          for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s) {
              int ih = oh * 2 - 1 + r, iw = ow * 2 - 1 + s;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
              // x[:, :, 1:, 1:]: element (ch, ih, iw) at 7 + ch * 36 + ih * 6 + iw
              acc += in.x[7 + (g * 2 + c) * 36 + ih * 6 + iw] * md.w[((k * 2 + c) * 3 + r) * 3 + s];
            }
        float v = md.bias[k] + acc;
        y0[(k * 3 + oh) * 3 + ow] = v > 0 ? v : 0;
      }
  std::vector<uint16_t> y1(24);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        float acc = 0;
        for (int l = 0; l < 5; ++l)
          acc += bf16_value(in.p[b * 15 + i * 5 + l]) * bf16_value(in.q[b * 20 + j * 5 + l]);
        y1[b * 12 + i * 4 + j] = to_bf16(acc);
      }
  std::vector<float> y2(6);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      float acc = 0;
      for (int l = 0; l < 7; ++l) acc += in.m[i * 7 + l] * md.e[j * 7 + l];
      y2[i * 2 + j] = acc;
    }
  auto bytes = [](const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); };
  return {bytes(y0.data(), 216), bytes(y1.data(), 48), bytes(y2.data(), 24)};
}

std::vector<std::string> bytes_of(const std::vector<coil::Tensor>& outs) {
  std::vector<std::string> r;
  for (const coil::Tensor& t : outs)
    r.emplace_back(static_cast<const char*>(t.data()),
                   static_cast<size_t>(t.numel() * coil::dtype_size(t.dtype())));
  return r;
}

TEST(GpuExportFake, LaunchesAndCudaGraphsComputeTheReference) {
  std::mt19937 rng(7);
  Model md{randoms(108, rng), randoms(6, rng), randoms(14, rng)};
  fs::path dir = write_model(md, "fake_relu");
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "cuda_graph" : "launches");
    coil::GpuLoadOptions o;
    o.cuda_graph = graph;
    Stats at_load = stats();
    coil::GpuExportedModel m = coil::GpuExportedModel::load(dir, o);
    EXPECT_EQ(m.uses_cuda_graph(), graph);
    Stats loaded = stats();
    // The graph: the convolution, its bias, the kernel and the two products, captured once.
    EXPECT_EQ(loaded.captured_ops - at_load.captured_ops, graph ? 5 : 0);
    for (int call = 0; call < 2; ++call) {  // new inputs each call: the graph reads them
      Inputs in = make_inputs(rng);
      std::vector<std::string> want = reference(md, in);
      Stats before = stats();
      std::vector<std::string> got = bytes_of(m.run(in.tensors()));
      Stats after = stats();
      ASSERT_EQ(got.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], want[i]) << "output " << i;
      EXPECT_EQ(after.graph_launches - before.graph_launches, graph ? 1 : 0);
      EXPECT_EQ(after.direct_ops - before.direct_ops, graph ? 0 : 5);
    }
    // Device memory in and out (the fake's device memory is the host's).
    Inputs in = make_inputs(rng);
    std::vector<std::string> want = reference(md, in);
    std::vector<std::string> outs = {std::string(216, '\0'), std::string(48, '\0'),
                                     std::string(24, '\0')};
    std::vector<void*> in_ptrs = {in.x.data(), in.p.data(), in.q.data(), in.m.data()};
    std::vector<void*> out_ptrs = {outs[0].data(), outs[1].data(), outs[2].data()};
    m.run_device(in_ptrs, out_ptrs);
    m.synchronize();
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(outs[i], want[i]) << "run_device output " << i;
    // launch() replays on the model's own buffers: what the last set_inputs put there.
    Inputs again = make_inputs(rng);
    std::vector<coil::Tensor> again_tensors = again.tensors();
    std::vector<coil::TensorRef> refs;
    for (const coil::Tensor& t : again_tensors) refs.push_back(t.ref());
    m.set_inputs(refs);
    m.launch();
    std::vector<std::string> got = bytes_of(m.get_outputs());
    want = reference(md, again);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], want[i]) << "launch output " << i;
  }
  EXPECT_EQ(stats().set_stream_while_capturing, 0);  // cuBLAS's workspace kept in the capture
}

TEST(GpuExportFake, ALaunchTheCaptureRefusesIsNamed) {
  std::mt19937 rng(3);
  Model md{randoms(108, rng), randoms(6, rng), randoms(14, rng)};
  fs::path dir = write_model(md, "fake_uncapturable");
  // Launches: it runs (the kernel writes nothing, the products still come out).
  coil::GpuExportedModel plain = coil::GpuExportedModel::load(dir);
  Inputs in = make_inputs(rng);
  std::vector<std::string> got = bytes_of(plain.run(in.tensors()));
  EXPECT_EQ(got[2], reference(md, in)[2]);
  coil::GpuLoadOptions o;
  o.cuda_graph = true;
  std::string err = error_of([&] { coil::GpuExportedModel::load(dir, o); });
  EXPECT_NE(err.find("capturing the call as a CUDA graph: launch fake_uncapturable: CUDA error "
                     "900 (operation not permitted when stream is capturing)"),
            std::string::npos)
      << err;
}

}  // namespace

// The fake first: the runtime's dlopen("libcuda.so.1") then finds it loaded (its soname), and
// COIL_CUBLAS / COIL_CUDNN name the same file. A machine with a real CUDA stack installed (this
// one may have its libraries, without a GPU) must not be asked.
int main(int argc, char** argv) {
  if (::dlopen(COIL_FAKE_GPU, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "cannot load the fake CUDA stack %s: %s\n", COIL_FAKE_GPU, ::dlerror());
    return 1;
  }
  ::setenv("COIL_CUBLAS", COIL_FAKE_GPU, 1);
  ::setenv("COIL_CUDNN", COIL_FAKE_GPU, 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
