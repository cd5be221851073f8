#include "fuzz/cuda_case.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <typeinfo>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coil/coil.h"
#include "fuzz/local_check.h"
#include "graph/interpreter.h"
#include "support/check.h"
#include "support/npy.h"

namespace fs = std::filesystem;

namespace coil::fuzz {
namespace {

bool has_low_precision(const Graph& g) {
  for (const auto& n : g.nodes())
    if (is_low_precision(n->type.dtype)) return true;
  return false;
}

// The exception's demangled type and message (as evaluate.cpp's exception_text).
std::string exception_text(const std::exception& e) {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string text = fmt::format("{}: {}", status == 0 ? name : typeid(e).name(), e.what());
  std::free(name);
  return text;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  COIL_USER_CHECK(out.good(), "cannot write {}", path.string());
}

nlohmann::ordered_json shape_json(const std::vector<int64_t>& shape) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (int64_t d : shape) j.push_back(d);
  return j;
}

// What run_triton.py needs to run the local check of member `m` (its instrumented module at
// `module`): which output of that module is which node, and which node each input is.
nlohmann::ordered_json local_json(const CudaMember& m, const std::string& module) {
  const Graph& g = m.c.graph;
  auto node_json = [&](int id) {
    const Node& n = g.node(id);
    return nlohmann::ordered_json{
        {"node", id}, {"name", n.name}, {"dtype", dtype_name(n.type.dtype)}};
  };
  nlohmann::ordered_json j;
  j["module"] = m.module_local.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(module);
  j["error"] =
      m.local_error.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(m.local_error);
  j["graph_outputs"] = g.outputs().size();
  j["inputs"] = nlohmann::ordered_json::array();
  for (int id : g.inputs()) j["inputs"].push_back(node_json(id));
  j["nodes"] = nlohmann::ordered_json::array();
  for (int id : m.local_nodes) j["nodes"].push_back(node_json(id));
  return j;
}

}  // namespace

Outcome generate_cuda(const FuzzCase& c, bool fusion, std::string& source) {
  CompileOptions options;
  options.device = "cuda";
  options.sizes = c.sizes;
  options.autotune = false;
  options.fusion = fusion;
  const int k = fusion ? 0 : 1;
  const std::string where = fusion ? "cuda fusion=on" : "cuda fusion=off";
  try {
    source = generate_gpu_module(c.graph, options).source;
    return {};
  } catch (const Error& e) {
    // The documented limits, as evaluate.cpp's run_config tells them (plus UnsupportedError).
    std::string msg = e.what();
    bool documented = dynamic_cast<const UnsupportedError*>(&e) != nullptr ||
                      msg.find("is not supported") != std::string::npos ||
                      msg.find("are not supported yet") != std::string::npos;
    return {documented ? "unsupported" : "compile-error", where + ": " + msg, k};
  } catch (const InternalError& e) {
    return {"internal", where + ": " + e.what(), k};
  } catch (const std::exception& e) {
    return {"internal", where + ": " + exception_text(e), k};
  }
}

Outcome prepare_member(CudaMember& m) {
  try {
    m.inputs = case_inputs(m.c);
    m.reference = interpret(m.c.graph, m.inputs);
  } catch (const Error& e) {
    // As evaluate_case: a graph valid for its symbols can be invalid for the bound sizes; when
    // the code generator refuses it too, both sides agree that it is an error.
    std::string unused;
    Outcome g = generate_cuda(m.c, true, unused);
    if (g.cls == "compile-error" || g.cls == "unsupported")
      return {"rejected", fmt::format("the reference: {}\n{}", e.what(), g.message)};
    return {"interp-error", e.what()};
  } catch (const std::exception& e) {
    return {"internal", "interpreter: " + exception_text(e)};
  }
  if (has_low_precision(m.c.graph)) {
    try {
      m.widened = interpret(widen_low_precision(m.c.graph), m.inputs);
    } catch (const std::exception&) {
      // Without the second reference, outputs are compared with the first one only.
    }
  }
  Outcome on = generate_cuda(m.c, true, m.module_on);
  if (!on.cls.empty()) return on;
  Outcome off = generate_cuda(m.c, false, m.module_off);
  if (!off.cls.empty()) return off;
  // As check_locally compiles it; a module of its own, since it is needed only when an output
  // differs, and a batch's call stays as cheap as it was.
  Outcome local =
      generate_cuda(with_every_node_as_output(m.c, m.local_nodes), true, m.module_local);
  if (!local.cls.empty()) {
    m.module_local.clear();
    m.local_error = local.cls + ": " + local.message;
  }
  return {};
}

std::string cuda_file_stem(const std::string& key) {
  bool digits = !key.empty() && std::all_of(key.begin(), key.end(),
                                            [](unsigned char ch) { return std::isdigit(ch); });
  if (digits) return fmt::format("{:0>9}", key);
  std::string name = fs::path(key).extension() == ".coil" ? fs::path(key).stem().string() : key;
  std::string safe;
  for (char ch : name) safe += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return safe;
}

std::string cuda_case_name(const std::string& key) {
  return "case-" + cuda_file_stem(key);
}

