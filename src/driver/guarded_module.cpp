// Explicit guards for size-generic CPU models (driver/dynamic_model.h, step 2): one module,
// generated and checked at two sets of sizes, serves every size tuple that passes its guards
// with no code generated per size.
#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <tuple>

#include "codegen/cpp/cpp_kernel.h"
#include "codegen/cpp/cpp_module.h"
#include "driver/debug_dir.h"
#include "driver/dynamic_model.h"
#include "driver/kernel_calls.h"
#include "driver/module_build.h"
#include "ir/loop_extents.h"
#include "runtime/remote_cache.h"
#include "sched/memory_plan.h"
#include "support/check.h"
#include "support/log.h"
#include "support/progress.h"

namespace coil {

namespace {

// The check's sizes: each free symbol the next even number above its generation size that
// is no constant dim (nor taken). An odd prime and an even number differ in every power-of-two
// residue, so a decision that read a residue (a tail elided because a size divides) or a
// number printed for a size's value shows as a difference between the two texts.
std::vector<int64_t> check_sizes(const std::vector<int64_t>& at, std::set<int64_t> taken) {
  std::vector<int64_t> out = at;
  for (int64_t v : at) taken.insert(v);
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] <= 1) continue;
    int64_t v = at[i] + 1;
    while (v % 2 != 0 || taken.count(v)) ++v;
    out[i] = v;
    taken.insert(v);
  }
  return out;
}

std::map<sym::Expr, int64_t> hints_of(const std::vector<int64_t>& sizes) {
  std::map<sym::Expr, int64_t> hints;
  for (size_t i = 0; i < sizes.size(); ++i)
    hints[sym::make_symbol(size_symbol_name(static_cast<int>(i)))] = sizes[i];
  return hints;
}

std::string sizes_text(const std::vector<std::string>& symbols, const std::vector<int64_t>& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < symbols.size(); ++i)
    parts.push_back(fmt::format("{}={}", symbols[i], v[i]));
  return fmt::format("{}", fmt::join(parts, ", "));
}

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const TensorRef ra = a.ref(), rb = b.ref();
  if (!ra.is_contiguous() || !rb.is_contiguous()) return false;
  return std::memcmp(
             a.data(), b.data(),
             static_cast<size_t>(ra.numel()) * static_cast<size_t>(dtype_size(a.dtype()))) == 0;
}

// The program generated at `sizes` (hints) with the 0/1-bound symbols bound in `options`, and
// the guards its heuristics recorded.
std::pair<GeneratedProgram, std::vector<sym::SizeGuard>> generate_at(
    const Graph& graph, const CompileOptions& options, const std::vector<std::string>& symbols,
    const std::vector<int64_t>& sizes, StageTimer* timer) {
  sym::SizeHintScope scope(hints_of(sizes));
  SizeGeneric size_generic{symbols};
  GeneratedProgram gen = generate_program(graph, options, timer, &size_generic);
  return {std::move(gen), scope.guards()};
}

}  // namespace

bool GuardedModule::admits(const std::vector<int64_t>& sizes, std::string* failed) const {
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool ok = bound[i] >= 0 ? sizes[i] == bound[i] : sizes[i] >= 2;
    if (!ok) {
      if (failed)
        *failed = bound[i] >= 0
                      ? fmt::format("{} == {}", size_symbol_name(static_cast<int>(i)), bound[i])
                      : fmt::format("{} >= 2", size_symbol_name(static_cast<int>(i)));
      return false;
    }
  }
  const std::map<sym::Expr, int64_t> values = hints_of(sizes);
  for (const sym::SizeGuard& g : guards)
    if (!g.holds(values)) {
      if (failed) *failed = g.to_string();
      return false;
    }
  return true;
}

