#include "driver/dynamic_model.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "graph/graph_copy.h"
#include "support/check.h"
#include "support/env.h"
#include "support/log.h"

namespace coil {

std::vector<std::string> unbound_size_symbols(const Graph& graph,
                                              const std::map<std::string, int64_t>& sizes) {
  std::set<std::string> names;
  for (int id : graph.inputs())
    for (const sym::Expr& d : graph.node(id).type.shape)
      for (const sym::Expr& s : sym::free_symbols(d)) {
        const std::string name = sym::to_string(s);
        if (!sizes.count(name)) names.insert(name);
      }
  return {names.begin(), names.end()};
}

std::set<int64_t> constant_dims(const Graph& graph) {
  std::set<int64_t> taken;
  for (const auto& n : graph.nodes())
    if (n)
      for (const sym::Expr& d : n->type.shape)
        if (auto c = d.as_const()) taken.insert(*c);
  return taken;
}

namespace {

bool is_prime(int64_t v) {
  if (v < 2) return false;
  for (int64_t q = 2; q * q <= v; ++q)
    if (v % q == 0) return false;
  return true;
}

}  // namespace

std::vector<int64_t> prime_sizes(const std::vector<int64_t>& sizes, std::set<int64_t> taken,
                                 int64_t floor, bool below) {
  std::vector<int64_t> out = sizes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] <= 1) continue;
    int64_t v = below ? sizes[i] : std::max(sizes[i], floor);
    while (v >= 2 && (!is_prime(v) || taken.count(v))) v += below ? -1 : 1;
    if (v < 2) return {};
    out[i] = v;
    taken.insert(v);
  }
  return out;
}

std::pair<std::string, std::string> first_differing_lines(const std::string& a,
                                                          const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(sa, la));
    const bool gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga || !gb) return {ga ? la : "(end)", gb ? lb : "(end)"};
    if (la != lb) return {la, lb};
  }
}

std::vector<int64_t> representative_sizes(const Graph& graph,
                                          const std::vector<std::string>& symbols) {
  // Primes from 97 up: not a multiple of a vector width or tile, so a size-generic variant
  // keeps its tail loops, as it must for the sizes it will serve.
  return prime_sizes(std::vector<int64_t>(symbols.size(), 97), constant_dims(graph), 97);
}

namespace {

std::string sizes_str(const std::vector<std::string>& symbols, const std::vector<int64_t>& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < symbols.size(); ++i)
    parts.push_back(fmt::format("{}={}", symbols[i], v[i]));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// A graph shape with the symbols bound by `values` (constants stay), -1 where one is not.
std::vector<int64_t> shape_at(const Shape& shape, const std::map<sym::Expr, sym::Expr>& values) {
  std::vector<int64_t> out;
  for (const sym::Expr& d : shape) {
    sym::Expr e = sym::substitute(d, values);
    out.push_back(e.is_const() ? e.const_value() : -1);
  }
  return out;
}

}  // namespace

DynamicModel::DynamicModel(const Graph& graph, CompileOptions options,
                           std::vector<std::string> symbols)
    : graph_(copy_graph(graph)), options_(std::move(options)), symbols_(std::move(symbols)) {
  std::map<sym::Expr, sym::Expr> bound;
  for (const auto& [name, value] : options_.sizes) bound[sym::make_symbol(name)] = sym::Expr(value);
  for (int id : graph_.inputs()) {
    const Node& n = graph_.node(id);
    inputs_.push_back({n.name, n.type.dtype, shape_at(n.type.shape, bound), n.source_name});
  }
  for (const GraphOutput& o : graph_.outputs()) {
    const Node& n = graph_.node(o.node);
    outputs_.push_back({o.name, n.type.dtype, shape_at(n.type.shape, bound), o.source_name});
  }
}

