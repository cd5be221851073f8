// Size-generic models: compile once, run every size (issue 20; docs/dynamic-shapes.md).
//
// A graph whose input shapes hold size symbols that CompileOptions::sizes leaves unbound
// compiles into a DynamicModel (coil::compile returns one inside its CompiledModel). A call
// binds the symbols from its inputs' shapes and runs the module whose guards its sizes pass,
// compiling one first when there is none:
//
//   1. The pipeline runs with the symbols renamed ks0, ks1, ... and kept symbolic (lowering,
//      scheduling, the C++ printers: loop bounds and index expressions are printed with them,
//      and the module's entry coil_graph_run_sized takes their values and the arena offsets of
//      the call's memory plan). Heuristics that need numbers (vector extents, tiles, parallel
//      depth, template blocking) read size hints (sym/size_hints.h).
//   2. Explicit guards (GuardedModule): the module is generated at representative sizes near
//      the call's (primes: no divisibility for a heuristic to lean on), and again at sizes one
//      above them (even: every residue that a tail or a tile could depend on moves); the two
//      texts and constants must agree. Its guards are what the text was chosen under: each
//      symbol >= 2 (Inductor's 0/1 rule: a size of 0 or 1 is bound and gets a module of its
//      own) and every condition a heuristic recorded (sym::decide_at_least: a large output
//      streams). A later call whose sizes pass them runs that module with a memory plan made
//      for its sizes (microseconds: no code generated, no compiler); one that fails a guard
//      gets another module, compiled once and cached on disk like any.
//   3. Where the two texts differ (a decision that read a size and is not yet a guard), the
//      sizes of that 0/1 pattern fall back to the source as the guard: each new size tuple
//      runs the front half (milliseconds) and reuses a compiled module when it prints the same
//      source (the code cache, keyed by the source's hash). What the size-generic pipeline
//      cannot do at all throws, and those sizes compile specialized (bound, as
//      CompileOptions::sizes would). Both are logged with the reason.
//
// COIL_LOGS=guards prints each module's guards, each new size with the module it ran, and
// every compile with its reason (the guard that failed).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "driver/pipeline.h"
#include "runtime/code_cache.h"
#include "runtime/model_runner.h"
#include "sym/size_hints.h"

namespace coil {

/// One compiled variant: the module (shared with every size that prints the same source) with
/// the memory plan and sizes of one size tuple.
struct SizeVariant {
  std::vector<int64_t> sizes;  // the symbols' values, in DynamicModel::symbols() order
  std::string code_key;        // the code cache's key of its module
  bool size_generic = false;   // false: compiled specialized to `sizes` (step 3)
  std::unique_ptr<ModelRunner> runner;
  /// Its compile's report; the variants of one guarded module share the module's (a report
  /// holds the generated source: one copy per size was 1.25 MB a token for a decode step).
  std::shared_ptr<const CompileReport> report;
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

class DebugDir;

/// How compile_size_variant and compile_guarded_module end once `gen` is generated: the module
/// compiled through the code cache, `out`'s parts (inputs and outputs named; with their shapes
/// where `static_shapes`, else each call gives them), the kernel report, options.output_dir,
/// and the debug directory's files (`extra`: more of them, name -> text). Returns the flags.
CompileFlags finish_size_variant(const Graph& graph, const CompileOptions& options,
                                 const GeneratedProgram& gen, bool static_shapes, StageTimer& timer,
                                 SizeVariantBuild& out, DebugDir* debug,
                                 const std::map<std::string, std::string>& extra = {});

/// A module that serves every size tuple passing its guards (step 2 above).
struct GuardedModule {
  /// Per symbol: 0 or 1 where the 0/1 rule bound it, -1 where it is free (and guarded >= 2).
  std::vector<int64_t> bound;
  /// The conditions its heuristics recorded (sym::decide_at_least), over ks0, ks1, ...
  std::vector<sym::SizeGuard> guards;
  std::vector<int64_t> generated_at, checked_at;  // the two sizes its text was generated at
  std::shared_ptr<const GeneratedProgram> gen;    // what a variant's memory plan is made from
  SizeVariantBuild build;                         // at generated_at
  /// build.report, shared by every variant this module serves (its arena_bytes are those of
  /// generated_at; each variant's runner has its own).
  std::shared_ptr<const CompileReport> report;

