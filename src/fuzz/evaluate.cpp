#include "fuzz/evaluate.h"
#include "fuzz/local_check.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>
#include <typeinfo>

#include <fmt/format.h>

#include "coil/coil.h"
#include "graph/interpreter.h"
#include "runtime/compare.h"

namespace coil::fuzz {
// Ops whose result both sides compute exactly alike from the same inputs (a cast rounds the
// same way everywhere); the others (transcendentals, arithmetic, reductions in another order)
// may differ in the last bits of their dtype.
bool is_exact_op(std::string_view op) {
  static const std::set<std::string_view> exact = {
      "input",       "constant",   "full",        "iota",       "cast",      "reshape", "permute",
      "transpose",   "expand",     "slice",       "squeeze",    "unsqueeze", "flatten", "concat",
      "gather",      "abs",        "neg",         "relu",       "maximum",   "minimum", "where",
      "clamp",       "max",        "min",         "max_pool2d", "floor",     "ceil",    "round",
      "sign",        "eq",         "ne",          "lt",         "le",        "gt",      "ge",
      "logical_and", "logical_or", "logical_not", "isnan",      "argmax",    "argmin"};
  return exact.count(op) != 0;
}

// compare_tensors' rule for one element.
bool element_matches(double a, double e, Tolerance tol) {
  if (std::isnan(a) || std::isnan(e)) return std::isnan(a) && std::isnan(e);
  if (std::isinf(a) || std::isinf(e)) return a == e;
  return std::fabs(a - e) <= tol.atol + tol.rtol * std::fabs(e);
}

namespace {

const char* config_name(int k) {
  return k == 0 ? "fusion=on" : "fusion=off";
}

bool has_low_precision(const Graph& g) {
  for (const auto& n : g.nodes())
    if (is_low_precision(n->type.dtype)) return true;
  return false;
}

Tolerance loosest(Tolerance a, Tolerance b) {
  return {std::max(a.rtol, b.rtol), std::max(a.atol, b.atol)};
}

// Every element within tolerance of one of the two references, or between them.
bool within_either(const Tensor& got, const Tensor& r1, const Tensor& r2, Tolerance tol) {
  if (got.shape() != r2.shape() || got.dtype() != r1.dtype() || r1.shape() != r2.shape())
    return false;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.item_as_double(i), e1 = r1.item_as_double(i), e2 = r2.item_as_double(i);
    if (element_matches(a, e1, tol) || element_matches(a, e2, tol)) continue;
    if (std::isfinite(e1) && std::isfinite(e2) && a >= std::min(e1, e2) && a <= std::max(e1, e2))
      continue;
    return false;
  }
  return true;
}

std::string exception_text(const std::exception& e) {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string text = fmt::format("{}: {}", status == 0 ? name : typeid(e).name(), e.what());
  std::free(name);
  return text;
}

}  // namespace

