#include "runtime/gpu_conv.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/check.h"

namespace coil::gpu {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

ConvRef conv_ref(const json& o, size_t buffers, const fs::path& path, const char* what) {
  ConvRef r;
  r.buffer = o.at("buffer").get<int>();
  r.offset = o.at("offset").get<int64_t>();
  COIL_USER_CHECK(r.buffer >= 0 && r.buffer < static_cast<int>(buffers),
                  "{}: a convolution's {} in buffer {} ({} buffers)", path.string(), what, r.buffer,
                  buffers);
  return r;
}

}  // namespace

void check_extent(const fs::path& path, const std::string& what,
                  const std::vector<int64_t>& buffer_bytes, int buffer, int64_t offset,
                  int64_t elements, int64_t element_bytes) {
  int64_t bytes = buffer_bytes.at(static_cast<size_t>(buffer));
  COIL_USER_CHECK(offset >= 0 && elements >= 0 && offset + elements * element_bytes <= bytes,
                  "{}: {} reaches byte {} of buffer {}, which has {}", path.string(), what,
                  offset + elements * element_bytes, buffer, bytes);
}

ConvSpec parse_conv(const json& c, const std::vector<int64_t>& buffer_bytes, const fs::path& path) {
  const size_t buffers = buffer_bytes.size();
  ConvSpec s;
  s.x = conv_ref(c.at("x"), buffers, path, "input");
  s.w = conv_ref(c.at("w"), buffers, path, "weight");
  s.out = conv_ref(c.at("out"), buffers, path, "output");
  if (c.contains("bias") && !c.at("bias").is_null())
    s.bias = conv_ref(c.at("bias"), buffers, path, "bias");
  s.x_shape = c.at("x_shape").get<std::vector<int64_t>>();
  s.x_strides = c.at("x_strides").get<std::vector<int64_t>>();
  s.w_shape = c.at("w_shape").get<std::vector<int64_t>>();
  s.out_shape = c.at("out_shape").get<std::vector<int64_t>>();
  s.stride = c.at("stride").get<std::vector<int>>();
  s.padding = c.at("padding").get<std::vector<int>>();
  s.dilation = c.at("dilation").get<std::vector<int>>();
  s.groups = c.at("groups").get<int>();
  s.dtype = c.at("dtype").get<std::string>();
  s.tf32 = c.value("tf32", false);
  COIL_USER_CHECK(s.x_shape.size() == 4 && s.x_strides.size() == 4 && s.w_shape.size() == 4 &&
                      s.out_shape.size() == 4 && s.stride.size() == 2 && s.padding.size() == 2 &&
                      s.dilation.size() == 2,
                  "{}: a convolution that is not 2-D (shapes of 4 dims; stride, padding and "
                  "dilation of 2)",
                  path.string());
  COIL_USER_CHECK(s.dtype == "f32" || s.dtype == "bf16" || s.dtype == "f16",
                  "{}: a convolution of dtype {}: cuDNN convolutions are f32, bf16 or f16",
                  path.string(), s.dtype);
  COIL_USER_CHECK(s.groups >= 1 && s.x_shape[1] % s.groups == 0 &&
                      s.w_shape[1] * s.groups == s.x_shape[1] && s.w_shape[0] % s.groups == 0,
                  "{}: a convolution of {} groups with input channels {} and weight {}",
                  path.string(), s.groups, s.x_shape[1], fmt::join(s.w_shape, "x"));
  for (int i = 0; i < 2; ++i)
    COIL_USER_CHECK(s.stride[i] >= 1 && s.dilation[i] >= 1 && s.padding[i] >= 0,
                    "{}: a convolution of stride [{}], padding [{}], dilation [{}]", path.string(),
                    fmt::join(s.stride, ", "), fmt::join(s.padding, ", "),
                    fmt::join(s.dilation, ", "));
  std::vector<int64_t> want = {s.x_shape[0], s.w_shape[0], 0, 0};
  for (int i = 0; i < 2; ++i)
    want[2 + i] =
        (s.x_shape[2 + i] + 2 * s.padding[i] - s.dilation[i] * (s.w_shape[2 + i] - 1) - 1) /
            s.stride[i] +
        1;
  COIL_USER_CHECK(
      s.out_shape == want && want[2] > 0 && want[3] > 0,
      "{}: a convolution of input [{}] and weight [{}] into [{}]: its window gives [{}]",
      path.string(), fmt::join(s.x_shape, ", "), fmt::join(s.w_shape, ", "),
      fmt::join(s.out_shape, ", "), fmt::join(want, ", "));
  int64_t esize = s.dtype == "f32" ? 4 : 2, last = 0;
  for (int i = 0; i < 4; ++i) {
    COIL_USER_CHECK(s.x_shape[i] >= 1 && s.x_strides[i] >= 0,
                    "{}: a convolution input of shape [{}] and strides [{}]", path.string(),
                    fmt::join(s.x_shape, ", "), fmt::join(s.x_strides, ", "));
    last += (s.x_shape[i] - 1) * s.x_strides[i];
  }
  auto numel = [](const std::vector<int64_t>& v) { return v[0] * v[1] * v[2] * v[3]; };
  check_extent(path, "a convolution's input", buffer_bytes, s.x.buffer, s.x.offset, last + 1,
               esize);
  check_extent(path, "a convolution's weight", buffer_bytes, s.w.buffer, s.w.offset,
               numel(s.w_shape), esize);
  check_extent(path, "a convolution's output", buffer_bytes, s.out.buffer, s.out.offset,
               numel(s.out_shape), esize);
  if (s.bias.buffer >= 0)
    check_extent(path, "a convolution's bias", buffer_bytes, s.bias.buffer, s.bias.offset,
                 s.w_shape[0], esize);
  return s;
}

