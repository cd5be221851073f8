// Matrix products and convolution: MatMul, Gemm, Conv, ConvTranspose, Det, and the window
// helpers the pools (onnx_ops_pool.cpp) and the integer ops (onnx_ops_integer.cpp) share.
// Conv is 2-D (coil's conv2d); a 1-D window is a 2-D one of width 1 (the input and the weight
// get a trailing dim of size 1, the result loses it), a 3-D one a sum of 2-D convolutions over
// its depth taps (ConvTranspose's 3-D convolution too). Its ONNX padding
// (pads, auto_pad) becomes the op's symmetric padding plus, where ONNX pads one side more, an
// explicit concat with constant blocks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

void require_float(OnnxNode& n, int x) {
  if (!is_floating(n.dtype(x)))
    unsupported("{} inputs (coil's matrix products and convolutions are floating point only)",
                dtype_name(n.dtype(x)));
}

}  // namespace

// ONNX's pads attribute has `attr_dims` begin entries, then as many end entries; a 1-D window
// computed as 2-D (kernel of 2 entries, attr_dims 1) gets no padding along the added dim.
std::vector<int64_t> onnx_pads(OnnxNode& n, int x, const std::vector<int64_t>& kernel,
                               const std::vector<int64_t>& stride,
                               const std::vector<int64_t>& dilation, size_t attr_dims) {
  size_t dims = kernel.size();
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(2 * dims, 0);
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> given =
        n.attr_ints("pads").value_or(std::vector<int64_t>(2 * attr_dims, 0));
    if (given.size() != 2 * attr_dims)
      n.error("pads has {} entries, expected {}", given.size(), 2 * attr_dims);
    for (int64_t p : given)
      if (p < 0) n.error("negative pads [{}]", fmt::join(given, ", "));
    for (size_t d = 0; d < attr_dims; ++d) {
      pads[d] = given[d];
      pads[dims + d] = given[attr_dims + d];
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // The output is ceil(in / stride); the padding that takes, split evenly, the odd one at
    // the end (SAME_UPPER) or the start (SAME_LOWER).
    for (size_t d = 0; d < dims; ++d) {
      auto size = n.type(x).shape[2 + d].as_const();
      if (!size) unsupported("auto_pad {} with a symbolic spatial size", auto_pad);
      // The window attributes are not checked yet: a kernel_shape of 2^63 - 1 overflowed the
      // total, and a stride of 0 would divide by zero (found by
      // tests/fuzz/parsers/onnx_parser_fuzzer).
      if (kernel[d] < 1 || stride[d] < 1 || dilation[d] < 1)
        n.error(
            "auto_pad {} needs kernel_shape, strides and dilations of at least 1, got {}, {}, {}",
            auto_pad, kernel[d], stride[d], dilation[d]);
      int64_t out = *size / stride[d] + (*size % stride[d] != 0 ? 1 : 0);  // ceil
      int64_t total = 0;  // (out - 1) * stride + (kernel - 1) * dilation + 1 - size
      if (__builtin_mul_overflow(kernel[d] - 1, dilation[d], &total) ||
          __builtin_add_overflow(total, (out - 1) * stride[d] + 1 - *size, &total))
        n.error("auto_pad {}: kernel_shape {} with dilations {} overflows int64", auto_pad,
                kernel[d], dilation[d]);
      total = std::max<int64_t>(total, 0);
      int64_t small = total / 2, large = total - small;
      pads[d] = auto_pad == "SAME_UPPER" ? small : large;
      pads[dims + d] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad != "VALID") {
    n.error("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
            printable(auto_pad));
  }
  return pads;
}

int pad_axis(OnnxNode& n, int x, int64_t axis, int64_t before, int64_t after, double value) {
  if (before == 0 && after == 0) return x;
  std::vector<int64_t> shape = n.static_shape(x, "the input of asymmetric padding");
  std::vector<int> parts;
  auto block = [&](int64_t size) {
    shape[static_cast<size_t>(axis)] = size;
    return n.add("full", {}, Attrs{{"shape", shape}, {"value", value}, {"dtype", n.dtype(x)}});
  };
  if (before > 0) parts.push_back(block(before));
  parts.push_back(x);
  if (after > 0) parts.push_back(block(after));
  return n.add("concat", parts, Attrs{{"dim", axis}});
}

std::vector<int64_t> spatial_attr(OnnxNode& n, std::string_view name, int64_t dflt,
                                  size_t attr_dims, int64_t extra) {
  std::vector<int64_t> v = n.attr_ints(name).value_or(std::vector<int64_t>(attr_dims, dflt));
  if (v.size() != attr_dims)
    n.error("{} has {} entries for {} spatial dims", name, v.size(), attr_dims);
  if (attr_dims == 1) v.push_back(extra);
  return v;
}

int unsqueeze_last(OnnxNode& n, int x) {
  return n.add("unsqueeze", {x}, Attrs{{"dim", int64_t{-1}}});
}

int squeeze_last(OnnxNode& n, int x) {
  return n.add("squeeze", {x}, Attrs{{"dims", std::vector<int64_t>{n.rank(x) - 1}}});
}

namespace {

// The rank check of Conv and ConvTranspose once 3-D windows are handled: 1 or 2 spatial dims,
// else unsupported. Returns
// whether the window is 1-D.
bool check_window_rank(OnnxNode& n, int x) {
  int64_t r = n.rank(x);
  if (r < 3) n.error("the input must have at least 3 dims, got {}", shape_str(n.type(x).shape));
  if (r != 3 && r != 4) unsupported("{}-D windows (coil supports 1-D, 2-D and 3-D)", r - 2);
  return r == 3;
}

// The operand checks shared by Conv and ConvTranspose: a 1-D or 2-D float input and a weight of
// its rank; 1-D operands become 2-D with a trailing dim of 1. Returns whether they were 1-D.
bool conv_operands(OnnxNode& n, int& x, int& w) {
  bool one_d = check_window_rank(n, x);
  require_float(n, x);
  if (n.rank(w) != n.rank(x))
    n.error("the weight must be {}-D, got {}", n.rank(x), shape_str(n.type(w).shape));
  if (one_d) x = unsqueeze_last(n, x), w = unsqueeze_last(n, w);
  return one_d;
}

}  // namespace

void map_matmul(OnnxNode& n) {
  int a = n.in(0), b = n.in(1);
  require_float(n, a);
  n.set_output(0, n.add("matmul", {a, b}));
}

void map_gemm(OnnxNode& n) {
  int a = n.in(0), b = n.in(1);
  require_float(n, a);
  if (n.rank(a) != 2 || n.rank(b) != 2)
    n.error("A and B must be 2-D, got {} and {}", shape_str(n.type(a).shape),
            shape_str(n.type(b).shape));
  Attrs swap{{"dim0", int64_t{0}}, {"dim1", int64_t{1}}};
  if (n.attr_int("transA", 0) != 0) a = n.add("transpose", {a}, swap);
  if (n.attr_int("transB", 0) != 0) b = n.add("transpose", {b}, swap);
  double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  if (n.has_input(2)) {
    // Opsets 1 to 6: C is [M, N] unless broadcast=1 (then numpy's unidirectional broadcast, as
    // from opset 7 on).
    const Shape& c = n.type(n.in(2)).shape;
    Shape mn{n.type(a).shape[0], n.type(b).shape[1]};
    if (n.opset() < 7 && n.attr_int("broadcast", 0) == 0 && c != mn)
      n.error("C is {}, not {}, and broadcast is 0", shape_str(c), shape_str(mn));
    n.set_output(0, n.add("addmm", {n.in(2), a, b}, Attrs{{"alpha", alpha}, {"beta", beta}}));
    return;
  }
  int y = n.add("matmul", {a, b});
  if (alpha != 1.0) y = n.add("mul", {y, n.scalar(alpha, n.dtype(y))});
  n.set_output(0, y);
}

namespace {

// conv2d of x [N, C, H, W] with ONNX's pads (begin h, w, end h, w): the part both sides share
// as the op's padding, the rest as explicit zeros.
int conv2d_pads(OnnxNode& n, int x, int w, int bias, const std::vector<int64_t>& stride,
                const std::vector<int64_t>& dilation, const std::vector<int64_t>& pads,
                int64_t group) {
  std::vector<int64_t> padding;
  for (int64_t d = 0; d < 2; ++d) {
    auto i = static_cast<size_t>(d);
    int64_t common = std::min(pads[i], pads[2 + i]);
    padding.push_back(common);
    x = pad_axis(n, x, 2 + d, pads[i] - common, pads[2 + i] - common, 0.0);
  }
  std::vector<int> in{x, w};
  if (bias >= 0) in.push_back(bias);
  return n.add(
      "conv2d", in,
      Attrs{{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", group}});
}

// A 3-D convolution as the sum over the depth taps of 2-D ones: tap t reads the depth positions
// od * sd + t * dd of x padded with zeros along D (a strided slice, [N, C, D', H, W]), moved into
// the batch ([N * D', C, H, W]), convolved with w's slice t ([M, C / group, kh, kw]) with the
// (H, W) attributes. The bias is added once. Shapes must be static.
int conv3d_explicit(OnnxNode& n, int x, int w, int bias, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& dilation, const std::vector<int64_t>& pads,
                    int64_t group) {
  std::vector<int64_t> xs = n.static_shape(x, "the input of a 3-D convolution");
  std::vector<int64_t> ws = n.static_shape(w, "the weight");
  std::vector<int64_t> kernel{ws[2], ws[3], ws[4]};
  int64_t depth = xs[2] + pads[0] + pads[3];
  int64_t span = 0;
  if (__builtin_mul_overflow(dilation[0], kernel[0] - 1, &span) || span + 1 > depth)
    n.error("the padded depth {} is smaller than the window's ({} taps, dilation {})", depth,
            kernel[0], dilation[0]);
  int64_t out_depth = (depth - span - 1) / stride[0] + 1;
  int xp = pad_axis(n, x, 2, pads[0], pads[3], 0.0);
  int y = -1;
  for (int64_t t = 0; t < kernel[0]; ++t) {
    int64_t start = t * dilation[0];
    int xt = n.add("slice", {xp},
                   Attrs{{"dim", int64_t{2}},
                         {"start", start},
                         {"end", start + (out_depth - 1) * stride[0] + 1},
                         {"step", stride[0]}});
    xt = n.add("permute", {xt}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3, 4}}});
    xt = n.add("reshape", {xt},
               Attrs{{"shape", std::vector<int64_t>{xs[0] * out_depth, xs[1], xs[3], xs[4]}}});
    int wt = n.add("slice", {w}, Attrs{{"dim", int64_t{2}}, {"start", t}, {"end", t + 1}});
    wt = n.add("reshape", {wt}, Attrs{{"shape", std::vector<int64_t>{ws[0], ws[1], ws[3], ws[4]}}});
    int yt = conv2d_pads(n, xt, wt, -1, {stride[1], stride[2]}, {dilation[1], dilation[2]},
                         {pads[1], pads[2], pads[4], pads[5]}, group);
    y = y < 0 ? yt : n.add("add", {y, yt});
  }
  std::vector<int64_t> ys = n.static_shape(y, "the output");  // [N * D', M, H', W']
  y = n.add("reshape", {y},
            Attrs{{"shape", std::vector<int64_t>{xs[0], out_depth, ys[1], ys[2], ys[3]}}});
  y = n.add("permute", {y}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3, 4}}});
  if (bias >= 0) {
    if (n.rank(bias) != 1 || !(n.type(bias).shape[0] == ws[0]))
      n.error("the bias must be [{}], got {}", ws[0], shape_str(n.type(bias).shape));
    y = n.add("add", {y, reshape_to(n, bias, Shape{ws[0], 1, 1, 1})});
  }
  return y;
}

