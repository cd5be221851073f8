// Lowering of max_pool2d and avg_pool2d: one Pointwise computation over the output whose element
// unrolls the window, kh * kw loads combined with maximum (max) or add (avg).
//
// A tap that can fall outside the input (in the padding, or past the end in ceil_mode) loads at
// an index clamped into the input, so that no load leaves the buffer, and is masked: max
// replaces it by -inf (the lowest integer for integer dtypes), avg by 0. Which taps can leave
// the input is decided per dim from the static sizes, so a window that always fits costs no
// comparison. avg divides by torch's count: with count_include_pad the window clipped to the
// padded input, else the taps inside the input; an index expression of the output position
// where it varies, a constant where it does not.
#include <limits>

#include "graph/type_rules.h"
#include "lower/lower_ops.h"
#include "support/check.h"

namespace coil {
namespace {

using Index = std::vector<sym::Expr>;

/// Windows are unrolled into the loop body; larger ones need a reduction loop (not yet).
constexpr int64_t kMaxTaps = 64;
/// An input whose element costs more than this (loader_cost) is stored before pooling, since
/// overlapping windows read each element several times; a load plus one op (relu, a cast) is
/// recomputed instead.
constexpr int kCheapInputCost = 2;

/// One spatial dim of a pooling window.
struct PoolAxis {
  int64_t size, out, kernel, stride, padding, dilation;