// Fused code rounds an f16/bf16 intermediate only where it stores it (docs/numerics.md), at
// places the fused graph decides; the reference rounds after every node. When an output differs
// from both references but matches once every node is stored (LocalVerdict::kGoneWhenStored),
// this interprets the graph with each subset of its f16/bf16 intermediates rounded (outputs
// always are) and names the first placement whose output `output` matches `got`: coil's result
// is then one of the roundings its semantics allow (fuzz cases of seed 400: 119, 6760, 7450, a
// sum of a few bf16 products that cancels). Empty when none matches or there are more than
// kMaxRoundingChoices intermediates to place.
constexpr size_t kMaxRoundingChoices = 8;
std::string rounding_placement(const Graph& g, const std::vector<Tensor>& inputs, size_t output,
                               const Tensor& got, Tolerance tol) {
  std::vector<bool> is_output(static_cast<size_t>(g.num_nodes()), false);
  for (const GraphOutput& o : g.outputs()) is_output[static_cast<size_t>(o.node)] = true;
  // Only the nodes the output depends on (a batch holds 25 unrelated graphs).
  std::vector<bool> feeds(static_cast<size_t>(g.num_nodes()), false);
  feeds[static_cast<size_t>(g.outputs()[output].node)] = true;
  for (int id = g.num_nodes() - 1; id >= 0; --id)
    if (feeds[static_cast<size_t>(id)])
      for (int i : g.node(id).inputs) feeds[static_cast<size_t>(i)] = true;
  std::vector<int> always, choices;
  for (const auto& np : g.nodes()) {
    if (!feeds[static_cast<size_t>(np->id)]) continue;
    std::string_view op = np->op_name();
    if (!is_low_precision(np->type.dtype) || op == "input" || op == "constant" || op == "full" ||
        op == "iota" || op == "cast")
      continue;
    (is_output[static_cast<size_t>(np->id)] ? always : choices).push_back(np->id);
  }
  if (choices.empty() || choices.size() > kMaxRoundingChoices) return {};
  for (uint32_t mask = 1; mask + 1 < (1u << choices.size()); ++mask) {
    std::vector<int> rounded = always;
    for (size_t b = 0; b < choices.size(); ++b)
      if (mask & (1u << b)) rounded.push_back(choices[b]);
    std::vector<Tensor> want;
    try {
      want = interpret(widen_low_precision(g, rounded), inputs);
    } catch (const std::exception&) {
      return {};
    }
    if (!compare_tensors(got, want[output], tol).ok) continue;
    std::vector<std::string> names;
    for (size_t b = 0; b < choices.size(); ++b)
      if (mask & (1u << b)) names.push_back(g.node(choices[b]).name);
    return fmt::format(
        "the output matches the reference with only {} of the f16/bf16 intermediates rounded "
        "({}): a rounding placement that fused code may choose",
        names.size(), fmt::join(names, ", "));
  }
  return {};
}

namespace {

Outcome run_config(const FuzzCase& c, int k, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& expected,
                   const std::optional<std::vector<Tensor>>& widened,
                   std::vector<std::filesystem::path>& entries) {
  CompileOptions options;
  options.sizes = c.sizes;
  options.autotune = false;
  options.fusion = k == 0;
  const std::string where = config_name(k);
  CompiledModel m;
  try {
    m = compile(c.graph, options);
  } catch (const Error& e) {
    std::string msg = e.what();
    bool documented = msg.find("is not supported") != std::string::npos ||
                      msg.find("are not supported yet") != std::string::npos;
    return {documented ? "unsupported" : "compile-error", where + ": " + msg, k};
  } catch (const InternalError& e) {
    return {"internal", where + ": " + e.what(), k};
  } catch (const std::exception& e) {
    return {"internal", where + ": " + exception_text(e), k};
  }
  entries.push_back(m.report().so_path.parent_path());
  std::vector<Tensor> got;
  try {
    got = m.run(inputs);
  } catch (const Error& e) {
    return {"run-error", where + ": " + e.what(), k};
  } catch (const std::exception& e) {
    return {"internal", where + ": run: " + exception_text(e), k};
  }
  if (got.size() != expected.size())
    return {"wrong", fmt::format("{}: {} outputs, expected {}", where, got.size(), expected.size()),
            k};
  std::vector<Tolerance> tolerances = output_tolerances(c.graph);
  for (size_t i = 0; i < got.size(); ++i) {
    const GraphOutput& o = c.graph.outputs()[i];
    const Node& n = c.graph.node(o.node);
    Tolerance tol = tolerances[i];
    auto matches = [&](const Tensor& t) {
      return compare_tensors(t, expected[i], tol).ok ||
             (widened && within_either(t, expected[i], (*widened)[i], tol));
    };
    if (matches(got[i])) continue;
    CompareResult r = compare_tensors(got[i], expected[i], tol);
    std::string what = fmt::format("{}: output {} ({} {}) differs: {}", where, o.name, n.op_name(),
                                   dtype_name(n.type.dtype), r.message);
    LocalVerdict v =
        check_locally(c, options, inputs, i, [&](const Tensor& t) { return !matches(t); });
    if (v.kind == LocalVerdict::kExplained) return {"rounding", what + "\n" + v.message, k};
    if (v.kind == LocalVerdict::kGoneWhenStored && widened) {
      std::string placement = rounding_placement(c.graph, inputs, i, got[i], tol);
      if (!placement.empty())
        return {"rounding", what + "\nlocal check: " + v.message + "; " + placement, k};
    }
    return {"wrong", what + "\nlocal check: " + v.message, k};
  }
  return {};
}

}  // namespace