int conv3d(OnnxNode& n, int x, int w, int bias) {
  require_float(n, x);
  if (n.rank(w) != 5) n.error("the weight must be 5-D, got {}", shape_str(n.type(w).shape));
  std::vector<int64_t> ws = n.static_shape(w, "the weight");
  std::vector<int64_t> kernel{ws[2], ws[3], ws[4]};
  if (n.has_attr("kernel_shape") && spatial_attr(n, "kernel_shape", 1, 3) != kernel)
    n.error("kernel_shape [{}] differs from the weight's {}",
            fmt::join(*n.attr_ints("kernel_shape"), ", "), shape_str(n.type(w).shape));
  std::vector<int64_t> stride = spatial_attr(n, "strides", 1, 3);
  std::vector<int64_t> dilation = spatial_attr(n, "dilations", 1, 3);
  for (size_t d = 0; d < 3; ++d)
    if (stride[d] < 1 || dilation[d] < 1 || kernel[d] < 1)
      n.error("strides [{}], dilations [{}] and the kernel {} must be at least 1",
              fmt::join(stride, ", "), fmt::join(dilation, ", "), shape_str(n.type(w).shape));
  std::vector<int64_t> pads = onnx_pads(n, x, kernel, stride, dilation, 3);
  return conv3d_explicit(n, x, w, bias, stride, dilation, pads, n.attr_int("group", 1));
}

}  // namespace

