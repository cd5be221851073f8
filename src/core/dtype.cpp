#include "coil/dtype.h"

#include "support/check.h"

namespace coil {

std::string_view dtype_name(DType t) {
  switch (t) {
#define COIL_DTYPE_CASE(e, name, ctype, bytes, kind) \
  case DType::e:                                     \
    return name;
    COIL_DTYPES(COIL_DTYPE_CASE)
#undef COIL_DTYPE_CASE
  }
  COIL_UNREACHABLE("bad dtype {}", static_cast<int>(t));
}

std::optional<DType> parse_dtype(std::string_view s) {
#define COIL_DTYPE_PARSE(e, name, ctype, bytes, kind) \
  if (s == name) return DType::e;
  COIL_DTYPES(COIL_DTYPE_PARSE)
#undef COIL_DTYPE_PARSE
  return std::nullopt;
}

std::string_view dtype_cpp_type(DType t) {
  switch (t) {
#define COIL_DTYPE_CASE(e, name, ctype, bytes, kind) \
  case DType::e:                                     \
    return ctype;
    COIL_DTYPES(COIL_DTYPE_CASE)
#undef COIL_DTYPE_CASE
  }
  COIL_UNREACHABLE("bad dtype {}", static_cast<int>(t));
}

int dtype_size(DType t) {
  switch (t) {
#define COIL_DTYPE_CASE(e, name, ctype, bytes, kind) \
  case DType::e:                                     \
    return bytes;
    COIL_DTYPES(COIL_DTYPE_CASE)
#undef COIL_DTYPE_CASE
  }
  COIL_UNREACHABLE("bad dtype {}", static_cast<int>(t));
}

static char dtype_kind(DType t) {
  switch (t) {
#define COIL_DTYPE_CASE(e, name, ctype, bytes, kind) \
  case DType::e:                                     \
    return kind;
    COIL_DTYPES(COIL_DTYPE_CASE)
#undef COIL_DTYPE_CASE
  }
  COIL_UNREACHABLE("bad dtype {}", static_cast<int>(t));
}

bool is_floating(DType t) {
  return dtype_kind(t) == 'f';
}
bool is_integral(DType t) {
  return dtype_kind(t) != 'f';
}
bool is_signed_integer(DType t) {
  return dtype_kind(t) == 'i';
}

DType compute_dtype(DType t) {
  return is_low_precision(t) ? DType::F32 : t;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {  // category: bool 0, integer 1, float 2
    char k = dtype_kind(t);
    return k == 'b' ? 0 : k == 'f' ? 2 : 1;
  };
  int ra = rank(a), rb = rank(b);
  if (is_wide_unsigned(a) || is_wide_unsigned(b)) {
    // torch promotes u16/u32/u64 with floats only: u64 with i64 has no exact common type.
    if (ra == 2 || rb == 2) return ra == 2 ? a : b;
    COIL_USER_CHECK(false,
                    "cannot promote {} with {}: u16, u32 and u64 promote only to floats (as in "
                    "torch); cast one operand first",
                    dtype_name(a), dtype_name(b));
  }
  if (ra != rb) return ra > rb ? a : b;
  if (ra == 2) {
    if (is_low_precision(a) && is_low_precision(b)) return DType::F32;  // f16 with bf16
    return dtype_size(a) >= dtype_size(b) ? a : b;
  }
  // Integers: u8 with i8 needs a signed type wider than both (torch's i16).
  if ((a == DType::U8 && b == DType::I8) || (a == DType::I8 && b == DType::U8)) return DType::I16;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

}  // namespace coil
