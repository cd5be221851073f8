// coil's own shared libraries that generated modules link: libcoil_vmath.so (vector math, the
// precompiled GEMM loops and attention kernel; src/kernels/vmath/) and libcoil_extern.so
// (oneDNN/OpenBLAS calls; src/kernels/extern/). The compiler links modules against them
// (runtime/isa.h) and whoever loads a module, here or on another machine, must find them.
#pragma once

#include <string>

namespace coil {

/// Where generated modules find coil's runtime libraries: libcoil_vmath.so (vector erf from
/// Eigen, the precompiled GEMM loops; src/kernels/vmath/vmath.h), which the avx512/avx2 ISAs'
/// IsaInfo::link_flags link with -L and -rpath, and libcoil_extern.so (extern_link_flags()),
/// built into the same directory:
///   1. $COIL_VMATH_DIR when set (a user error if it lacks the library);
///   2. else the directory of the binary or library holding coil (libcoil_c.so, libcoil.so,
///      bin/coil), or its ../lib, when the library is there: the build tree, an installed
///      prefix (cmake/install.cmake) or the device bundle, wherever it was moved;
///   3. else the build's lib/ directory, baked in by CMake, when the library is there;
///   4. else "": no -L/-rpath, so the linker searches LIBRARY_PATH and the default paths, and
///      the loader LD_LIBRARY_PATH (how scripts/device_bundle.sh's bundle runs elsewhere).
/// Read when the ISA table is built (once per process).
std::string vmath_dir();

/// Loads libcoil_vmath.so and libcoil_extern.so from vmath_dir() (when it names a directory),
/// so that a module compiled elsewhere, whose runpath names the compiling machine's directory,
/// finds them here: the dynamic loader satisfies a module's dependency with a library of the
/// same name that is already loaded. Once per process; a library that fails to load is left to
/// the module's own dlopen, whose message names it.
void load_runtime_libraries();

}  // namespace coil
