// Test helper: the generated CPU module of a text-format graph (its kernel names and source),
// for tests that check which kernels a pass leaves (fold_conv_activations, depthwise convs).
#pragma once

#include <string>
#include <vector>

#include "driver/pipeline.h"
#include "graph/text_format.h"

namespace coil::testing {

struct Module {
  std::vector<std::string> kernels;
  std::string source;
};

inline Module cpu_module(const std::string& text) {
  CompileOptions o;
  GeneratedProgram p = generate_program(parse_graph(text, "<test>"), o);
  Module m;
  for (const auto& k : p.module.kernels) m.kernels.push_back(k.name);
  m.source = p.module.source;
  return m;
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// How many times `part` occurs in `s` (calls of a kernel library in a module's source).
inline size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace coil::testing
