// The C ABI (include/coil/coil_c.h), part 2: compile options as JSON, compiling, and running on
// caller memory. Part 1 (errors, graphs) is coil_c.cpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi/capi_internal.h"
#include "support/check.h"
#include "support/suggest.h"

namespace coil::capi {
namespace {

using nlohmann::json;

const char* json_kind(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "null";
}

// The text of a JSON document; coil::Error naming the duplicated key when an object holds one
// twice (nlohmann would keep the last silently).
json parse_json(std::string_view text) {
  std::vector<std::set<std::string>> keys;  // per open object
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second)
      user_error("options: key '{}' is given twice", parsed.get<std::string>());
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    std::string message = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." without the tag.
    size_t tag = message.find("] ");
    if (message.starts_with("[json.exception.") && tag != std::string::npos)
      message = message.substr(tag + 2);
    user_error("options: invalid JSON: {}", message);
  }
}

bool get_bool(const json& v, const std::string& key) {
  COIL_USER_CHECK(v.is_boolean(), "options: '{}' must be a boolean, got {} ({})", key, json_kind(v),
                  v.dump());
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& key) {
  COIL_USER_CHECK(v.is_string(), "options: '{}' must be a string, got {} ({})", key, json_kind(v),
                  v.dump());
  return v.get<std::string>();
}

// CompileOptions from the JSON object `text` (NULL or "": the defaults, with `device`).
CompileOptions parse_options(const char* text, const std::string& device) {
  CompileOptions o;
  o.device = device;
  if (!text || !*text) return o;
  json j = parse_json(text);
  COIL_USER_CHECK(j.is_object(), "options: expected a JSON object, got {} ({})", json_kind(j),
                  j.dump());
  static const std::vector<std::string> kKeys = {
      "sizes",       "isa",         "fusion",        "store_all_intermediates",
      "autotune",    "device",      "precision",     "output_dir",
      "debug_dir",   "write_graph", "graph_weights", "mode",
      "remote_cache"};
  for (const auto& [key, v] : j.items()) {
    if (key == "sizes") {
      COIL_USER_CHECK(v.is_object(),
                      "options: 'sizes' must be an object of symbol sizes, got {} ({})",
                      json_kind(v), v.dump());
      for (const auto& [symbol, size] : v.items()) {
        COIL_USER_CHECK(size.is_number_integer() &&
                            (size.is_number_unsigned() ? size.get<uint64_t>() <= INT64_MAX : true),
                        "options: 'sizes.{}' must be an integer, got {} ({})", symbol,
                        json_kind(size), size.dump());
        o.sizes[symbol] = size.get<int64_t>();
      }
    } else if (key == "isa") {
      o.isa = get_string(v, key);
    } else if (key == "fusion") {
      o.fusion = get_bool(v, key);
    } else if (key == "store_all_intermediates") {
      o.store_all_intermediates = get_bool(v, key);
    } else if (key == "autotune") {
      o.autotune = get_bool(v, key);
    } else if (key == "device") {
      o.device = get_string(v, key);
    } else if (key == "precision") {
      o.precision = get_string(v, key);
    } else if (key == "output_dir") {
      o.output_dir = get_string(v, key);
    } else if (key == "debug_dir") {
      o.debug_dir = get_string(v, key);
    } else if (key == "write_graph") {
      o.write_graph = get_bool(v, key);
    } else if (key == "graph_weights") {
      o.graph_weights = get_bool(v, key);
    } else if (key == "mode") {
      o.mode = get_string(v, key);
    } else if (key == "remote_cache") {
      o.remote_cache = get_string(v, key);
    } else {
      user_error("options: unknown key '{}'{}; the keys are {}", key, did_you_mean(key, kKeys),
                 fmt::join(kKeys, ", "));
    }
  }
  return o;
}

// Byte range [lo, hi) that a tensor's elements span (checked not to overflow by tensor_ref).
struct Extent {
  uintptr_t lo = 0, hi = 0;
  bool overlaps(const Extent& o) const { return lo < o.hi && o.lo < hi; }
};

