// The text of coil_repro.h, the helpers of a kernel repro's main() (driver/kernel_repro.h),
// kept apart from the code that writes it so that both read plainly.
#pragma once

namespace coil {

inline constexpr const char* kKernelReproHelpers =
    R"repro(// main()'s helpers of a coil kernel repro: arguments loaded from data/ or generated, outputs
// compared with the saved ones, the kernel timed. Written by coil (src/driver/kernel_repro.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

namespace coil_repro {

struct Options {
  std::string data = "data";  // --data DIR: the saved arguments
  int iters = 0;              // --iters N: timed runs (0: as many as fit in half a second)
};

inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--data" || a == "--iters") && i + 1 < argc) {
      std::string v = argv[++i];
      if (a == "--data") o.data = v;
      else o.iters = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--iters N]; unknown argument '%s'\n", argv[0],
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

/// Reads exactly `bytes` bytes of `path` into dst; false when the file does not exist.
inline bool read_exact(const std::string& path, void* dst, size_t bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  size_t size = static_cast<size_t>(in.tellg());
  if (size != bytes) {
    std::fprintf(stderr, "%s: %zu bytes, the kernel's argument has %zu\n", path.c_str(), size,
                 bytes);
    std::exit(2);
  }
  in.seekg(0);
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
  return true;
}

template <typename T>
void fill_generated(std::vector<T>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (T& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    if constexpr (std::is_same_v<T, bool>) x = u < 0.5;
    else if constexpr (std::is_integral_v<T>) x = 0;  // safe as an index
    else x = static_cast<T>(static_cast<float>(2 * u - 1));
  }
}

/// One pointer argument of the kernel: its values before the call, loaded from
/// data/<name>.bin when saved, else generated (outputs: zeros).
template <typename T>
struct Arg {
  const char* name;
  bool is_output;
  std::vector<T> values;
  bool loaded = false;
  Arg(const char* name_, int64_t count, bool output, const Options& o, uint64_t seed)
      : name(name_), is_output(output), values(static_cast<size_t>(std::max<int64_t>(count, 1))) {
    loaded = read_exact(o.data + "/" + name + ".bin", values.data(), bytes());
    if (!loaded && !is_output) fill_generated(values, seed);
  }
  T* data() { return values.data(); }
  size_t bytes() const { return values.size() * sizeof(T); }
};

/// Compares an output with data/<name>.expected.bin: 1 on a mismatch, 0 on a match or when
/// nothing is saved. Floats match within 1e-5 relative plus 1e-6 absolute (NaN matches NaN).
template <typename T>
int check(const Arg<T>& a, const Options& o, int& checked) {
  std::vector<T> want(a.values.size());
  if (!read_exact(o.data + "/" + a.name + ".expected.bin", want.data(), a.bytes())) return 0;
  ++checked;
  size_t bad = 0, worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = static_cast<double>(a.values[i]), w = static_cast<double>(want[i]);
    if (std::isnan(g) && std::isnan(w)) continue;
    double err = std::fabs(g - w);
    if (!(err <= 1e-6 + 1e-5 * std::fabs(w))) {
      ++bad;
      if (std::isnan(err) || err > worst_err) worst_err = std::isnan(err) ? INFINITY : err, worst = i;
    }
  }
  if (bad == 0) {
    std::printf("%s: matches the saved output (%zu elements)\n", a.name, want.size());
    return 0;
  }
  std::printf("%s: MISMATCH in %zu of %zu elements; worst at [%zu]: got %.9g, saved %.9g\n",
              a.name, bad, want.size(), worst, static_cast<double>(a.values[worst]),
              static_cast<double>(want[worst]));
  return 1;
}

/// Times `run` (after one warm-up call) and prints the median and GB/s of `bytes` moved.
template <typename Run>
void time_kernel(Run run, double bytes, const Options& o) {
  using clock = std::chrono::steady_clock;
  run();
  std::vector<double> times;
  auto start = clock::now();
  for (int i = 0; o.iters > 0 ? i < o.iters : (i < 5 || (i < 10000 && std::chrono::duration<double>(clock::now() - start).count() < 0.5)); ++i) {
    auto t0 = clock::now();
    run();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  std::printf("time: median %.3f us over %zu runs (min %.3f us); %.2f GB/s\n", median * 1e6,
              times.size(), times.front() * 1e6, bytes / median / 1e9);
}

}  // namespace coil_repro
)repro";

}  // namespace coil
