// The op reference, generated from the op registry: what `coil ops` prints, and docs/ops.md
// (the test OpReference.DocIsCurrent keeps that file equal to op_reference_markdown()).
#pragma once

#include <string>

namespace coil {

/// Every op, one line each (name, kind, inputs, attributes, meaning), and its attributes below
/// it, one line each.
std::string op_reference_text();

/// docs/ops.md: a table of the ops and one of their attributes.
std::string op_reference_markdown();

}  // namespace coil
