#include "fuzz/fuzz_case.h"

#include <fstream>
#include <sstream>

#include "fuzz/graph_edit.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "support/check.h"

namespace coil::fuzz {

uint64_t mix_seed(uint64_t seed, uint64_t index) {
  // splitmix64 over both words: consecutive indices give unrelated seeds.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  return mix(mix(seed) ^ index);
}

FuzzCase clone_case(const FuzzCase& c) {
  return FuzzCase{apply_edit(c.graph, {}), c.sizes, c.input_seed, c.threads, c.matmul, c.given};
}

std::string case_text(const FuzzCase& c, const std::vector<std::string>& comments) {
  std::string out;
  for (const std::string& line : comments) out += "# " + line + "\n";
  if (!c.sizes.empty()) {
    std::vector<std::string> parts;
    for (const auto& [name, value] : c.sizes) parts.push_back(fmt::format("{}={}", name, value));
    out += fmt::format("# sizes: {}\n", fmt::join(parts, ", "));
  }
  out += fmt::format("# input-seed: {}\n# threads: {}\n", c.input_seed, c.threads);
  if (!c.matmul.empty()) out += fmt::format("# matmul: {}\n", c.matmul);
  return out + to_text(c.graph);
}

FuzzCase parse_case(const std::string& text, const std::string& filename) {
  FuzzCase c;
  std::istringstream lines(text);
  std::string line;
  auto value_of = [&](const std::string& key) -> std::optional<std::string> {
    std::string prefix = "# " + key + ":";
    if (line.rfind(prefix, 0) != 0) return std::nullopt;
    return line.substr(prefix.size());
  };
  while (std::getline(lines, line)) {
    if (auto v = value_of("sizes")) {
      std::istringstream items(*v);
      std::string item;
      while (std::getline(items, item, ',')) {
        size_t eq = item.find('=');
        COIL_USER_CHECK(eq != std::string::npos, "{}: bad size binding '{}'", filename, item);
        std::string name = item.substr(0, eq);
        name.erase(0, name.find_first_not_of(' '));
        c.sizes[name] = std::stoll(item.substr(eq + 1));
      }
    } else if (auto s = value_of("input-seed")) {
      c.input_seed = std::stoull(*s);
    } else if (auto t = value_of("threads")) {
      c.threads = std::stoi(*t);
    } else if (auto m = value_of("matmul")) {
      c.matmul = m->substr(m->find_first_not_of(' '));
    }
  }
  c.graph = parse_graph(text, filename);
  for (const sym::Expr& s : c.graph.size_symbols())
    COIL_USER_CHECK(c.sizes.count(s.symbol_name()),
                    "{}: size {} has no value; add a header line '# sizes: {}=N'", filename,
                    s.symbol_name(), s.symbol_name());
  return c;
}

FuzzCase load_case_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  COIL_USER_CHECK(in.good(), "cannot read {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_case(text.str(), path.string());
}

std::vector<Tensor> case_inputs(const FuzzCase& c) {
  std::vector<Tensor> inputs;
  for (int id : c.graph.inputs()) {
    const Node& n = c.graph.node(id);
    std::vector<int64_t> shape;
    for (const sym::Expr& d : n.type.shape) shape.push_back(sym::evaluate(d, c.sizes));
    if (auto g = c.given.find(n.name);
        g != c.given.end() && g->second.dtype() == n.type.dtype && g->second.shape() == shape) {
      inputs.push_back(g->second);
      continue;
    }
    uint64_t name_hash = 1469598103934665603ull;  // FNV-1a
    for (char ch : n.name) name_hash = (name_hash ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
    inputs.push_back(random_tensor(n.type.dtype, shape, mix_seed(c.input_seed, name_hash)));
  }
  return inputs;
}

}  // namespace coil::fuzz
