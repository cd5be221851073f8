#include "driver/pass_checks.h"

#include <mutex>

#include <fmt/format.h>

#include "driver/debug_dir.h"
#include "ir/verify.h"
#include "sched/verify.h"
#include "support/check.h"
#include "support/env.h"
#include "support/log.h"

namespace coil {

namespace {

constexpr std::string_view kPasses[] = {"input",
                                        "recognize_attention",
                                        "decompose_and_bind",
                                        "lower",
                                        "simplify_indices",
                                        "elide_store_rounding",
                                        "fuse_expand_depthwise",
                                        "convs_as_matmuls",
                                        "fold_conv_activations",
                                        "autotune_matmuls",
                                        "fuse",
                                        "plan_memory"};

/// Prints what `print()` returns, building it only when the channel is on (printing a
/// program's index expressions unsimplified can take long).
/// Also writes it to the debug directory (driver/debug_dir.h) when one is open.
template <typename Print>
void dump(std::string_view pass, std::string_view what, std::string_view extension, Print print) {
  DebugDir* debug = DebugDir::current();
  if (!debug && !log_enabled(LogChannel::ir_passes)) return;
  std::string text = print();
  if (debug) debug->after_pass(pass, extension, text);
  if (log_enabled(LogChannel::ir_passes))
    log_write(LogChannel::ir_passes, fmt::format("after {} ({}):\n{}", pass, what, text));
}

}  // namespace

std::span<const std::string_view> pipeline_passes() {
  return kPasses;
}

bool ir_verification_enabled() {
  std::string v = env(EnvVar::verify_ir);
#ifdef NDEBUG
  constexpr bool kDefault = false;
#else
  constexpr bool kDefault = true;
#endif
  if (v.empty()) return kDefault;
  if (v == "1") return true;
  if (v == "0") return false;
  static std::once_flag once;
  std::call_once(once, [&] {
    warn(fmt::format("COIL_VERIFY_IR='{}' is not 0 or 1; ignored (verification is {})", v,
                     kDefault ? "on" : "off"));
  });
  return kDefault;
}

void throw_if_invalid(std::string_view pass, std::string_view what,
                      const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  internal_error_at(__FILE__, __LINE__,
                    fmt::format("IR verifier: the {} after pass {} breaks {} invariant(s):\n  {}",
                                what, pass, errors.size(), fmt::join(errors, "\n  ")));
}

void after_graph_pass(std::string_view pass, const Graph& graph, GraphStage stage) {
  dump(pass, "graph", "coil", [&] { return to_text(graph); });
  if (ir_verification_enabled()) throw_if_invalid(pass, "graph", verify_graph(graph, stage));
}

void after_ir_pass(std::string_view pass, const IrProgram& program) {
  dump(pass, "loop IR", "ir", [&] { return to_string(program); });
  if (ir_verification_enabled()) throw_if_invalid(pass, "loop IR", verify_program(program));
}

void after_schedule_pass(std::string_view pass, const IrProgram& program, const Schedule& schedule,
                         bool memory_planned) {
  dump(pass, "schedule", "schedule", [&] { return to_string(program, schedule, memory_planned); });
  if (ir_verification_enabled())
    throw_if_invalid(pass, "schedule", verify_schedule(program, schedule, memory_planned));
}

}  // namespace coil