int conv_float(OnnxNode& n, int x, int w, int bias) {
  if (n.rank(x) == 5) return conv3d(n, x, w, bias);
  bool one_d = conv_operands(n, x, w);
  std::vector<int64_t> kernel;
  for (size_t d = 2; d < 4; ++d) {
    auto k = n.type(w).shape[d].as_const();
    if (!k) unsupported("a weight of symbolic shape {}", shape_str(n.type(w).shape));
    kernel.push_back(*k);
  }
  if (n.has_attr("kernel_shape") && spatial_attr(n, "kernel_shape", 1, one_d ? 1 : 2) != kernel)
    n.error("kernel_shape [{}] differs from the weight's {}",
            fmt::join(*n.attr_ints("kernel_shape"), ", "), shape_str(n.type(n.in(1)).shape));
  std::vector<int64_t> stride = spatial_attr(n, "strides", 1, one_d ? 1 : 2);
  std::vector<int64_t> dilation = spatial_attr(n, "dilations", 1, one_d ? 1 : 2);
  std::vector<int64_t> pads = onnx_pads(n, x, kernel, stride, dilation, one_d ? 1 : 2);
  int y = conv2d_pads(n, x, w, bias, stride, dilation, pads, n.attr_int("group", 1));
  return one_d ? squeeze_last(n, y) : y;
}