void write_cuda_case(const fs::path& dir, const std::string& name,
                     const std::vector<const CudaMember*>& members, const FuzzCase* merged,
                     const std::string& module_on, const std::string& module_off) {
  COIL_ASSERT(!members.empty(), "a case without graphs");
  const bool batch = members.size() > 1;
  COIL_ASSERT(!batch || merged != nullptr, "a batch case needs its merged graph");
  const fs::path tmp = dir / (".tmp-" + name), final_dir = dir / name;
  std::error_code ec;
  fs::remove_all(tmp, ec);
  for (const char* sub : {"inputs", "ref", "wide", "graphs"}) fs::create_directories(tmp / sub);

  nlohmann::ordered_json j;
  j["format"] = "coil-fuzz-cuda-case 1";
  j["name"] = name;
  j["modules"] = {{"on", "module.py"}, {"off", "module_nofuse.py"}};
  write_text(tmp / "module.py", batch ? module_on : members[0]->module_on);
  write_text(tmp / "module_nofuse.py", batch ? module_off : members[0]->module_off);
  const FuzzCase& whole = batch ? *merged : members[0]->c;
  std::vector<std::string> header{batch ? fmt::format("a batch of {} graphs", members.size())
                                        : "found by: " + members[0]->origin};
  write_text(tmp / "graph.coil", case_text(whole, header));

  // The merged graph's inputs and outputs are its members', in member order (merge_cases).
  const auto& whole_inputs = whole.graph.inputs();
  const auto& whole_outputs = whole.graph.outputs();
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array(), graphs = inputs;
  size_t in_pos = 0, out_pos = 0;
  for (size_t k = 0; k < members.size(); ++k) {
    const CudaMember& m = *members[k];
    const std::string prefix = batch ? fmt::format("b{}_", k) : "";
    nlohmann::ordered_json g;
    g["key"] = m.key;
    g["origin"] = m.origin;
    const std::string stem = "graphs/" + cuda_file_stem(m.key);
    g["graph"] = batch ? stem + ".coil" : "graph.coil";
    if (batch) {
      write_text(tmp / (stem + ".coil"), case_text(m.c, {"found by: " + m.origin}));
      g["modules"] = {{"on", stem + ".py"}, {"off", stem + "_nofuse.py"}};
      write_text(tmp / (stem + ".py"), m.module_on);
      write_text(tmp / (stem + "_nofuse.py"), m.module_off);
    }
    g["local"] = local_json(m, batch ? stem + "_local.py" : "module_local.py");
    if (!m.module_local.empty())
      write_text(tmp / g["local"]["module"].get<std::string>(), m.module_local);
    g["inputs"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < m.inputs.size(); ++i, ++in_pos) {
      const Node& n = m.c.graph.node(m.c.graph.inputs()[i]);
      COIL_ASSERT(in_pos < whole_inputs.size() &&
                      whole.graph.node(whole_inputs[in_pos]).name == prefix + n.name,
                  "input {} of graph {} is not input {} of its case", n.name, m.key, in_pos);
      std::string file = fmt::format("inputs/{}.npy", in_pos);
      write_npy(tmp / file, m.inputs[i]);
      inputs.push_back({{"name", prefix + n.name},
                        {"dtype", dtype_name(m.inputs[i].dtype())},
                        {"shape", shape_json(m.inputs[i].shape())},
                        {"file", file}});
      g["inputs"].push_back(in_pos);
    }
    std::vector<Tolerance> tolerances = output_tolerances(m.c.graph);
    g["outputs"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < m.reference.size(); ++i, ++out_pos) {
      const GraphOutput& o = m.c.graph.outputs()[i];
      COIL_ASSERT(out_pos < whole_outputs.size() && whole_outputs[out_pos].name == prefix + o.name,
                  "output {} of graph {} is not output {} of its case", o.name, m.key, out_pos);
      const Tensor& ref = m.reference[i];
      nlohmann::ordered_json out{{"position", out_pos},
                                 {"name", o.name},
                                 {"op", m.c.graph.node(o.node).op_name()},
                                 {"dtype", dtype_name(ref.dtype())},
                                 {"shape", shape_json(ref.shape())},
                                 {"rtol", tolerances[i].rtol},
                                 {"atol", tolerances[i].atol},
                                 {"ref", fmt::format("ref/{}.npy", out_pos)},
                                 {"wide", nullptr}};
      write_npy(tmp / out["ref"].get<std::string>(), ref);
      if (m.widened) {
        out["wide"] = fmt::format("wide/{}.npy", out_pos);
        write_npy(tmp / out["wide"].get<std::string>(), (*m.widened)[i]);
      }
      g["outputs"].push_back(std::move(out));
    }
    graphs.push_back(std::move(g));
  }
  COIL_ASSERT(in_pos == whole_inputs.size() && out_pos == whole_outputs.size(),
              "case {}: {} inputs and {} outputs, its graph has {} and {}", name, in_pos, out_pos,
              whole_inputs.size(), whole_outputs.size());
  j["inputs"] = std::move(inputs);
  j["graphs"] = std::move(graphs);
  write_text(tmp / "case.json", j.dump() + "\n");
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir);
}

}  // namespace coil::fuzz