std::vector<int64_t> DynamicModel::bind_sizes(const std::vector<TensorRef>& inputs) const {
  const std::vector<int>& ids = graph_.inputs();
  COIL_USER_CHECK(inputs.size() == ids.size(), "the model takes {} inputs, got {}", ids.size(),
                  inputs.size());
  std::map<sym::Expr, sym::Expr> values;
  for (const auto& [name, value] : options_.sizes)
    values[sym::make_symbol(name)] = sym::Expr(value);
  // First the dims that are a symbol alone (they bind it), then every dim is checked.
  for (size_t i = 0; i < ids.size(); ++i) {
    const Node& n = graph_.node(ids[i]);
    const TensorRef& t = inputs[i];
    COIL_USER_CHECK(t.shape.size() == n.type.shape.size(), "input {}: expected shape {}, got {}",
                    n.name, shape_str(n.type.shape), shape_str(t.shape));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const sym::Expr& e = n.type.shape[d];
      if (e.kind() != sym::ExprKind::Symbol || values.count(e)) continue;
      values[e] = sym::Expr(t.shape[d]);
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const Node& n = graph_.node(ids[i]);
    const TensorRef& t = inputs[i];
    COIL_USER_CHECK(t.dtype == n.type.dtype, "input {}: expected dtype {}, got {}", n.name,
                    dtype_name(n.type.dtype), dtype_name(t.dtype));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      sym::Expr want = sym::substitute(n.type.shape[d], values);
      COIL_USER_CHECK(want.is_const(),
                      "input {}: size '{}' of dim {} is an expression of sizes that no input "
                      "dim gives alone; bind them (CompileOptions::sizes, --size)",
                      n.name, sym::to_string(n.type.shape[d]), d);
      COIL_USER_CHECK(want.const_value() == t.shape[d], "input {}: expected shape {}, got {} ({})",
                      n.name, shape_str(n.type.shape), shape_str(t.shape),
                      n.type.shape[d].is_const()
                          ? fmt::format("dim {} must be {}", d, want.const_value())
                          : fmt::format("dim {} is '{}' = {} here", d,
                                        sym::to_string(n.type.shape[d]), want.const_value()));
    }
  }
  std::vector<int64_t> out;
  for (const std::string& s : symbols_) out.push_back(values.at(sym::make_symbol(s)).const_value());
  return out;
}

std::vector<ValueSpec> DynamicModel::outputs_at(const std::vector<int64_t>& sizes) const {
  return variant(sizes)->runner->outputs();
}

void DynamicModel::set_kept_variants(size_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  kept_variants_ = n;
}

size_t DynamicModel::num_variants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return variants_.size();
}

