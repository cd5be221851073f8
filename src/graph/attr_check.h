// Checks a node's attributes against its op's declared ones (AttrSpec, listed on each op's row
// of graph/op_registry.cpp). Graph::add_node runs it before the type rule, so an attribute that
// is misspelled, of the wrong kind or out of range is an error naming the op, the node and the
// attribute instead of being ignored.
#pragma once

#include <string>
#include <string_view>

#include "coil/attrs.h"

namespace coil {

struct OpDef;

/// coil::Error when `attrs` holds an attribute `op` does not declare (the message suggests the
/// nearest declared name, or lists them), one of the wrong kind or out of its range, or lacks a
/// required one. `node` is the node's name, for the messages.
void check_attrs(const OpDef& op, const Attrs& attrs, std::string_view node);

/// The checks of check_attrs for one given attribute (the text format runs it per attribute,
/// to point at the one that is wrong).
void check_attr(const OpDef& op, const std::string& name, const AttrValue& value,
                std::string_view node);

/// The declared attribute `name` of `op`, or null.
const AttrSpec* find_attr_spec(const OpDef& op, std::string_view name);

/// The default of an AttrUse::Default attribute as a value (AttrSpec::dflt parsed by its kind).
AttrValue attr_default(const AttrSpec& spec);

/// The attributes of `op` as the docs write them: `{axes?, keepdim=false}` (`?`: optional,
/// `=`: the default, neither: required); empty when it has none.
std::string attr_signature(const OpDef& op);

}  // namespace coil
