// The `coil` command-line tool's commands (tools/coil_main.cpp parses the arguments).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace coil::cli {

/// Options shared by compile/run/check/bench.
struct ModelArgs {
  std::string model;                // a .coil text graph or an .onnx model
  std::vector<std::string> sizes;   // "s0=128"
  std::vector<std::string> inputs;  // "x=path.npy"
  uint64_t seed = 0;
  std::string device = "cpu";  // cpu | cuda
};

int cmd_demo(int runs);
int cmd_ops(bool markdown);
int cmd_compile(const ModelArgs& a, const std::string& out_dir);
int cmd_run(const ModelArgs& a, const std::string& out_dir);
int cmd_check(const ModelArgs& a, const std::vector<std::string>& expects, double rtol,
              double atol);
int cmd_bench(const ModelArgs& a, int threads, int runs, int warmup, bool json);

}  // namespace coil::cli
