#include "prepare.h"

#include <filesystem>
#include <map>

#include "frontend/onnx/onnx_import.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "support/check.h"
#include "support/npy.h"

namespace coil::cli {

std::pair<std::string, std::string> split_pair(const std::string& s, const char* what) {
  auto eq = s.find('=');
  COIL_USER_CHECK(eq != std::string::npos && eq > 0, "{} '{}' must look like NAME=VALUE", what, s);
  return {s.substr(0, eq), s.substr(eq + 1)};
}

Prepared prepare(const ModelArgs& a) {
  bool onnx = std::filesystem::path(a.model).extension() == ".onnx";
  Prepared p{onnx ? import_onnx(a.model) : load_graph_file(a.model), {}, {}};
  p.options.device = a.device;
  for (const auto& s : a.sizes) {
    auto [name, value] = split_pair(s, "--size");
    try {
      p.options.sizes[name] = std::stoll(value);
    } catch (const std::exception&) {
      user_error("--size {}: '{}' is not an integer", name, value);
    }
  }
  std::map<std::string, Tensor> given;
  for (const auto& s : a.inputs) {
    auto [name, path] = split_pair(s, "--input");
    COIL_USER_CHECK(p.graph.find(name) >= 0, "--input {}: the model has no input named '{}'", name,
                    name);
    given[name] = read_npy(path);
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
