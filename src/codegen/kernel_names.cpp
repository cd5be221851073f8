#include "codegen/kernel_names.h"

#include <algorithm>

#include <fmt/format.h>

namespace coil {

std::vector<std::string> kernel_name_parts(const std::vector<Origin>& origins) {
  std::vector<Origin> sorted = origins;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Origin& a, const Origin& b) { return a.node < b.node; });
  std::vector<std::string> parts;
  size_t chars = 0;
  auto add = [&](const std::string& name) {
    if (name.empty() || std::find(parts.begin(), parts.end(), name) != parts.end()) return;
    if (parts.size() >= kMaxKernelNameParts) return;
    size_t more = name.size() + (parts.empty() ? 0 : 1);
    if (!parts.empty() && chars + more > kMaxKernelNameChars) return;
    parts.push_back(name);
    chars += more;
  };
  for (const Origin& o : sorted) add(o.composite);
  for (const Origin& o : sorted)
    if (o.composite.empty() && !o.data_movement) add(o.op);
  if (parts.empty())
    for (const Origin& o : sorted) add(o.op);
  return parts;
}

std::string fused_kernel_name(std::string_view prefix, const std::vector<Origin>& origins,
                              int index) {
  std::vector<std::string> parts = kernel_name_parts(origins);
  if (parts.empty()) return fmt::format("{}_{}", prefix, index);
  return fmt::format("{}_{}_{}", prefix, fmt::join(parts, "_"), index);
}

}  // namespace coil
