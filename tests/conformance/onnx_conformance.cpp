#include "conformance/onnx_conformance.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "coil/coil.h"
#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_data_dependent.h"
#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_model.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil::conformance {
namespace fs = std::filesystem;

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Pass:
      return "pass";
    case Outcome::Mismatch:
      return "mismatch";
    case Outcome::Unsupported:
      return "unsupported";
    case Outcome::ImportError:
      return "import error";
    case Outcome::CompileError:
      return "compile error";
    case Outcome::RunError:
      return "run error";
    case Outcome::BadTestData:
      return "test data";
  }
  return "?";
}

fs::path testdata_root() {
  if (const char* e = std::getenv("COIL_ONNX_TESTDATA")) return e;
  return "/usr/share/libonnx-testdata/data";  // Debian's libonnx-testdata
}

namespace {

onnx::ModelProto read_model(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&f)) throw Error(path.string() + ": cannot parse");
  return m;
}

// The files input_0.pb, input_1.pb, ... (or output_*) in numeric order.
std::vector<fs::path> data_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (int i = 0;; ++i) {
    fs::path p = dir / fmt::format("{}_{}.pb", prefix, i);
    if (!fs::exists(p)) break;
    files.push_back(p);
  }
  return files;
}

// A TensorProto file of the test data, for a value the model declares of elem_type `declared`
// (0: unknown). ONNX 1.12's data stores bfloat16 tensors as uint16 (numpy has no bfloat16): a
// uint16 file is read as bf16 where the model declares bfloat16, as uint16 otherwise.
Tensor load_test_tensor(const fs::path& path, int32_t declared) {
  std::ifstream f(path, std::ios::binary);
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&f)) throw Error(path.string() + ": not a TensorProto");
  if (t.data_type() == onnx::TensorProto::UINT16 && declared == onnx::TensorProto::BFLOAT16)
    t.set_data_type(onnx::TensorProto::BFLOAT16);
  return onnxfe::tensor_from_proto(t, path.string());
}

// The elem_type of each value (0 where the model gives none): graph inputs that are not
// initializers (the order of input_*.pb), or the graph outputs (output_*.pb).
std::vector<int32_t> declared_types(const onnx::ModelProto& m, bool outputs) {
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  std::vector<int32_t> types;
  for (const auto& v : outputs ? m.graph().output() : m.graph().input()) {
    if (!outputs && inits.count(v.name())) continue;
    types.push_back(v.type().has_tensor_type() ? v.type().tensor_type().elem_type() : 0);
  }
  return types;
}

}  // namespace

std::vector<std::string> model_ops(const fs::path& model) {
  onnx::ModelProto m = read_model(model);
  std::set<std::string> ops;
  for (const auto& n : m.graph().node())
    ops.insert(n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type()
                                                             : n.domain() + "." + n.op_type());
  return {ops.begin(), ops.end()};
}

bool op_supported(const std::string& op) {
  const onnxfe::OnnxOpDef* def = onnxfe::find_onnx_op(op);
  return def != nullptr && def->map != nullptr;
}

