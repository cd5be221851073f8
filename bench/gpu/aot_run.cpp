// Runs a GPU model that `coil export MODEL --device cuda -o DIR` wrote, from C++ with no Python
// (linked with libcoil_runtime alone), and checks it against the Python path: the export's
// sample inputs, whose outputs the Python path computed at export (sample_outputs.bin), must come
// out bit for bit, or with --atol/--rtol within that tolerance (cuDNN convolutions: the C++
// runtime asks cuDNN's heuristics for an algorithm, torch may have run another). Then times the
// per-call host cost: N calls on the model's own device buffers (launches only), one
// synchronize at the end, the median of 5 rounds. Then the same with the model loaded with
// GpuLoadOptions::cuda_graph (one cuGraphLaunch per call), whose outputs must equal the
// launches' bit for bit. Prints one JSON line.
//   coil_gpu_aot_run DIR [--calls N] [--atol A] [--rtol R] [--no-graph]
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

using clock_type = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An element of a float output as a double (f32, bf16, f16), for the tolerance check.
bool as_double(coil::DType t, const char* p, double* v) {
  if (t == coil::DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    *v = f;
    return true;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (t == coil::DType::BF16) {
    uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    *v = f;
    return true;
  }
  if (t == coil::DType::F16) {
    int e = (h >> 10) & 31, m = h & 1023;
    double mag = e == 0    ? std::ldexp(m, -24)
                 : e == 31 ? (m ? NAN : INFINITY)
                           : std::ldexp(1024 + m, e - 25);
    *v = (h & 0x8000) ? -mag : mag;
    return true;
  }
  return false;
}

struct Compare {
  size_t mismatched = 0;  // outputs not equal bit for bit
  double max_abs = 0;     // over float outputs that differ
  bool within = true;     // every element within atol + rtol * |want|
};

Compare compare(const std::vector<coil::Tensor>& outs, const std::string& want, double atol,
                double rtol) {
  Compare c;
  size_t pos = 0;
  for (const coil::Tensor& o : outs) {
    size_t esize = static_cast<size_t>(coil::dtype_size(o.dtype()));
    size_t n = static_cast<size_t>(o.numel()) * esize;
    if (pos + n > want.size()) throw coil::Error("the expected outputs are too short");
    const char* got = static_cast<const char*>(o.data());
    if (std::memcmp(got, want.data() + pos, n) != 0) {
      ++c.mismatched;
      for (int64_t i = 0; i < o.numel(); ++i) {
        double g = 0, w = 0;
        if (!as_double(o.dtype(), got + i * esize, &g) ||
            !as_double(o.dtype(), want.data() + pos + i * esize, &w)) {
          c.within = false;  // an integer output that differs
          break;
        }
        double d = std::fabs(g - w);
        if (std::isnan(g) != std::isnan(w)) d = INFINITY;
        if (std::isnan(g) && std::isnan(w)) d = 0;
        c.max_abs = std::max(c.max_abs, d);
        if (!(d <= atol + rtol * std::fabs(w))) c.within = false;
      }
    }
    pos += n;
  }
  return c;
}

std::string bytes_of(const std::vector<coil::Tensor>& outs) {
  std::string s;
  for (const coil::Tensor& o : outs)
    s.append(static_cast<const char*>(o.data()),
             static_cast<size_t>(o.numel() * coil::dtype_size(o.dtype())));
  return s;
}

double per_call_us(const coil::GpuExportedModel& m, int calls) {
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    m.synchronize();
    auto a = clock_type::now();
    for (int i = 0; i < calls; ++i) m.launch();
    m.synchronize();
    rounds.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - a).count() /
                     calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += (ch == '\n') ? ' ' : ch;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: coil_gpu_aot_run DIR [--calls N] [--atol A] [--rtol R] [--no-graph]\n");
    return 2;
  }
  std::string dir = argv[1];
  int calls = 2000;
  double atol = 0, rtol = 0;
  bool graph = true;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-graph") {
      graph = false;
    } else if (i + 1 < argc && a == "--calls") {
      calls = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--atol") {
      atol = std::atof(argv[++i]);
    } else if (i + 1 < argc && a == "--rtol") {
      rtol = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "coil_gpu_aot_run: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    auto t0 = clock_type::now();
    coil::GpuExportedModel m = coil::GpuExportedModel::load(dir);
    double load_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
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
    Compare c = compare(outs, want, atol, rtol);
    double us = per_call_us(m, calls);
    bool ok = c.mismatched == 0 || ((atol > 0 || rtol > 0) && c.within);
    std::string graph_json = "null";
    if (graph) {
      try {
        coil::GpuLoadOptions o;
        o.cuda_graph = true;
        auto g0 = clock_type::now();
        coil::GpuExportedModel gm = coil::GpuExportedModel::load(dir, o);
        double gload_ms = std::chrono::duration<double, std::milli>(clock_type::now() - g0).count();
        std::vector<coil::Tensor> gouts = gm.run(inputs);
        bool equal_launches = bytes_of(gouts) == bytes_of(outs);
        Compare gc = compare(gouts, want, atol, rtol);
        double gus = per_call_us(gm, calls);
        // A second call through run(): copies in, the graph, copies out on the model's stream.
        bool repeat_equal = bytes_of(gm.run(inputs)) == bytes_of(gouts);
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "{\"load_ms\": %.2f, \"outputs_equal_launches\": %s, "
                      "\"outputs_equal_python\": %s, \"repeat_equal\": %s, "
                      "\"per_call_us\": %.3f}",
                      gload_ms, equal_launches ? "true" : "false",
                      gc.mismatched == 0 ? "true" : "false", repeat_equal ? "true" : "false", gus);
        graph_json = buf;
        ok = ok && equal_launches && repeat_equal;
      } catch (const std::exception& e) {
        graph_json = "{\"error\": " + json_string(e.what()) + "}";
        ok = false;
      }
    }
    std::printf(
        "{\"device\": \"%s\", \"load_ms\": %.2f, \"outputs_equal_python\": %s, "
        "\"mismatched_outputs\": %zu, \"max_abs_diff\": %.3g, \"within_tolerance\": %s, "
        "\"atol\": %g, \"rtol\": %g, \"per_call_us\": %.3f, \"calls\": %d, \"cuda_graph\": %s}\n",
        m.device_name().c_str(), load_ms, c.mismatched == 0 ? "true" : "false", c.mismatched,
        c.max_abs, c.within ? "true" : "false", atol, rtol, us, calls, graph_json.c_str());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil_gpu_aot_run: %s\n", e.what());
    return 1;
  }
}
