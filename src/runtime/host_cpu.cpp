#include "runtime/host_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace coil {

// __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0); it needs
// literal names, hence the chain.
bool cpu_has_feature(std::string_view f) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512_bf16") return __builtin_cpu_supports("avx512bf16");
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "f16c") {
    // clang 14's __builtin_cpu_supports does not know "f16c": CPUID.1:ECX bit 29.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0 &&
           __builtin_cpu_supports("avx");
  }
#elif defined(__aarch64__)
  if (f == "asimd") return true;
#endif
  return false;
}

}  // namespace coil
