#include "fuzz/shrinker.h"

#include <functional>
#include <optional>
#include <set>

#include "fuzz/forked_runner.h"
#include "fuzz/graph_edit.h"

namespace coil::fuzz {
namespace {

constexpr int kPhases = 8;

// "Still the same failure": same class and compile config; for messages that identify the bug
// (compiler errors, internal errors) also the same key. A mismatch may move to another output
// as the graph shrinks, so there only the class counts.
bool same_failure(const Outcome& a, const Outcome& b) {
  if (a.cls != b.cls || a.config != b.config) return false;
  return a.cls == "wrong" || a.cls == "crash" || a.cls == "timeout" ||
         failure_key(a) == failure_key(b);
}

// `g` without the nodes no output reads (and the inputs left unread), so that an edit which
// cuts a node off (a fresh input in its place, other outputs) also drops what only it read.
Graph without_dead(const Graph& g) {
  std::vector<bool> live = live_nodes(g);
  std::vector<int> uses = g.use_counts();
  GraphEdit e;
  for (const auto& n : g.nodes()) {
    auto id = static_cast<size_t>(n->id);
    bool is_input = n->op_name() == "input";
    if ((!is_input && !live[id]) || (is_input && uses[id] == 0)) e.drop.insert(n->id);
  }
  return e.drop.empty() ? apply_edit(g, {}) : apply_edit(g, e);
}

struct Candidates {
  const FuzzCase& base;
  std::vector<FuzzCase> list;

