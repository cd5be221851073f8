// Compiles and runs a small graph through an installed coil (tests/install/test_install.sh):
// softmax(x * w + b) over rows, checked against the same computed here in double. Prints
// "ok cache_hit=<0|1>" (the whole-graph cache serves a second process, with no compiler on
// PATH) or "FAIL: ..." and exits 1. With an argument DIR, also compiles deployed_model.h's
// model, checks it, and exports it to DIR for consumer_runtime.cpp.
#include <cmath>
#include <cstdio>
#include <vector>

#include "coil/coil.h"
#include "deployed_model.h"

// deployed_model.h's model, compiled, checked and exported to `dir`.
bool export_deployed(const char* dir) {
  using namespace deployed;
  coil::Graph g;
  coil::Tensor w = coil::Tensor::empty(coil::DType::F32, {kIn, kOut});
  coil::Tensor b = coil::Tensor::empty(coil::DType::F32, {kOut});
  for (int64_t k = 0; k < kIn; ++k)
    for (int64_t n = 0; n < kOut; ++n) w.data_as<float>()[k * kOut + n] = weight(k, n);
  for (int64_t n = 0; n < kOut; ++n) b.data_as<float>()[n] = bias(n);
  int x = g.add_input("x", coil::DType::F32, coil::make_shape({kRows, kIn}));
  int y = g.add_node("matmul", {x, g.add_constant(w, "w")});
  g.add_output(g.add_node("relu", {g.add_node("add", {y, g.add_constant(b, "b")})}), "y");
  coil::CompiledModel m = coil::compile(g);
  coil::Tensor tx = coil::Tensor::empty(coil::DType::F32, {kRows, kIn});
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t k = 0; k < kIn; ++k) tx.data_as<float>()[r * kIn + k] = input(r, k);
  if (!check(m.run({tx}).at(0).data_as<float>())) return false;
  m.export_to(dir);
  return true;
}

int main(int argc, char** argv) {
  try {
    if (argc > 1 && !export_deployed(argv[1])) return 1;
    coil::Graph g;
    const int64_t rows = 7, cols = 33;
    int x = g.add_input("x", coil::DType::F32, coil::make_shape({rows, cols}));
    int w = g.add_input("w", coil::DType::F32, coil::make_shape({cols}));
    int b = g.add_input("b", coil::DType::F32, coil::make_shape({cols}));
    int y = g.add_node("add", {g.add_node("mul", {x, w}), b});
    g.add_output(g.add_node("softmax", {y}, coil::Attrs{{"axis", int64_t{-1}}}), "y");
    coil::CompiledModel m = coil::compile(g);

    coil::Tensor tx = coil::Tensor::empty(coil::DType::F32, {rows, cols});
    coil::Tensor tw = coil::Tensor::empty(coil::DType::F32, {cols});
    coil::Tensor tb = coil::Tensor::empty(coil::DType::F32, {cols});
    for (int64_t i = 0; i < rows * cols; ++i) tx.data_as<float>()[i] = std::sin(0.37f * i);
    for (int64_t j = 0; j < cols; ++j) {
      tw.data_as<float>()[j] = 0.5f + 0.03f * j;
      tb.data_as<float>()[j] = std::cos(0.2f * j);
    }
    std::vector<coil::Tensor> out = m.run({tx, tw, tb});
    const float* got = out.at(0).data_as<float>();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> v(cols);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        v[j] = double(tx.data_as<float>()[r * cols + j]) * tw.data_as<float>()[j] +
               tb.data_as<float>()[j];
        mx = std::max(mx, v[j]);
      }
      for (double& e : v) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j < cols; ++j) {
        double want = v[j] / sum;
        if (std::fabs(got[r * cols + j] - want) > 1e-6 + 1e-5 * std::fabs(want)) {
          std::printf("FAIL: y[%ld, %ld] = %.9g, expected %.9g\n", long(r), long(j),
                      got[r * cols + j], want);
          return 1;
        }
      }
    }
    std::printf("ok cache_hit=%d\n", m.report().model_cache_hit ? 1 : 0);
    return 0;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
