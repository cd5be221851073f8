// MaxPool and AveragePool through coil's max_pool2d and avg_pool2d.
//
// A 1-D window is a 2-D one of width 1 (the input gets a trailing dim of size 1, the result
// loses it). A 3-D window is separable, each step a 2-D pool with its own dims' attributes:
//   [N, C, D, H, W] -> [N, C*D, H, W] -> pool over (H, W) -> [N, C, D, H'*W']
//                   -> pool over (D, 1) -> [N, C, D', H'*W'] -> [N, C, D', H', W'].
// The max over a (kd, kh, kw) window is the max over its d of the (kh, kw) maxima. For the
// average, every per-dim rule factorizes: with count_include_pad the divisor is the product of
// the per-dim window sizes (clipped to the padded input in ceil mode, torch's and ONNX
// Runtime's count), so the mean of the (kh, kw) means is the 3-D mean; without it the (kh, kw)
// count of valid taps is the same for every d of one output, so averaging the 2-D means over
// the valid d only (a pool over d with count_include_pad=0) is the 3-D mean. Output sizes,
// ceil mode and padding are per dim as well.
#include <algorithm>
#include <limits>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

// One 2-D pooling step over the last two dims: 2 entries each, pads as ONNX orders them
// (begin h, begin w, end h, end w).
struct Window {
  std::vector<int64_t> kernel, stride, dilation, pads;
};

struct PoolKind {
  bool is_max;
  bool include_pad;  // AveragePool's count_include_pad
  bool ceil_mode;
};

// ONNX's pool of x [N, C, H, W] over (H, W). The op pads both sides alike, by at most half the
// kernel; the rest is explicit: -inf for max (never wins), zeros for an average that counts
// them. An average that does not count padding divides the padded sum by the pooled count of
// ones instead.
int pool2d(OnnxNode& n, int x, const Window& w, const PoolKind& k) {
  std::vector<int64_t> padding, before(2), after(2);
  bool explicit_pad = false;
  for (size_t d = 0; d < 2; ++d) {
    int64_t common = std::min({w.pads[d], w.pads[2 + d], w.kernel[d] / 2});
    padding.push_back(common);
    before[d] = w.pads[d] - common;
    after[d] = w.pads[2 + d] - common;
    explicit_pad |= before[d] > 0 || after[d] > 0;
  }
  DType t = n.dtype(x);
  double fill = 0;
  if (k.is_max && is_floating(t)) {
    fill = -std::numeric_limits<double>::infinity();
  } else if (k.is_max) {
    if (t == DType::I64 && explicit_pad) unsupported("asymmetric padding of int64 inputs");
    fill = t == DType::U8 ? 0.0 : t == DType::I8 ? -128.0 : -2147483648.0;
  }
  Attrs attrs{
      {"kernel", w.kernel}, {"stride", w.stride}, {"padding", padding}, {"ceil_mode", k.ceil_mode}};
  if (k.is_max) {
    attrs.set("dilation", w.dilation);
  } else {
    attrs.set("count_include_pad", k.include_pad || explicit_pad);
  }
  auto pad = [&](int v, double value) {
    for (int64_t d = 0; d < 2; ++d)
      v = pad_axis(n, v, 2 + d, before[static_cast<size_t>(d)], after[static_cast<size_t>(d)],
                   value);
    return v;
  };
  const char* op = k.is_max ? "max_pool2d" : "avg_pool2d";
  int y = n.add(op, {pad(x, fill)}, attrs);
  if (explicit_pad && !k.is_max && !k.include_pad) {
    // sum / count: both pooled with the same divisor, which cancels.
    std::vector<int64_t> plane = n.static_shape(x, "the input");
    plane[0] = plane[1] = 1;
    int ones = n.add("full", {}, Attrs{{"shape", plane}, {"value", 1.0}, {"dtype", t}});
    y = n.add("div", {y, n.add(op, {pad(ones, 0.0)}, attrs)});
  }
  if (k.ceil_mode && explicit_pad) {
    // The op drops a last window that starts in its own (right) padding, but explicit padding is
    // input to it: windows starting in the explicit part of ONNX's right padding are dropped
    // here (ONNX: "sliding windows that would start in the right padded region are ignored").
    std::vector<int64_t> xs = n.static_shape(x, "the input");
    for (size_t d = 0; d < 2; ++d) {
      int64_t size = n.type(y).shape[2 + d].const_value(), keep = size;
      while (keep > 0 && (keep - 1) * w.stride[d] >= xs[2 + d] + w.pads[d]) --keep;
      if (keep < size)
        y = n.add(
            "slice", {y},
            Attrs{{"dim", static_cast<int64_t>(2 + d)}, {"start", int64_t{0}}, {"end", keep}});
    }
  }
  return y;
}

