// Node attributes: a small ordered map from name to a typed value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "coil/dtype.h"

namespace coil {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DType>;

/// Attribute kinds, for op signatures and the text format.
enum class AttrKind { Int, Float, Bool, String, Ints, DType };

std::string attr_to_string(const AttrValue& v);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  bool has(const std::string& name) const { return map_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { map_[name] = std::move(v); }
  const std::map<std::string, AttrValue>& items() const { return map_; }

  // Typed getters; a missing or mistyped attribute is a coil::Error naming `op` and `name`.
  int64_t get_int(std::string_view op, const std::string& name) const;
  double get_float(std::string_view op, const std::string& name) const;  // accepts ints too
  bool get_bool(std::string_view op, const std::string& name) const;
  const std::string& get_string(std::string_view op, const std::string& name) const;
  const std::vector<int64_t>& get_ints(std::string_view op, const std::string& name) const;
  DType get_dtype(std::string_view op, const std::string& name) const;

  int64_t get_int_or(std::string_view op, const std::string& name, int64_t dflt) const {
    return has(name) ? get_int(op, name) : dflt;
  }
  double get_float_or(std::string_view op, const std::string& name, double dflt) const {
    return has(name) ? get_float(op, name) : dflt;
  }
  bool get_bool_or(std::string_view op, const std::string& name, bool dflt) const {
    return has(name) ? get_bool(op, name) : dflt;
  }
  std::string get_string_or(std::string_view op, const std::string& name, std::string dflt) const {
    return has(name) ? get_string(op, name) : dflt;
  }

  bool operator==(const Attrs& o) const { return map_ == o.map_; }

 private:
  std::map<std::string, AttrValue> map_;
};

}  // namespace coil