  // The base case edited by `e`, with `settings` applied to its other fields; with `prune`, also
  // without what the edit left dead.
  void add(const GraphEdit& e, const std::function<void(FuzzCase&)>& settings = {},
           bool prune = false) {
    try {
      Graph g = apply_edit(base.graph, e);
      FuzzCase c{prune ? without_dead(g) : std::move(g),
                 base.sizes,
                 base.input_seed,
                 base.threads,
                 base.matmul,
                 base.given};
      if (settings) settings(c);
      list.push_back(std::move(c));
    } catch (const std::exception&) {
      // Not well-typed (or no longer valid): not a candidate.
    }
  }
};

// Every size value `from` in input shapes and shape-like attributes replaced by `to`.
GraphEdit replace_size(const Graph& g, int64_t from, int64_t to) {
  GraphEdit e;
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (n.op_name() == "input") {
      TensorType t = n.type;
      for (sym::Expr& d : t.shape)
        if (d == sym::Expr(from)) d = to;
      e.input_type[n.id] = t;
    }
    Attrs a = n.attrs;
    if (a.has("shape")) {
      std::vector<int64_t> s = a.get_ints(n.op_name(), "shape");
      for (int64_t& v : s)
        if (v == from) v = to;
      a.set("shape", s);
    }
    if (n.op_name() == "iota" && a.get_int_or("iota", "size", 0) == from) a.set("size", to);
    e.attrs[n.id] = a;
  }
  return e;
}

std::vector<FuzzCase> candidates(int phase, const FuzzCase& c) {
  const Graph& g = c.graph;
  Candidates out{c, {}};
  switch (phase) {
    case 0:  // canonical input values, one thread, the matmul template
      if (c.input_seed != 1) out.add({}, [](FuzzCase& x) { x.input_seed = 1; });
      if (c.threads != 1) out.add({}, [](FuzzCase& x) { x.threads = 1; });
      if (!c.matmul.empty()) out.add({}, [](FuzzCase& x) { x.matmul.clear(); });
      break;
    case 1:  // fewer outputs
      for (size_t k = 0; g.outputs().size() > 1 && k < g.outputs().size(); ++k) {
        GraphEdit e;
        e.outputs = g.outputs();
        e.outputs->erase(e.outputs->begin() + static_cast<std::ptrdiff_t>(k));
        out.add(e);
      }
      break;
    case 2:  // every operand of a node a fresh input: its upstream cut off (from the outputs back)
      for (int id = g.num_nodes(); id-- > 0;) {
        GraphEdit e;
        for (int in : g.node(id).inputs)
          if (g.node(in).op_name() != "input" && g.node(in).op_name() != "constant")
            e.fresh_input.insert(in);
        if (!e.fresh_input.empty()) out.add(e, {}, /*prune=*/true);
      }
      break;
    case 3:  // a node replaced by one of its inputs, or by a fresh input (from the outputs back)
      for (int id = g.num_nodes(); id-- > 0;) {
        const Node& n = g.node(id);
        if (n.op_name() == "input") continue;
        std::set<int> tried;
        for (int in : n.inputs) {
          if (!tried.insert(in).second) continue;
          GraphEdit e;
          e.replace[id] = in;
          out.add(e);
        }
        GraphEdit e;
        e.fresh_input.insert(id);
        out.add(e);
        if (n.inputs.size() > 1) {  // without its last operand (a bias, a concat part)
          GraphEdit fewer;
          fewer.args[id] = std::vector<int>(n.inputs.begin(), n.inputs.end() - 1);
          out.add(fewer);
        }
      }
      break;
    case 4: {  // dead nodes and unused inputs dropped
      std::vector<bool> live = live_nodes(g);
      std::vector<int> uses = g.use_counts();
      std::set<int> dead, unused;
      for (const auto& n : g.nodes()) {
        if (n->op_name() != "input" && !live[static_cast<size_t>(n->id)]) dead.insert(n->id);
        if (n->op_name() == "input" && uses[static_cast<size_t>(n->id)] == 0) unused.insert(n->id);
      }
      for (const std::set<int>* s : {&dead, &unused}) {
        if (s->empty()) continue;
        GraphEdit all;
        all.drop = *s;
        out.add(all);
        for (int id : *s) {
          GraphEdit one;
          one.drop = {id};
          if (s->size() > 1) out.add(one);
        }
      }
      break;
    }
    case 5: {  // smaller sizes: symbols, every use of a size, one input dim
      for (const auto& [name, v] : c.sizes) {
        for (int64_t to : {int64_t{1}, int64_t{2}}) {
          if (to >= v) continue;
          out.add({}, [&](FuzzCase& x) { x.sizes[name] = to; });
        }
      }
      std::set<int64_t> values;
      for (int id : g.inputs())
        for (const sym::Expr& d : g.node(id).type.shape)
          if (auto v = d.as_const(); v && *v > 2) values.insert(*v);
      for (int64_t v : values)
        for (int64_t to : {int64_t{1}, int64_t{2}}) out.add(replace_size(g, v, to));
      for (int id : g.inputs()) {
        const TensorType& t = g.node(id).type;
        for (size_t d = 0; d < t.shape.size(); ++d) {
          auto v = t.shape[d].as_const();
          if (!v || *v <= 1) continue;
          for (int64_t to : {int64_t{1}, int64_t{2}, *v / 2}) {
            if (to >= *v || (to == *v / 2 && to <= 2)) continue;
            GraphEdit e;
            e.input_type[id] = t;
            e.input_type[id].shape[d] = to;
            out.add(e);
          }
        }
      }
      break;
    }
    case 6:  // f32 for other dtypes
      for (const auto& n : g.nodes()) {
        GraphEdit e;
        if (n->op_name() == "input" && n->type.dtype != DType::F32) {
          e.input_type[n->id] = TensorType{DType::F32, n->type.shape};
          out.add(e);
        } else if (n->attrs.has("dtype") &&
                   n->attrs.get_dtype(n->op_name(), "dtype") != DType::F32) {
          e.attrs[n->id] = n->attrs;
          e.attrs[n->id].set("dtype", DType::F32);
          out.add(e);
        }
      }
      break;
    default:  // one attribute dropped
      for (const auto& n : g.nodes()) {
        for (const auto& [key, value] : n->attrs.items()) {
          Attrs fewer;
          for (const auto& [k, v] : n->attrs.items())
            if (k != key) fewer.set(k, v);
          GraphEdit e;
          e.attrs[n->id] = fewer;
          out.add(e);
        }
      }
  }
  return std::move(out.list);
}

// The case cut down to the graph's first nodes, up to and including `last` (nodes are built in
// topological order), its outputs the sinks of that prefix.
std::optional<FuzzCase> prefix_case(const FuzzCase& c, int last) {
  const Graph& g = c.graph;
  std::vector<bool> read_in_prefix(static_cast<size_t>(g.num_nodes()), false);
  for (int id = 0; id <= last; ++id)
    for (int in : g.node(id).inputs) read_in_prefix[static_cast<size_t>(in)] = true;
  GraphEdit e;
  e.outputs.emplace();
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (id > last)
      e.drop.insert(id);
    else if (n.op_name() != "input" && n.op_name() != "constant" &&
             !read_in_prefix[static_cast<size_t>(id)])
      e.outputs->push_back({n.name, id});
  }
  Candidates one{c, {}};
  one.add(e, {}, /*prune=*/true);
  if (one.list.empty()) return std::nullopt;
  return std::move(one.list.front());
}

