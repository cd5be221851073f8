#include "graph/op_reference.h"

#include "graph/attr_check.h"
#include "graph/op_registry.h"
#include "support/check.h"

namespace coil {
namespace {

std::string_view kind_of(const OpDef& op) {
  switch (op.kind) {
    case OpKind::Source:
      return "source";
    case OpKind::Elementwise:
      return "elementwise";
    case OpKind::View:
      return "view";
    case OpKind::Reduction:
      return "reduction";
    case OpKind::Composite:
      return "composite";
    case OpKind::Other:
      return "other";
  }
  COIL_UNREACHABLE("bad op kind");
}

std::string arity(const OpDef& op) {
  if (op.max_inputs < 0) return fmt::format("{}+", op.min_inputs);
  if (op.min_inputs == op.max_inputs) return std::to_string(op.min_inputs);
  return fmt::format("{}-{}", op.min_inputs, op.max_inputs);
}

std::string_view short_kind(AttrKind k) {
  switch (k) {
    case AttrKind::Int:
      return "int";
    case AttrKind::Float:
      return "float";
    case AttrKind::Bool:
      return "bool";
    case AttrKind::String:
      return "string";
    case AttrKind::Ints:
      return "int list";
    case AttrKind::DType:
      return "dtype";
    case AttrKind::IntPair:
      return "int or [h, w]";
  }
  COIL_UNREACHABLE("bad attribute kind");
}

std::string use_of(const AttrSpec& s) {
  switch (s.use) {
    case AttrUse::Default:
      return std::string(s.dflt);
    case AttrUse::Optional:
      return "optional";
    case AttrUse::Required:
      return "required";
  }
  COIL_UNREACHABLE("bad attribute use");
}

std::string allowed(const AttrSpec& s) {
  if (s.at_least) return fmt::format(">= {}", *s.at_least);
  std::vector<std::string> c;
  for (std::string_view v : s.choices) c.push_back(fmt::format("\"{}\"", v));
  return fmt::format("{}", fmt::join(c, ", "));
}

// A table cell: '|' would end it.
std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string op_reference_text() {
  std::string out;
  for (const OpDef& op : all_ops()) {
    std::string sig = attr_signature(op);
    out += fmt::format("{:<18} {:<12} inputs {:<4} {}{}{}\n", op.name, kind_of(op), arity(op), sig,
                       sig.empty() ? "" : ": ", op.doc);
    for (const AttrSpec& s : op.attrs) {
      std::string a = allowed(s);
      out += fmt::format("    {:<18} {:<14} {:<10} {}{}{}\n", s.name, short_kind(s.kind), use_of(s),
                         a, a.empty() ? "" : "; ", s.doc);
    }
  }
  return out;
}

std::string op_reference_markdown() {
  std::string out =
      "# Op reference\n\n"
      "Generated from the op registry (`src/graph/op_registry.cpp`) by `coil ops --markdown`; "
      "the test\n`OpReference.DocIsCurrent` fails when this file differs from it. "
      "`docs/user-guide.md` explains\nthe ops; `docs/text-format.md` how attributes are written "
      "and checked.\n\n"
      "## Ops\n\n"
      "| op | kind | inputs | attributes | meaning |\n|---|---|---|---|---|\n";
  for (const OpDef& op : all_ops()) {
    std::string sig = attr_signature(op);
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", op.name, kind_of(op), arity(op),
                       sig.empty() ? "" : fmt::format("`{}`", sig), cell(op.doc));
  }
  out +=
      "\n## Attributes\n\n"
      "A node may give only these; `Graph::add_node` rejects any other name, a value of another "
      "kind\n(a float attribute takes an integer too), one outside the allowed values, and a "
      "missing required\none.\n\n"
      "| op | attribute | kind | default | allowed | meaning |\n|---|---|---|---|---|---|\n";
  for (const OpDef& op : all_ops())
    for (const AttrSpec& s : op.attrs)
      out += fmt::format("| `{}` | `{}` | {} | {} | {} | {} |\n", op.name, s.name,
                         short_kind(s.kind), cell(use_of(s)), allowed(s), cell(s.doc));
  return out;
}

}  // namespace coil
