#include "runtime/host_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace coil {
namespace {

#if defined(__x86_64__)
// AMX: CPUID.(7,0):EDX bit 24 (AMX-TILE) / 22 (AMX-BF16), the OS enabling the tile state in
// XCR0 (bits 17 XTILECFG and 18 XTILEDATA), and Linux granting this process the tile data
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once; without it the first tile
// instruction raises SIGILL). Generated modules ask again (coil_amx.h) for other processes.
bool amx_usable(unsigned edx_bit) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << edx_bit))) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
  static const bool granted =
      syscall(SYS_arch_prctl, 0x1023 /*ARCH_REQ_XCOMP_PERM*/, 18 /*XFEATURE_XTILEDATA*/) == 0;
  return granted;
#else
  return false;
#endif
}
#endif

}  // namespace

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
#if defined(__x86_64__)
  if (f == "amx_tile") return amx_usable(24);
  if (f == "amx_bf16") return amx_usable(24) && amx_usable(22);
#endif
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