// The tolerance of each output (evaluate.h): its dtype's default, widened to that of the least
// precise inexact computation it depends on (an f32 pow cast to f64 is only as good as f32).
std::vector<Tolerance> output_tolerances(const Graph& g) {
  std::vector<Tolerance> inherited(static_cast<size_t>(g.num_nodes()), Tolerance{0, 0});
  for (const auto& n : g.nodes()) {
    Tolerance t{0, 0};
    for (int i : n->inputs) t = loosest(t, inherited[static_cast<size_t>(i)]);
    if (is_floating(n->type.dtype) && !is_exact_op(n->op_name()))
      t = loosest(t, default_tolerance(n->type.dtype));
    inherited[static_cast<size_t>(n->id)] = t;
  }
  std::vector<Tolerance> out;
  for (const GraphOutput& o : g.outputs()) {
    DType t = g.node(o.node).type.dtype;
    Tolerance tol = default_tolerance(t);
    out.push_back(is_floating(t) ? loosest(tol, inherited[static_cast<size_t>(o.node)]) : tol);
  }
  return out;
}

namespace {

// An f16/bf16 linear or addmm widened as compiled code computes it: the product rounded to the
// dtype (so is alpha * product, and beta * bias), the bias added in f32, the sum not rounded
// (docs/numerics.md; graph/reference/linalg.cpp rounds the same steps and the sum). Widening
// the whole node to f32 skipped the product's rounding, so a fused reader of an f16 addmm
// (seed 403 graphs 5398 and 6675: log_softmax and matmul of an addmm that cancels) matched
// neither reference. `in` are the widened (f32) operands.
int widened_linear(Graph& w, const Node& n, const std::vector<int>& in, int& fresh) {
  const DType t = n.type.dtype;
  auto name = [&] { return fmt::format("widen_{}", fresh++); };
  auto round = [&](int x) {
    int r = w.add_node("cast", {x}, Attrs{{"dtype", t}}, name());
    return w.add_node("cast", {r}, Attrs{{"dtype", DType::F32}}, name());
  };
  auto scale = [&](int x, double v) {
    int c = w.add_node(
        "full", {}, Attrs{{"shape", std::vector<int64_t>{}}, {"value", v}, {"dtype", DType::F32}},
        name());
    return round(w.add_node("mul", {x, c}, Attrs{}, name()));
  };
  if (n.op_name() == "linear") {
    int wt =
        w.add_node("transpose", {in[1]}, Attrs{{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}, name());
    int y = w.add_node("matmul", {in[0], wt}, Attrs{}, name());
    if (in.size() < 3) return y;  // no bias: the product is the result (rounded at the end)
    return w.add_node("add", {round(y), in[2]}, Attrs{}, n.name);
  }
  const double alpha = n.attrs.get_float_or("addmm", "alpha", 1.0);
  const double beta = n.attrs.get_float_or("addmm", "beta", 1.0);
  int y = w.add_node("matmul", {in[1], in[2]}, Attrs{}, name());
  if (beta == 0.0 && alpha == 1.0) return y;
  y = round(y);
  if (alpha != 1.0) y = scale(y, alpha);
  if (beta == 0.0) return y;
  int bias = beta == 1.0 ? in[0] : scale(in[0], beta);
  return w.add_node("add", {bias, y}, Attrs{}, n.name);
}

}  // namespace

Graph widen_low_precision(const Graph& g, const std::vector<int>& rounded) {
  Graph w;
  std::vector<int> map(static_cast<size_t>(g.num_nodes()));
  int fresh = 0;
  auto to_f32 = [&](int id) {
    if (!is_low_precision(w.node(id).type.dtype)) return id;
    return w.add_node("cast", {id}, Attrs{{"dtype", DType::F32}}, fmt::format("widen_{}", fresh++));
  };
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    int id;
    if (n.op_name() == "input") {
      id = to_f32(w.add_input(n.name, n.type.dtype, n.type.shape));
    } else if (n.op_name() == "constant") {
      id = to_f32(w.add_constant(*n.data, n.name));
    } else if ((n.op_name() == "linear" || n.op_name() == "addmm") &&
               is_low_precision(n.type.dtype)) {
      std::vector<int> in;
      for (int i : n.inputs) in.push_back(map[static_cast<size_t>(i)]);
      id = widened_linear(w, n, in, fresh);
      const DType want = n.type.dtype;
      if (std::find(rounded.begin(), rounded.end(), n.id) != rounded.end())
        id = to_f32(
            w.add_node("cast", {id}, Attrs{{"dtype", want}}, fmt::format("widen_{}", fresh++)));
    } else {
      std::vector<int> in;
      for (int i : n.inputs) in.push_back(map[static_cast<size_t>(i)]);
      id = w.add_node(n.op_name(), in, n.attrs, n.name);
      // Sources and casts round to their dtype in compiled code as well.
      std::string_view op = n.op_name();
      if (op == "full" || op == "iota" || op == "cast") id = to_f32(id);
      const DType want = n.type.dtype;
      if (is_low_precision(want) && w.node(id).type.dtype != want &&
          std::find(rounded.begin(), rounded.end(), n.id) != rounded.end())
        id = to_f32(
            w.add_node("cast", {id}, Attrs{{"dtype", want}}, fmt::format("widen_{}", fresh++)));
    }
    map[static_cast<size_t>(n.id)] = id;
  }
  for (const GraphOutput& o : g.outputs()) {
    int id = map[static_cast<size_t>(o.node)];
    DType want = g.node(o.node).type.dtype;
    if (w.node(id).type.dtype != want)
      id = w.add_node("cast", {id}, Attrs{{"dtype", want}}, fmt::format("widen_{}", fresh++));
    w.add_output(id, o.name);
  }
  return w;
}