  int64_t first(int64_t tap) const { return tap * dilation - padding; }  // at output 0
  int64_t last(int64_t tap) const { return (out - 1) * stride + first(tap); }
  /// Input position of `tap` at output position `o`.
  sym::Expr position(const sym::Expr& o, int64_t tap) const {
    return o * sym::Expr(stride) + sym::Expr(first(tap));
  }
};

/// The index a tap loads (clamped into the input where it can leave it) and, in `inside`, the
/// body value saying it is in the input (-1 when it always is).
sym::Expr tap_index(LoopBody& b, const PoolAxis& a, const sym::Expr& o, int64_t tap, int* inside) {
  sym::Expr pos = a.position(o, tap), index = pos;
  *inside = -1;
  auto both = [&](int cond) {
    *inside = *inside < 0 ? cond : b.compute(LoopOp::logical_and, DType::Bool, {*inside, cond});
  };
  if (a.first(tap) < 0) {
    index = sym::max(index, 0);
    both(b.compute(LoopOp::ge, DType::Bool,
                   {b.index_expr(pos, DType::I64), b.index_expr(0, DType::I64)}));
  }
  if (a.last(tap) > a.size - 1) {
    index = sym::min(index, a.size - 1);
    both(b.compute(LoopOp::lt, DType::Bool,
                   {b.index_expr(pos, DType::I64), b.index_expr(a.size, DType::I64)}));
  }
  return index;
}

/// avg_pool2d's divisor along one dim at output position `o`: a constant when every window
/// counts `kernel` taps, else an index expression.
sym::Expr window_count(const PoolAxis& a, const sym::Expr& o, bool count_include_pad) {
  sym::Expr start = a.position(o, 0);
  int64_t last_end = a.last(0) + a.kernel;
  if (count_include_pad) {
    if (last_end <= a.size + a.padding) return a.kernel;
    return sym::min(start + sym::Expr(a.kernel), sym::Expr(a.size + a.padding)) - start;
  }
  if (a.first(0) >= 0 && last_end <= a.size) return a.kernel;
  return sym::min(start + sym::Expr(a.kernel), sym::Expr(a.size)) - sym::max(start, 0);
}

/// The value masked taps of max_pool2d take: -inf, or the dtype's lowest integer.
int lowest_value(LoopBody& b, DType t) {
  if (is_floating(t)) return b.constant(-std::numeric_limits<double>::infinity(), t);
  switch (t) {
    case DType::U8:
    case DType::U16:
    case DType::U32:
    case DType::U64:
      return b.constant(0, t);
    case DType::I16:
      return b.constant(std::numeric_limits<int16_t>::min(), t);
    case DType::I8:
      return b.constant(std::numeric_limits<int8_t>::min(), t);
    case DType::I32:
      return b.constant(std::numeric_limits<int32_t>::min(), t);
    default:
      // -2^63 is exact in double; an integer literal of it is not valid C++.
      return b.to_dtype(b.constant(-0x1p63, DType::F64), t);
  }
}

int64_t static_size(const Node& node, const sym::Expr& e) {
  auto c = e.as_const();
  COIL_ASSERT(c.has_value(), "{}: size {} is not bound before lowering", node.name,
              sym::to_string(e));
  return *c;
}

}  // namespace

TensorBox lower_pool2d(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  std::string_view op = node.op_name();
  const bool is_max = op == "max_pool2d";
  Window2d w = pool2d_params(node);
  int64_t taps = w.kernel[0] * w.kernel[1];
  COIL_SUPPORTED_CHECK(
      taps <= kMaxTaps,
      "{}: windows of more than {} elements are not supported yet (kernel [{}, {}] "
      "has {})",
      op, kMaxTaps, w.kernel[0], w.kernel[1], taps);
  TensorBox x = in[0];
  if (x.buffer < 0 && loader_cost(x) > kCheapInputCost) x = ctx.realize(x);
  const Shape& out = node.type.shape;
  const size_t r = out.size();
  std::array<PoolAxis, 2> axes;
  for (size_t d = 0; d < 2; ++d) {
    axes[d] = PoolAxis{static_size(node, x.sizes[r - 2 + d]),
                       static_size(node, out[r - 2 + d]),
                       w.kernel[d],
                       w.stride[d],
                       w.padding[d],
                       w.dilation[d]};
  }
  const DType t = node.type.dtype, ct = compute_dtype(t);
  const bool include_pad = w.count_include_pad;
  TensorBox box{
      t, out, [x, axes, is_max, include_pad, t, ct, r](LoopBody& b, const Index& idx) {
        const sym::Expr &oh = idx[r - 2], &ow = idx[r - 1];
        std::vector<sym::Expr> rows, cols;
        std::vector<int> row_in, col_in;
        for (int64_t i = 0; i < axes[0].kernel; ++i) {
          int c;
          rows.push_back(tap_index(b, axes[0], oh, i, &c));
          row_in.push_back(c);
        }
        for (int64_t j = 0; j < axes[1].kernel; ++j) {
          int c;
          cols.push_back(tap_index(b, axes[1], ow, j, &c));
          col_in.push_back(c);
        }
        int acc = -1;
        for (size_t i = 0; i < rows.size(); ++i) {
          for (size_t j = 0; j < cols.size(); ++j) {
            Index src = idx;
            src[r - 2] = rows[i];
            src[r - 1] = cols[j];
            int v = x.load(b, src);
            int inside = row_in[i] < 0 ? col_in[j]
                         : col_in[j] < 0
                             ? row_in[i]
                             : b.compute(LoopOp::logical_and, DType::Bool, {row_in[i], col_in[j]});
            if (inside >= 0) {
              int fill = is_max ? lowest_value(b, t) : b.constant(0, t);
              v = b.compute(LoopOp::where, ct, {inside, v, fill});
            }
            acc = acc < 0 ? v : b.compute(is_max ? LoopOp::maximum : LoopOp::add, ct, {acc, v});
          }
        }
        if (is_max) return acc;
        sym::Expr count =
            window_count(axes[0], oh, include_pad) * window_count(axes[1], ow, include_pad);
        int divisor = count.is_const() ? b.constant(static_cast<double>(count.const_value()), t)
                                       : b.to_dtype(b.index_expr(count, DType::I64), t);
        return b.compute(LoopOp::div, ct, {acc, divisor});
      }};
  return ctx.realize(box);
}

}  // namespace coil