void map_conv(OnnxNode& n) {
  n.set_output(0, conv_float(n, n.in(0), n.in(1), n.has_input(2) ? n.in(2) : -1));
}

namespace {

// x with s - 1 zeros between neighbours along `axis`: [.., H, ..] -> [.., (H - 1) * s + 1, ..].
// A where with an iota mask, so the other dims (a batch) may be symbolic.
int interleave_zeros(OnnxNode& n, int x, int64_t axis, int64_t s) {
  Shape shape = n.type(x).shape;
  auto c = shape[static_cast<size_t>(axis)].as_const();
  if (!c) unsupported("a symbolic spatial size");
  int64_t size = *c;
  if (s == 1 || size == 0) return x;
  int v = n.add("unsqueeze", {x}, Attrs{{"dim", axis + 1}});
  int first = n.add("eq", {iota_along(n, s, axis + 1, n.rank(v)), n.scalar(0, DType::I64)});
  v = n.add("where", {first, v, n.scalar(0, n.dtype(x))});  // [.., H, s, ..]
  shape[static_cast<size_t>(axis)] = size * s;
  v = reshape_to(n, v, shape);
  return n.add("slice", {v},
               Attrs{{"dim", axis}, {"start", int64_t{0}}, {"end", (size - 1) * s + 1}});
}

}  // namespace

