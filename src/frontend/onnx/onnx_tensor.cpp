#include "frontend/onnx/onnx_tensor.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <utility>

#include "frontend/onnx/onnx_import.h"
#include "support/check.h"

namespace coil::onnxfe {

using TP = onnx::TensorProto;

std::optional<DType> dtype_from_onnx(int32_t elem_type) {
  switch (elem_type) {
    case TP::FLOAT:
      return DType::F32;
    case TP::UINT8:
      return DType::U8;
    case TP::INT8:
      return DType::I8;
    case TP::INT32:
      return DType::I32;
    case TP::INT64:
      return DType::I64;
    case TP::BOOL:
      return DType::Bool;
    case TP::FLOAT16:
      return DType::F16;
    case TP::DOUBLE:
      return DType::F64;
    case TP::BFLOAT16:
      return DType::BF16;
    case TP::INT16:
      return DType::I16;
    case TP::UINT16:
      return DType::U16;
    case TP::UINT32:
      return DType::U32;
    case TP::UINT64:
      return DType::U64;
    default:
      return std::nullopt;
  }
}

int32_t dtype_to_onnx(DType t) {
  switch (t) {
    case DType::F32:
      return TP::FLOAT;
    case DType::U8:
      return TP::UINT8;
    case DType::I8:
      return TP::INT8;
    case DType::I32:
      return TP::INT32;
    case DType::I64:
      return TP::INT64;
    case DType::Bool:
      return TP::BOOL;
    case DType::F16:
      return TP::FLOAT16;
    case DType::F64:
      return TP::DOUBLE;
    case DType::BF16:
      return TP::BFLOAT16;
    case DType::I16:
      return TP::INT16;
    case DType::U16:
      return TP::UINT16;
    case DType::U32:
      return TP::UINT32;
    case DType::U64:
      return TP::UINT64;
  }
  COIL_UNREACHABLE("bad dtype");
}

std::string onnx_dtype_name(int32_t elem_type) {
  if (!TP::DataType_IsValid(elem_type) || elem_type == TP::UNDEFINED)
    return fmt::format("<unknown elem_type {}>", elem_type);
  std::string s = TP::DataType_Name(static_cast<TP::DataType>(elem_type));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

namespace {

// Copies `n` values of a repeated field into the tensor, converting each to the dtype.
template <typename Field, typename Convert>
void copy_field(const Field& field, int64_t n, Tensor& out, std::string_view what,
                std::string_view field_name, Convert convert) {
  COIL_USER_CHECK(field.size() == n, "{}: {} has {} values for {} elements", what, field_name,
                  field.size(), n);
  for (int64_t i = 0; i < n; ++i) convert(field.Get(static_cast<int>(i)), i);
}

// The typed field that holds a tensor of dtype `dt` without raw_data, and its length.
std::pair<std::string_view, int64_t> typed_field_size(const onnx::TensorProto& t, DType dt) {
  switch (dt) {
    case DType::F32:
      return {"float_data", t.float_data_size()};
    case DType::F64:
      return {"double_data", t.double_data_size()};
    case DType::I64:
      return {"int64_data", t.int64_data_size()};
    case DType::U32:
    case DType::U64:  // onnx.proto: uint32 and uint64 values go in uint64_data
      return {"uint64_data", t.uint64_data_size()};
    default:  // i32, i16, u16, i8, u8, bool, f16, bf16
      return {"int32_data", t.int32_data_size()};
  }
}

}  // namespace

bool fits_constant(const std::vector<int64_t>& sizes) {
  constexpr int64_t kLimit = int64_t{1} << 31;  // the text format's kMaxConstantElements
  int64_t n = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(n, std::max<int64_t>(s, 1), &n) || n >= kLimit) return false;
  return true;
}

void check_constant_shape(const std::vector<int64_t>& sizes, std::string_view what) {
  COIL_USER_CHECK(fits_constant(sizes),
                  "{}: shape {} is too large for a constant (its sizes, zeros counted as ones, "
                  "multiply to 2^31 or more)",
                  what, shape_str(sizes));
}

Tensor tensor_from_proto(const onnx::TensorProto& t, std::string_view what) {
  std::optional<DType> dt = dtype_from_onnx(t.data_type());
  COIL_SUPPORTED_CHECK(dt.has_value(), "{}: dtype {} is not supported by coil", what,
                       onnx_dtype_name(t.data_type()));
  COIL_SUPPORTED_CHECK(t.data_location() != TP::EXTERNAL,
                       "{}: external data (a separate weights file) is not supported", what);
  COIL_SUPPORTED_CHECK(!t.has_segment(), "{}: segmented tensors are not supported", what);
  std::vector<int64_t> shape;
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    COIL_USER_CHECK(d >= 0, "{}: dim {} is negative", what, d);
    COIL_USER_CHECK(d == 0 || numel <= kLimit / d, "{}: shape has more than 2^62 elements", what);
    numel = d == 0 ? 0 : numel * d;
    shape.push_back(d);
  }
  // A zero-size dim after a huge one: keep checking the product of the nonzero dims.
  // An empty initializer of dims [2147483647, 0, 2] imported but its graph did not parse back
  // (found by tests/fuzz/parsers/onnx_parser_fuzzer): constants must fit the text format. (A
  // tensor with 2^31 elements or more fails the data checks below: a protobuf is under 2 GiB.)
  if (numel == 0) check_constant_shape(shape, what);
  const int64_t elem = dtype_size(*dt);
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    COIL_USER_CHECK(numel <= kLimit / elem && static_cast<int64_t>(raw.size()) == numel * elem,
                    "{}: raw_data has {} bytes, expected {} for {} {} elements", what, raw.size(),
                    numel <= kLimit / elem ? numel * elem : -1, numel, dtype_name(*dt));
    Tensor out = Tensor::empty(*dt, shape);
    if (numel > 0) std::memcpy(out.data(), raw.data(), raw.size());  // little-endian host
    // A bool is one byte in raw_data, but only 0 and 1 are bools: bytes such as 34 or 255 were
    // loaded as bool by the reference interpreter when folding (undefined; found by
    // tests/fuzz/parsers/onnx_parser_fuzzer). Any nonzero byte is true, as in int32_data.
    if (*dt == DType::Bool) {
      auto* b = static_cast<uint8_t*>(out.data());
      for (int64_t i = 0; i < numel; ++i) b[i] = b[i] != 0 ? 1 : 0;
    }
    return out;
  }
  // Typed fields: anything larger than 2^31 elements cannot be in a protobuf anyway.
  COIL_USER_CHECK(numel < (int64_t{1} << 31), "{}: {} elements but no raw_data", what, numel);
  // The field must hold every element before the tensor is allocated: dims [2147483647] with
  // three int64_data values allocated 16 GiB only to report the mismatch (found by the libFuzzer
  // target tests/fuzz/parsers/onnx_parser_fuzzer).
  auto [field_name, field_size] = typed_field_size(t, *dt);
  COIL_USER_CHECK(field_size == numel, "{}: {} has {} values for {} elements", what, field_name,
                  field_size, numel);
  Tensor out = Tensor::empty(*dt, shape);
  switch (*dt) {
    case DType::F32:
      copy_field(t.float_data(), numel, out, what, "float_data",
                 [&](float v, int64_t i) { out.data_as<float>()[i] = v; });
      break;
    case DType::F64:
      copy_field(t.double_data(), numel, out, what, "double_data",
                 [&](double v, int64_t i) { out.data_as<double>()[i] = v; });
      break;
    case DType::I64:
      copy_field(t.int64_data(), numel, out, what, "int64_data",
                 [&](int64_t v, int64_t i) { out.data_as<int64_t>()[i] = v; });
      break;
    case DType::I32:
      copy_field(t.int32_data(), numel, out, what, "int32_data",
                 [&](int32_t v, int64_t i) { out.data_as<int32_t>()[i] = v; });
      break;
    case DType::I8:
      copy_field(t.int32_data(), numel, out, what, "int32_data",
                 [&](int32_t v, int64_t i) { out.data_as<int8_t>()[i] = static_cast<int8_t>(v); });
      break;
    case DType::U8:
      copy_field(t.int32_data(), numel, out, what, "int32_data", [&](int32_t v, int64_t i) {
        out.data_as<uint8_t>()[i] = static_cast<uint8_t>(v);
      });
      break;
    case DType::Bool:
      copy_field(t.int32_data(), numel, out, what, "int32_data",
                 [&](int32_t v, int64_t i) { out.data_as<bool>()[i] = v != 0; });
      break;
    case DType::I16:
      copy_field(t.int32_data(), numel, out, what, "int32_data", [&](int32_t v, int64_t i) {
        out.data_as<int16_t>()[i] = static_cast<int16_t>(v);
      });
      break;
    case DType::U16:
      copy_field(t.int32_data(), numel, out, what, "int32_data", [&](int32_t v, int64_t i) {
        out.data_as<uint16_t>()[i] = static_cast<uint16_t>(v);
      });
      break;
    case DType::U32:
      copy_field(t.uint64_data(), numel, out, what, "uint64_data", [&](uint64_t v, int64_t i) {
        out.data_as<uint32_t>()[i] = static_cast<uint32_t>(v);
      });
      break;
    case DType::U64:
      copy_field(t.uint64_data(), numel, out, what, "uint64_data",
                 [&](uint64_t v, int64_t i) { out.data_as<uint64_t>()[i] = v; });
      break;
    case DType::F16:
    case DType::BF16:  // the 16 bits of each value, stored in int32_data
      copy_field(t.int32_data(), numel, out, what, "int32_data", [&](int32_t v, int64_t i) {
        out.data_as<uint16_t>()[i] = static_cast<uint16_t>(v);
      });
      break;
  }
  return out;
}

}  // namespace coil::onnxfe

namespace coil {

Tensor load_onnx_tensor(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  COIL_USER_CHECK(f.good(), "{}: cannot open the file", path.string());
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  onnx::TensorProto t;
  COIL_USER_CHECK(bytes.size() < (size_t{1} << 31) &&
                      t.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
                  "{}: not a valid serialized TensorProto", path.string());
  return onnxfe::tensor_from_proto(t, path.string());
}

}  // namespace coil
