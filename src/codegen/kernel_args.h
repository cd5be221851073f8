// The argument type both backends' kernels take (CppKernelSource::args, TritonKernelSource::
// args): a buffer, read or written, under its parameter name.
#pragma once

#include <string>

namespace coil {

/// One pointer argument of a generated kernel: a buffer and whether the kernel writes it. For
/// Triton kernels `buffer` indexes TritonProgramPlan::buffers, for C++ kernels
/// IrProgram::buffers.
struct KernelArg {
  int buffer = -1;
  bool is_output = false;
  std::string name;  // in_ptr0, out_ptr0, ...
};

}  // namespace coil
