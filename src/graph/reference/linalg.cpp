// Reference kernels of the linear-algebra and CNN ops: matmul, bmm, linear, addmm, conv2d,
// max_pool2d, avg_pool2d, global_avg_pool2d. Plain loops over row-major copies of the inputs,
// products and sums in double, one rounding to the result dtype at the end. The composites
// (linear, addmm, global_avg_pool2d) are computed directly, not through their decompositions,
// so that tests of the decompositions compare against an independent formula. One exception:
// linear and addmm of f16/bf16 round the product to the dtype before the bias is added (and
// alpha * product, beta * bias each once more), as torch's CPU kernels do (torch 1.13 and 2.x:
// addmm(c, a, b) over bf16 [1, 2] x [2, 1] gives 0.15625 where one rounding gives 0.1640625)
// and coil's compiled code does on every device: `lp_step` below.
#include <cmath>
#include <limits>

#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

using Sizes = std::vector<int64_t>;

size_t at(int64_t i) {
  return static_cast<size_t>(i);
}

int64_t lowest_int(DType t) {
  switch (t) {
    case DType::U8:
      return 0;
    case DType::I8:
      return std::numeric_limits<int8_t>::min();
    case DType::I32:
      return std::numeric_limits<int32_t>::min();
    case DType::I16:
      return std::numeric_limits<int16_t>::min();
    case DType::U16:
    case DType::U32:
    case DType::U64:
      return 0;
    default:
      return std::numeric_limits<int64_t>::min();
  }
}

}  // namespace

Tensor ref_matmul(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Sizes &sa = in[0].shape(), &sb = in[1].shape();
  // A 1-D a is a row [1, K], a 1-D b a column [K, 1]; those dims are dropped from the result.
  Sizes am = sa.size() == 1 ? Sizes{1, sa[0]} : sa;
  Sizes bm = sb.size() == 1 ? Sizes{sb[0], 1} : sb;
  int64_t m_size = am[am.size() - 2], k_size = am.back(), n_size = bm.back();
  Sizes batch_a(am.begin(), am.end() - 2), batch_b(bm.begin(), bm.end() - 2);
  Sizes batch = ref::broadcast_sizes(node.op_name(), batch_a, batch_b);
  Sizes stride_a = ref::broadcast_strides(batch_a, batch);
  Sizes stride_b = ref::broadcast_strides(batch_b, batch);
  Sizes out_shape = batch;
  if (sa.size() > 1) out_shape.push_back(m_size);
  if (sb.size() > 1) out_shape.push_back(n_size);
  std::vector<double> a = ref::read_doubles(in[0]), b = ref::read_doubles(in[1]);
  Tensor out = Tensor::empty(node.type.dtype, out_shape);
  int64_t o = 0;
  ref::for_each_index(batch, [&](const Sizes& idx) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * stride_a[d];
      ob += idx[d] * stride_b[d];
    }
    oa *= m_size * k_size;
    ob *= k_size * n_size;
    for (int64_t m = 0; m < m_size; ++m) {
      for (int64_t n = 0; n < n_size; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < k_size; ++k)
          acc += a[at(oa + m * k_size + k)] * b[at(ob + k * n_size + n)];
        ref::set_double(out, o++, acc);
      }
    }
  });
  return out;
}

// One rounding step of an f16/bf16 linear or addmm (the header comment); f32 and f64 keep the
// double until the final rounding.
double lp_step(DType t, double v) {
  return is_low_precision(t) ? ref::round_to(t, v) : v;
}

Tensor ref_linear(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Sizes& sx = in[0].shape();
  int64_t in_features = sx.back(), out_features = in[1].shape()[0];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < sx.size(); ++d) rows *= sx[d];
  std::vector<double> x = ref::read_doubles(in[0]), w = ref::read_doubles(in[1]);
  std::vector<double> bias = in.size() > 2 ? ref::read_doubles(in[2]) : std::vector<double>();
  Sizes out_shape = sx;
  out_shape.back() = out_features;
  Tensor out = Tensor::empty(node.type.dtype, out_shape);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out_features; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < in_features; ++k)
        acc += x[at(r * in_features + k)] * w[at(j * in_features + k)];
      if (!bias.empty()) acc = lp_step(node.type.dtype, acc) + bias[at(j)];
      ref::set_double(out, r * out_features + j, acc);
    }
  }
  return out;
}

Tensor ref_addmm(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  double alpha = node.attrs.get_float_or("addmm", "alpha", 1.0);
  double beta = node.attrs.get_float_or("addmm", "beta", 1.0);
  int64_t m_size = in[1].shape()[0], k_size = in[1].shape()[1], n_size = in[2].shape()[1];
  Sizes bias_stride = ref::broadcast_strides(in[0].shape(), {m_size, n_size});
  std::vector<double> bias = ref::read_doubles(in[0]);
  std::vector<double> a = ref::read_doubles(in[1]), b = ref::read_doubles(in[2]);
  Tensor out = Tensor::empty(node.type.dtype, {m_size, n_size});
  for (int64_t m = 0; m < m_size; ++m) {
    for (int64_t n = 0; n < n_size; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < k_size; ++k) acc += a[at(m * k_size + k)] * b[at(k * n_size + n)];
      // As torch.addmm: beta = 0 ignores the bias (its NaN and inf do not propagate).
      const DType t = node.type.dtype;
      double y = lp_step(t, acc);
      if (alpha != 1.0) y = lp_step(t, alpha * y);
      if (beta != 0) {
        double c = bias[at(m * bias_stride[0] + n * bias_stride[1])];
        y += beta == 1.0 ? c : lp_step(t, beta * c);
      }
      ref::set_double(out, m * n_size + n, y);
    }
  }
  return out;
}