Extent extent_of(const TensorRef& t) {
  if (t.numel() == 0) return {};
  int64_t below = 0, above = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    int64_t reach = t.strides[d] * (t.shape[d] - 1);
    (reach < 0 ? below : above) += reach;
  }
  int64_t size = dtype_size(t.dtype);
  auto base = reinterpret_cast<uintptr_t>(t.data);
  return {base + static_cast<uintptr_t>(below * size),
          base + static_cast<uintptr_t>((above + 1) * size)};
}

// Copies the contiguous `src` into the strided `dst` (same dtype and shape).
void copy_to_strided(const Tensor& src, const TensorRef& dst) {
  int64_t n = src.numel();
  if (n == 0) return;
  size_t esize = static_cast<size_t>(dtype_size(src.dtype()));
  size_t rank = dst.shape.size();
  std::vector<int64_t> idx(rank, 0);
  const auto* from = static_cast<const std::byte*>(src.data());
  auto* to = static_cast<std::byte*>(const_cast<void*>(dst.data));
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d) off += idx[d] * dst.strides[d];
    std::memcpy(to + off * static_cast<int64_t>(esize), from + static_cast<size_t>(i) * esize,
                esize);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < dst.shape[d]) break;
      idx[d] = 0;
    }
  }
}

void check_type(const TensorRef& t, const ValueSpec& spec, const char* kind) {
  bool ok = t.dtype == spec.dtype && t.shape.size() == spec.shape.size();
  for (size_t d = 0; ok && d < t.shape.size(); ++d)
    ok = spec.shape[d] < 0 || t.shape[d] == spec.shape[d];  // -1: a size-generic model's symbol
  COIL_USER_CHECK(ok, "{} {}: expected {}{}, got {}", kind, spec.name, dtype_name(spec.dtype),
                  shape_str(spec.shape), ref_type_str(t));
}

/// The output specs of a call on `ins`: the model's, or for a size-generic one its graph's
/// output shapes at the sizes the inputs bind (a dim that is a symbol alone binds it; the
/// model's run checks the rest and names any disagreement).
std::vector<ValueSpec> output_specs_at(const coil_model& m, const std::vector<TensorRef>& ins) {
  if (!m.size_generic) return m.outputs();
  std::map<std::string, int64_t> sizes;
  for (size_t i = 0; i < ins.size() && i < m.input_shapes.size(); ++i)
    for (size_t d = 0; d < m.input_shapes[i].size() && d < ins[i].shape.size(); ++d)
      if (m.input_shapes[i][d].is_symbol())
        sizes.emplace(m.input_shapes[i][d].symbol_name(), ins[i].shape[d]);
  std::vector<ValueSpec> out = m.outputs();
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t d = 0; d < out[i].shape.size(); ++d)
      out[i].shape[d] = sym::evaluate(m.output_shapes[i][d], sizes);
  return out;
}

