// What compile() and a size-generic model's variants share once the C++ source is known.
#pragma once

#include <utility>

#include "codegen/cpp/cpp_module.h"
#include "coil/coil.h"
#include "runtime/code_cache.h"

namespace coil {

/// `module` built for options' ISA through the code cache: a large module as several
/// translation units at once (one g++ per core). Returns the flags and the result.
std::pair<CompileFlags, CompileResult> build_module(const CppModule& module,
                                                    const CompileOptions& options);

/// options.output_dir (when set): module.cpp, module.so, report.json and, when asked, the graph.
void write_output_dir(const Graph& graph, const CompileOptions& options,
                      const CompileReport& report);

}  // namespace coil