  /// Whether `sizes` (the symbols' values) pass: the 0/1 pattern, each free size >= 2, every
  /// recorded guard. `failed` (optional) gets the first guard that does not hold.
  bool admits(const std::vector<int64_t>& sizes, std::string* failed = nullptr) const;
  /// "ks0 >= 2, 4096*ks0 <= 4194303" (the names are the kernels' ks0, ks1, ...).
  std::string guards_text() const;
};

/// Compiles the guarded module for `sizes` (guarded_module.cpp): coil::UnsupportedError naming
/// the first differing line where the text depends on the sizes (every size of that 0/1
/// pattern then runs the front half), the pipeline's own error where it cannot keep the sizes
/// symbolic; null, with `why`, where no sizes it tried to generate at gave guards that `sizes`
/// pass (these sizes alone then run the front half).
std::unique_ptr<GuardedModule> compile_guarded_module(const Graph& graph,
                                                      const CompileOptions& options,
                                                      const std::vector<std::string>& symbols,
                                                      const std::vector<int64_t>& sizes,
                                                      std::string* why = nullptr);

/// The variant of `module` for `sizes`, which it admits: its inputs', outputs' and arena's
/// sizes and a memory plan made at `sizes`, the module itself shared (nothing generated).
SizeVariantBuild guarded_variant(const GuardedModule& module, const std::vector<int64_t>& sizes);

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

  /// The variant for `sizes`, compiled on first use. Hold the pointer while using it: a
  /// variant that only re-plans memory for a guarded module's sizes may be dropped from the
  /// cache of recent sizes (see kept_variants) and made again when its sizes come back.
  std::shared_ptr<const SizeVariant> variant(const std::vector<int64_t>& sizes) const;
  /// How many such re-plannable variants are kept (the most recently used); the others (a
  /// module's first variant, which owns its packed constants, and variants compiled
  /// specialized) are always kept. A decode step is a new size every token: without a bound
  /// its variants (34 KB each for a 12-layer step) grew without end. Tests lower it.
  void set_kept_variants(size_t n) const;
  size_t num_variants() const;

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
  mutable std::map<std::vector<int64_t>, std::shared_ptr<const SizeVariant>> variants_;
  // The re-plannable variants' sizes by last use (a tick of use_clock_), oldest first.
  mutable std::map<uint64_t, std::vector<int64_t>> droppable_by_use_;
  mutable std::map<std::vector<int64_t>, uint64_t> last_use_;
  mutable uint64_t use_clock_ = 0;
  mutable size_t kept_variants_ = 4096;
  mutable std::vector<std::unique_ptr<GuardedModule>> guarded_;
  /// 0/1 patterns (GuardedModule::bound) whose text depends on the sizes: step 3 serves them.
  mutable std::map<std::vector<int64_t>, std::string> unguarded_;
  /// Per module (code key): the first variant's runner, whose packed constants the others
  /// read when their constants are the same data.
  struct Module {
    const ModelRunner* runner = nullptr;
    std::vector<void*> constants;
  };
  mutable std::map<std::string, Module> modules_;
  mutable std::vector<std::shared_ptr<const Tensor>> constants_;  // what variants point into
  // Every variant's runner takes its arena from here: a new size reuses memory that earlier
  // sizes touched (runtime/model_runner.h).
  std::shared_ptr<ArenaPool> arena_pool_ = std::make_shared<ArenaPool>();
  mutable Stats stats_;
  mutable const CompileReport* last_report_ = nullptr;
};

/// Sizes at which to compile one variant that stands for "any size" (`coil compile` without
/// --size): distinct values above 1 (no 0/1 binding) that equal no other symbol's and no
/// constant dim of the graph (no coincidence that would print a size as another), moderate
/// enough that the heuristics read them as ordinary sizes. In `symbols` order.
std::vector<int64_t> representative_sizes(const Graph& graph,
                                          const std::vector<std::string>& symbols);

/// The constant dims of `graph`'s nodes: a size equal to one could print as that constant.
std::set<int64_t> constant_dims(const Graph& graph);

/// Per size of `sizes` above 1 (0 and 1 stay): the smallest prime at least max(size, floor),
/// or with `below` the largest prime at most the size, that is not in `taken` and not chosen
/// for an earlier size. Empty when `below` finds none.
std::vector<int64_t> prime_sizes(const std::vector<int64_t>& sizes, std::set<int64_t> taken,
                                 int64_t floor, bool below = false);

/// The first line where `a` and `b` differ, each side's ("(end)" past a text's last line).
std::pair<std::string, std::string> first_differing_lines(const std::string& a,
                                                          const std::string& b);

/// The size symbols of `graph`'s inputs that `sizes` does not bind, sorted by name.
std::vector<std::string> unbound_size_symbols(const Graph& graph,
                                              const std::map<std::string, int64_t>& sizes);

}  // namespace coil
