#include "fuzz/check_values.h"

#include <cstdio>
#include <exception>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coil/error.h"
#include "fuzz/fuzz_case.h"
#include "fuzz/local_check.h"
#include "support/check.h"
#include "support/npy.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace coil::fuzz {
namespace {

const char* verdict_name(LocalVerdict::Kind k) {
  switch (k) {
    case LocalVerdict::kExplained:
      return "explained";
    case LocalVerdict::kNodeDiffers:
      return "node-differs";
    case LocalVerdict::kGoneWhenStored:
      return "gone-when-stored";
    case LocalVerdict::kInconclusive:
      break;
  }
  return "inconclusive";
}

// Every node's value, by the graph's ids; a node without one, or a value of another dtype or
// rank than its node, is an error (the values do not belong to this graph).
std::vector<Tensor> read_values(const fs::path& dir, const Graph& g) {
  std::ifstream in(dir / "values.json");
  COIL_USER_CHECK(in.good(), "cannot read {}", (dir / "values.json").string());
  json j = json::parse(in, nullptr, false);
  COIL_USER_CHECK(!j.is_discarded() && j.contains("nodes") && j["nodes"].is_array(),
                  "{}: not a values.json (no \"nodes\" list)", (dir / "values.json").string());
  std::vector<Tensor> values(static_cast<size_t>(g.num_nodes()));
  std::vector<bool> seen(values.size(), false);
  for (const json& v : j["nodes"]) {
    const std::string name = v.at("name").get<std::string>();
    const int id = g.find(name);
    COIL_USER_CHECK(id >= 0, "values.json: the graph has no node {}", name);
    Tensor t = read_npy(dir / v.at("file").get<std::string>());
    const Node& n = g.node(id);
    COIL_USER_CHECK(t.dtype() == n.type.dtype && t.shape().size() == n.type.shape.size(),
                    "the value of node {} ({} {}D) is {} {}D", name, dtype_name(n.type.dtype),
                    n.type.shape.size(), dtype_name(t.dtype()), t.shape().size());
    values[static_cast<size_t>(id)] = std::move(t);
    seen[static_cast<size_t>(id)] = true;
  }
  for (const auto& n : g.nodes())
    COIL_USER_CHECK(seen[static_cast<size_t>(n->id)], "values.json has no value of node {}",
                    n->name);
  return values;
}

}  // namespace

int run_check_values(const fs::path& dir) {
  FuzzCase c;
  std::vector<Tensor> values;
  try {
    c = load_case_file(dir / "graph.coil");
    values = read_values(dir, c.graph);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil_fuzz --check-values: %s\n", e.what());
    return 2;
  }
  LocalVerdict v = check_nodes(c.graph, values);
  json out{{"verdict", verdict_name(v.kind)},
           {"node", v.node >= 0 ? json(v.node) : json()},
           {"name", v.node >= 0 ? c.graph.node(v.node).name : ""},
           {"op", v.node >= 0 ? std::string(c.graph.node(v.node).op_name()) : ""},
           {"message", v.message}};
  std::ofstream(dir / "verdict.json")
      << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  std::printf("%s: %s\n", verdict_name(v.kind), v.message.c_str());
  return v.kind == LocalVerdict::kExplained ? 0 : 1;
}

}  // namespace coil::fuzz
