// The entry points of a generated CPU module (codegen/cpp/cpp_module.cpp writes them; whoever
// loads the module, runtime/model_runner.h, finds them with dlsym): the contract between the
// code generator and the runtime, which an exported model (runtime/artifact.h) keeps across
// processes and machines. Plain C signatures, so that nothing but this header is shared.
#pragma once

#include <cstdint>

namespace coil {

/// Signature of the generated entry point. `inputs`, `outputs` and `constants` hold one data
/// pointer per graph input, output and constant; `arena` holds MemoryPlan::arena_bytes;
/// `packed` holds the constants that templates read packed (filled once by GraphPackFn).
using GraphRunFn = void (*)(void* const* inputs, void* const* outputs, void* const* constants,
                            char* arena, const char* packed);
inline constexpr const char* kGraphRunSymbol = "coil_graph_run";
/// The entry point of a size-generic module (driver/dynamic_model.h), in place of
/// coil_graph_run: the same buffers, then the values of its size symbols (ks0, ks1, ... in
/// order) and the byte offset in `arena` of each intermediate it keeps there (the memory plan
/// of these sizes, in the order of the module's arena buffers).
using GraphRunSizedFn = void (*)(void* const* inputs, void* const* outputs, void* const* constants,
                                 char* arena, const char* packed, const int64_t* sizes,
                                 const int64_t* arena_offsets);
inline constexpr const char* kGraphRunSizedSymbol = "coil_graph_run_sized";
/// In a module with run-time checks: the IrProgram::run_checks entry that failed first in the
/// last run, with *value and *limit set, and resets it; -1 when every check passed.
using GraphRunErrorFn = int (*)(int64_t* value, int64_t* limit);
inline constexpr const char* kGraphRunErrorSymbol = "coil_graph_run_error";
/// Bytes of the packed-constant region (64-byte aligned).
using GraphPackedBytesFn = int64_t (*)();
inline constexpr const char* kGraphPackedBytesSymbol = "coil_graph_packed_bytes";
/// Byte offsets of the packed constants in the packed region, offsets[n] the total (only in
/// modules that pack constants). Kernel repros (driver/kernel_repro.h) read packed operands
/// through it.
using GraphPackedLayoutFn = void (*)(int64_t* offsets);
inline constexpr const char* kGraphPackedLayoutSymbol = "coil_graph_packed_layout";
/// Packs the constants (weights) once, when the module is loaded.
using GraphPackFn = void (*)(void* const* constants, char* packed);
inline constexpr const char* kGraphPackSymbol = "coil_graph_pack";

}  // namespace coil
