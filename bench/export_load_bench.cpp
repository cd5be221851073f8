// The load time of an exported model (docs/deploy.md, "Figures"): one process per measurement,
// linked with libcoil_runtime alone, as a deployment is. Loads DIR (manifest, both checksums,
// the weights mapped, the module dlopen'ed), then runs it on zeros: the first call (it touches
// every weight page, and oneDNN creates its primitives) and the median of 10 more. Prints one
// JSON line; bench/export_bench.sh runs it several times per model and takes medians.
//   coil_export_load_bench DIR
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "coil/runtime.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: coil_export_load_bench DIR\n");
    return 2;
  }
  try {
    using clock = std::chrono::steady_clock;
    auto ms = [](clock::time_point a, clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    auto t0 = clock::now();
    coil::ExportedModel m = coil::ExportedModel::load(argv[1]);
    auto t1 = clock::now();
    std::vector<coil::Tensor> inputs;
    for (const coil::ValueSpec& s : m.inputs())
      inputs.push_back(coil::Tensor::zeros(s.dtype, s.shape));
    auto t2 = clock::now();
    m.run(inputs);
    auto t3 = clock::now();
    std::vector<double> later;
    for (int i = 0; i < 10; ++i) {
      auto a = clock::now();
      m.run(inputs);
      later.push_back(ms(a, clock::now()));
    }
    std::sort(later.begin(), later.end());
    const coil::ExportInfo& info = m.info();
    std::printf(
        "{\"load_ms\": %.3f, \"first_run_ms\": %.3f, \"later_run_ms\": %.3f, \"module_bytes\": "
        "%ld, \"weights_bytes\": %ld, \"kernels\": %zu}\n",
        ms(t0, t1), ms(t2, t3), later[later.size() / 2], static_cast<long>(info.module_bytes),
        static_cast<long>(info.weights_bytes), info.kernels.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil_export_load_bench: %s\n", e.what());
    return 1;
  }
}