// MaxPool's Indices output for x [N, C, H, W] (a 1-D window too: W is 1) and its max y: the
// flat index into x (row-major; storage_order 1: column-major over H and W) of the first maximum
// in the window's scan order (h, then w), as ONNX Runtime. Per tap (i, j) of the window, a
// strided slice of x padded with the lowest value gives that tap's value at every output; from
// the last tap to the first, the index of a tap that equals the max and lies inside x replaces
// the one so far. The tap indices and their validity fold into constants at import.
int max_indices(OnnxNode& n, int x, int y, const Window& w, int64_t storage_order) {
  std::vector<int64_t> xs = n.static_shape(x, "the input of MaxPool with Indices");
  std::vector<int64_t> ys = n.static_shape(y, "the output");
  int64_t batch = xs[0], channels = xs[1], h = xs[2], wd = xs[3];
  double lowest = is_floating(n.dtype(x))   ? -std::numeric_limits<double>::infinity()
                  : n.dtype(x) == DType::U8 ? 0.0
                  : n.dtype(x) == DType::I8 ? -128.0
                                            : -2147483648.0;
  int padded = x;
  for (size_t d = 0; d < 2; ++d) {
    // The padding the windows read: ONNX's, and in ceil mode what the last window needs more.
    int64_t need = (ys[2 + d] - 1) * w.stride[d] + (w.kernel[d] - 1) * w.dilation[d] + 1 -
                   (xs[2 + d] + w.pads[d]);
    padded = pad_axis(n, padded, static_cast<int64_t>(2 + d), w.pads[d], std::max<int64_t>(need, 0),
                      lowest);
  }
  // Where each tap of the window at each output lies in x (iotas over the outputs).
  auto along = [&](size_t d, int64_t tap) {
    int pos =
        n.add("mul", {n.cast(iota_along(n, ys[2 + d], static_cast<int64_t>(2 + d), 4), DType::I64),
                      n.scalar(static_cast<double>(w.stride[d]), DType::I64)});
    return n.add("add",
                 {pos, n.scalar(static_cast<double>(tap * w.dilation[d] - w.pads[d]), DType::I64)});
  };
  auto inside = [&](int pos, int64_t size) {
    return n.add("logical_and",
                 {n.add("ge", {pos, n.scalar(0, DType::I64)}),
                  n.add("lt", {pos, n.scalar(static_cast<double>(size), DType::I64)})});
  };
  auto times = [&](int v, int64_t k) {
    return n.add("mul", {v, n.scalar(static_cast<double>(k), DType::I64)});
  };
  int plane =
      n.add("add", {times(n.cast(iota_along(n, batch, 0, 4), DType::I64), channels * h * wd),
                    times(n.cast(iota_along(n, channels, 1, 4), DType::I64), h * wd)});
  int result = n.scalar(-1, DType::I64);
  for (int64_t i = w.kernel[0] - 1; i >= 0; --i) {
    for (int64_t j = w.kernel[1] - 1; j >= 0; --j) {
      int hp = along(0, i), wp = along(1, j);
      int local =
          storage_order == 1 ? n.add("add", {times(wp, h), hp}) : n.add("add", {times(hp, wd), wp});
      int tap = padded;
      for (size_t d = 0; d < 2; ++d) {
        int64_t start = (d == 0 ? i : j) * w.dilation[d];
        tap = n.add("slice", {tap},
                    Attrs{{"dim", static_cast<int64_t>(2 + d)},
                          {"start", start},
                          {"end", start + (ys[2 + d] - 1) * w.stride[d] + 1},
                          {"step", w.stride[d]}});
      }
      int hit = n.add("logical_and", {n.add("eq", {tap, y}),
                                      n.add("logical_and", {inside(hp, h), inside(wp, wd)})});
      result = n.add("where", {hit, n.add("add", {plane, local}), result});
    }
  }
  return result;
}

}  // namespace

