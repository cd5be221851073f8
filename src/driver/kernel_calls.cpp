#include "driver/kernel_calls.h"

#include <array>
#include <utility>

#include "sched/memory_plan.h"
#include "support/check.h"

namespace coil {

KernelCallPlan kernel_call_plan(const IrProgram& program, const Schedule& schedule,
                                const CppModule& module) {
  KernelCallPlan plan;
  for (size_t k = 0; k < module.kernels.size(); ++k) {
    const CppKernelSource& ks = module.kernels[k];
    KernelTraffic traffic = kernel_traffic(program, schedule, k);
    KernelCallPlan::Kernel kernel{
        ks.name, ks.origins, traffic.bytes_read, traffic.bytes_written, traffic.ops, {}};
    for (const KernelArg& a : ks.args) {
      const Buffer& b = program.buffer(a.buffer);
      KernelCallPlan::Arg arg;
      arg.param = a.name;
      arg.kind = b.kind;
      arg.external_index = b.external_index;
      if (b.kind == BufferKind::Intermediate)
        arg.arena_offset = schedule.memory.offsets[static_cast<size_t>(b.id)];
      arg.bytes = buffer_nbytes(b);
      arg.is_output = a.is_output;
      kernel.args.push_back(arg);
    }
    for (const PackedOperand& po : ks.packed) {
      KernelCallPlan::Arg arg;
      arg.param = po.param;
      arg.kind = BufferKind::Constant;
      arg.packed_slot = po.slot;
      plan.packed_slots = std::max(plan.packed_slots, po.slot + 1);
      kernel.args.push_back(arg);
    }
    kernel.run_error = ks.run_error;
    plan.kernels.push_back(std::move(kernel));
  }
  return plan;
}

namespace {

// Generated kernels take only pointer parameters, so each is called through a pointer to a
// function of N void* parameters (one calling convention for all pointer types on every ABI
// coil targets).
using AnyKernel = void (*)();
using Caller = void (*)(AnyKernel, void* const*);

template <size_t... I>
void call_with(AnyKernel fn, void* const* a, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))...)>(fn)(a[I]...);
}

template <size_t N>
void call_n(AnyKernel fn, void* const* a) {
  call_with(fn, a, std::make_index_sequence<N>{});
}

template <size_t... N>
constexpr std::array<Caller, sizeof...(N)> callers(std::index_sequence<N...>) {
  return {&call_n<N>...};
}

constexpr auto kCallers = callers(std::make_index_sequence<97>{});

}  // namespace

KernelCaller::KernelCaller(const KernelCallPlan& plan, const SharedLibrary& library,
                           const ModuleBindings& bindings)
    : plan_(plan) {
  std::vector<int64_t> packed_offsets(static_cast<size_t>(plan.packed_slots) + 1, 0);
  if (plan.packed_slots > 0)
    library.symbol_as<GraphPackedLayoutFn>(kGraphPackedLayoutSymbol)(packed_offsets.data());
  for (const KernelCallPlan::Kernel& k : plan.kernels) {
    const size_t count = k.args.size() + (k.run_error ? 1 : 0);
    COIL_USER_CHECK(count < kCallers.size(),
                    "kernel {}: {} arguments; calling kernels one by one supports at most {}",
                    k.name, count, kCallers.size() - 1);
    Call c;
    c.fn = reinterpret_cast<AnyKernel>(library.symbol(k.name));
    for (const KernelCallPlan::Arg& a : k.args) {
      void* p = nullptr;
      int64_t n = a.bytes;
      if (a.packed_slot >= 0) {
        auto s = static_cast<size_t>(a.packed_slot);
        p = const_cast<char*>(bindings.packed) + packed_offsets[s];
        n = packed_offsets[s + 1] - packed_offsets[s];
      } else {
        auto e = static_cast<size_t>(a.external_index);
        switch (a.kind) {
          case BufferKind::Input:
            p = bindings.inputs.at(e);
            break;
          case BufferKind::Output:
            p = bindings.outputs.at(e);
            break;
          case BufferKind::Constant:
            p = bindings.constants.at(e);
            break;
          case BufferKind::Intermediate:
            COIL_ASSERT(a.arena_offset >= 0, "kernel {}: {} is not in the arena", k.name, a.param);
            p = bindings.arena + a.arena_offset;
            break;
        }
      }
      c.args.push_back(p);
      c.bytes.push_back(n);
    }
    // A kernel with run-time checks records a failure into the caller's coil::RunError (the
    // kernel runtime's struct: an atomic int and two int64s); a kernel called alone here is
    // never asked about failures, so zeroed storage of that size stands in for it.
    if (k.run_error) c.args.push_back(run_error_.data());
    calls_.push_back(std::move(c));
  }
}

void KernelCaller::call(size_t k) const {
  const Call& c = calls_[k];
  kCallers[c.args.size()](c.fn, c.args.data());
}

}  // namespace coil
