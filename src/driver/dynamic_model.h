// Size-generic models: compile once, run every size (issue 20; docs/dynamic-shapes.md).
//
// A graph whose input shapes hold size symbols that CompileOptions::sizes leaves unbound
// compiles into a DynamicModel (coil::compile returns one inside its CompiledModel). A call
// binds the symbols from its inputs' shapes and runs the variant compiled for those sizes,
// compiling it first when there is none:
//
//   1. The pipeline runs with the symbols renamed ks0, ks1, ... and kept symbolic (lowering,
//      scheduling, the C++ printers: loop bounds and index expressions are printed with them,
//      and the module's entry coil_graph_run_sized takes their values and the arena offsets of
//      the call's memory plan). Heuristics that need numbers (vector extents, tiles, parallel
//      depth, template blocking) read the call's sizes as size hints (sym/size_hints.h).
//   2. The guard: a compiled module serves every size at which step 1 prints the same source,
//      found through the code cache (keyed by the source's hash). A size whose decisions
//      differ (a tail loop that was not needed, a different matmul blocking) gets its own
//      variant, compiled once and cached on disk like any module. So a variant is reused only
//      where it is exactly the code a compile for those sizes would print: never a wrong answer.
//   3. What step 1 cannot keep symbolic yet throws, and that call's sizes compile specialized
//      (bound, as CompileOptions::sizes would), logged with the reason.
//
// Step 1 costs the front half of a compile (milliseconds, no C++ compiler) per new size; its
// result is remembered per size tuple, so a size seen before costs a map lookup.
// COIL_LOGS=guards prints each new size, the variant it ran and every compile with its reason.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "runtime/code_cache.h"
#include "runtime/model_runner.h"

namespace coil {

/// One compiled variant: the module (shared with every size that prints the same source) with
/// the memory plan and sizes of one size tuple.
struct SizeVariant {
  std::vector<int64_t> sizes;  // the symbols' values, in DynamicModel::symbols() order
  std::string code_key;        // the code cache's key of its module
  bool size_generic = false;   // false: compiled specialized to `sizes` (step 3)
  std::unique_ptr<ModelRunner> runner;
  CompileReport report;
};

/// What a variant's compile hands the DynamicModel (compiled_model.cpp makes it).
struct SizeVariantBuild {
  CompileResult built;                                   // the shared object
  ModelRunner::Parts parts;                              // all but library and packed
  std::vector<std::shared_ptr<const Tensor>> constants;  // what parts.constants point into
  CompileReport report;
  bool size_generic = false;
};

/// Compiles `graph` at `sizes` of `symbols` (compiled_model.cpp): size-generic when the
/// pipeline allows, else specialized.
SizeVariantBuild compile_size_variant(const Graph& graph, const CompileOptions& options,
                                      const std::vector<std::string>& symbols,
                                      const std::vector<int64_t>& sizes);

class DynamicModel {
 public:
  /// `symbols`: the graph's unbound size symbols, sorted by name.
  DynamicModel(const Graph& graph, CompileOptions options, std::vector<std::string> symbols);

  const std::vector<std::string>& symbols() const { return symbols_; }
  /// The graph's inputs and outputs; -1 where a size is symbolic.
  const std::vector<ValueSpec>& inputs() const { return inputs_; }
  const std::vector<ValueSpec>& outputs() const { return outputs_; }

  /// The symbols' values that `inputs` give (coil::Error naming the input and dim when the
  /// count, a dtype, a constant dim or a dim written as an expression of symbols disagrees).
  std::vector<int64_t> bind_sizes(const std::vector<TensorRef>& inputs) const;
  /// The output specs at `sizes`.
  std::vector<ValueSpec> outputs_at(const std::vector<int64_t>& sizes) const;

  /// Runs on `inputs` (any sizes), into fresh outputs or caller memory (as CompiledModel's).
  std::vector<Tensor> run(const std::vector<TensorRef>& inputs) const;
  void run_into(const std::vector<TensorRef>& inputs, const std::vector<void*>& outputs) const;

  /// The variant for `sizes`, compiled on first use.
  const SizeVariant& variant(const std::vector<int64_t>& sizes) const;

  using Stats = CompiledModel::SizeStats;
  Stats stats() const;
  /// The report of the last variant compiled (a CompiledModel's report()).
  const CompileReport& last_report() const;

 private:
  Graph graph_;
  CompileOptions options_;
  std::vector<std::string> symbols_;
  std::vector<ValueSpec> inputs_, outputs_;
  mutable std::mutex mutex_;  // held while a variant is looked up or compiled
  mutable std::map<std::vector<int64_t>, std::unique_ptr<SizeVariant>> variants_;
  /// Per module (code key): the first variant's runner, whose packed constants the others
  /// read when their constants are the same data.
  struct Module {
    const ModelRunner* runner = nullptr;
    std::vector<void*> constants;
  };
  mutable std::map<std::string, Module> modules_;
  mutable std::vector<std::shared_ptr<const Tensor>> constants_;  // what variants point into
  mutable Stats stats_;
  mutable const CompileReport* last_report_ = nullptr;
};

/// Sizes at which to compile one variant that stands for "any size" (`coil compile` without
/// --size): distinct values above 1 (no 0/1 binding) that equal no other symbol's and no
/// constant dim of the graph (no coincidence that would print a size as another), moderate
/// enough that the heuristics read them as ordinary sizes. In `symbols` order.
std::vector<int64_t> representative_sizes(const Graph& graph,
                                          const std::vector<std::string>& symbols);

/// The size symbols of `graph`'s inputs that `sizes` does not bind, sorted by name.
std::vector<std::string> unbound_size_symbols(const Graph& graph,
                                              const std::map<std::string, int64_t>& sizes);

}  // namespace coil