CaseResult prepare_case(const fs::path& dir, PreparedCase* out) {
  fs::path data = dir / "test_data_set_0";
  std::vector<Tensor> inputs;
  try {
    onnx::ModelProto model = read_model(dir / "model.onnx");
    for (bool outputs : {false, true}) {
      std::vector<int32_t> declared = declared_types(model, outputs);
      std::vector<fs::path> files = data_files(data, outputs ? "output" : "input");
      for (size_t i = 0; i < files.size(); ++i)
        (outputs ? out->expected : inputs)
            .push_back(load_test_tensor(files[i], i < declared.size() ? declared[i] : 0));
    }
  } catch (const Error& e) {
    return {Outcome::BadTestData, e.what()};
  }
  auto unsupported = [](const std::string& msg) {
    return msg.find("unsupported ops:") != std::string::npos ||
           msg.find("opset") != std::string::npos ||
           msg.find("coil does not support") != std::string::npos;
  };
  Graph& g = out->graph;
  try {
    g = import_onnx(dir / "model.onnx");
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.find(onnxfe::kStaged) != std::string::npos) {
      out->staged = true;
      out->model = dir / "model.onnx";
      out->inputs = inputs;
      return {Outcome::Pass, ""};
    }
    if (msg.find("is not a constant") == std::string::npos)
      return {unsupported(msg) ? Outcome::Unsupported : Outcome::ImportError, msg};
    // Bind the inputs the import needs to the test's values, as coil::OnnxModel does (frontend/
    // onnx/onnx_model.h: the integer and one-element inputs, and Resize's and Upsample's roi
    // and scales, each released again when the model imports without it), and feed the rest.
    onnx::ModelProto m = read_model(dir / "model.onnx");
    std::set<std::string> inits;
    for (const auto& t : m.graph().initializer()) inits.insert(t.name());
    std::map<std::string, Tensor> given;
    std::vector<std::string> order;
    size_t k = 0;
    for (const auto& in : m.graph().input()) {
      if (inits.count(in.name()) || k >= inputs.size()) continue;
      given[in.name()] = inputs[k++];
      order.push_back(in.name());
    }
    ValueBoundImport imp;
    try {
      imp = import_onnx_binding_values(dir / "model.onnx", given);
    } catch (const Error& e2) {
      return {unsupported(e2.what()) ? Outcome::Unsupported : Outcome::ImportError, e2.what(),
              true};
    }
    g = std::move(imp.graph);
    std::vector<Tensor> rest;
    for (const std::string& n : order)
      if (std::find(imp.bound.begin(), imp.bound.end(), n) == imp.bound.end())
        rest.push_back(given[n]);
    for (; k < inputs.size(); ++k) rest.push_back(inputs[k]);  // extra files: BadTestData below
    inputs = rest;
    out->specialized = true;
  }
  out->inputs = inputs;
  CaseResult ok{Outcome::Pass, "", out->specialized};
  if (inputs.size() != g.inputs().size())
    return {Outcome::BadTestData,
            fmt::format("{} input files for {} graph inputs", inputs.size(), g.inputs().size()),
            out->specialized};
  if (out->expected.size() != g.outputs().size())
    return {Outcome::BadTestData,
            fmt::format("{} output files for {} graph outputs", out->expected.size(),
                        g.outputs().size()),
            out->specialized};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& n = g.node(g.inputs()[i]);
    bool fits = inputs[i].dim() == n.type.rank() && inputs[i].dtype() == n.type.dtype;
    for (size_t d = 0; fits && d < n.type.shape.size(); ++d) {
      if (n.type.shape[d].is_symbol())
        out->options.sizes.emplace(n.type.shape[d].symbol_name(), inputs[i].shape()[d]);
      else
        fits = n.type.shape[d] == sym::Expr(inputs[i].shape()[d]);
    }
    if (!fits)
      return {Outcome::BadTestData,
              fmt::format("input {}: the model declares {}, the test data is {}{}", n.name,
                          type_str(n.type), dtype_name(inputs[i].dtype()),
                          shape_str(inputs[i].shape())),
              out->specialized};
  }
  return ok;
}

CaseResult run_case(const fs::path& dir) {
  PreparedCase c;
  CaseResult result = prepare_case(dir, &c);
  if (result.outcome != Outcome::Pass) return result;
  std::vector<Tensor> got;
  if (c.staged) {  // compiled stages and host ops: coil::OnnxModel compiles as it runs
    try {
      got = OnnxModel::load(c.model).run(c.inputs);
    } catch (const std::exception& e) {
      return {Outcome::RunError, e.what(), c.specialized};
    }
    if (got.size() != c.expected.size())
      return {Outcome::BadTestData,
              fmt::format("{} output files for {} graph outputs", c.expected.size(), got.size())};
  } else {
    CompiledModel model;
    try {
      model = compile(c.graph, c.options);
    } catch (const std::exception& e) {
      return {Outcome::CompileError, e.what(), c.specialized};
    }
    try {
      got = model.run(c.inputs);
    } catch (const std::exception& e) {
      return {Outcome::RunError, e.what(), c.specialized};
    }
  }
  std::vector<std::string> problems;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string name = c.staged ? fmt::format("#{}", i) : c.graph.outputs()[i].name;
    const Tensor& want = c.expected[i];
    if (got[i].dtype() != want.dtype() || got[i].shape() != want.shape()) {
      problems.push_back(fmt::format("output {}: got {}{}, expected {}{}", name,
                                     dtype_name(got[i].dtype()), shape_str(got[i].shape()),
                                     dtype_name(want.dtype()), shape_str(want.shape())));
      continue;
    }
    Tolerance tol = kTolerance;
    if (const char* atol = std::getenv("COIL_CONFORMANCE_ATOL")) tol.atol = std::stod(atol);
    CompareResult cmp = compare_tensors(got[i], want, tol);
    if (!cmp.ok) problems.push_back(fmt::format("output {}: {}", name, cmp.message));
  }
  if (!problems.empty())
    return {Outcome::Mismatch, fmt::format("{}", fmt::join(problems, "; ")), c.specialized};
  return result;
}

std::vector<AllowedTest> read_allowlist(const fs::path& file) {
  std::ifstream f(file);
  if (!f) throw Error(file.string() + ": cannot open");
  std::vector<AllowedTest> tests;
  std::string line;
  while (std::getline(f, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    AllowedTest t;
    std::string flag;
    if (!(words >> t.path)) continue;
    t.slow = (words >> flag) && flag == "slow";
    tests.push_back(t);
  }
  return tests;
}

}  // namespace coil::conformance
