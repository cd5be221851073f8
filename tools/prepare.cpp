#include "prepare.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>

#include "coil/expr.h"
#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_model.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "support/check.h"
#include "support/npy.h"
#include "support/progress.h"

namespace coil::cli {

std::pair<std::string, std::string> split_pair(const std::string& s, const char* what,
                                               const char* form) {
  auto eq = s.find('=');
  COIL_USER_CHECK(eq != std::string::npos && eq > 0, "{} {}: expected {}", what, s, form);
  return {s.substr(0, eq), s.substr(eq + 1)};
}

std::string names_list(const std::vector<std::string>& names) {
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

namespace {

/// The graph's size symbols, in the order its inputs first use them.
std::vector<std::string> size_symbols(const Graph& g) {
  std::vector<std::string> names;
  for (int id : g.inputs())
    for (const sym::Expr& d : g.node(id).type.shape)
      for (const sym::Expr& s : sym::free_symbols(d))
        if (std::find(names.begin(), names.end(), s.symbol_name()) == names.end())
          names.push_back(s.symbol_name());
  return names;
}

/// --size NAME=VALUE for the graph `g` into `sizes`; a name the graph lacks is an error, since
/// the value would be ignored without a word (a typo, or the ONNX model names it otherwise).
void bind_size(const Graph& g, const std::string& arg, std::map<std::string, int64_t>& sizes) {
  auto [name, value] = split_pair(arg, "--size", "NAME=VALUE, e.g. --size s0=8");
  int64_t v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  COIL_USER_CHECK(ec != std::errc::result_out_of_range, "--size {}: {} is out of range", arg,
                  value);
  COIL_USER_CHECK(ec == std::errc() && end == value.data() + value.size(),
                  "--size {}: '{}' is not an integer", arg, value);
  COIL_USER_CHECK(v >= 0, "--size {}: a size must not be negative", arg);
  std::vector<std::string> symbols = size_symbols(g);
  COIL_USER_CHECK(std::find(symbols.begin(), symbols.end(), name) != symbols.end(),
                  "--size {}: the graph has no size symbol '{}' (its symbols: {})", arg, name,
                  names_list(symbols));
  auto [it, fresh] = sizes.emplace(name, v);
  COIL_USER_CHECK(fresh || it->second == v, "--size {}: {} is already given as {}", arg, name,
                  it->second);
}

}  // namespace

Prepared prepare(const ModelArgs& a, bool make_inputs) {
  bool onnx = std::filesystem::path(a.model).extension() == ".onnx";
  // --input files by the name given; an ONNX model whose shape arguments come from graph
  // inputs is imported with those inputs bound to the files' values (frontend/onnx/
  // onnx_model.h), and they leave the graph's inputs.
  struct File {
    std::string arg, name;
    Tensor value;
  };
  std::vector<File> files;
  for (const auto& s : a.inputs) {
    auto [name, path] = split_pair(s, "--input", "NAME=FILE.npy");
    files.push_back({s, name, read_npy(path)});
  }
  std::vector<std::string> bound;
  Prepared p;
  if (onnx) {
    std::map<std::string, Tensor> by_name;
    for (const File& f : files) by_name.emplace(f.name, f.value);
    ValueBoundImport imp = import_onnx_binding_values(a.model, by_name);
    p.graph = std::move(imp.graph);
    bound = std::move(imp.bound);
  } else {
    p.graph = load_graph_file(a.model);
  }
  p.options.device = a.device;
  p.options.precision = a.precision;
  p.options.mode = a.mode;
  p.options.remote_cache = a.remote_cache;
  set_progress_enabled(!a.quiet);
  p.options.debug_dir = a.debug_dir;
  p.options.write_graph = a.write_graph || a.graph_without_weights;
  p.options.graph_weights = !a.graph_without_weights;
  for (const auto& s : a.sizes) bind_size(p.graph, s, p.options.sizes);
  // Inputs by coil's name or the model's own (ONNX's "onnx::Gemm_0" is onnx_Gemm_0).
  std::vector<ValueSpec> input_specs;
  for (int id : p.graph.inputs()) {
    const Node& n = p.graph.node(id);
    input_specs.push_back({n.name, n.type.dtype, {}, n.source_name});
  }
  std::map<std::string, Tensor> given;
  for (const auto& [s, name, value] : files) {
    if (std::find(bound.begin(), bound.end(), name) != bound.end()) continue;
    std::optional<size_t> at = find_value(input_specs, name);
    COIL_USER_CHECK(at.has_value(), "--input {}: the model has no input '{}' (its inputs: {})", s,
                    name, value_names(input_specs));
    const std::string& canonical = input_specs[*at].name;
    COIL_USER_CHECK(!given.count(canonical), "--input {}: input '{}' is given twice", s, name);
    given[canonical] = value;
  }
  // Bind symbols from given inputs' shapes, then make the remaining inputs.
  for (int id : p.graph.inputs()) {
    const Node& n = p.graph.node(id);
    auto it = given.find(n.name);
    if (it == given.end()) continue;
    COIL_USER_CHECK(it->second.dim() == n.type.rank(), "input {}: expected {} dims, got {}", n.name,
                    n.type.rank(), shape_str(it->second.shape()));
    for (size_t d = 0; d < n.type.shape.size(); ++d)
      if (n.type.shape[d].is_symbol())
        p.options.sizes.emplace(n.type.shape[d].symbol_name(), it->second.shape()[d]);
  }
  if (!make_inputs) return p;  // given inputs bound their sizes; the rest may stay unbound
  uint64_t k = 0;
  for (int id : p.graph.inputs()) {
    const Node& n = p.graph.node(id);
    auto it = given.find(n.name);
    if (it != given.end()) {
      p.inputs.push_back(it->second);
      continue;
    }
    std::vector<int64_t> shape;
    for (const auto& d : n.type.shape) {
      if (auto c = d.as_const()) {
        shape.push_back(*c);
        continue;
      }
      auto b = p.options.sizes.find(d.symbol_name());
      COIL_USER_CHECK(b != p.options.sizes.end(),
                      "input {}: size '{}' is not bound; pass --size {}=N or --input {}=FILE.npy",
                      n.name, d.symbol_name(), d.symbol_name(), n.name);
      shape.push_back(b->second);
    }
    p.inputs.push_back(random_tensor(n.type.dtype, shape, a.seed * 1000003u + k++));
  }
  return p;
}

}  // namespace coil::cli