// The case with one node's value as its only output (and only what it reads).
std::optional<FuzzCase> cone_case(const FuzzCase& c, int node) {
  GraphEdit e;
  e.outputs = std::vector<GraphOutput>{{c.graph.node(node).name, node}};
  Candidates one{c, {}};
  one.add(e, {}, /*prune=*/true);
  if (one.list.empty()) return std::nullopt;
  return std::move(one.list.front());
}

}  // namespace

ShrinkResult shrink_case(const FuzzCase& c, const Outcome& failure, const ShrinkOptions& options) {
  ShrinkResult r{clone_case(c), failure, 0};
  EvalOptions eval;
  eval.only_config = failure.config;
  std::set<std::string> evaluated{case_text(r.shrunk)};
  const auto batch = static_cast<size_t>(std::max(options.jobs, 1));
  // One candidate in a child; it replaces the case when it fails the same way.
  auto try_case = [&](std::optional<FuzzCase> cand) {
    if (!cand || r.evaluations >= options.max_evaluations || stop_requested()) return false;
    std::string text = case_text(*cand);
    if (!evaluated.insert(text).second) return false;
    Outcome o = run_forked(1, 1, options.timeout_s, [&](size_t) {
                  return evaluate_case(*cand, eval);
                }).front();
    ++r.evaluations;
    if (!o.failed() || !same_failure(o, failure)) return false;
    r.shrunk = std::move(*cand);
    r.outcome = o;
    return true;
  };
  // First, for a long graph, bisection: the shortest prefix of its nodes that still fails, in
  // log2(nodes) evaluations, then the last node of that prefix alone with what it reads (the
  // greedy phases below would spend an evaluation per node to strip the graph from its outputs
  // back). The prefix of every node is tried first: its outputs are all sinks, not the model's.
  std::vector<int> computed;
  for (const auto& n : r.shrunk.graph.nodes())
    if (n->op_name() != "input" && n->op_name() != "constant") computed.push_back(n->id);
  if (computed.size() >= 8 && try_case(prefix_case(r.shrunk, computed.back()))) {
    FuzzCase whole = clone_case(r.shrunk);
    size_t lo = 0, hi = computed.size() - 1;  // the prefix ending at computed[hi] fails
    while (lo < hi && r.evaluations < options.max_evaluations && !stop_requested()) {
      size_t mid = (lo + hi) / 2;
      std::optional<FuzzCase> p = prefix_case(whole, computed[mid]);
      if (p && try_case(std::move(p)))
        hi = mid;
      else
        lo = mid + 1;
    }
    // r.shrunk is the shortest failing prefix tried; its last node is computed[hi] (the
    // prefix keeps node names).
    int last = r.shrunk.graph.find(whole.graph.node(computed[hi]).name);
    if (last >= 0) try_case(cone_case(r.shrunk, last));
  }
  bool progress = true;
  while (progress && r.evaluations < options.max_evaluations && !stop_requested()) {
    progress = false;
    for (int phase = 0; phase < kPhases && r.evaluations < options.max_evaluations;) {
      std::vector<FuzzCase> fresh;
      for (FuzzCase& cand : candidates(phase, r.shrunk))
        if (!evaluated.count(case_text(cand))) fresh.push_back(std::move(cand));
      bool accepted = false;
      for (size_t i = 0; i < fresh.size() && !accepted && r.evaluations < options.max_evaluations;
           i += batch) {
        size_t m = std::min({batch, fresh.size() - i,
                             static_cast<size_t>(options.max_evaluations - r.evaluations)});
        std::vector<Outcome> outs = run_forked(m, options.jobs, options.timeout_s, [&](size_t j) {
          return evaluate_case(fresh[i + j], eval);
        });
        r.evaluations += static_cast<int>(m);
        for (size_t j = 0; j < m && !accepted && !stop_requested(); ++j) {
          evaluated.insert(case_text(fresh[i + j]));
          if (outs[j].failed() && same_failure(outs[j], failure)) {
            r.shrunk = std::move(fresh[i + j]);
            r.outcome = outs[j];
            accepted = true;
          }
        }
      }
      // After a step, the same phase again on the smaller case; else the next phase.
      if (accepted)
        progress = true;
      else
        ++phase;
    }
  }
  return r;
}

}  // namespace coil::fuzz