void run_model(const coil_model& m, const coil_tensor* inputs, int32_t num_inputs,
               const coil_tensor* outputs, int32_t num_outputs) {
  const auto& in_specs = m.inputs();
  COIL_USER_CHECK(num_inputs >= 0 && static_cast<size_t>(num_inputs) == in_specs.size(),
                  "the model takes {} inputs, got {}", in_specs.size(), num_inputs);
  COIL_USER_CHECK(num_inputs == 0 || inputs, "coil_model_run: inputs is NULL for {} inputs",
                  num_inputs);
  std::vector<TensorRef> ins, outs;
  for (size_t i = 0; i < in_specs.size(); ++i) {
    ins.push_back(tensor_ref(inputs[i], "input " + in_specs[i].name));
    check_type(ins.back(), in_specs[i], "input");
  }
  const std::vector<ValueSpec> out_specs = output_specs_at(m, ins);
  COIL_USER_CHECK(num_outputs >= 0 && static_cast<size_t>(num_outputs) == out_specs.size(),
                  "the model has {} outputs, got {}", out_specs.size(), num_outputs);
  COIL_USER_CHECK(num_outputs == 0 || outputs, "coil_model_run: outputs is NULL for {} outputs",
                  num_outputs);
  for (size_t i = 0; i < out_specs.size(); ++i) {
    const std::string what = "output " + out_specs[i].name;
    outs.push_back(tensor_ref(outputs[i], what));
    const TensorRef& o = outs.back();
    check_type(o, out_specs[i], "output");
    for (size_t d = 0; d < o.shape.size(); ++d) {
      COIL_USER_CHECK(o.strides[d] >= 0,
                      "{}: stride {} of dim {} is negative (outputs need "
                      "strides >= 0)",
                      what, o.strides[d], d);
      COIL_USER_CHECK(o.strides[d] != 0 || o.shape[d] <= 1,
                      "{}: stride 0 in dim {} of size {} (an output cannot broadcast)", what, d,
                      o.shape[d]);
    }
  }
  // Written in place: the contiguous outputs while inputs read in place (contiguous) are read;
  // the others after. Pairs where one side is dense are checked by their extents (exact then).
  for (size_t i = 0; i < outs.size(); ++i) {
    Extent e = extent_of(outs[i]);
    bool dense = outs[i].is_contiguous();
    for (size_t k = 0; k < ins.size() && dense; ++k)
      COIL_USER_CHECK(!ins[k].is_contiguous() || !e.overlaps(extent_of(ins[k])),
                      "output {} overlaps input {} (outputs must not alias inputs)",
                      out_specs[i].name, in_specs[k].name);
    for (size_t k = 0; k < i; ++k)
      COIL_USER_CHECK(!(dense || outs[k].is_contiguous()) || !e.overlaps(extent_of(outs[k])),
                      "output {} overlaps output {} (outputs must not alias each other)",
                      out_specs[i].name, out_specs[k].name);
  }
  std::vector<void*> ptrs;
  std::vector<Tensor> temps(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].is_contiguous()) {
      ptrs.push_back(const_cast<void*>(outs[i].data));
    } else {
      temps[i] = Tensor::empty(out_specs[i].dtype, out_specs[i].shape);
      ptrs.push_back(temps[i].data());
    }
  }
  m.run_into(ins, ptrs);
  for (size_t i = 0; i < outs.size(); ++i)
    if (temps[i].defined()) copy_to_strided(temps[i], outs[i]);
}

}  // namespace
}  // namespace coil::capi

using namespace coil;
using capi::guard;
using capi::require;

