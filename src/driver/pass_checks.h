// What runs after every pass of the compile pipeline (generate_program, driver/pipeline.h):
//
//   * the verifier of the representation the pass returns (graph/verify.h, ir/verify.h,
//     sched/verify.h), when IR verification is on: COIL_VERIFY_IR=1 turns it on, =0 off, and
//     unset it is on in debug builds (no NDEBUG) and off in release builds. The test suites set
//     COIL_VERIFY_IR=1 (tests/support/test_main.cpp for the GoogleTest binaries, the ENVIRONMENT
//     of the other tests in tests/CMakeLists.txt). A broken invariant is a coil::InternalError
//     (exit code 4 in the CLI) naming the pass after which it was found, then every message;
//   * COIL_LOGS=ir_passes: a dump of the representation, labeled with the pass
//     ("[coil:ir_passes] after simplify_indices (loop IR):"), in the order the passes ran.
//
// The passes, in order (kPipelinePasses): the input graph, decompose_and_bind (graph), lower,
// simplify_indices, elide_store_rounding (loop IR, inside lower_graph), autotune_matmuls (loop
// IR, CPU only), fuse, plan_memory (schedule, inside schedule_program).
#pragma once

#include <span>
#include <string_view>

#include "graph/verify.h"
#include "ir/ir.h"
#include "sched/scheduler.h"

namespace coil {

/// Every pass after which the pipeline checks and dumps, in order ("input" is the graph as
/// given, before any pass).
std::span<const std::string_view> pipeline_passes();

/// Whether the verifier runs after each pass (COIL_VERIFY_IR; see above).
bool ir_verification_enabled();

/// Verifies (when enabled) and dumps (COIL_LOGS=ir_passes) what `pass` returned.
void after_graph_pass(std::string_view pass, const Graph& graph, GraphStage stage);
void after_ir_pass(std::string_view pass, const IrProgram& program);
void after_schedule_pass(std::string_view pass, const IrProgram& program, const Schedule& schedule,
                         bool memory_planned);

/// The internal error of a verifier's `errors` after `pass` (no-op when there are none).
void throw_if_invalid(std::string_view pass, std::string_view what,
                      const std::vector<std::string>& errors);

}  // namespace coil
