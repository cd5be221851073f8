#include "coil/attrs.h"

#include <cmath>

#include "support/check.h"

namespace coil {

namespace {
thread_local AttrReadLog* read_log = nullptr;
}  // namespace

AttrReadLog::AttrReadLog() {
  COIL_ASSERT(read_log == nullptr, "AttrReadLog: one is already recording on this thread");
  read_log = this;
}

AttrReadLog::~AttrReadLog() {
  read_log = nullptr;
}

void Attrs::note_read(const std::string& name, const AttrValue* dflt) const {
  if (read_log == nullptr || owner_.empty()) return;
  read_log->record(
      AttrRead{std::string(owner_), name, dflt ? std::optional<AttrValue>(*dflt) : std::nullopt});
}

void Attrs::note_default(const std::string& name, AttrValue dflt) const {
  if (read_log != nullptr) note_read(name, &dflt);
}

std::string_view attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::Int:
      return "an integer";
    case AttrKind::Float:
      return "a number";
    case AttrKind::Bool:
      return "a bool";
    case AttrKind::String:
      return "a string";
    case AttrKind::Ints:
      return "a list of integers";
    case AttrKind::DType:
      return "a dtype";
    case AttrKind::IntPair:
      return "an integer or a list of 1 or 2 integers";
  }
  COIL_UNREACHABLE("bad attribute kind {}", static_cast<int>(kind));
}

std::string attr_to_string(const AttrValue& v) {
  struct Printer {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      // Shortest text that reads back to the same double, always with a '.' or exponent so
      // the text format keeps it a float.
      std::string s = fmt::format("{}", d);
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s;
    }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const {
      std::string out = "\"";
      for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      return out + "\"";
    }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ", "));
    }
    std::string operator()(DType t) const { return std::string(dtype_name(t)); }
  };
  return std::visit(Printer{}, v);
}

template <typename T>
static const T& get_typed(const std::map<std::string, AttrValue>& m, std::string_view op,
                          const std::string& name, const char* kind) {
  auto it = m.find(name);
  COIL_USER_CHECK(it != m.end(), "{}: missing attribute '{}'", op, name);
  const T* p = std::get_if<T>(&it->second);
  COIL_USER_CHECK(p, "{}: attribute '{}' must be {}, got {}", op, name, kind,
                  attr_to_string(it->second));
  return *p;
}

int64_t Attrs::get_int(std::string_view op, const std::string& name) const {
  note_read(name, nullptr);
  return get_typed<int64_t>(map_, op, name, "an integer");
}
double Attrs::get_float(std::string_view op, const std::string& name) const {
  note_read(name, nullptr);
  auto it = map_.find(name);
  if (it != map_.end()) {
    if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
    if (auto* b = std::get_if<bool>(&it->second)) return *b ? 1.0 : 0.0;
  }
  return get_typed<double>(map_, op, name, "a number");
}
bool Attrs::get_bool(std::string_view op, const std::string& name) const {
  note_read(name, nullptr);
  return get_typed<bool>(map_, op, name, "a bool");
}
const std::string& Attrs::get_string(std::string_view op, const std::string& name) const {
  note_read(name, nullptr);
  return get_typed<std::string>(map_, op, name, "a string");
}
const std::vector<int64_t>& Attrs::get_ints(std::string_view op, const std::string& name) const {
  note_read(name, nullptr);
  return get_typed<std::vector<int64_t>>(map_, op, name, "a list of integers");
}
DType Attrs::get_dtype(std::string_view op, const std::string& name) const {
  note_read(name, nullptr);
  return get_typed<DType>(map_, op, name, "a dtype");
}

}  // namespace coil
