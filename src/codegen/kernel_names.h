// Kernel names of both backends, built from the structured provenance of the computations a
// kernel holds (ComputedBuffer::origins): Inductor's `<prefix>_fused_<ops>_<n>` with its
// descriptive_names="original_aten" idea, where the composite ops a decomposition expanded
// (layer_norm, softmax, linear) name the kernel rather than the primitives they became.
//
//   cpp_fused_layer_norm_0      a layer_norm's three passes (sums, normalize) in one kernel
//   triton_per_fused_softmax_0  softmax's max, exp, sum and scaling
//   cpp_fused_add_relu_1        primitives in graph order when no composite is involved
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"

namespace coil {

/// At most this many ops name a kernel, and their joined names at most kMaxKernelNameChars
/// characters (always at least one op): names stay readable in profiles and logs.
constexpr size_t kMaxKernelNameParts = 4;
constexpr size_t kMaxKernelNameChars = 48;

/// The ops naming a kernel with `origins`, in this order, each once: the composite ops in graph
/// order of their first node, then the ops of the other nodes that compute (inputs, full and
/// views only when nothing else does), in graph order; bounded as above.
std::vector<std::string> kernel_name_parts(const std::vector<Origin>& origins);

/// "<prefix>_<parts joined by _>_<index>": fused_kernel_name("cpp_fused", origins, 0) is
/// "cpp_fused_layer_norm_0". `origins` may repeat nodes and come in any order.
std::string fused_kernel_name(std::string_view prefix, const std::vector<Origin>& origins,
                              int index);

}  // namespace coil