extern "C" {

coil_status coil_compile(const coil_graph* graph, const char* options_json, coil_model** out) {
  if (out) *out = nullptr;
  return guard([&] {
    require(graph, "coil_compile", "graph");
    require(out, "coil_compile", "out");
    CompileOptions options = capi::parse_options(options_json, "cpu");
    // Each size bound to a symbol of the graph (a misspelled name is an error); sizes left
    // unbound make a size-generic model (docs/dynamic-shapes.md).
    std::vector<std::string> names;
    for (const sym::Expr& e : graph->graph.size_symbols()) names.push_back(sym::to_string(e));
    for (const auto& [name, value] : options.sizes)
      COIL_USER_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                      "options: size '{}': the graph has no size symbol '{}' (its symbols: {})",
                      name, name,
                      names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
    auto m = std::make_unique<coil_model>();
    m->compiled = compile(graph->graph, options);
    m->size_generic = m->compiled.size_generic();
    if (m->size_generic) {
      const Graph& g = graph->graph;
      std::map<sym::Expr, sym::Expr> bound;
      for (const auto& [name, v] : options.sizes) bound[sym::make_symbol(name)] = sym::Expr(v);
      auto at_bound = [&](Shape s) {
        for (sym::Expr& d : s) d = sym::substitute(d, bound);
        return s;
      };
      for (int id : g.inputs()) m->input_shapes.push_back(at_bound(g.node(id).type.shape));
      for (const GraphOutput& o : g.outputs())
        m->output_shapes.push_back(at_bound(g.node(o.node).type.shape));
      std::vector<std::string> unbound;
      for (const std::string& n : names)
        if (!options.sizes.count(n)) unbound.push_back(n);
      m->report_json = nlohmann::json{{"size_generic", true}, {"symbols", unbound}}.dump();
    } else {
      m->report_json = m->compiled.report().to_json();
    }
    *out = m.release();
  });
}

coil_status coil_model_export(const coil_model* model, const char* dir) {
  return guard([&] {
    require(model, "coil_model_export", "model");
    require(dir, "coil_model_export", "dir");
    COIL_USER_CHECK(!model->is_exported,
                    "coil_model_export: the model was loaded from an export; copy its directory "
                    "instead");
    model->compiled.export_to(dir);
  });
}

coil_status coil_model_load(const char* dir, coil_model** out) {
  if (out) *out = nullptr;
  return guard([&] {
    require(dir, "coil_model_load", "dir");
    require(out, "coil_model_load", "out");
    auto m = std::make_unique<coil_model>();
    m->exported = ExportedModel::load(dir);
    m->is_exported = true;
    const ExportInfo& info = m->exported.info();
    nlohmann::ordered_json j{{"exported", true},
                             {"format", info.format},
                             {"coil_version", info.coil_version},
                             {"isa", info.isa},
                             {"cpu_features", info.cpu_features},
                             {"kernels", info.kernels},
                             {"module_bytes", info.module_bytes},
                             {"weights_bytes", info.weights_bytes},
                             {"arena_bytes", info.arena_bytes},
                             {"load_seconds", info.load_seconds}};
    m->report_json = j.dump(2) + "\n";
    *out = m.release();
  });
}

coil_status coil_generate_gpu_module(const coil_graph* graph, const char* options_json,
                                     char** module_source, char** report_json) {
  if (module_source) *module_source = nullptr;
  if (report_json) *report_json = nullptr;
  return guard([&] {
    require(graph, "coil_generate_gpu_module", "graph");
    CompileOptions options = capi::parse_options(options_json, "cuda");
    COIL_USER_CHECK(options.device == "cuda",
                    "coil_generate_gpu_module: options' device must be \"cuda\" (or absent), got "
                    "\"{}\"",
                    options.device);
    CompileReport report = generate_gpu_module(graph->graph, options);
    char* source = module_source ? capi::dup_string(report.source) : nullptr;
    try {
      if (report_json) *report_json = capi::dup_string(report.to_json());
    } catch (...) {
      std::free(source);
      throw;
    }
    if (module_source) *module_source = source;
  });
}

void coil_model_free(coil_model* model) {
  delete model;
}

int32_t coil_model_num_inputs(const coil_model* model) {
  if (!model) {
    capi::set_last_error("coil_model_num_inputs: model is NULL");
    return -1;
  }
  return static_cast<int32_t>(model->inputs().size());
}

int32_t coil_model_num_outputs(const coil_model* model) {
  if (!model) {
    capi::set_last_error("coil_model_num_outputs: model is NULL");
    return -1;
  }
  return static_cast<int32_t>(model->outputs().size());
}

coil_status coil_model_value_info(const coil_model* model, int32_t is_output, int32_t index,
                                  const char** name, const char** dtype, int32_t* ndim,
                                  const int64_t** shape) {
  return guard([&] {
    require(model, "coil_model_value_info", "model");
    COIL_USER_CHECK(is_output == 0 || is_output == 1,
                    "coil_model_value_info: is_output is {} (expected 0 or 1)", is_output);
    const auto& specs = is_output ? model->outputs() : model->inputs();
    const char* kind = is_output ? "output" : "input";
    COIL_USER_CHECK(index >= 0 && static_cast<size_t>(index) < specs.size(),
                    "coil_model_value_info: {} index {} is out of range (the model has {} {}s)",
                    kind, index, specs.size(), kind);
    const ValueSpec& s = specs[static_cast<size_t>(index)];
    if (name) *name = s.name.c_str();
    if (dtype) *dtype = dtype_name(s.dtype).data();  // the names are string literals
    if (ndim) *ndim = static_cast<int32_t>(s.shape.size());
    if (shape) *shape = s.shape.data();
  });
}

namespace {

// The output specs of a call on `inputs` (coil_model_output_shape and _shapes).
std::vector<ValueSpec> output_specs_for(const coil_model& model, const coil_tensor* inputs,
                                        int32_t num_inputs, const char* fn) {
  const auto& in_specs = model.inputs();
  COIL_USER_CHECK(num_inputs >= 0 && static_cast<size_t>(num_inputs) == in_specs.size(),
                  "the model takes {} inputs, got {}", in_specs.size(), num_inputs);
  COIL_USER_CHECK(num_inputs == 0 || inputs, "{}: inputs is NULL for {} inputs", fn, num_inputs);
  std::vector<TensorRef> ins;
  for (size_t i = 0; i < in_specs.size(); ++i)
    ins.push_back(capi::tensor_ref(inputs[i], "input " + in_specs[i].name));
  return capi::output_specs_at(model, ins);
}

}  // namespace

coil_status coil_model_output_shape(const coil_model* model, const coil_tensor* inputs,
                                    int32_t num_inputs, int32_t index, int32_t* ndim,
                                    int64_t* shape, int32_t capacity) {
  return guard([&] {
    require(model, "coil_model_output_shape", "model");
    require(ndim, "coil_model_output_shape", "ndim");
    const std::vector<ValueSpec> specs =
        output_specs_for(*model, inputs, num_inputs, "coil_model_output_shape");
    COIL_USER_CHECK(index >= 0 && static_cast<size_t>(index) < specs.size(),
                    "coil_model_output_shape: output index {} is out of range (the model has {} "
                    "outputs)",
                    index, specs.size());
    const std::vector<int64_t>& s = specs[static_cast<size_t>(index)].shape;
    COIL_USER_CHECK(static_cast<int64_t>(s.size()) <= capacity,
                    "coil_model_output_shape: output {} has {} dims, over the capacity {}",
                    specs[static_cast<size_t>(index)].name, s.size(), capacity);
    COIL_USER_CHECK(s.empty() || shape, "coil_model_output_shape: shape is NULL");
    *ndim = static_cast<int32_t>(s.size());
    std::copy(s.begin(), s.end(), shape);
  });
}

coil_status coil_model_output_shapes(const coil_model* model, const coil_tensor* inputs,
                                     int32_t num_inputs, int32_t* ndims, int32_t num_outputs,
                                     int64_t* shapes, int32_t capacity) {
  return guard([&] {
    require(model, "coil_model_output_shapes", "model");
    const std::vector<ValueSpec> specs =
        output_specs_for(*model, inputs, num_inputs, "coil_model_output_shapes");
    COIL_USER_CHECK(num_outputs >= 0 && static_cast<size_t>(num_outputs) == specs.size(),
                    "coil_model_output_shapes: the model has {} outputs, got num_outputs {}",
                    specs.size(), num_outputs);
    COIL_USER_CHECK(num_outputs == 0 || ndims, "coil_model_output_shapes: ndims is NULL");
    int64_t total = 0;
    for (const ValueSpec& o : specs) total += static_cast<int64_t>(o.shape.size());
    COIL_USER_CHECK(total <= capacity,
                    "coil_model_output_shapes: the outputs have {} dims in all, over the capacity "
                    "{}",
                    total, capacity);
    COIL_USER_CHECK(total == 0 || shapes, "coil_model_output_shapes: shapes is NULL");
    for (size_t i = 0; i < specs.size(); ++i) {
      ndims[i] = static_cast<int32_t>(specs[i].shape.size());
      shapes = std::copy(specs[i].shape.begin(), specs[i].shape.end(), shapes);
    }
  });
}

const char* coil_model_report_json(const coil_model* model) {
  if (!model) {
    capi::set_last_error("coil_model_report_json: model is NULL");
    return nullptr;
  }
  return model->report_json.c_str();
}

coil_status coil_model_run(const coil_model* model, const coil_tensor* inputs, int32_t num_inputs,
                           const coil_tensor* outputs, int32_t num_outputs) {
  return guard([&] {
    require(model, "coil_model_run", "model");
    capi::run_model(*model, inputs, num_inputs, outputs, num_outputs);
  });
}

coil_status coil_set_num_threads(int32_t n) {
  return guard([&] {
    COIL_USER_CHECK(n >= 0, "coil_set_num_threads: {} threads (expected >= 0; 0 leaves it as is)",
                    n);
    set_num_threads(n);
  });
}

}  // extern "C"
