// The attributes of an ONNX node that its mapping did not read (OnnxNode::check_unread_attrs).
// Each is compared with the default of the op's schema at the model's opset, from the ONNX
// library's own registry (libonnx), so that no default is written down twice.
#include <onnx/defs/schema.h>

#include <algorithm>

#include "frontend/onnx/onnx_context.h"

namespace coil::onnxfe {
namespace {

using AP = onnx::AttributeProto;

// The value of `a` for a message; `t` is the type it has (old models leave `type` unset).
std::string value_str(const AP& a, AP::AttributeType t) {
  switch (t) {
    case AP::INT:
      return std::to_string(a.i());
    case AP::FLOAT:
      return fmt::format("{}", a.f());
    case AP::STRING:
      return fmt::format("'{}'", printable(a.s()));
    case AP::INTS:
      return fmt::format("[{}]", fmt::join(a.ints(), ", "));
    case AP::FLOATS:
      return fmt::format("[{}]", fmt::join(a.floats(), ", "));
    default:
      return AP::AttributeType_IsValid(t) ? "a " + AP::AttributeType_Name(t) : "a value";
  }
}

// Whether `a` holds `dflt` (both of type `t`); only plain values have defaults in ONNX.
bool equals_default(const AP& a, const AP& dflt, AP::AttributeType t) {
  switch (t) {
    case AP::INT:
      return a.i() == dflt.i();
    case AP::FLOAT:
      return a.f() == dflt.f();
    case AP::STRING:
      return a.s() == dflt.s();
    case AP::INTS:
      return std::equal(a.ints().begin(), a.ints().end(), dflt.ints().begin(), dflt.ints().end());
    case AP::FLOATS:
      return std::equal(a.floats().begin(), a.floats().end(), dflt.floats().begin(),
                        dflt.floats().end());
    default:
      return false;
  }
}

}  // namespace

void OnnxNode::check_unread_attrs() const {
  const onnx::OpSchema* schema = nullptr;
  bool looked_up = false;
  for (int i = 0; i < proto_.attribute_size(); ++i) {
    if (attr_read_[static_cast<size_t>(i)]) continue;
    const AP& a = proto_.attribute(i);
    // The registry is built on first use (~0.1 s): only models with an unread attribute pay.
    // The other domain coil maps, ai.onnx.preview.training, has one version: 1.
    if (!looked_up) {
      schema = is_default_domain(proto_.domain())
                   ? onnx::OpSchemaRegistry::Schema(op_type(), opset_)
                   : onnx::OpSchemaRegistry::Schema(op_type(), 1, proto_.domain());
      looked_up = true;
    }
    if (!schema)
      unsupported("attribute '{}' = {} is not implemented", printable(a.name()),
                  value_str(a, a.type()));
    const auto& declared = schema->attributes();
    auto it = declared.find(a.name());
    if (it == declared.end())
      error("attribute '{}' is not an attribute of {} in {}", printable(a.name()), op_type(),
            is_default_domain(proto_.domain())
                ? fmt::format("opset {}", opset_)
                : fmt::format("{} version 1", printable(proto_.domain())));
    // consumed_inputs (opsets 1 to 5) was a hint for in-place memory reuse, without meaning.
    if (a.name() == "consumed_inputs") continue;
    const onnx::OpSchema::Attribute& spec = it->second;
    AP::AttributeType t = a.type() == AP::UNDEFINED ? spec.type : a.type();
    if (t != spec.type)
      error("attribute '{}' must be {}, got {}", printable(a.name()),
            AP::AttributeType_Name(spec.type),
            AP::AttributeType_IsValid(t) ? AP::AttributeType_Name(t) : std::to_string(t));
    bool has_default = spec.default_value.has_type();
    if (has_default && equals_default(a, spec.default_value, t)) continue;
    if (has_default)
      unsupported("attribute '{}' = {} is not implemented (only its default, {})",
                  printable(a.name()), value_str(a, t), value_str(spec.default_value, t));
    unsupported("attribute '{}' = {} is not implemented", printable(a.name()), value_str(a, t));
  }
}

}  // namespace coil::onnxfe
