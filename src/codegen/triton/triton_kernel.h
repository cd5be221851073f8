// TritonKernel: prints one planned kernel (triton_plan.h) as a @triton.jit function with its
// heuristics decorator, the shapes Inductor prints (inductor.md §3.1):
//
//   pointwise   xindex = xoffset + tl.arange(0, XBLOCK)[:], one op per line, tl.store
//   tiled       yindex [:, None] (program_id(1)) x xindex [None, :] (program_id(0))
//   persistent  xindex [:, None] x r0_index [None, :] over the whole row (R0_BLOCK =
//               next_pow2(r0_numel), passed by the runtime); reductions are tl.sum(..., 1) etc.
//               over the masked block; values forwarded between nests stay in registers
//   looped      one `for r0_offset in range(0, r0_numel, R0_BLOCK)` loop per nest with
//               reductions or element-wise stores, [XBLOCK, R0_BLOCK] accumulators reduced after
//               the loop; element values a later loop needs are recomputed there
//
// Index variables are named like Inductor's (x0 = xindex % 1000, r0_1 = r0_index). Masks
// appear only where a numel is not provably a multiple of the largest block the runtime may
// pick; masked lanes of a reduction take the reduction's identity.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_args.h"
#include "codegen/triton/triton_plan.h"

namespace coil {

struct TritonKernelSource {
  std::string name;             // triton_poi_fused_add_mul_0
  std::string decorator;        // @heuristics.pointwise(...)
  std::string code;             // "@triton.jit\ndef ...": what kernel_hash covers
  std::string hash;             // XXH3-128 of `code`
  std::vector<KernelArg> args;  // pointers, in the signature's order
  /// Per arg: the dtype, sizes and strides of its buffer (what the wrapper allocates; kernel
  /// repros allocate the same, driver/kernel_repro.h).
  struct ArgLayout {
    DType dtype = DType::F32;
    std::vector<int64_t> sizes, strides;
  };
  std::vector<ArgLayout> arg_layouts;
  std::vector<int64_t> numels;         // passed after the pointers: [ynumel,] xnumel [, r0_numel]
  std::vector<sym::Expr> numel_exprs;  // the same as expressions of the size symbols
  /// Size symbols passed between the pointers and the numels (ks0, ...: a size-generic
  /// kernel's index expressions read them).
  std::vector<std::string> size_args;
  std::vector<int64_t> size_arg_values;  // their values at the sizes generated at (repros)
  /// Gathers at run-time indices: (IrProgram::run_checks site, dim size) of each. The kernel
  /// then takes `index_check` after the pointers (coil_runtime.runtime.index_check).
  std::vector<std::pair<int, int64_t>> index_sites;
  std::vector<std::string> helpers;  // module-level @triton.jit helpers the kernel calls
  std::vector<std::string> origins;  // graph nodes, "t3 (add)"
  int64_t bytes_read = 0, bytes_written = 0;
};

/// Prints kernel `k` of `plan`; `index` is its position among the module's kernels (the name's
/// suffix).
TritonKernelSource generate_triton_kernel(const TritonProgramPlan& plan, size_t k, int index);

}  // namespace coil
