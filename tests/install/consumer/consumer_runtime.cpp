// A deployment: loads the model consumer.cpp exported (argv[1]) through libcoil_runtime alone
// (coil::runtime: no compiler library, run with no compiler on PATH by test_install.sh), runs it
// and checks its values. Prints "ok kernels=<n> load_ms=<t>" or "FAIL: ..." and exits 1.
#include <cstdio>
#include <string>
#include <vector>

#include "coil/runtime.h"
#include "deployed_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::printf("FAIL: usage: consumer_runtime EXPORT_DIR\n");
    return 1;
  }
  try {
    coil::ExportedModel m = coil::ExportedModel::load(argv[1]);
    using deployed::kIn;
    using deployed::kRows;
    coil::Tensor x = coil::Tensor::empty(coil::DType::F32, {kRows, kIn});
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t k = 0; k < kIn; ++k) x.data_as<float>()[r * kIn + k] = deployed::input(r, k);
    std::vector<coil::Tensor> out = m.run({x});
    if (!deployed::check(out.at(0).data_as<float>())) return 1;
    // A wrong input is an error naming it, not a crash.
    try {
      m.run({coil::Tensor::empty(coil::DType::F32, {kRows + 1, kIn})});
      std::printf("FAIL: a wrong shape ran\n");
      return 1;
    } catch (const coil::Error& e) {
      if (std::string(e.what()).find("input x: expected shape") == std::string::npos) {
        std::printf("FAIL: wrong message: %s\n", e.what());
        return 1;
      }
    }
    std::printf("ok kernels=%zu load_ms=%.1f\n", m.info().kernels.size(),
                m.info().load_seconds * 1e3);
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