std::shared_ptr<const SizeVariant> DynamicModel::variant(const std::vector<int64_t>& sizes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = variants_.find(sizes);
  if (it != variants_.end()) {
    auto use = last_use_.find(sizes);
    if (use != last_use_.end()) {  // a droppable variant: now the most recently used
      droppable_by_use_.erase(use->second);
      use->second = ++use_clock_;
      droppable_by_use_[use->second] = sizes;
    }
    return it->second;
  }
  // The 0/1 pattern: which sizes the 0/1 rule binds (a module serves one pattern).
  std::vector<int64_t> pattern;
  for (int64_t v : sizes) pattern.push_back(v <= 1 ? v : -1);
  const GuardedModule* from = nullptr;
  bool fresh = false;  // `from` compiled for this call
  std::string failed_guards;
  for (const auto& g : guarded_) {
    std::string failed;
    if (g->bound != pattern) continue;
    if (g->admits(sizes, &failed)) {
      from = g.get();
      break;
    }
    failed_guards +=
        fmt::format("; fails `{}` of module {}", failed, g->build.built.key.substr(0, 12));
  }
  const std::string guards_setting = env(EnvVar::size_guards);
  COIL_USER_CHECK(guards_setting.empty() || guards_setting == "on" || guards_setting == "off",
                  "COIL_SIZE_GUARDS='{}': expected on or off", guards_setting);
  if (!from && guards_setting == "off" && !unguarded_.count(pattern)) {
    unguarded_[pattern] = "COIL_SIZE_GUARDS=off";
    COIL_LOG(guards,
             "sizes {}: COIL_SIZE_GUARDS=off: each new size of this kind runs the front "
             "half",
             sizes_str(symbols_, sizes));
  }
  if (!from && !unguarded_.count(pattern)) {
    ++stats_.generated;
    std::string why;
    try {
      std::unique_ptr<GuardedModule> made =
          compile_guarded_module(graph_, options_, symbols_, sizes, &why);
      if (!made) throw UnsupportedError(why);
      made->report = std::make_shared<const CompileReport>(made->build.report);
      guarded_.push_back(std::move(made));
      from = guarded_.back().get();
      fresh = true;
      ++stats_.guarded;
      COIL_LOG(guards, "sizes {}{}: new module {} (generated at {}, checked at {}){}; guards: {}",
               sizes_str(symbols_, sizes), failed_guards, from->build.built.key.substr(0, 12),
               sizes_str(symbols_, from->generated_at), sizes_str(symbols_, from->checked_at),
               from->build.built.cache_hit ? " from the code cache" : " compiled",
               from->guards_text());
    } catch (const std::exception& e) {
      // No sizes near these gave guards they pass: these sizes alone run the front half.
      if (why.empty()) unguarded_[pattern] = e.what();
      COIL_LOG(guards,
               "sizes {}: no guarded module ({}); each new size of this kind runs the front half "
               "and reuses a module that prints the same source",
               sizes_str(symbols_, sizes), e.what());
    }
  } else if (from) {
    COIL_LOG(guards, "sizes {}: the guards of module {} hold (no code generated)",
             sizes_str(symbols_, sizes), from->build.built.key.substr(0, 12));
  }
  SizeVariantBuild b;
  if (from) {
    b = guarded_variant(*from, sizes);
    if (!fresh) b.built.cache_hit = true;  // nothing compiled for this variant
  } else {
    ++stats_.generated;
    b = compile_size_variant(graph_, options_, symbols_, sizes);
  }
  auto v = std::make_unique<SizeVariant>();
  v->sizes = sizes;
  v->code_key = b.built.key;
  v->size_generic = b.size_generic;
  v->report = from ? from->report : std::make_shared<const CompileReport>(std::move(b.report));
  ModelRunner::Parts parts = std::move(b.parts);
  parts.library = SharedLibrary::open(b.built.so_path);
  auto same = modules_.find(b.built.key);
  // Variants of one module share its packed constants (the first one's, kept alive here) when
  // they pack the same data: the same source with other constants (a constant made at
  // lowering for these sizes) packs its own.
  const bool shares_packed = same != modules_.end() && same->second.constants == parts.constants;
  if (shares_packed) parts.packed = same->second.runner->packed();
  const std::vector<void*> constants = parts.constants;
  parts.arena_pool = arena_pool_;
  // Droppable: re-made from a guarded module by a memory plan alone, and not the runner
  // whose packed constants the module's other variants read.
  const bool droppable = from != nullptr && !fresh && shares_packed;
  v->runner = std::make_unique<ModelRunner>(std::move(parts));
  ++stats_.sizes;
  if (same == modules_.end()) {
    modules_[b.built.key] = {v->runner.get(), constants};
    ++stats_.modules;
  }
  if (!b.built.cache_hit) ++stats_.compiled;
  if (!b.size_generic) ++stats_.specialized;
  if (!from)
    COIL_LOG(guards, "sizes {}: {} module {}{}", sizes_str(symbols_, sizes),
             same != modules_.end() ? "the same source as an earlier size: reusing" : "new",
             b.built.key.substr(0, 12),
             b.built.cache_hit ? " (from the code cache)" : " (compiled)");
  // The constants (weights) live as long as the model: every variant points into them.
  constants_.insert(constants_.end(), b.constants.begin(), b.constants.end());
  last_report_ = v->report.get();  // a guarded module's or a kept variant's: lives on
  std::shared_ptr<const SizeVariant> made = std::move(v);
  variants_[sizes] = made;
  if (droppable) {
    last_use_[sizes] = ++use_clock_;
    droppable_by_use_[use_clock_] = sizes;
    while (droppable_by_use_.size() > kept_variants_) {  // drop the least recently used
      auto oldest = droppable_by_use_.begin();
      variants_.erase(oldest->second);  // callers still holding it keep it alive
      last_use_.erase(oldest->second);
      droppable_by_use_.erase(oldest);
    }
  }
  return made;
}

std::vector<Tensor> DynamicModel::run(const std::vector<TensorRef>& inputs) const {
  const std::shared_ptr<const SizeVariant> v = variant(bind_sizes(inputs));
  std::vector<Tensor> outs;
  std::vector<void*> ptrs;
  for (const ValueSpec& s : v->runner->outputs()) {
    outs.push_back(Tensor::empty(s.dtype, s.shape));
    ptrs.push_back(outs.back().data());
  }
  v->runner->run(inputs, ptrs);
  return outs;
}

void DynamicModel::run_into(const std::vector<TensorRef>& inputs,
                            const std::vector<void*>& outputs) const {
  variant(bind_sizes(inputs))->runner->run(inputs, outputs);
}

DynamicModel::Stats DynamicModel::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

const CompileReport& DynamicModel::last_report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  COIL_USER_CHECK(last_report_ != nullptr,
                  "report: a size-generic model compiles at its first call; run it first");
  return *last_report_;
}

}  // namespace coil
