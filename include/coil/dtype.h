// Element types. f16/bf16 are storage types: every op computes them in f32 and rounds the
// result back (as PyTorch eager does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coil {

// X(enum, text name, C++ storage type name in generated code, bytes, kind)
// kind: 'b' bool, 'u' unsigned int, 'i' signed int, 'f' float.
#define COIL_DTYPES(X)                      \
  X(Bool, "bool", "bool", 1, 'b')           \
  X(U8, "u8", "uint8_t", 1, 'u')            \
  X(I8, "i8", "int8_t", 1, 'i')             \
  X(I32, "i32", "int32_t", 4, 'i')          \
  X(I64, "i64", "int64_t", 8, 'i')          \
  X(F16, "f16", "coil::half", 2, 'f')       \
  X(BF16, "bf16", "coil::bfloat16", 2, 'f') \
  X(F32, "f32", "float", 4, 'f')            \
  X(F64, "f64", "double", 8, 'f')           \
  X(I16, "i16", "int16_t", 2, 'i')          \
  X(U16, "u16", "uint16_t", 2, 'u')         \
  X(U32, "u32", "uint32_t", 4, 'u')         \
  X(U64, "u64", "uint64_t", 8, 'u')

enum class DType : uint8_t {
#define COIL_DTYPE_ENUM(e, name, ctype, bytes, kind) e,
  COIL_DTYPES(COIL_DTYPE_ENUM)
#undef COIL_DTYPE_ENUM
};

/// Text name used by the text format, logs and errors: "f32", "i64", ...
std::string_view dtype_name(DType t);
/// Parses a text name; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);
/// Storage type spelled in generated C++ ("float", "coil::bfloat16", ...).
std::string_view dtype_cpp_type(DType t);
/// Bytes per element.
int dtype_size(DType t);

bool is_floating(DType t);
bool is_integral(DType t);  // includes bool
bool is_signed_integer(DType t);
/// f16/bf16: stored narrow, computed in f32.
inline bool is_low_precision(DType t) {
  return t == DType::F16 || t == DType::BF16;
}
/// The type arithmetic is carried out in: f32 for f16/bf16, else t itself.
DType compute_dtype(DType t);

/// u16, u32, u64: the unsigned types torch 2.3 added with few kernels ("barebones").
inline bool is_wide_unsigned(DType t) {
  return t == DType::U16 || t == DType::U32 || t == DType::U64;
}

/// Result type of a binary op on two tensors (torch.promote_types, the rule of torch 2.x):
/// bool < integers < floats; within a category the wider wins; u8 with i8 gives i16; f16 with
/// bf16 gives f32. u16/u32/u64 promote only to themselves and to floats: with bool or another
/// integer type torch refuses ("Promotion for uint16, uint32, uint64 types is not supported")
/// and so does coil, a UserError naming both types (numpy's u64 with i64 -> f64 is not torch's).
DType promote_types(DType a, DType b);

}  // namespace coil
