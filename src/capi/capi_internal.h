// What the two files of the C ABI (include/coil/coil_c.h) share: the handles, the boundary that
// turns exceptions into statuses, argument checks and the conversion of caller tensors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coil/coil.h"
#include "coil/coil_c.h"

struct coil_graph {
  coil::Graph graph;
};

/// A model compiled here (coil_compile) or loaded from an export (coil_model_load): the C ABI
/// runs both alike.
struct coil_model {
  coil::CompiledModel compiled;  // empty for a loaded export
  coil::ExportedModel exported;  // empty for a compiled model
  bool is_exported = false;
  std::string report_json;  // the compile report, or the export's info, as JSON
  /// A size-generic model (sizes left unbound): its graph's input and output shapes, from
  /// which a call's sizes and output shapes follow (docs/dynamic-shapes.md).
  bool size_generic = false;
  std::vector<coil::Shape> input_shapes, output_shapes;

  const std::vector<coil::ValueSpec>& inputs() const {
    return is_exported ? exported.inputs() : compiled.inputs();
  }
  const std::vector<coil::ValueSpec>& outputs() const {
    return is_exported ? exported.outputs() : compiled.outputs();
  }
  void run_into(const std::vector<coil::TensorRef>& in, const std::vector<void*>& out) const {
    if (is_exported)
      exported.run_into(in, out);
    else
      compiled.run_into(in, out);
  }
};

namespace coil::capi {

/// Sets this thread's coil_last_error(). Never throws (a failed allocation leaves it empty).
void set_last_error(std::string_view message) noexcept;
/// Records the exception being handled as this thread's last error and returns its status:
/// coil::UnsupportedError, coil::Error, anything else. Call only inside a catch block.
coil_status status_of_current_exception() noexcept;

/// Runs `f` (void()); exceptions become statuses and messages, so none crosses the boundary.
template <typename F>
coil_status guard(F&& f) noexcept {
  try {
    f();
    return COIL_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

/// coil::Error "FUNCTION: ARGUMENT is NULL" when `p` is null.
void require(const void* p, const char* function, const char* argument);

/// A copy of `s` from malloc, for the `char**` results (coil_free_string frees it).
char* dup_string(std::string_view s);

/// The dtype named `name` (coil::Error "WHAT: unknown dtype 'NAME'", with a suggestion).
DType dtype_of(const char* name, std::string_view what);

/// A view of caller memory as a TensorRef, checked: a known dtype, 0 to 64 dims, sizes >= 0,
/// a shape pointer, a data pointer unless it has no elements, and offsets that fit in int64
/// (strides NULL: contiguous). `what` names the tensor in errors ("input x").
TensorRef tensor_ref(const coil_tensor& t, std::string_view what);

/// "f32[4, 5]"
std::string ref_type_str(const TensorRef& t);

}  // namespace coil::capi
