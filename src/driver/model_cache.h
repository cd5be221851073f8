// The whole-graph cache: the warm path of compile() (issue 25).
//
// A key over everything that decides a CPU module maps straight to the code-cache entry of its
// shared object and to the decisions compile() would otherwise make again, so that a model
// compiled once loads in a new process with no lowering, no autotuning and no C++ compiler:
//
//   key = XXH3-128 over  the graph (graph_fingerprint: structure, names, types, attributes and
//                        the XXH3 of each constant's bytes), the options that change code
//                        (sizes, isa, fusion, store_all_intermediates, autotune, mode,
//                        precision), the environment that does (COIL_CPU_ISA, COIL_MATMUL,
//                        COIL_COMPILE_DEBUG, COIL_VMATH_DIR), the host CPU's flags, the OpenMP
//                        thread count (the default mode's matmul decisions are measured at it
//                        and differ between counts; the module itself is keyed by its source, so
//                        machines of other thread counts that decide alike share it), and coil's
//                        own binary (the XXH3 of its bytes: a rebuilt coil generates anew, a copy
//                        of the same build elsewhere hits). No path, user or cache directory:
//                        the key is also the remote cache's (runtime/remote_cache.h).
//   entry = <cache>/models/<key[0:2]>/<key>.json (and <key>.cpp, the generated C++ as one
//           listing, for reports and output directories): the code-cache key of the module, the ISA
//           it was built for, the compiler that built it (compiler_fingerprint), the inputs,
//           outputs, run-time checks, the kernel call plan, the arena size, and for each
//           constant the graph constant it is.
//
// With a remote cache, a local miss is looked up there (and written as the local entry), and
// every stored entry is stored there too.
//
// The compiler is not part of the key, so that a deployment without one on PATH still hits;
// when a compiler is on PATH and it is not the one that built the entry, the entry is not used
// (the cold path then builds with the new compiler and rewrites it). An entry whose module.so
// fails its checksum is not used either.
//
// Compiles that must see every stage bypass the cache: a debug directory (CompileOptions::
// debug_dir, COIL_DEBUG_DIR), COIL_TESTING_INJECT_BUG, COIL_TESTING_AMX_EMULATE, and COIL_LOGS
// with a channel other than perf or cache (graph, ir, fusion, output_code, autotune... print
// what the stages do).
// COIL_VERIFY_IR does not: a hit runs no pass to verify (the tests verify every cold compile).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "driver/kernel_calls.h"
#include "ir/ir.h"

namespace coil {

struct ModelCacheEntry {
  std::string code_key;                   // CompileResult::key of the module
  std::string isa;                        // IsaInfo::name the module was generated for
  std::vector<std::string> cpu_features;  // IsaInfo::cpu_features: what a CPU running it needs
  std::string compiler;                   // compiler_fingerprint() of the compiler that built it
  std::vector<ValueSpec> inputs, outputs;
  std::vector<RunCheck> run_checks;
  KernelCallPlan kernel_calls;
  int64_t arena_bytes = 0;
  /// Per constant of the module (IrProgram::constants): its position among the graph's
  /// constant nodes (in node order).
  std::vector<int> constant_nodes;
  /// The generated C++ as one listing (CppModule::source, CompileReport::source), kept beside
  /// the entry as <key>.cpp: the code cache holds a split module's translation units instead.
  std::string source;
};

/// The key of `graph` compiled with `options`, or nullopt when this compile bypasses the cache
/// (see above).
std::optional<std::string> model_cache_key(const Graph& graph, const CompileOptions& options);

/// The entry for `key`, or nullopt when there is none, it does not parse, or it was built by
/// another compiler than the one on PATH.
std::optional<ModelCacheEntry> load_model_cache_entry(const std::string& key);

/// Writes the entry (atomically: a temp file renamed into place).
void store_model_cache_entry(const std::string& key, const ModelCacheEntry& entry);

/// For each of `constants` (IrProgram::constants), the position of the graph constant node
/// holding the same data; nullopt if one is not a graph constant's data.
std::optional<std::vector<int>> constant_positions(
    const Graph& graph, const std::vector<std::shared_ptr<const Tensor>>& constants);

/// The data of the graph's constant nodes, in node order.
std::vector<std::shared_ptr<const Tensor>> graph_constants(const Graph& graph);

}  // namespace coil
