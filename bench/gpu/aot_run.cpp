// Runs a GPU model that `coil export MODEL --device cuda -o DIR` wrote, from C++ with no Python
// (linked with libcoil_runtime alone), and checks it against the Python path: the export's
// sample inputs, whose outputs the Python path computed at export (sample_outputs.bin), must come
// out bit for bit. Then times the per-call host cost: N calls on the model's own device buffers
// (launches only), one synchronize at the end, the median of 5 rounds. Prints one JSON line.
//   coil_gpu_aot_run DIR [--calls N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "coil/runtime.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: coil_gpu_aot_run DIR [--calls N]\n");
    return 2;
  }
  std::string dir = argv[1];
  int calls = 2000;
  if (argc == 4 && std::string(argv[2]) == "--calls") calls = std::atoi(argv[3]);
  try {
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    coil::GpuExportedModel m = coil::GpuExportedModel::load(dir);
    double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    std::string in_bytes = read_file(dir + "/sample_inputs.bin");
    std::string want = read_file(dir + "/sample_outputs.bin");
    std::vector<coil::Tensor> inputs;
    size_t at = 0;
    for (const coil::ValueSpec& s : m.inputs()) {
      inputs.push_back(coil::Tensor::empty(s.dtype, s.shape));
      size_t n = static_cast<size_t>(coil::shape_numel(s.shape) * coil::dtype_size(s.dtype));
      if (at + n > in_bytes.size()) throw coil::Error("sample_inputs.bin is too short");
      std::memcpy(inputs.back().data(), in_bytes.data() + at, n);
      at += n;
    }
    std::vector<coil::Tensor> outs = m.run(inputs);
    size_t pos = 0, mismatched = 0;
    double max_abs = 0;  // f32 outputs: the largest difference, when not bit for bit
    for (const coil::Tensor& o : outs) {
      size_t n = static_cast<size_t>(o.numel() * coil::dtype_size(o.dtype()));
      if (pos + n > want.size()) throw coil::Error("sample_outputs.bin is too short");
      if (std::memcmp(o.data(), want.data() + pos, n) != 0) {
        ++mismatched;
        if (o.dtype() == coil::DType::F32)
          for (int64_t i = 0; i < o.numel(); ++i) {
            float w;
            std::memcpy(&w, want.data() + pos + 4 * i, 4);
            max_abs = std::max(max_abs, static_cast<double>(std::fabs(o.data_as<float>()[i] - w)));
          }
      }
      pos += n;
    }
    std::vector<double> rounds;
    for (int r = 0; r < 5; ++r) {
      m.synchronize();
      auto a = clock::now();
      for (int i = 0; i < calls; ++i) m.launch();
      m.synchronize();
      rounds.push_back(std::chrono::duration<double, std::micro>(clock::now() - a).count() / calls);
    }
    std::sort(rounds.begin(), rounds.end());
    std::printf(
        "{\"device\": \"%s\", \"load_ms\": %.2f, \"outputs_equal_python\": %s, "
        "\"mismatched_outputs\": %zu, \"per_call_us\": %.3f, \"calls\": %d}\n",
        m.device_name().c_str(), load_ms, mismatched == 0 ? "true" : "false", mismatched, rounds[2],
        calls);
    return mismatched == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil_gpu_aot_run: %s\n", e.what());
    return 1;
  }
}
