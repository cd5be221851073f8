#include "frontend/onnx/onnx_model.h"

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "frontend/onnx/onnx_data_dependent.h"
#include "frontend/onnx/onnx_staged.h"
#include "frontend/onnx/onnx_tensor.h"
#include "support/check.h"
#include "support/log.h"

namespace coil {
namespace {

bool needs_a_value(const Error& e) {
  return std::string_view(e.what()).find("is not a constant") != std::string_view::npos;
}

onnx::ModelProto parse(const std::string& bytes, const std::string& name) {
  onnx::ModelProto m;
  COIL_USER_CHECK(m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
                  "{}: not a valid ONNX model (the protobuf does not parse)", name);
  return m;
}

/// The graph inputs without an initializer (what a caller feeds), by ONNX name, in order.
std::vector<std::string> fed_inputs(const onnx::ModelProto& m) {
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  std::vector<std::string> out;
  for (const auto& in : m.graph().input())
    if (!inits.count(in.name())) out.push_back(in.name());
  return out;
}

/// The fed inputs whose value can shape the graph (the header's candidates), in order; an
/// input in `given` is judged by its value (dtype, element count), the others by their
/// declared type.
std::vector<std::string> value_candidates(const onnx::ModelProto& m,
                                          const std::map<std::string, Tensor>& given) {
  std::set<std::string> resize_params;
  for (const auto& node : m.graph().node())
    if (node.op_type() == "Resize" || node.op_type() == "Upsample")
      for (int i = 1; i < node.input_size(); ++i) resize_params.insert(node.input(i));
  std::set<std::string> fed;
  for (const std::string& n : fed_inputs(m)) fed.insert(n);
  std::vector<std::string> out;
  for (const auto& in : m.graph().input()) {
    if (!fed.count(in.name()) || !in.type().has_tensor_type()) continue;
    if (auto it = given.find(in.name()); it != given.end()) {
      const Tensor& t = it->second;
      if ((is_integral(t.dtype()) && t.dtype() != DType::Bool) || t.numel() == 1 ||
          resize_params.count(in.name()))
        out.push_back(in.name());
      continue;
    }
    const auto& tt = in.type().tensor_type();
    std::optional<DType> dt = onnxfe::dtype_from_onnx(tt.elem_type());
    bool one_element = tt.has_shape();
    for (const auto& d : tt.shape().dim())
      one_element = one_element && d.has_dim_value() && d.dim_value() == 1;
    if ((dt && is_integral(*dt) && *dt != DType::Bool) || one_element ||
        resize_params.count(in.name()))
      out.push_back(in.name());
  }
  return out;
}

Graph import_bound(const std::string& bytes, const std::string& name,
                   const std::map<std::string, Tensor>& given,
                   const std::vector<std::string>& bind) {
  OnnxImportOptions opt;
  for (const std::string& b : bind) opt.input_values[b] = given.at(b);
  return import_onnx_bytes(bytes, name, opt);
}

}  // namespace

ValueBoundImport import_onnx_binding_values(const std::string& bytes, const std::string& name,
                                            const std::map<std::string, Tensor>& given,
                                            const std::vector<std::string>* bound_only) {
  if (bound_only) {
    for (const std::string& b : *bound_only)
      COIL_USER_CHECK(given.count(b), "{}: input '{}' shapes the model: give its value", name, b);
    return {import_bound(bytes, name, given, *bound_only), *bound_only};
  }
  std::string first_error;
  try {
    return {import_onnx_bytes(bytes, name), {}};
  } catch (const Error& e) {
    if (!needs_a_value(e)) throw;
    first_error = e.what();
  }
  std::vector<std::string> bind, missing;
  for (const std::string& c : value_candidates(parse(bytes, name), given))
    (given.count(c) ? bind : missing).push_back(c);
  Graph g;
  try {
    g = import_bound(bytes, name, given, bind);
  } catch (const Error& e) {
    if (!needs_a_value(e) || missing.empty()) throw;
    user_error("{} (the model takes it from a graph input: give the value of {})", first_error,
               fmt::join(missing, ", "));
  }
  // Release each input the import does not need, so that data inputs stay inputs.
  for (size_t i = 0; i < bind.size();) {
    std::vector<std::string> fewer = bind;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
    try {
      g = import_bound(bytes, name, given, fewer);
      bind = std::move(fewer);
    } catch (const Error& e) {
      if (!needs_a_value(e)) throw;
      ++i;
    }
  }
  return {std::move(g), std::move(bind)};
}

namespace {

std::string read_file_bytes(const std::filesystem::path& path) {
  std::error_code ec;
  COIL_USER_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a model file",
                  path.string());
  std::ifstream f(path, std::ios::binary);
  COIL_USER_CHECK(f.good(), "{}: cannot open the file", path.string());
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  COIL_USER_CHECK(!f.bad(), "{}: read error", path.string());
  return bytes;
}

}  // namespace