// A transposed convolution is the convolution (stride 1) of the input with s - 1 zeros between
// neighbours, padded by dilation * (kernel - 1) - pad on each side (plus output_padding at the
// end; a negative amount crops), with the weight's in/out channels swapped per group and its
// window flipped.
void map_conv_transpose(OnnxNode& n) {
  int x = n.in(0), w = n.in(1);
  bool three_d = n.rank(x) == 5, one_d = false;
  if (three_d) {
    require_float(n, x);
    if (n.rank(w) != 5) n.error("the weight must be 5-D, got {}", shape_str(n.type(w).shape));
  } else {
    one_d = conv_operands(n, x, w);
  }
  size_t sd = three_d ? 3 : 2, ad = one_d ? 1 : sd;  // spatial dims, and as the attributes name
  std::vector<int64_t> ws = n.static_shape(w, "the weight"), xs(sd + 2, 0);
  for (size_t d = 1; d < sd + 2; ++d) {  // the batch may be symbolic
    auto c = n.type(x).shape[d].as_const();
    if (!c) unsupported("input {} with a symbolic dim {}", shape_str(n.type(x).shape), d);
    xs[d] = *c;
  }
  int64_t group = n.attr_int("group", 1);
  if (group < 1 || xs[1] % group != 0 || ws[0] != xs[1])
    n.error("the weight {} does not fit input {} with group {}", shape_str(n.type(n.in(1)).shape),
            shape_str(n.type(n.in(0)).shape), group);
  int64_t cin = xs[1], cout = ws[1] * group;
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  if (n.has_attr("kernel_shape") && spatial_attr(n, "kernel_shape", 1, ad) != kernel)
    n.error("kernel_shape [{}] differs from the weight's {}",
            fmt::join(*n.attr_ints("kernel_shape"), ", "), shape_str(n.type(n.in(1)).shape));
  std::vector<int64_t> stride = spatial_attr(n, "strides", 1, ad);
  std::vector<int64_t> dilation = spatial_attr(n, "dilations", 1, ad);
  std::vector<int64_t> out_pad = spatial_attr(n, "output_padding", 0, ad, 0);
  for (size_t d = 0; d < sd; ++d)
    if (stride[d] < 1 || dilation[d] < 1 || out_pad[d] < 0)
      n.error("strides [{}], dilations [{}] and output_padding [{}] must be positive",
              fmt::join(stride, ", "), fmt::join(dilation, ", "), fmt::join(out_pad, ", "));
  // The full output size before padding is removed, per spatial dim.
  std::vector<int64_t> full(sd);
  for (size_t d = 0; d < sd; ++d) {
    // Attributes near 2^63 overflow the size; the zero-interleaved input is built in memory.
    constexpr int64_t kMax = int64_t{1} << 31;
    if (stride[d] > kMax || dilation[d] > kMax || out_pad[d] > kMax || kernel[d] > kMax ||
        xs[2 + d] > kMax)
      n.error("strides [{}], dilations [{}] or output_padding [{}] are too large",
              fmt::join(stride, ", "), fmt::join(dilation, ", "), fmt::join(out_pad, ", "));
    full[d] = stride[d] * (xs[2 + d] - 1) + out_pad[d] + (kernel[d] - 1) * dilation[d] + 1;
  }
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(2 * sd, 0), target;  // begin pads, then end pads
  if (n.has_attr("output_shape")) {
    target = *n.attr_ints("output_shape");
    if (target.size() == ad + 2) target.erase(target.begin(), target.begin() + 2);
    if (target.size() != ad)
      n.error("output_shape has {} entries for {} spatial dims", target.size(), ad);
    if (one_d) target.push_back(1);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < sd; ++d) target.push_back(xs[2 + d] * stride[d]);
  } else if (auto_pad == "NOTSET") {
    pads = n.attr_ints("pads").value_or(std::vector<int64_t>(2 * ad, 0));
    if (pads.size() != 2 * ad) n.error("pads has {} entries, expected {}", pads.size(), 2 * ad);
    if (one_d) pads = {pads[0], 0, pads[1], 0};
  } else if (auto_pad != "VALID") {
    n.error("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
            printable(auto_pad));
  }
  if (!target.empty()) {
    // ONNX: the total padding that gives the target; SAME_UPPER puts the odd one at the end. A
    // target larger than the full size gets zeros at the end (as ONNX Runtime and ONNX's test
    // data: a negative end pad).
    n.ignore_attr("pads");  // auto-generated, as ONNX says
    for (size_t d = 0; d < sd; ++d) {
      int64_t total = full[d] - target[d];
      pads[d] = total < 0 ? 0 : auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[sd + d] = total - pads[d];
    }
  }
  for (size_t d = 0; d < sd; ++d)
    if (full[d] - pads[d] - pads[sd + d] < 0)
      n.error("pads [{}] exceed the output size {}", fmt::join(pads, ", "), full[d]);
  // 2-D: the op's symmetric padding plus explicit zeros; 3-D: conv3d_explicit's pads.
  std::vector<int64_t> padding, conv_pads(2 * sd, 0);
  for (int64_t d = 0; d < static_cast<int64_t>(sd); ++d) {
    auto i = static_cast<size_t>(d);
    x = interleave_zeros(n, x, 2 + d, stride[i]);
    int64_t edge = dilation[i] * (kernel[i] - 1);
    int64_t begin = edge - pads[i], end = edge - pads[sd + i] + out_pad[i];
    if (begin < 0 || end < 0) {
      int64_t size = *n.type(x).shape[2 + i].as_const();
      x = n.add("slice", {x},
                Attrs{{"dim", 2 + d},
                      {"start", std::max<int64_t>(-begin, 0)},
                      {"end", size - std::max<int64_t>(-end, 0)}});
      begin = std::max<int64_t>(begin, 0), end = std::max<int64_t>(end, 0);
    }
    if (three_d) {
      conv_pads[i] = begin, conv_pads[sd + i] = end;
      continue;
    }
    int64_t common = std::min(begin, end);
    padding.push_back(common);
    x = pad_axis(n, x, 2 + d, begin - common, end - common, 0.0);
  }
  // [Cin, Cout/g, k...] -> [g, Cin/g, Cout/g, k...] -> [Cout, Cin/g, k...], flipped.
  std::vector<int64_t> grouped{group, cin / group, cout / group}, swapped{cout, cin / group},
      perm{0, 2, 1};
  for (size_t d = 0; d < sd; ++d) {
    grouped.push_back(kernel[d]);
    swapped.push_back(kernel[d]);
    perm.push_back(static_cast<int64_t>(3 + d));
  }
  int v = n.add("reshape", {w}, Attrs{{"shape", grouped}});
  v = n.add("permute", {v}, Attrs{{"dims", perm}});
  v = n.add("reshape", {v}, Attrs{{"shape", swapped}});
  for (int64_t d = 2; d < static_cast<int64_t>(sd) + 2; ++d) {
    std::vector<int64_t> rev;
    for (int64_t k = ws[static_cast<size_t>(d)] - 1; k >= 0; --k) rev.push_back(k);
    if (rev.size() > 1) v = gather_const(n, v, d, rev);
  }
  if (three_d)
    return n.set_output(0, conv3d_explicit(n, x, v, n.has_input(2) ? n.in(2) : -1, {1, 1, 1},
                                           dilation, conv_pads, group));
  std::vector<int> in{x, v};
  if (n.has_input(2)) in.push_back(n.in(2));
  int y = n.add("conv2d", in,
                Attrs{{"stride", std::vector<int64_t>{1, 1}},
                      {"padding", padding},
                      {"dilation", dilation},
                      {"groups", group}});
  n.set_output(0, one_d ? squeeze_last(n, y) : y);
}

