// The cuDNN convolutions of a GPU export (runtime/gpu_export.cpp): a manifest's "conv" launch
// read and checked (no GPU needed), then its cuDNN descriptors, algorithm and workspace size
// made at load, as torch's legacy cuDNN path makes them. cuDNN itself is cuda::dnn()'s, loaded
// with dlopen (runtime/cuda_driver.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/cuda_driver.h"

namespace coil::gpu {

// A cuDNN convolution (torch.nn.functional.conv2d in the module): NCHW, cross-correlation.
// Descriptors, algorithm and workspace size are set at load.
struct ConvRef {
  int buffer = -1;
  int64_t offset = 0;  // bytes
};
struct Conv {
  ConvRef x, w, bias, out;  // bias.buffer -1: none
  cuda::CudnnDesc x_desc = nullptr, w_desc = nullptr, conv_desc = nullptr, y_desc = nullptr,
                  bias_desc = nullptr;
  int algo = 0;
  size_t workspace = 0;
};

// A convolution of the manifest: what its cuDNN descriptors are made of.
struct ConvSpec {
  ConvRef x, w, bias, out;
  std::vector<int64_t> x_shape, x_strides, w_shape, out_shape;  // NCHW; OC, C/groups, KH, KW
  std::vector<int> stride, padding, dilation;
  int groups = 1;
  std::string dtype;
  bool tf32 = false;
};

/// A manifest's "conv" entry, checked: buffers in range (`buffer_bytes`: each buffer's size) and
/// every operand inside its buffer, 2-D, a dtype cuDNN takes, groups that divide the channels,
/// an output shape the window arithmetic gives. Errors name `path`.
ConvSpec parse_conv(const nlohmann::json& c, const std::vector<int64_t>& buffer_bytes,
                    const std::filesystem::path& path);

/// Raises an error naming `path` and `what` unless the `elements` of `element_bytes` a view
/// reaches from `offset` (bytes; its last element at (elements - 1)) fit buffer `buffer`.
void check_extent(const std::filesystem::path& path, const std::string& what,
                  const std::vector<int64_t>& buffer_bytes, int buffer, int64_t offset,
                  int64_t elements, int64_t element_bytes);

/// The convolution's cuDNN descriptors and algorithm on handle `h` (cuda::dnn() loaded).
Conv make_conv(cuda::CudnnHandle h, const ConvSpec& s);

/// Frees what make_conv made.
void destroy_conv(Conv& c);

}  // namespace coil::gpu