namespace {

int cudnn_dtype(const std::string& dt) {
  return dt == "f32"    ? cuda::kCudnnDataFloat
         : dt == "bf16" ? cuda::kCudnnDataBfloat16
                        : cuda::kCudnnDataHalf;
}

}  // namespace

// The convolution's descriptors, as torch's legacy cuDNN path sets them (ATen/cudnn/
// Descriptors.h, ConvolutionDescriptor::set): fp32 compute; tensor-op math for f16 and bf16;
// for f32 FMA math when TF32 is off (coil's default precision 'highest'), else the default;
// the algorithm cuDNN's heuristics rank first (cudnnGetConvolutionForwardAlgorithm_v7), with
// the math type it was ranked with.
Conv make_conv(cuda::CudnnHandle h, const ConvSpec& s) {
  const cuda::Dnn& n = cuda::dnn();
  Conv c;
  c.x = s.x;
  c.w = s.w;
  c.bias = s.bias;
  c.out = s.out;
  int dt = cudnn_dtype(s.dtype);
  auto i = [](int64_t v) { return static_cast<int>(v); };
  cuda::check_dnn(n.cudnnCreateTensorDescriptor(&c.x_desc), "cudnnCreateTensorDescriptor");
  cuda::check_dnn(
      n.cudnnSetTensor4dDescriptorEx(c.x_desc, dt, i(s.x_shape[0]), i(s.x_shape[1]),
                                     i(s.x_shape[2]), i(s.x_shape[3]), i(s.x_strides[0]),
                                     i(s.x_strides[1]), i(s.x_strides[2]), i(s.x_strides[3])),
      fmt::format("the convolution's input [{}]", fmt::join(s.x_shape, ", ")));
  cuda::check_dnn(n.cudnnCreateFilterDescriptor(&c.w_desc), "cudnnCreateFilterDescriptor");
  cuda::check_dnn(
      n.cudnnSetFilter4dDescriptor(c.w_desc, dt, cuda::kCudnnTensorNchw, i(s.w_shape[0]),
                                   i(s.w_shape[1]), i(s.w_shape[2]), i(s.w_shape[3])),
      fmt::format("the convolution's weight [{}]", fmt::join(s.w_shape, ", ")));
  const std::vector<int64_t>& o = s.out_shape;
  cuda::check_dnn(n.cudnnCreateTensorDescriptor(&c.y_desc), "cudnnCreateTensorDescriptor");
  cuda::check_dnn(n.cudnnSetTensor4dDescriptorEx(c.y_desc, dt, i(o[0]), i(o[1]), i(o[2]), i(o[3]),
                                                 i(o[1] * o[2] * o[3]), i(o[2] * o[3]), i(o[3]), 1),
                  fmt::format("the convolution's output [{}]", fmt::join(o, ", ")));
  if (c.bias.buffer >= 0) {
    cuda::check_dnn(n.cudnnCreateTensorDescriptor(&c.bias_desc), "cudnnCreateTensorDescriptor");
    cuda::check_dnn(
        n.cudnnSetTensor4dDescriptorEx(c.bias_desc, dt, 1, i(o[1]), 1, 1, i(o[1]), 1, 1, 1),
        "the convolution's bias");
  }
  cuda::check_dnn(n.cudnnCreateConvolutionDescriptor(&c.conv_desc),
                  "cudnnCreateConvolutionDescriptor");
  std::string what =
      fmt::format("a convolution (stride [{}], padding [{}], dilation [{}], {} groups, {})",
                  fmt::join(s.stride, ", "), fmt::join(s.padding, ", "),
                  fmt::join(s.dilation, ", "), s.groups, s.dtype);
  cuda::check_dnn(
      n.cudnnSetConvolution2dDescriptor(c.conv_desc, s.padding[0], s.padding[1], s.stride[0],
                                        s.stride[1], s.dilation[0], s.dilation[1],
                                        cuda::kCudnnCrossCorrelation, cuda::kCudnnDataFloat),
      what);
  cuda::check_dnn(n.cudnnSetConvolutionGroupCount(c.conv_desc, s.groups), what);
  int math = dt != cuda::kCudnnDataFloat ? cuda::kCudnnTensorOpMath
             : s.tf32                    ? cuda::kCudnnDefaultMath
                                         : cuda::kCudnnFmaMath;
  cuda::check_dnn(n.cudnnSetConvolutionMathType(c.conv_desc, math), what);
  cuda::CudnnFwdAlgoPerf perf[cuda::kCudnnFwdAlgoCount] = {};
  int returned = 0;
  cuda::check_dnn(
      n.cudnnGetConvolutionForwardAlgorithm_v7(h, c.x_desc, c.w_desc, c.conv_desc, c.y_desc,
                                               cuda::kCudnnFwdAlgoCount, &returned, perf),
      what + ": cudnnGetConvolutionForwardAlgorithm_v7");
  int chosen = -1;
  for (int k = 0; k < returned && chosen < 0; ++k)
    if (perf[k].status == 0) chosen = k;
  COIL_USER_CHECK(chosen >= 0, "{}: cuDNN has no algorithm for it ({} ranked)", what, returned);
  c.algo = perf[chosen].algo;
  if (perf[chosen].math_type != math)
    cuda::check_dnn(n.cudnnSetConvolutionMathType(c.conv_desc, perf[chosen].math_type), what);
  cuda::check_dnn(n.cudnnGetConvolutionForwardWorkspaceSize(h, c.x_desc, c.w_desc, c.conv_desc,
                                                            c.y_desc, c.algo, &c.workspace),
                  what + ": cudnnGetConvolutionForwardWorkspaceSize");
  return c;
}

void destroy_conv(Conv& c) {
  const cuda::Dnn& n = cuda::dnn();
  for (void* t : {c.x_desc, c.y_desc, c.bias_desc})
    if (t) n.cudnnDestroyTensorDescriptor(t);
  if (c.w_desc) n.cudnnDestroyFilterDescriptor(c.w_desc);
  if (c.conv_desc) n.cudnnDestroyConvolutionDescriptor(c.conv_desc);
  c = Conv{};
}

}  // namespace coil::gpu
