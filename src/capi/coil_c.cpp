// The C ABI (include/coil/coil_c.h), part 1: errors, strings, the version and graphs. Part 2,
// compiling and running, is coil_c_model.cpp. Every exported function catches everything
// (capi::guard): no exception crosses into C.
#include "coil/coil_c.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "capi/capi_internal.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/op_registry.h"
#include "graph/text_format.h"
#include "support/check.h"
#include "support/suggest.h"
#include "support/version.h"

namespace coil::capi {
namespace {

thread_local std::string t_last_error;

constexpr int32_t kMaxDims = 64;

std::vector<std::string> dtype_names() {
  return {
#define COIL_DTYPE_NAME(e, name, ctype, bytes, kind) name,
      COIL_DTYPES(COIL_DTYPE_NAME)
#undef COIL_DTYPE_NAME
  };
}

// Errors of the text parser on a one-line snippet ("<snippet>:1:COL: message") without the
// position, which says little about one line: "message".
std::string without_position(std::string_view message) {
  constexpr std::string_view kPrefix = "<snippet>:";
  if (!message.starts_with(kPrefix)) return std::string(message);
  size_t colon = message.find(": ", kPrefix.size());
  return std::string(colon == std::string_view::npos ? message : message.substr(colon + 2));
}

// Runs `f`, prefixing the message of a coil::Error it throws (keeping its kind) with `prefix`.
template <typename F>
auto with_prefix(const std::string& prefix, F&& f) {
  try {
    return f();
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(prefix + without_position(e.what()));
  } catch (const Error& e) {
    throw Error(prefix + without_position(e.what()));
  }
}

}  // namespace

void set_last_error(std::string_view message) noexcept {
  try {
    t_last_error.assign(message.data(), message.size());
  } catch (...) {
    t_last_error.clear();
  }
}

coil_status status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const UnsupportedError& e) {
    set_last_error(e.what());
    return COIL_ERROR_UNSUPPORTED;
  } catch (const Error& e) {
    set_last_error(e.what());
    return COIL_ERROR_INPUT;
  } catch (const InternalError& e) {
    set_last_error(e.what());
    return COIL_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    try {
      set_last_error(std::string("internal error: ") + e.what());
    } catch (...) {
      set_last_error(e.what());
    }
    return COIL_ERROR_INTERNAL;
  } catch (...) {
    set_last_error("internal error: an unknown exception");
    return COIL_ERROR_INTERNAL;
  }
}

void require(const void* p, const char* function, const char* argument) {
  if (!p) user_error("{}: {} is NULL", function, argument);
}

char* dup_string(std::string_view s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

DType dtype_of(const char* name, std::string_view what) {
  COIL_USER_CHECK(name != nullptr, "{}: dtype is NULL", what);
  auto d = parse_dtype(name);
  if (!d)
    user_error("{}: unknown dtype '{}'{}; the dtypes are {}", what, name,
               did_you_mean(name, dtype_names()), fmt::join(dtype_names(), ", "));
  return *d;
}

TensorRef tensor_ref(const coil_tensor& t, std::string_view what) {
  TensorRef r;
  r.dtype = dtype_of(t.dtype, what);
  COIL_USER_CHECK(t.ndim >= 0 && t.ndim <= kMaxDims, "{}: ndim {} is out of range (0 to {})", what,
                  t.ndim, kMaxDims);
  COIL_USER_CHECK(t.ndim == 0 || t.shape != nullptr, "{}: shape is NULL for {} dims", what, t.ndim);
  r.shape.assign(t.shape, t.shape + t.ndim);
  // Sizes multiplied with zeros counted as ones (as contiguous strides are) must fit in int64.
  int64_t numel = 1, product = 1;
  for (int64_t s : r.shape) {
    COIL_USER_CHECK(s >= 0, "{}: shape {} has a negative size", what, shape_str(r.shape));
    COIL_USER_CHECK(!__builtin_mul_overflow(product, std::max<int64_t>(s, 1), &product),
                    "{}: shape {} has 2^63 elements or more", what, shape_str(r.shape));
    numel *= s;
  }
  r.strides =
      t.strides ? std::vector<int64_t>(t.strides, t.strides + t.ndim) : contiguous_strides(r.shape);
  r.data = t.data;
  if (numel == 0) return r;
  COIL_USER_CHECK(t.data != nullptr, "{}: data is NULL", what);
  // The farthest element's byte offset must fit in int64 (copies and the checks of
  // coil_model_run compute it).
  int64_t reach = 0;  // the sum of |stride| * (size - 1), in elements
  bool overflow = false;
  for (size_t d = 0; d < r.shape.size() && !overflow; ++d) {
    int64_t stride = r.strides[d], step = 0;
    overflow = stride == INT64_MIN ||
               __builtin_mul_overflow(stride < 0 ? -stride : stride, r.shape[d] - 1, &step) ||
               __builtin_add_overflow(reach, step, &reach);
  }
  int64_t bytes = 0;
  overflow = overflow || __builtin_add_overflow(reach, 1, &bytes) ||
             __builtin_mul_overflow(bytes, int64_t{dtype_size(r.dtype)}, &bytes);
  COIL_USER_CHECK(!overflow, "{}: strides {} with shape {} reach beyond 2^63 bytes", what,
                  shape_str(r.strides), shape_str(r.shape));
  return r;
}

std::string ref_type_str(const TensorRef& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), shape_str(t.shape));
}

}  // namespace coil::capi

using namespace coil;
using capi::guard;
using capi::require;

