// What this CPU can run: one instruction-set feature at a time, named as /proc/cpuinfo names
// it ("avx512f", "avx512_bf16", "fma"). The ISA table (runtime/isa.h) asks it before it picks
// the ISA of generated code, and an exported model (runtime/artifact.h) before it loads code
// that another machine generated.
#pragma once

#include <string_view>

namespace coil {

/// Whether the CPU (and the OS, which must save the wide registers) has feature `f`. A name
/// coil does not know is reported missing. "amx_tile" / "amx_bf16" also ask Linux for this
/// process's tile data permission (once) and are missing when it is refused.
bool cpu_has_feature(std::string_view f);

}  // namespace coil
