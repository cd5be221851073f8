// Node attributes: a small ordered map from name to a typed value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "coil/dtype.h"

namespace coil {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DType>;

/// Attribute kinds, for op signatures and the text format.
enum class AttrKind {
  Int,
  Float,  // a double; an integer or a bool is accepted too (get_float converts them)
  Bool,
  String,
  Ints,
  DType,
  IntPair,  // an integer, or a list of one or two (height, width: conv and pooling windows)
};

/// "an integer", "a list of integers", ...: the kind as an error message names it.
std::string_view attr_kind_name(AttrKind kind);

/// Whether a node may leave an attribute out, and what that means.
enum class AttrUse {
  Default,   // absent means the declared default (AttrSpec::dflt)
  Optional,  // absent has a meaning of its own, which the attribute's doc says
  Required,
};

/// One attribute an op takes. Each op lists its attributes on its row of the op registry
/// (graph/op_registry.cpp); Graph::add_node checks a node's attributes against that list
/// (graph/attr_check.h) before the type rule runs, so the rules, reference kernels, lowerings
/// and decompositions only ever see declared attributes of the declared kinds.
struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  AttrUse use;
  std::string_view dflt;  // AttrUse::Default: the default as the text format writes it
  std::string_view doc;   // one line
  // Allowed values beyond the kind; unset: any value of the kind.
  std::optional<double> at_least = std::nullopt;   // Int, Float, Ints, IntPair: each number
  std::span<const std::string_view> choices = {};  // String: one of these

  constexpr AttrSpec min(double v) const {
    AttrSpec s = *this;
    s.at_least = v;
    return s;
  }
  constexpr AttrSpec one_of(std::span<const std::string_view> c) const {
    AttrSpec s = *this;
    s.choices = c;
    return s;
  }
};

constexpr AttrSpec attr(std::string_view name, AttrKind kind, std::string_view dflt,
                        std::string_view doc) {
  return {name, kind, AttrUse::Default, dflt, doc};
}
constexpr AttrSpec optional_attr(std::string_view name, AttrKind kind, std::string_view doc) {
  return {name, kind, AttrUse::Optional, {}, doc};
}
constexpr AttrSpec required_attr(std::string_view name, AttrKind kind, std::string_view doc) {
  return {name, kind, AttrUse::Required, {}, doc};
}

std::string attr_to_string(const AttrValue& v);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  bool has(const std::string& name) const {
    note_read(name, nullptr);
    return map_.count(name) != 0;
  }
  void set(const std::string& name, AttrValue v) { map_[name] = std::move(v); }
  const std::map<std::string, AttrValue>& items() const { return map_; }
  /// Marks these as the attributes of an `op` node (Graph::add_node does), so that an
  /// AttrReadLog can tell whose attributes are read.
  void set_owner(std::string_view op) { owner_ = op; }

  // Typed getters; a missing or mistyped attribute is a coil::Error naming `op` and `name`.
  int64_t get_int(std::string_view op, const std::string& name) const;
  double get_float(std::string_view op, const std::string& name) const;  // accepts ints too
  bool get_bool(std::string_view op, const std::string& name) const;
  const std::string& get_string(std::string_view op, const std::string& name) const;
  const std::vector<int64_t>& get_ints(std::string_view op, const std::string& name) const;
  DType get_dtype(std::string_view op, const std::string& name) const;

  int64_t get_int_or(std::string_view op, const std::string& name, int64_t dflt) const {
    note_default(name, dflt);
    return has(name) ? get_int(op, name) : dflt;
  }
  double get_float_or(std::string_view op, const std::string& name, double dflt) const {
    note_default(name, dflt);
    return has(name) ? get_float(op, name) : dflt;
  }
  bool get_bool_or(std::string_view op, const std::string& name, bool dflt) const {
    note_default(name, dflt);
    return has(name) ? get_bool(op, name) : dflt;
  }
  std::string get_string_or(std::string_view op, const std::string& name, std::string dflt) const {
    note_default(name, dflt);
    return has(name) ? get_string(op, name) : dflt;
  }

  bool operator==(const Attrs& o) const { return map_ == o.map_; }

 private:
  void note_read(const std::string& name, const AttrValue* dflt) const;
  void note_default(const std::string& name, AttrValue dflt) const;

  std::map<std::string, AttrValue> map_;
  std::string_view owner_;  // the op of the node holding these (an op registry name), if any
};

/// One read of a node's attribute: the op, the name, and the default the reader assumed when
/// the attribute is absent (the *_or getters), if any.
struct AttrRead {
  std::string op;
  std::string name;
  std::optional<AttrValue> dflt;
};

/// While one exists, records on its thread every attribute that code asks a node about
/// (Attrs::has and the getters, on attributes owned by a node). The test that the op registry
/// declares exactly the attributes the type rules, reference kernels, lowerings and
/// decompositions read uses it (tests/error/attr_decl_test.cpp). Not nestable.
class AttrReadLog {
 public:
  AttrReadLog();
  ~AttrReadLog();
  AttrReadLog(const AttrReadLog&) = delete;
  AttrReadLog& operator=(const AttrReadLog&) = delete;
  const std::vector<AttrRead>& reads() const { return reads_; }
  void record(AttrRead r) { reads_.push_back(std::move(r)); }

 private:
  std::vector<AttrRead> reads_;
};

}  // namespace coil
