// The vector instruction sets generated CPU kernels can target (Inductor's cpu_vec_isa.py): per
// ISA its register width, lanes per dtype, compiler and linker flags and the macro that selects
// the implementation in src/kernels/coil_vec.h.
//
// Detection (host_isa): the first ISA of [avx512_amx, avx512, avx2] (x86) or [neon] (AArch64)
// that the CPU
// reports (__builtin_cpu_supports / cpuid) and that passes a compile-and-run probe: a small
// program using coil_vec.h (and SLEEF) built with the ISA's flags, run in a child process. The
// probe's outcome is cached in <cache_root()>/isa/<key>, key = hash of the compiler version,
// the full command line, the embedded headers and the host CPU flags, so a later process only
// reads a file. Nothing usable: "scalar" (one-lane vectors, no SLEEF).
// avx512_amx is avx512 plus AVX512-BF16 and the AMX tiles (bf16 matmuls on TDPBF16PS; the CPU
// must report amx_tile/amx_bf16 and Linux grant the tile data permission).
// COIL_CPU_ISA=avx512_amx|avx512|avx2|neon|scalar overrides the choice (avx512 on an AMX machine:
// the AVX512-BF16 kernel); naming an ISA this machine cannot run is a coil::Error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coil/dtype.h"
#include "runtime/runtime_libraries.h"
#include "runtime/toolchain.h"

namespace coil {

/// One vector instruction set.
struct IsaInfo {
  /// "avx512_amx", "avx512", "avx2", "neon" or "scalar" (the COIL_CPU_ISA spelling).
  std::string name;
  /// Register width in bits; 0 for scalar.
  int bit_width = 0;
  /// The macro coil_vec.h selects the implementation with ("" for scalar).
  std::string macro;
  /// Compiler flags that enable the instructions. host_isa() may add optional extensions that
  /// the probe confirmed (-mavx512bf16).
  std::vector<std::string> flags;
  /// Linker flags generated code needs (SLEEF and libcoil_vmath for the x86 ISAs).
  std::vector<std::string> link_flags;
  /// CPU features that must all be present (names as /proc/cpuinfo spells them).
  std::vector<std::string> cpu_features;

  /// Lanes of `t` in one register (Inductor's table: 16 f32, 32 bf16, 64 u8 on AVX-512); 1 for
  /// every dtype on scalar. coil_vec.h loads bf16/f16/bool/u8/i8 into vectors of their compute
  /// type, so a kernel's loop step is lanes(F32).
  int lanes(DType t) const;
  bool is_scalar() const { return bit_width == 0; }
};

/// Every ISA coil knows, in detection priority order: avx512_amx, avx512, avx2, neon, scalar.
const std::vector<IsaInfo>& all_isas();

/// The table entry named `name`; throws coil::Error listing the names for an unknown one.
const IsaInfo& isa_by_name(std::string_view name);

/// Whether this CPU (and OS) reports every feature the ISA needs. Scalar: always true.
bool cpu_supports(const IsaInfo& isa);

/// The outcome of a compile-and-run probe.
struct IsaProbe {
  bool ok = false;
  /// True when the outcome was read from the cache directory.
  bool cached = false;
  /// Why the probe failed (compiler or program output), empty when ok.
  std::string detail;
};

/// Compiles and runs the probe program for `isa` with `toolchain` (and `extra_flags`, e.g.
/// -mavx512bf16 to check that extension), or reads its cached outcome. Does not check cpuid.
IsaProbe probe_isa(const IsaInfo& isa, const Toolchain& toolchain = Toolchain::get(),
                   const std::vector<std::string>& extra_flags = {});

/// COIL_CPU_ISA if set, else the best ISA this machine runs (see the top of this file).
/// Probes (through the disk cache) on every call; host_isa() remembers the answer.
IsaInfo detect_host_isa();

/// detect_host_isa(), computed once per process (thread-safe).
const IsaInfo& host_isa();

/// Flags compiling generated code for `isa` (through compile_cached): the ISA's flags, the
/// -D of its macro and its link flags. They are on the command line, so the ISA is part of the
/// code cache key.
CompileFlags isa_compile_flags(const IsaInfo& isa);

/// isa_compile_flags plus what generated modules (not the runtime headers' own tests) get:
/// -DCOIL_GEMM_PRECOMPILED where libcoil_vmath holds the ISA's matmul loops (avx512_amx,
/// avx512, avx2).
CompileFlags module_compile_flags(const IsaInfo& isa);

/// Linker flags for a generated module that calls extern kernels
/// (src/kernels/coil_extern.h): -lcoil_extern from vmath_dir(), with an rpath.
/// That library links oneDNN and, when it was built with it (extern_have_openblas()),
/// OpenBLAS's OpenMP build by its directory (the plain libopenblas.so usually names the
/// pthread build, whose threads fight OpenMP's). Kept with --no-as-needed like SLEEF (the code
/// cache puts flags before the source). All are -Wl, or -l flags, which the code cache leaves
/// out of the precompiled header's command, so modules with and without extern kernels share
/// one precompiled coil_vec.h. Not part of isa_compile_flags: only modules that call a library
/// need them.
std::vector<std::string> extern_link_flags();

/// Whether OpenBLAS's OpenMP build was found when libcoil was built. Generated code that calls
/// coil::ext::sgemm_openblas must then `#define COIL_HAVE_OPENBLAS 1` before including
/// coil_extern.h (a -D flag works too, at the cost of a second precompiled header).
bool extern_have_openblas();

}  // namespace coil