void map_pool(OnnxNode& n) {
  int x = n.in(0);
  bool is_max = n.op_type() == "MaxPool";
  int64_t r = n.rank(x);
  if (r < 3) n.error("the input must have at least 3 dims, got {}", shape_str(n.type(x).shape));
  if (r > 5) unsupported("{}-D windows (coil supports 1-D, 2-D and 3-D)", r - 2);
  auto dims = static_cast<size_t>(r - 2);
  bool indices = is_max && n.wants_output(1);
  if (indices && dims == 3) unsupported("the Indices output of 3-D windows");
  int64_t storage_order = is_max ? n.attr_int("storage_order", 0) : 0;
  if (storage_order != 0 && storage_order != 1)
    n.error("storage_order {} is not 0 (row-major) or 1 (column-major)", storage_order);
  if (!n.has_attr("kernel_shape")) n.error("kernel_shape is missing");
  // A 1-D window's attributes get the entry of the added dim (kernel, stride, dilation 1).
  std::vector<int64_t> kernel = spatial_attr(n, "kernel_shape", 1, dims);
  std::vector<int64_t> stride = spatial_attr(n, "strides", 1, dims);
  std::vector<int64_t> dilation = spatial_attr(n, "dilations", 1, dims);
  for (size_t d = 0; d < kernel.size(); ++d)
    if (kernel[d] < 1 || stride[d] < 1 || dilation[d] < 1) {
      auto given = [&](const std::vector<int64_t>& v) {  // without a 1-D window's added dim
        return fmt::format("[{}]",
                           fmt::join(v.begin(), v.begin() + static_cast<int64_t>(dims), ", "));
      };
      n.error("kernel_shape {}, strides {} and dilations {} must be at least 1", given(kernel),
              given(stride), given(dilation));
    }
  if (!is_max && std::any_of(dilation.begin(), dilation.end(), [](int64_t v) { return v != 1; }))
    unsupported("dilations");
  PoolKind kind{is_max, !is_max && n.attr_int("count_include_pad", 0) != 0,
                n.attr_int("ceil_mode", 0) != 0};
  if (dims == 1) x = unsqueeze_last(n, x);
  std::vector<int64_t> pads = onnx_pads(n, x, kernel, stride, dilation, dims);
  if (dims <= 2) {
    Window w{kernel, stride, dilation, pads};
    int y = pool2d(n, x, w, kind);
    if (indices) {
      int idx = max_indices(n, x, y, w, storage_order);
      n.set_output(1, dims == 1 ? squeeze_last(n, idx) : idx);
    }
    return n.set_output(0, dims == 1 ? squeeze_last(n, y) : y);
  }
  // 3-D: (H, W) first, on [N, C*D, H, W] (N may be symbolic; the rest must be static).
  Shape s = n.type(x).shape;
  for (size_t d = 1; d < 5; ++d)
    if (!s[d].is_const())
      unsupported("3-D windows on input {} (only the batch may be symbolic)", shape_str(s));
  int planes = reshape_to(n, x, Shape{s[0], s[1] * s[2], s[3], s[4]});
  int y = pool2d(n, planes,
                 Window{{kernel[1], kernel[2]},
                        {stride[1], stride[2]},
                        {dilation[1], dilation[2]},
                        {pads[1], pads[2], pads[4], pads[5]}},
                 kind);
  Shape hw = n.type(y).shape;  // [N, C*D, H', W']
  y = reshape_to(n, y, Shape{s[0], s[1], s[2], hw[2] * hw[3]});
  // Then D, as a (kd, 1) window over [N, C, D, H'*W'].
  y = pool2d(n, y,
             Window{{kernel[0], 1}, {stride[0], 1}, {dilation[0], 1}, {pads[0], 0, pads[3], 0}},
             kind);
  n.set_output(0, reshape_to(n, y, Shape{s[0], s[1], n.type(y).shape[2], hw[2], hw[3]}));
}

}  // namespace coil::onnxfe
