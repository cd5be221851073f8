// Reading and writing numpy .npy files (https://numpy.org/doc/stable/reference/generated/
// numpy.lib.format.html), the exchange format between coil, its tests and PyTorch/numpy.
// No Debian package provides a standalone .npy library (xtensor's xnpy needs xtensor
// containers), hence this small one.
//
// dtypes (descr):
//   bool '|b1'  u8 '|u1'  i8 '|i1'  i32 '<i4'  i64 '<i8'  f16 '<f2'  f32 '<f4'  f64 '<f8'
//   bf16: numpy has no bfloat16, so it is written as '|V2' (a raw 2-byte void, which numpy
//   loads as dtype('V2'); view it as ml_dtypes.bfloat16, or as '<u2' for the bits), and '|V2'
//   or '<V2' is read back as bf16.
// Reading accepts format versions 1.0, 2.0 and 3.0, big-endian data (byte-swapped),
// fortran_order True (converted to C order) and, for 1-byte types, any byte-order mark.
// Writing uses version 1.0 unless the header is too long for it (then 2.0), C order,
// little-endian, with the header padded to a multiple of 64 bytes as numpy does.
// Malformed or truncated files throw coil::Error naming the file and the problem.
#pragma once

#include <filesystem>

#include "coil/tensor.h"

namespace coil {

/// Reads a .npy file into a new contiguous tensor.
Tensor read_npy(const std::filesystem::path& path);

/// Writes `tensor` (any strides; written in C order) to `path`, replacing the file.
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

}  // namespace coil