// Det of [..., M, M] for M <= 4 as the Leibniz sum over permutations (at most 24 products of M
// elements): exact formulas with no pivoting, so small matrices only; larger ones are
// unsupported rather than computed by a factorization coil does not have.
void map_det(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r < 2) n.error("the input must have at least 2 dims, got {}", shape_str(n.type(x).shape));
  if (!is_floating(n.dtype(x)))
    n.error("the input must be floating point, got {}", dtype_name(n.dtype(x)));
  const Shape& s = n.type(x).shape;
  if (!s[static_cast<size_t>(r - 1)].is_const() ||
      !(s[static_cast<size_t>(r - 1)] == s[static_cast<size_t>(r - 2)]))
    n.error("the last two dims must be equal and static, got {}", shape_str(s));
  int64_t m = s[static_cast<size_t>(r - 1)].const_value();
  if (m > 4) unsupported("{}x{} matrices (coil expands determinants up to 4x4)", m, m);
  auto at = [&](int64_t i, int64_t j) {
    int e = n.add("slice", {x},
                  Attrs{{"dim", r - 2}, {"start", i}, {"end", i + 1}, {"step", int64_t{1}}});
    e = n.add("slice", {e},
              Attrs{{"dim", r - 1}, {"start", j}, {"end", j + 1}, {"step", int64_t{1}}});
    return n.add("squeeze", {e}, Attrs{{"dims", std::vector<int64_t>{r - 2, r - 1}}});
  };
  std::vector<int64_t> perm(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) perm[static_cast<size_t>(i)] = i;
  int det = -1;
  do {
    int inversions = 0;
    for (size_t i = 0; i < perm.size(); ++i)
      for (size_t j = i + 1; j < perm.size(); ++j) inversions += perm[i] > perm[j];
    int term = at(0, perm[0]);
    for (int64_t i = 1; i < m; ++i)
      term = n.add("mul", {term, at(i, perm[static_cast<size_t>(i)])});
    if (det < 0)
      det = inversions % 2 ? n.add("neg", {term}) : term;
    else
      det = n.add(inversions % 2 ? "sub" : "add", {det, term});
  } while (std::next_permutation(perm.begin(), perm.end()));
  n.set_output(0, det);
}

}  // namespace coil::onnxfe