ValueBoundImport import_onnx_binding_values(const std::filesystem::path& path,
                                            const std::map<std::string, Tensor>& given) {
  return import_onnx_binding_values(read_file_bytes(path), path.string(), given);
}

OnnxModel::OnnxModel(OnnxModel&&) noexcept = default;
OnnxModel& OnnxModel::operator=(OnnxModel&&) noexcept = default;
OnnxModel::~OnnxModel() = default;

OnnxModel OnnxModel::load(const std::filesystem::path& path, const CompileOptions& options) {
  return from_bytes(read_file_bytes(path), path.string(), options);
}

OnnxModel OnnxModel::from_bytes(std::string bytes, std::string name,
                                const CompileOptions& options) {
  OnnxModel m;
  m.name_ = std::move(name);
  m.bytes_ = std::move(bytes);
  m.options_ = options;
  m.input_names_ = fed_inputs(parse(m.bytes_, m.name_));
  try {
    Graph g = import_onnx_bytes(m.bytes_, m.name_);
    m.variants_[""] = std::make_unique<CompiledModel>(compile(g, options));
    m.decided_ = true;
  } catch (const Error& e) {
    if (std::string_view(e.what()).find(onnxfe::kStaged) != std::string_view::npos) {
      COIL_LOG(guards, "{}: ops whose output size depends on values: running in stages", m.name_);
      m.staged_ = std::make_unique<StagedOnnxModel>(m.bytes_, m.name_, options);
      m.decided_ = true;
      return m;
    }
    if (!needs_a_value(e)) throw;
    COIL_LOG(guards, "{}: an input shapes the model; compiling per value at the first call",
             m.name_);
  }
  return m;
}

std::vector<std::string> OnnxModel::value_inputs() const {
  std::lock_guard<std::mutex> lock(*mutex_);
  return bound_;
}

int OnnxModel::variants() const {
  if (staged_) return staged_->compiled();
  std::lock_guard<std::mutex> lock(*mutex_);
  return static_cast<int>(variants_.size());
}

std::vector<Tensor> OnnxModel::run(const std::vector<Tensor>& inputs) const {
  COIL_USER_CHECK(inputs.size() == input_names_.size(),
                  "{}: the model takes {} inputs ({}), got {}", name_, input_names_.size(),
                  fmt::join(input_names_, ", "), inputs.size());
  std::map<std::string, Tensor> given;
  for (size_t i = 0; i < inputs.size(); ++i) given[input_names_[i]] = inputs[i];
  if (staged_) return staged_->run(given);
  const CompiledModel* model = nullptr;
  {
    std::lock_guard<std::mutex> lock(*mutex_);
    auto key_of = [&] {
      std::string key;
      for (const std::string& b : bound_) {
        Tensor t = given.at(b).is_contiguous() ? given.at(b) : given.at(b).clone();
        key += fmt::format("{}{}:", dtype_name(t.dtype()), shape_str(t.shape()));
        key.append(static_cast<const char*>(t.data()),
                   static_cast<size_t>(t.numel() * dtype_size(t.dtype())));
      }
      return key;
    };
    if (!decided_) {
      ValueBoundImport imp = import_onnx_binding_values(bytes_, name_, given);
      bound_ = imp.bound;
      decided_ = true;
      COIL_LOG(guards, "{}: specializing on the values of {}", name_, fmt::join(bound_, ", "));
      variants_[key_of()] = std::make_unique<CompiledModel>(compile(imp.graph, options_));
    }
    std::string key = key_of();
    auto it = variants_.find(key);
    if (it == variants_.end()) {
      COIL_LOG(guards, "{}: new values of {}: compiling variant {}", name_, fmt::join(bound_, ", "),
               variants_.size() + 1);
      ValueBoundImport imp = import_onnx_binding_values(bytes_, name_, given, &bound_);
      it = variants_.emplace(key, std::make_unique<CompiledModel>(compile(imp.graph, options_)))
               .first;
    }
    model = it->second.get();
  }
  std::vector<Tensor> rest;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (std::find(bound_.begin(), bound_.end(), input_names_[i]) == bound_.end())
      rest.push_back(inputs[i]);
  return model->run(rest);
}

}  // namespace coil
