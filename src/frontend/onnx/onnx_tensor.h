// ONNX tensors and types <-> coil: element types, TensorProto contents, value_info shapes.
#pragma once

#include <onnx/onnx_pb.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coil/tensor.h"

namespace coil::onnxfe {

/// The coil dtype of an ONNX elem_type (TensorProto::DataType); nullopt when coil lacks it
/// (string, complex, int16, uint16, uint32, uint64, float8).
std::optional<DType> dtype_from_onnx(int32_t elem_type);
/// The ONNX elem_type of a coil dtype.
int32_t dtype_to_onnx(DType t);
/// "float", "int64", "string", "<unknown elem_type 42>" (ONNX's names, lower-case).
std::string onnx_dtype_name(int32_t elem_type);

/// Converts a TensorProto (raw_data or the typed repeated fields). `what` names the tensor in
/// errors ("initializer 'w'"). Errors: unsupported dtype, external or segmented data, a negative
/// dim, more than 2^62 elements, a data size that does not match the dims.
Tensor tensor_from_proto(const onnx::TensorProto& t, std::string_view what);

/// Whether a constant of these sizes fits coil's text format, which every imported graph must
/// print to and parse back: the sizes, zeros counted as ones, multiply to less than 2^31.
bool fits_constant(const std::vector<int64_t>& sizes);
/// A user error naming `what` when `fits_constant(sizes)` is false.
void check_constant_shape(const std::vector<int64_t>& sizes, std::string_view what);

}  // namespace coil::onnxfe
