// The kernel runtime headers (src/kernels/*.h), embedded in libcoil so that a coil
// binary needs no source tree at run time. The definition is generated at build time by
// cmake/embed_headers.cmake; the code cache (runtime/code_cache.h) writes the files into
// <cache>/include/<hash>/ and compiles kernels with that directory on the include path.
#pragma once

#include <vector>

namespace coil {

/// One embedded header: its file name (no directory) and its full text.
struct EmbeddedFile {
  const char* name;
  const char* text;
};

/// Every embedded kernel runtime header, in a fixed order.
const std::vector<EmbeddedFile>& embedded_kernel_headers();

/// python/coil_runtime/*.py (file names, texts), sorted: the Triton launcher that Triton kernel
/// repros carry (driver/kernel_repro.h).
const std::vector<EmbeddedFile>& embedded_python_runtime();

}  // namespace coil
