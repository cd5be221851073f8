#include "fuzz/check_values.h"

#include <cstdio>
#include <exception>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "coil/error.h"
#include "fuzz/evaluate.h"
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

int run_check_placement(const fs::path& dir) {
  FuzzCase c;
  std::vector<Tensor> inputs;
  std::vector<std::pair<size_t, Tensor>> outputs;
  try {
    c = load_case_file(dir / "graph.coil");
    std::ifstream in(dir / "values.json");
    COIL_USER_CHECK(in.good(), "cannot read {}", (dir / "values.json").string());
    json j = json::parse(in, nullptr, false);
    COIL_USER_CHECK(!j.is_discarded() && j.contains("inputs") && j.contains("outputs"),
                    "{}: no \"inputs\" and \"outputs\" lists", (dir / "values.json").string());
    const Graph& g = c.graph;
    for (int id : g.inputs()) {
      const Node& n = g.node(id);
      const json* file = nullptr;
      for (const json& v : j["inputs"])
        if (v.at("name").get<std::string>() == n.name) file = &v.at("file");
      COIL_USER_CHECK(file != nullptr, "values.json has no value of input {}", n.name);
      Tensor t = read_npy(dir / file->get<std::string>());
      COIL_USER_CHECK(t.dtype() == n.type.dtype, "input {} is {}, the graph says {}", n.name,
                      dtype_name(t.dtype()), dtype_name(n.type.dtype));
      inputs.push_back(std::move(t));
    }
    for (const json& v : j["outputs"]) {
      const size_t index = v.at("index").get<size_t>();
      COIL_USER_CHECK(index < g.outputs().size(), "values.json: output {} of a graph of {}", index,
                      g.outputs().size());
      outputs.emplace_back(index, read_npy(dir / v.at("file").get<std::string>()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coil_fuzz --check-placement: %s\n", e.what());
    return 2;
  }
  const std::vector<Tolerance> tols = output_tolerances(c.graph);
  std::vector<std::string> found;
  std::string missing;
  for (const auto& [index, got] : outputs) {
    std::string placement = rounding_placement(c.graph, inputs, index, got, tols[index]);
    const std::string& name = c.graph.outputs()[index].name;
    if (placement.empty()) {
      missing = fmt::format(
          "output {}: no rounding placement of its f16/bf16 intermediates "
          "gives the GPU's value",
          name);
      break;
    }
    found.push_back(fmt::format("output {}: {}", name, placement));
  }
  const bool explained = missing.empty() && !found.empty();
  const std::string message =
      explained ? fmt::format("{}", fmt::join(found, "; "))
                : (missing.empty() ? std::string("values.json names no output") : missing);
  json out{{"verdict", explained ? "explained" : "no-placement"}, {"message", message}};
  std::ofstream(dir / "verdict.json")
      << out.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  std::printf("%s: %s\n", explained ? "explained" : "no-placement", message.c_str());
  return explained ? 0 : 1;
}

}  // namespace coil::fuzz
