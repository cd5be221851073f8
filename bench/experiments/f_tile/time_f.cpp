// Times the f kernel (x.t() + y, [4096, 4096] f32) of a module source compiled to a .so:
// the size-specialized kernel (3 pointers) or a size-generic one (3 pointers + ks0).
// Usage: time_f SO generic(0|1) [runs]
#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    std::printf("%s\n", dlerror());
    return 1;
  }
  const bool generic = std::atoi(argv[2]) != 0;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 30;
  const long n = 4096;
  // On 2 MiB pages where the kernel allows (as coil's tensors are), with HUGE=1.
  const bool huge = std::getenv("HUGE") && std::atoi(std::getenv("HUGE")) != 0;
  auto alloc = [&](size_t bytes) {
    void* p = aligned_alloc(2 << 20, bytes);
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<float*>(p);
  };
  float *x = alloc(n * n * 4), *y = alloc(n * n * 4), *o = alloc(n * n * 4);
  for (long i = 0; i < n * n; ++i) {
    x[i] = i % 7;
    y[i] = i % 5;
    o[i] = 0;
  }
  using G = void (*)(const float*, const float*, float*, long);
  using S = void (*)(const float*, const float*, float*);
  void* f = dlsym(h, "cpp_fused_add_0");
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    if (generic)
      reinterpret_cast<G>(f)(x, y, o, n);
    else
      reinterpret_cast<S>(f)(x, y, o);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  double err = 0;
  for (long i = 0; i < n; i += 37)
    for (long j = 0; j < n; j += 41) err += o[i * n + j] - (x[j * n + i] + y[i * n + j]);
  std::printf("%s: median %.3f ms (min %.3f), check %g\n", argv[1], ms[ms.size() / 2], ms[0], err);
  return 0;
}
