// Lowering of attention on the CPU: an Extern computation (ir.h AttentionSpec) that the C++
// backend prints as a call of coil::attention::forward (kernels/coil_attention.h), the blocked
// flash kernel. q, k and v are read in their dtype (f32, bf16, f16; f64 attention never gets
// here: decompose_and_bind writes it out) through (batch, head, row) strides with contiguous
// rows: buffers and views of them (heads sliced out of a qkv projection) in place, computed
// operands stored first. The mask is stored in its
// own (unbroadcast) shape, bool or converted to f32, and read through broadcast strides.
#include <cmath>

#include "graph/op_registry.h"
#include "ir/loop_extents.h"
#include "lower/lower_ops.h"
#include "support/check.h"
#include "support/log.h"

namespace coil {
namespace {

using Index = std::vector<sym::Expr>;

// Static sizes, or their values at the size hints of a size-generic compile (sym/size_hints.h).
std::vector<int64_t> static_sizes_of(const Shape& s) {
  return static_extents(s);
}

/// `box` [B, H, T, D] in `dtype` as (buffer, offset, batch/head/row strides) with contiguous
/// rows: a view of a buffer read in place (the heads of a qkv projection), else a stored copy.
void strided_operand(LowerContext& ctx, const TensorBox& box, DType dtype, int& buffer,
                     int64_t& offset, std::array<int64_t, 3>& strides) {
  const std::vector<int64_t> sizes = static_sizes_of(box.sizes);
  if (box.buffer < 0 || ctx.program.buffer(box.buffer).layout.dtype == dtype) {
    std::optional<StridedOperand> op = as_strided(box, 2, {sizes[0], sizes[1]});
    if (op && ctx.program.buffer(op->buffer).layout.dtype == dtype &&
        (op->col_stride == 1 || sizes[3] <= 1)) {
      buffer = op->buffer;
      offset = op->offset;
      strides = {op->batch_strides[0], op->batch_strides[1], op->row_stride};
      return;
    }
  }
  buffer = ctx.realize(box.dtype == dtype ? box : cast_box(box, dtype)).buffer;
  offset = 0;
  strides = {sizes[1] * sizes[2] * sizes[3], sizes[2] * sizes[3], sizes[3]};
}

/// The buffer holding `box` contiguously in `dtype`: the box's own buffer, else a stored copy.
int contiguous_buffer(LowerContext& ctx, const TensorBox& box, DType dtype) {
  if (box.buffer >= 0 && ctx.program.buffer(box.buffer).layout.dtype == dtype) return box.buffer;
  return ctx.realize(box.dtype == dtype ? box : cast_box(box, dtype)).buffer;
}

}  // namespace

TensorBox lower_attention(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  const DType dtype = node.type.dtype;
  COIL_ASSERT(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
              "attention {}: dtype {} reaches the kernel (f64 is decomposed)", node.name,
              dtype_name(dtype));
  auto spec = std::make_shared<AttentionSpec>();
  spec->dtype = dtype;
  strided_operand(ctx, in[0], dtype, spec->q, spec->q_offset, spec->q_strides);
  strided_operand(ctx, in[1], dtype, spec->k, spec->k_offset, spec->k_strides);
  strided_operand(ctx, in[2], dtype, spec->v, spec->v_offset, spec->v_strides);
  const auto qs = static_sizes_of(in[0].sizes), ks = static_sizes_of(in[1].sizes),
             vs = static_sizes_of(in[2].sizes);
  spec->batch = qs[0];
  spec->heads = qs[1];
  spec->q_len = qs[2];
  spec->head_dim = qs[3];
  spec->kv_heads = ks[1];
  spec->kv_len = ks[2];
  spec->value_dim = vs[3];
  spec->scale = node.attrs.get_float_or("attention", "scale",
                                        1.0 / std::sqrt(static_cast<double>(spec->head_dim)));
  spec->causal = node.attrs.get_bool_or("attention", "causal", false);
  if (in.size() > 3) {
    const TensorBox& mask = in[3];
    spec->bool_mask = mask.dtype == DType::Bool;
    spec->mask = contiguous_buffer(ctx, mask, spec->bool_mask ? DType::Bool : DType::F32);
    // Contiguous strides of the mask's own shape, right-aligned to [B, H, Tq, Tk]; 0 where it
    // broadcasts (size 1 or a missing leading dim).
    const auto ms = static_sizes_of(mask.sizes);
    int64_t stride = 1;
    for (size_t d = ms.size(); d-- > 0;) {
      spec->mask_strides[d + 4 - ms.size()] = ms[d] == 1 ? 0 : stride;
      stride *= ms[d];
    }
  }
  const Shape& out_shape = node.type.shape;
  int id = ctx.program.add_buffer(BufferKind::Intermediate, contiguous_layout(dtype, out_shape));
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Extern;
  c.ranges = out_shape;
  c.attention = spec;
  // The body only names the operands (read whole by the kernel) and the result.
  int vq = c.body.load(spec->q, sym::Expr(0), compute_dtype(dtype));
  c.body.load(spec->k, sym::Expr(0), compute_dtype(dtype));
  c.body.load(spec->v, sym::Expr(0), compute_dtype(dtype));
  if (spec->mask >= 0) {
    DType mt = ctx.program.buffer(spec->mask).layout.dtype;
    c.body.load(spec->mask, sym::Expr(0), compute_dtype(mt));
  }
  Index idx;
  for (size_t i = 0; i < out_shape.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  c.body.store(id, ctx.program.buffer(id).layout.offset_of(idx), vq);
  COIL_LOG(ir, "attention {}: B={} H={}/{} Tq={} Tk={} D={} Dv={}{}{}", node.name, spec->batch,
           spec->heads, spec->kv_heads, spec->q_len, spec->kv_len, spec->head_dim, spec->value_dim,
           spec->causal ? " causal" : "", spec->mask >= 0 ? " masked" : "");
  ctx.add_computation(std::move(c));
  return ctx.buffer_box(id);
}

}  // namespace coil
