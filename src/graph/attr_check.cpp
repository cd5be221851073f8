#include "graph/attr_check.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "graph/op_registry.h"
#include "support/check.h"

namespace coil {
namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The declared name a misspelling most likely meant: the nearest by edit distance when it is
// within a third of the name's length (at least 2 edits: `dim` for `dims`), or one that
// starts the other (`kernel` for torch's `kernel_size`); null when none is near.
const AttrSpec* nearest(const OpDef& op, std::string_view name) {
  const AttrSpec* best = nullptr;
  size_t best_d = 0;
  for (const AttrSpec& s : op.attrs) {
    size_t d = edit_distance(name, s.name);
    bool prefix = std::min(name.size(), s.name.size()) >= 3 &&
                  (name.starts_with(s.name) || s.name.starts_with(name));
    bool near = d <= std::max<size_t>(2, s.name.size() / 3) || prefix;
    if (near && (!best || d < best_d)) best = &s, best_d = d;
  }
  return best;
}

bool kind_matches(AttrKind kind, const AttrValue& v) {
  switch (kind) {
    case AttrKind::Int:
      return std::holds_alternative<int64_t>(v);
    case AttrKind::Float:  // as Attrs::get_float reads it
      return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v) ||
             std::holds_alternative<bool>(v);
    case AttrKind::Bool:
      return std::holds_alternative<bool>(v);
    case AttrKind::String:
      return std::holds_alternative<std::string>(v);
    case AttrKind::Ints:
      return std::holds_alternative<std::vector<int64_t>>(v);
    case AttrKind::DType:
      return std::holds_alternative<DType>(v);
    case AttrKind::IntPair: {
      const auto* list = std::get_if<std::vector<int64_t>>(&v);
      return std::holds_alternative<int64_t>(v) || (list && !list->empty() && list->size() <= 2);
    }
  }
  return false;
}

std::string quoted_list(std::span<const std::string_view> names, std::string_view last_sep) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? last_sep : ", ";
    out += fmt::format("\"{}\"", names[i]);
  }
  return out;
}

// The numbers of `v` that `at_least` bounds: every entry of a list.
std::vector<double> numbers(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return {static_cast<double>(*i)};
  if (const auto* d = std::get_if<double>(&v)) return {*d};
  if (const auto* b = std::get_if<bool>(&v)) return {*b ? 1.0 : 0.0};
  std::vector<double> out;
  if (const auto* list = std::get_if<std::vector<int64_t>>(&v))
    for (int64_t x : *list) out.push_back(static_cast<double>(x));
  return out;
}

}  // namespace

const AttrSpec* find_attr_spec(const OpDef& op, std::string_view name) {
  for (const AttrSpec& s : op.attrs)
    if (s.name == name) return &s;
  return nullptr;
}

void check_attr(const OpDef& op, const std::string& name, const AttrValue& value,
                std::string_view node) {
  const AttrSpec* spec = find_attr_spec(op, name);
  if (!spec) {
    if (const AttrSpec* near = nearest(op, name))
      user_error("unknown attribute '{}' of {} (node {}); did you mean '{}'?", name, op.name, node,
                 near->name);
    if (op.attrs.empty())
      user_error("unknown attribute '{}' of {} (node {}); {} takes no attributes", name, op.name,
                 node, op.name);
    std::vector<std::string_view> names;
    for (const AttrSpec& s : op.attrs) names.push_back(s.name);
    user_error("unknown attribute '{}' of {} (node {}); its attributes are {}", name, op.name, node,
               fmt::join(names, ", "));
  }
  COIL_USER_CHECK(kind_matches(spec->kind, value),
                  "attribute '{}' of {} (node {}) must be {}, got {}", name, op.name, node,
                  attr_kind_name(spec->kind), attr_to_string(value));
  if (spec->at_least) {
    std::vector<double> v = numbers(value);
    bool ok = std::all_of(v.begin(), v.end(), [&](double x) { return x >= *spec->at_least; });
    COIL_USER_CHECK(ok, "attribute '{}' of {} (node {}) must be >= {}, got {}", name, op.name, node,
                    *spec->at_least, attr_to_string(value));
  }
  if (!spec->choices.empty()) {
    const std::string& s = std::get<std::string>(value);
    bool ok = std::find(spec->choices.begin(), spec->choices.end(), s) != spec->choices.end();
    COIL_USER_CHECK(ok, "attribute '{}' of {} (node {}) must be {}, got {}", name, op.name, node,
                    spec->choices.size() == 2 ? quoted_list(spec->choices, " or ")
                                              : "one of " + quoted_list(spec->choices, ", "),
                    attr_to_string(value));
  }
}

void check_attrs(const OpDef& op, const Attrs& attrs, std::string_view node) {
  for (const auto& [name, value] : attrs.items()) check_attr(op, name, value, node);
  for (const AttrSpec& s : op.attrs)
    COIL_USER_CHECK(s.use != AttrUse::Required || attrs.items().count(std::string(s.name)),
                    "missing attribute '{}' of {} (node {})", s.name, op.name, node);
}

AttrValue attr_default(const AttrSpec& spec) {
  COIL_ASSERT(spec.use == AttrUse::Default, "attribute '{}' has no default", spec.name);
  std::string_view t = spec.dflt;
  auto integer = [&](std::string_view s) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    COIL_ASSERT(ec == std::errc() && end == s.data() + s.size(), "attribute '{}': bad default '{}'",
                spec.name, spec.dflt);
    return v;
  };
  auto list = [&] {
    COIL_ASSERT(t.size() >= 2 && t.front() == '[' && t.back() == ']',
                "attribute '{}': bad default '{}'", spec.name, spec.dflt);
    std::vector<int64_t> v;
    std::string_view rest = t.substr(1, t.size() - 2);
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      while (item.starts_with(' ')) item.remove_prefix(1);
      v.push_back(integer(item));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    return v;
  };
  switch (spec.kind) {
    case AttrKind::Int:
      return integer(t);
    case AttrKind::Float: {
      std::string s(t);
      char* end = nullptr;
      double v = std::strtod(s.c_str(), &end);
      COIL_ASSERT(end == s.c_str() + s.size() && !s.empty(), "attribute '{}': bad default '{}'",
                  spec.name, spec.dflt);
      return v;
    }
    case AttrKind::Bool:
      COIL_ASSERT(t == "true" || t == "false", "attribute '{}': bad default '{}'", spec.name, t);
      return t == "true";
    case AttrKind::String:
      COIL_ASSERT(t.size() >= 2 && t.front() == '"' && t.back() == '"',
                  "attribute '{}': bad default '{}'", spec.name, t);
      return std::string(t.substr(1, t.size() - 2));
    case AttrKind::Ints:
      return list();
    case AttrKind::DType: {
      auto d = parse_dtype(t);
      COIL_ASSERT(d.has_value(), "attribute '{}': bad default '{}'", spec.name, t);
      return *d;
    }
    case AttrKind::IntPair:
      if (t.starts_with('[')) return list();
      return integer(t);
  }
  COIL_UNREACHABLE("bad attribute kind");
}

std::string attr_signature(const OpDef& op) {
  if (op.attrs.empty()) return "";
  std::vector<std::string> parts;
  for (const AttrSpec& s : op.attrs) {
    switch (s.use) {
      case AttrUse::Default:
        parts.push_back(fmt::format("{}={}", s.name, s.dflt));
        break;
      case AttrUse::Optional:
        parts.push_back(fmt::format("{}?", s.name));
        break;
      case AttrUse::Required:
        parts.push_back(std::string(s.name));
        break;
    }
  }
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

}  // namespace coil
