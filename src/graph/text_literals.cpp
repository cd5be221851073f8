// Conversion of the text format's number and word literals into attribute values and constant
// elements, with range checks.
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

#include "graph/text_lexer.h"

namespace coil::text {
namespace {

[[noreturn]] void literal_error(const Literal& lit, std::string_view file, const std::string& m) {
  throw_at(file, lit.where().line, lit.where().col, m);
}

// Reads a Float or Int literal as T (float or double). A value too small for T rounds to zero
// (as in C); one too large is an error.
template <typename T>
T parse_floating(const Literal& lit, std::string_view file, std::string_view dtype) {
  std::string s = lit.text();
  const char* last = s.data() + s.size();
  T v = 0;
  auto [end, ec] = std::from_chars(s.data(), last, v);
  if (ec == std::errc() && end == last) return v;
  double d = 0;
  auto [end_d, ec_d] = std::from_chars(s.data(), last, d);
  if (!std::is_same_v<T, double> && ec_d == std::errc() && end_d == last && std::fabs(d) < 1)
    return std::signbit(d) ? T(-0.0) : T(0.0);
  literal_error(lit, file, fmt::format("number '{}' is out of range for {}", s, dtype));
}

}  // namespace

std::string Literal::text() const {
  return fmt::format("{}{}", sign ? "-" : "", tok->text);
}

int64_t parse_int(const Literal& lit, std::string_view file) {
  std::string s = lit.text();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    literal_error(lit, file, fmt::format("integer '{}' does not fit in 64 bits", s));
  return v;
}

double parse_f64(const Literal& lit, std::string_view file) {
  return parse_floating<double>(lit, file, "f64");
}

void store_element(Tensor& value, int64_t i, const Literal& lit, std::string_view file) {
  DType dtype = value.dtype();
  const Token& t = *lit.tok;
  std::string_view dname = dtype_name(dtype);
  if (dtype == DType::Bool) {
    if (lit.sign || (!t.is_ident("true") && !t.is_ident("false")))
      literal_error(lit, file,
                    fmt::format("expected true or false in bool data but found '{}'", lit.text()));
    value.data_as<bool>()[i] = t.text == "true";
    return;
  }
  if (is_integral(dtype)) {
    if (t.kind != TokKind::Int)
      literal_error(
          lit, file,
          fmt::format("expected an integer in {} data but found '{}'", dname, lit.text()));
    if (dtype == DType::U64) {  // beyond int64: 2^63 .. 2^64 - 1
      std::string s = lit.text();
      uint64_t u = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), u);
      if (lit.sign || ec != std::errc() || end != s.data() + s.size())
        literal_error(lit, file, fmt::format("value {} is out of range for u64", s));
      value.data_as<uint64_t>()[i] = u;
      return;
    }
    int64_t v = parse_int(lit, file);
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    if (dtype == DType::I16) lo = INT16_MIN, hi = INT16_MAX;
    if (dtype == DType::U16) lo = 0, hi = UINT16_MAX;
    if (dtype == DType::U32) lo = 0, hi = UINT32_MAX;
    if (dtype == DType::U8) lo = 0, hi = UINT8_MAX;
    if (dtype == DType::I8) lo = INT8_MIN, hi = INT8_MAX;
    if (dtype == DType::I32) lo = INT32_MIN, hi = INT32_MAX;
    if (v < lo || v > hi)
      literal_error(lit, file, fmt::format("value {} is out of range for {}", v, dname));
    switch (dtype) {
      case DType::U8:
        value.data_as<uint8_t>()[i] = static_cast<uint8_t>(v);
        return;
      case DType::I8:
        value.data_as<int8_t>()[i] = static_cast<int8_t>(v);
        return;
      case DType::I32:
        value.data_as<int32_t>()[i] = static_cast<int32_t>(v);
        return;
      case DType::I16:
        value.data_as<int16_t>()[i] = static_cast<int16_t>(v);
        return;
      case DType::U16:
        value.data_as<uint16_t>()[i] = static_cast<uint16_t>(v);
        return;
      case DType::U32:
        value.data_as<uint32_t>()[i] = static_cast<uint32_t>(v);
        return;
      default:
        value.data_as<int64_t>()[i] = v;
        return;
    }
  }
  if (t.is_ident("true") || t.is_ident("false"))
    literal_error(lit, file,
                  fmt::format("expected a number in {} data but found '{}'", dname, lit.text()));
  double v = 0;
  if (t.is_ident("nan")) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (t.is_ident("inf")) {
    v = (lit.sign ? -1 : 1) * std::numeric_limits<double>::infinity();
  } else if (dtype == DType::F64) {
    v = parse_floating<double>(lit, file, dname);
  } else {
    // f32, f16, bf16: read as float, so the printer's shortest float text reads back exactly.
    v = parse_floating<float>(lit, file, dname);
  }
  void* p = static_cast<std::byte*>(value.data()) + i * dtype_size(dtype);
  store_from_double(dtype, p, v);
  if (std::isinf(load_as_double(dtype, p)) && !std::isinf(v))
    literal_error(lit, file, fmt::format("value {} is out of range for {}", lit.text(), dname));
}

}  // namespace coil::text