extern "C" {

int32_t coil_abi_version(void) {
  return COIL_C_ABI_VERSION;
}

const char* coil_version(void) {
  static const std::string* version = [] {
    try {
      return new std::string(version_line());
    } catch (...) {
      return new (std::nothrow) std::string();
    }
  }();
  return version ? version->c_str() : "coil";
}

const char* coil_last_error(void) {
  return capi::t_last_error.c_str();
}

void coil_free_string(char* s) {
  std::free(s);
}

coil_status coil_graph_new(coil_graph** out) {
  if (out) *out = nullptr;
  return guard([&] {
    require(out, "coil_graph_new", "out");
    *out = new coil_graph();
  });
}

coil_status coil_graph_parse(const char* text, const char* source_name, coil_graph** out) {
  if (out) *out = nullptr;
  return guard([&] {
    require(text, "coil_graph_parse", "text");
    require(out, "coil_graph_parse", "out");
    auto g = std::make_unique<coil_graph>();
    g->graph = parse_graph(text, source_name ? source_name : "<text>");
    *out = g.release();
  });
}

coil_status coil_graph_import_onnx(const char* path, coil_graph** out) {
  if (out) *out = nullptr;
  return guard([&] {
    require(path, "coil_graph_import_onnx", "path");
    require(out, "coil_graph_import_onnx", "out");
    auto g = std::make_unique<coil_graph>();
    g->graph = import_onnx(path);
    *out = g.release();
  });
}

coil_status coil_graph_to_text(const coil_graph* graph, char** out) {
  if (out) *out = nullptr;
  return guard([&] {
    require(graph, "coil_graph_to_text", "graph");
    require(out, "coil_graph_to_text", "out");
    *out = capi::dup_string(to_text(graph->graph));
  });
}

coil_status coil_graph_add_input(coil_graph* graph, const char* name, const char* type,
                                 int32_t* id) {
  return guard([&] {
    require(graph, "coil_graph_add_input", "graph");
    require(name, "coil_graph_add_input", "name");
    require(type, "coil_graph_add_input", "type");
    std::string prefix = fmt::format("input {}: ", name);
    TensorType t = capi::with_prefix(prefix + fmt::format("type '{}': ", type),
                                     [&] { return parse_type_text(type, name, "<snippet>"); });
    int n = graph->graph.add_input(name, t.dtype, std::move(t.shape));
    if (id) *id = n;
  });
}

coil_status coil_graph_add_node(coil_graph* graph, const char* op, const int32_t* inputs,
                                int32_t num_inputs, const char* attrs, const char* name,
                                int32_t* id) {
  return guard([&] {
    require(graph, "coil_graph_add_node", "graph");
    require(op, "coil_graph_add_node", "op");
    COIL_USER_CHECK(num_inputs >= 0, "coil_graph_add_node: num_inputs is {}", num_inputs);
    COIL_USER_CHECK(num_inputs == 0 || inputs != nullptr,
                    "coil_graph_add_node: inputs is NULL for {} inputs", num_inputs);
    Graph& g = graph->graph;
    // Errors name the node, by the name it gets when unnamed.
    std::string node = name && *name ? std::string(name) : g.next_fresh_name();
    std::string prefix = fmt::format("node {}: ", node);
    const OpDef* def = find_op(op);
    if (!def) {
      std::vector<std::string> names;
      for (const OpDef& o : all_ops()) names.emplace_back(o.name);
      user_error("{}unknown op '{}'{}", prefix, op, did_you_mean(op, names));
    }
    COIL_USER_CHECK(def->kind != OpKind::Source || def->name == "full" || def->name == "iota",
                    "{}{}: use coil_graph_add_input or coil_graph_add_constant for source values",
                    prefix, def->name);
    Attrs a;
    if (attrs && *attrs)
      a = capi::with_prefix(prefix + fmt::format("attributes '{}': ", attrs),
                            [&] { return parse_attr_text(attrs, "<snippet>"); });
    std::vector<int> ids(inputs, inputs + num_inputs);
    // Attribute errors name the node already ("... of sum (node t3)"); the others get it here.
    int n = 0;
    try {
      n = g.add_node(def->name, std::move(ids), std::move(a), name ? name : "");
    } catch (const Error& e) {
      std::string message = e.what();
      if (message.find(fmt::format("(node {})", node)) != std::string::npos) throw;
      if (dynamic_cast<const UnsupportedError*>(&e)) throw UnsupportedError(prefix + message);
      throw Error(prefix + message);
    }
    if (id) *id = n;
  });
}

coil_status coil_graph_add_constant(coil_graph* graph, const char* name, const coil_tensor* value,
                                    int32_t* id) {
  return guard([&] {
    require(graph, "coil_graph_add_constant", "graph");
    require(value, "coil_graph_add_constant", "value");
    std::string what = name ? fmt::format("constant {}", name) : std::string("constant");
    Tensor t = Tensor::copy_of(capi::tensor_ref(*value, what));
    int n = graph->graph.add_constant(std::move(t), name ? name : "");
    if (id) *id = n;
  });
}

coil_status coil_graph_add_output(coil_graph* graph, int32_t id, const char* name) {
  return guard([&] {
    require(graph, "coil_graph_add_output", "graph");
    graph->graph.add_output(id, name ? name : "");
  });
}

coil_status coil_graph_value_type(const coil_graph* graph, int32_t id, char** type) {
  if (type) *type = nullptr;
  return guard([&] {
    require(graph, "coil_graph_value_type", "graph");
    require(type, "coil_graph_value_type", "type");
    const Graph& g = graph->graph;
    COIL_USER_CHECK(id >= 0 && id < g.num_nodes(),
                    "coil_graph_value_type: value id {} does not exist (the graph has {} values)",
                    id, g.num_nodes());
    *type = capi::dup_string(type_str(g.node(id).type));
  });
}

void coil_graph_free(coil_graph* graph) {
  delete graph;
}

}  // extern "C"
