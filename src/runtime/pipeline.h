// The front half of compile(): graph -> decomposed graph -> loop IR -> schedule -> C++ source,
// without invoking the C++ compiler. Golden tests and `coil compile` use it directly.
#pragma once

#include "codegen/cpp/cpp_module.h"
#include "coil/coil.h"
#include "ir/ir.h"
#include "sched/scheduler.h"

namespace coil {

class StageTimer;
struct IsaInfo;

/// The vector ISA generated code targets: options.isa, else the host's (runtime/isa.h).
const IsaInfo& target_isa(const CompileOptions& options);

struct GeneratedProgram {
  Graph graph;  // decomposed, sizes bound
  IrProgram program;
  Schedule schedule;
  CppModule module;
};

/// Runs every stage up to code generation; `timer` (optional) records each stage's time.
GeneratedProgram generate_program(const Graph& graph, const CompileOptions& options,
                                  StageTimer* timer = nullptr);

}  // namespace coil
