// A CPU module run kernel by kernel from the host, as its generated wrapper coil_graph_run runs
// it: the same pointers (inputs, outputs, constants, arena offsets, packed constants through the
// exported coil_graph_packed_layout), the same order, each kernel called through its exported
// symbol. Kernel repros save each kernel's arguments this way (driver/kernel_repro.h) and
// CompiledModel::profile times each kernel alone.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "codegen/cpp/cpp_module.h"
#include "ir/ir.h"
#include "runtime/loader.h"
#include "sched/scheduler.h"

namespace coil {

/// Where each argument of each kernel of a CPU module lives when coil_graph_run calls it.
struct KernelCallPlan {
  struct Arg {
    std::string param;  // in_ptr0, out_ptr0, packed_ptr0
    BufferKind kind = BufferKind::Intermediate;
    int external_index = -1;    // inputs, outputs, constants
    int64_t arena_offset = -1;  // intermediates in the arena
    int packed_slot = -1;       // packed operands: the slot of coil_graph_packed_layout
    int64_t bytes = 0;          // packed operands: from the layout
    bool is_output = false;
  };
  struct Kernel {
    std::string name;
    std::vector<std::string> origins;
    int64_t bytes_read = 0, bytes_written = 0, ops = 0;  // kernel_traffic
    std::vector<Arg> args;
    bool run_error = false;  // takes the run's coil::RunError after `args` (CppKernelSource)
  };
  std::vector<Kernel> kernels;
  int packed_slots = 0;
};

KernelCallPlan kernel_call_plan(const IrProgram& program, const Schedule& schedule,
                                const CppModule& module);

/// The pointers coil_graph_run receives.
struct ModuleBindings {
  std::vector<void*> inputs, outputs, constants;
  char* arena = nullptr;
  const char* packed = nullptr;
};

/// The kernels of a loaded module with their arguments bound, ready to call one at a time.
class KernelCaller {
 public:
  KernelCaller(const KernelCallPlan& plan, const SharedLibrary& library,
               const ModuleBindings& bindings);
  KernelCaller(const KernelCaller&) = delete;  // calls_ point into run_error_
  KernelCaller& operator=(const KernelCaller&) = delete;
  size_t size() const { return calls_.size(); }
  const KernelCallPlan::Kernel& kernel(size_t k) const { return plan_.kernels[k]; }
  /// Argument i of kernel k: its pointer and size in bytes.
  void* arg(size_t k, size_t i) const { return calls_[k].args[i]; }
  int64_t arg_bytes(size_t k, size_t i) const { return calls_[k].bytes[i]; }
  /// Calls kernel k once.
  void call(size_t k) const;

 private:
  struct Call {
    void (*fn)() = nullptr;
    std::vector<void*> args;
    std::vector<int64_t> bytes;
  };
  const KernelCallPlan& plan_;
  std::vector<Call> calls_;
  alignas(16) std::array<int64_t, 4> run_error_{};  // storage for kernels' coil::RunError
};

}  // namespace coil