Outcome evaluate_case(const FuzzCase& c, const EvalOptions& options) {
  std::vector<Tensor> inputs, expected;
  try {
    inputs = case_inputs(c);
    expected = interpret(c.graph, inputs);
  } catch (const Error& e) {
    // A graph valid for its symbols can be invalid for the bound sizes (a pool window larger
    // than s0 = 1): when compile refuses it too, both sides agree that it is an error.
    try {
      CompileOptions options;
      options.sizes = c.sizes;
      options.autotune = false;
      compile(c.graph, options);
    } catch (const Error& ce) {
      return {"rejected", fmt::format("the reference: {}\ncompile: {}", e.what(), ce.what())};
    } catch (const std::exception&) {
      // an internal error of the compiler: reported as the interpreter's refusal below
    }
    return {"interp-error", e.what()};
  } catch (const std::exception& e) {
    return {"internal", "interpreter: " + exception_text(e)};
  }
  std::optional<std::vector<Tensor>> widened;
  if (has_low_precision(c.graph)) {
    try {
      widened = interpret(widen_low_precision(c.graph), inputs);
    } catch (const std::exception&) {
      // Without the second reference, outputs are compared with the first one only.
    }
  }
  set_num_threads(c.threads);
  // The library GEMMs in place of the template, chosen without timing (driver/autotune.h).
  if (!c.matmul.empty()) ::setenv("COIL_MATMUL", c.matmul.c_str(), 1);
  std::vector<std::filesystem::path> entries;
  // Both compiles run unless the first one fails: a difference the local check explained as
  // rounding (class "rounding", not a failure) does not hide a failure of the second.
  Outcome result;
  for (int k = 0; k < 2 && !result.failed() && result.cls != "unsupported"; ++k) {
    if (options.only_config >= 0 && k != options.only_config) continue;
    Outcome r;
    try {
      r = run_config(c, k, inputs, expected, widened, entries);
    } catch (const std::exception& e) {
      r = {"internal", fmt::format("{}: {}", config_name(k), exception_text(e)), k};
    }
    if (r.failed() || result.cls.empty()) result = r;
  }
  if (options.delete_modules) {
    for (const auto& dir : entries) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
  return result;
}

std::string failure_key(const Outcome& o) {
  const std::string& m = o.message;
  std::string line = m.substr(0, m.find('\n'));
  if (m.find("compiling generated code failed") != std::string::npos) {
    size_t at = m.find("error:");
    if (at != std::string::npos) {
      size_t end = m.find('\n', at);
      line = line.substr(0, line.find(':')) + ": " + m.substr(at, end - at);
    }
  }
  if (o.cls == "wrong") {
    line = std::regex_replace(line, std::regex("output \\S+ \\("), "output (");
    line = line.substr(0, line.find(" differs"));
  }
  return o.cls + " " + std::regex_replace(line, std::regex("[0-9]+"), "N");
}

}  // namespace coil::fuzz
