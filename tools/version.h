// What `coil --version` prints: coil's version and the commit it was built from
// (support/version.h), the compiler that built it, and what generated kernels will use on this
// machine (the host ISA and the C++ compiler), which is what a bug report needs.
#pragma once

#include <string>

#include "support/version.h"

namespace coil::cli {

/// The lines `coil --version` prints (without a final newline); the first is version_line().
std::string version_text();

}  // namespace coil::cli