Tensor ref_conv2d(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  Window2d p = conv2d_params(node);
  const Sizes &sx = in[0].shape(), &sw = in[1].shape();
  int64_t batch = sx[0], c_in = sx[1], h = sx[2], w = sx[3];
  int64_t c_out = sw[0], c_group = sw[1], kh = sw[2], kw = sw[3];
  p.kernel = {kh, kw};
  int64_t oh = window_output_size("conv2d", h, p, 0).const_value();
  int64_t ow = window_output_size("conv2d", w, p, 1).const_value();
  int64_t oc_group = c_out / p.groups;
  std::vector<double> x = ref::read_doubles(in[0]), wt = ref::read_doubles(in[1]);
  std::vector<double> bias = in.size() > 2 ? ref::read_doubles(in[2]) : std::vector<double>();
  Tensor out = Tensor::empty(node.type.dtype, {batch, c_out, oh, ow});
  int64_t o = 0;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < c_out; ++oc) {
      int64_t g = oc / oc_group;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t z = 0; z < ow; ++z) {
          double acc = bias.empty() ? 0.0 : bias[at(oc)];
          for (int64_t ic = 0; ic < c_group; ++ic) {
            int64_t c = g * c_group + ic;
            for (int64_t i = 0; i < kh; ++i) {
              int64_t hi = y * p.stride[0] - p.padding[0] + i * p.dilation[0];
              if (hi < 0 || hi >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                int64_t wi = z * p.stride[1] - p.padding[1] + j * p.dilation[1];
                if (wi < 0 || wi >= w) continue;
                acc += x[at(((n * c_in + c) * h + hi) * w + wi)] *
                       wt[at(((oc * c_group + ic) * kh + i) * kw + j)];
              }
            }
          }
          ref::set_double(out, o++, acc);
        }
      }
    }
  }
  return out;
}

// max_pool2d: the NaN-propagating maximum of the taps inside the input (padding never wins;
// a window with no tap inside gives -inf, or the lowest integer). avg_pool2d: the sum of the
// taps inside the input divided by torch's count: with count_include_pad, the window clipped to
// the padded input; without, the taps inside the input.
Tensor ref_pool2d(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  bool is_max = node.op_name() == "max_pool2d";
  Window2d p = pool2d_params(node);
  const Tensor& x = in[0];
  const Sizes& sx = x.shape();
  int64_t h = sx[sx.size() - 2], w = sx[sx.size() - 1];
  int64_t oh = window_output_size(node.op_name(), h, p, 0).const_value();
  int64_t ow = window_output_size(node.op_name(), w, p, 1).const_value();
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < sx.size(); ++d) planes *= sx[d];
  Sizes out_shape(sx.begin(), sx.end() - 2);
  out_shape.push_back(oh);
  out_shape.push_back(ow);
  Tensor out = Tensor::empty(node.type.dtype, out_shape);
  bool integral = !is_floating(x.dtype());
  std::vector<double> xd = integral ? std::vector<double>() : ref::read_doubles(x);
  std::vector<int64_t> xi = integral ? ref::read_ints(x) : std::vector<int64_t>();
  for (int64_t& e : xi) e = ref::order_key(x.dtype(), e);  // u64 compares unsigned
  int64_t o = 0;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t z = 0; z < ow; ++z) {
        int64_t h0 = y * p.stride[0] - p.padding[0], w0 = z * p.stride[1] - p.padding[1];
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t iacc = integral ? ref::order_key(x.dtype(), lowest_int(x.dtype())) : 0;
        int64_t inside = 0;
        for (int64_t i = 0; i < p.kernel[0]; ++i) {
          int64_t hi = h0 + i * p.dilation[0];
          if (hi < 0 || hi >= h) continue;
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            int64_t wi = w0 + j * p.dilation[1];
            if (wi < 0 || wi >= w) continue;
            size_t k = at((plane * h + hi) * w + wi);
            ++inside;
            if (integral) {
              iacc = std::max(iacc, xi[k]);
            } else if (!is_max) {
              acc += xd[k];
            } else if (std::isnan(xd[k]) || xd[k] > acc) {
              acc = xd[k];  // once NaN, nothing is greater
            }
          }
        }
        if (integral) {
          ref::set_int(out, o++, ref::order_key(x.dtype(), iacc));
          continue;
        }
        if (!is_max) {
          int64_t count = inside;
          if (p.count_include_pad) {
            int64_t h1 = std::min(h0 + p.kernel[0], h + p.padding[0]);
            int64_t w1 = std::min(w0 + p.kernel[1], w + p.padding[1]);
            count = (h1 - h0) * (w1 - w0);
          }
          acc /= static_cast<double>(count);
        }
        ref::set_double(out, o++, acc);
      }
    }
  }
  return out;
}

Tensor ref_global_avg_pool2d(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Sizes& sx = in[0].shape();
  int64_t hw = sx[sx.size() - 2] * sx[sx.size() - 1];
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < sx.size(); ++d) planes *= sx[d];
  std::vector<double> x = ref::read_doubles(in[0]);
  Sizes out_shape(sx.begin(), sx.end() - 2);
  out_shape.push_back(1);
  out_shape.push_back(1);
  Tensor out = Tensor::empty(node.type.dtype, out_shape);
  for (int64_t plane = 0; plane < planes; ++plane) {
    double acc = 0;
    for (int64_t i = 0; i < hw; ++i) acc += x[at(plane * hw + i)];
    ref::set_double(out, plane, acc / static_cast<double>(hw));
  }
  return out;
}

}  // namespace coil