std::string GuardedModule::guards_text() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < bound.size(); ++i)
    parts.push_back(bound[i] >= 0
                        ? fmt::format("{} == {}", size_symbol_name(static_cast<int>(i)), bound[i])
                        : fmt::format("{} >= 2", size_symbol_name(static_cast<int>(i))));
  for (const sym::SizeGuard& g : guards) parts.push_back(g.to_string());
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::unique_ptr<GuardedModule> compile_guarded_module(const Graph& graph,
                                                      const CompileOptions& options,
                                                      const std::vector<std::string>& symbols,
                                                      const std::vector<int64_t>& sizes,
                                                      std::string* why) {
  RemoteCacheScope remote_scope(options.remote_cache);
  ProgressScope progress;
  auto m = std::make_unique<GuardedModule>();
  SizeVariantBuild& out = m->build;
  CompileReport& report = out.report;
  report.precision = options.precision;
  StageTimer timer(report);
  target_isa(options);
  // Inductor's 0/1 specialization: a size of 0 or 1 is bound (a dim of 1 broadcasts, a dim of
  // 0 empties the tensor, and index arithmetic simplifies differently); the module serves that
  // pattern only.
  CompileOptions generic_options = options;
  for (size_t i = 0; i < symbols.size(); ++i) {
    m->bound.push_back(sizes[i] <= 1 ? sizes[i] : -1);
    if (sizes[i] <= 1) generic_options.sizes[symbols[i]] = sizes[i];
  }
  const std::set<int64_t> taken = constant_dims(graph);
  const bool free_symbols =
      std::any_of(sizes.begin(), sizes.end(), [](int64_t v) { return v > 1; });
  // At least 97 where the call is smaller, as `coil compile` without --size: small sizes
  // would steer the heuristics (a row of 3 is not worth a vector loop) for every later size.
  // If the call's own sizes fail the guards recorded there, generate at its scale instead.
  // The check's text is generated first, so that the debug directory holds the module's own.
  std::unique_ptr<DebugDir> debug;
  GeneratedProgram gen, other;
  std::vector<sym::SizeGuard> other_guards;
  // Generated at primes near the call's sizes (prime_sizes): primes leave no divisibility for
  // a tail or tile decision to lean on, and sizes near the call's keep the heuristics (vector
  // plans, autotuning buckets) at its scale. Where the call's sizes fail the guards recorded
  // at the primes above them (a threshold between), the primes at their own scale, then the
  // primes just below them.
  const std::vector<std::vector<int64_t>> candidates = {
      prime_sizes(sizes, taken, 97), prime_sizes(sizes, taken, 2),
      prime_sizes(sizes, taken, 2, /*below=*/true)};
  for (size_t attempt = 0; attempt < candidates.size(); ++attempt) {
    if (candidates[attempt].empty() ||
        (attempt > 0 && candidates[attempt] == candidates[attempt - 1]))
      continue;
    m->generated_at = candidates[attempt];
    m->checked_at = check_sizes(m->generated_at, taken);
    if (free_symbols)
      std::tie(other, other_guards) =
          generate_at(graph, generic_options, symbols, m->checked_at, nullptr);
    debug =
        DebugDir::open(graph, generic_options,
                       sizes_text(symbols, m->generated_at) + " (a size-generic model's module)");
    std::tie(gen, m->guards) =
        generate_at(graph, generic_options, symbols, m->generated_at, &timer);
    if (m->admits(sizes)) break;
    if (attempt + 1 == candidates.size()) {
      std::string failed;
      m->admits(sizes, &failed);
      if (why)
        *why =
            fmt::format("the sizes {} fail its guard {} at the sizes it was generated at ({})",
                        sizes_text(symbols, sizes), failed, sizes_text(symbols, m->generated_at));
      return nullptr;
    }
  }
  if (free_symbols) {
    // The check: the same text, constants and guards at sizes that differ in every residue.
    std::string failed;
    COIL_SUPPORTED_CHECK(m->admits(m->checked_at, &failed),
                         "size-generic module: the check's sizes {} fail its guard {}",
                         sizes_text(symbols, m->checked_at), failed);
    if (gen.module.source != other.module.source) {
      auto [la, lb] = first_differing_lines(gen.module.source, other.module.source);
      COIL_SUPPORTED_CHECK(false,
                           "size-generic module: the generated code depends on the sizes: `{}` "
                           "at {}, `{}` at {}",
                           la, sizes_text(symbols, m->generated_at), lb,
                           sizes_text(symbols, m->checked_at));
    }
  } else {
    other.program.constants = gen.program.constants;
    other_guards = m->guards;
  }
  bool same_constants = gen.program.constants.size() == other.program.constants.size();
  for (size_t i = 0; same_constants && i < gen.program.constants.size(); ++i)
    same_constants = same_constant(*gen.program.constants[i], *other.program.constants[i]);
  COIL_SUPPORTED_CHECK(same_constants,
                       "size-generic module: a constant made at lowering depends on the sizes "
                       "({} and {})",
                       sizes_text(symbols, m->generated_at), sizes_text(symbols, m->checked_at));
  COIL_SUPPORTED_CHECK(other_guards == m->guards,
                       "size-generic module: its heuristics recorded other guards at {}",
                       sizes_text(symbols, m->checked_at));
  // The report's kernel traffic and the arena at the sizes the module was generated at.
  sym::SizeHintScope scope(hints_of(m->generated_at));
  out.size_generic = true;
  out.parts.sized = true;
  finish_size_variant(graph, options, gen, /*static_shapes=*/false, timer, out, debug.get(),
                      {{"guards.txt", m->guards_text() + "\n"}});
  m->gen = std::make_shared<const GeneratedProgram>(std::move(gen));
  return m;
}

SizeVariantBuild guarded_variant(const GuardedModule& module, const std::vector<int64_t>& sizes) {
  SizeVariantBuild out;
  out.built = module.build.built;
  out.size_generic = true;
  out.constants = module.build.constants;  // (the report is the module's: DynamicModel shares it)
  ModelRunner::Parts& parts = out.parts;
  parts = module.build.parts;
  parts.sizes = sizes;
  // The memory plan at these sizes (the module takes the arena offsets per call), and the
  // shapes of its inputs and outputs.
  sym::SizeHintScope scope(hints_of(sizes));
  const GeneratedProgram& gen = *module.gen;
  Schedule schedule;
  schedule.memory = plan_memory(gen.program, gen.schedule.deps, gen.schedule.kernels);
  parts.arena_bytes = schedule.memory.arena_bytes;
  parts.arena_offsets = arena_offsets(gen.program, schedule);
  const Graph& g = gen.graph;
  for (size_t i = 0; i < g.inputs().size(); ++i)
    parts.inputs[i].shape = static_extents(g.node(g.inputs()[i]).type.shape);
  for (size_t i = 0; i < g.outputs().size(); ++i)
    parts.outputs[i].shape = static_extents(g.node(g.outputs()[i].node).type.shape);
  return out;
}

}  // namespace coil
