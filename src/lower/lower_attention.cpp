// Lowering of attention and its backward ops (attention_lse, attention_grad) on the CPU: an
// Extern computation (ir.h AttentionSpec) that the C++ backend prints as a call of
// coil::attention::forward, logsumexp or backward (kernels/coil_attention.h), the blocked
// flash kernels. q, k and v are read in their dtype (f32, bf16, f16; f64 attention never gets
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

/// `box` [B, H, T, D] as a strided view of a buffer of `dtype` with contiguous rows, if it is one.
std::optional<StridedOperand> in_place_view(const LowerContext& ctx, const TensorBox& box,
                                            DType dtype) {
  const std::vector<int64_t> sizes = static_sizes_of(box.sizes);
  if (box.buffer >= 0 && ctx.program.buffer(box.buffer).layout.dtype != dtype) return std::nullopt;
  std::optional<StridedOperand> op = as_strided(box, 2, {sizes[0], sizes[1]});
  if (op && ctx.program.buffer(op->buffer).layout.dtype == dtype &&
      (op->col_stride == 1 || sizes[3] <= 1))
    return op;
  return std::nullopt;
}

/// `box` (graph node `node`'s value) stored in `dtype`, once for every attention node that reads
/// it so (LowerContext::attention_operands).
int stored_operand(LowerContext& ctx, int node, const TensorBox& box, DType dtype) {
  const auto key = std::make_pair(node, dtype);
  auto it = ctx.attention_operands.find(key);
  if (it != ctx.attention_operands.end()) return it->second;
  const int buffer = ctx.realize(box.dtype == dtype ? box : cast_box(box, dtype)).buffer;
  ctx.attention_operands.emplace(key, buffer);
  return buffer;
}

/// `box` [B, H, T, D] (graph node `node`'s value) in `dtype` as (buffer, offset,
/// batch/head/row strides) with contiguous rows: a view of a buffer read in place (the heads of
/// a qkv projection), else a stored copy.
void strided_operand(LowerContext& ctx, int node, const TensorBox& box, DType dtype, int& buffer,
                     int64_t& offset, std::array<int64_t, 3>& strides) {
  const std::vector<int64_t> sizes = static_sizes_of(box.sizes);
  if (std::optional<StridedOperand> op = in_place_view(ctx, box, dtype)) {
    buffer = op->buffer;
    offset = op->offset;
    strides = {op->batch_strides[0], op->batch_strides[1], op->row_stride};
    return;
  }
  buffer = stored_operand(ctx, node, box, dtype);
  offset = 0;
  strides = {sizes[1] * sizes[2] * sizes[3], sizes[2] * sizes[3], sizes[3]};
}

/// The buffer holding `box` (graph node `node`'s value) contiguously in `dtype`: the box's own
/// buffer, else a stored copy.
int contiguous_buffer(LowerContext& ctx, int node, const TensorBox& box, DType dtype) {
  if (box.buffer >= 0 && ctx.program.buffer(box.buffer).layout.dtype == dtype) return box.buffer;
  return stored_operand(ctx, node, box, dtype);
}

}  // namespace

namespace {

/// The kernel a node of attention, attention_lse or attention_grad calls.
AttentionKernel kernel_of(const Node& node) {
  if (node.op->name == "attention") return AttentionKernel::forward;
  if (node.op->name == "attention_lse") return AttentionKernel::logsumexp;
  const std::string wrt = node.attrs.get_string("attention_grad", "wrt");
  return wrt == "q"   ? AttentionKernel::grad_q
         : wrt == "k" ? AttentionKernel::grad_k
                      : AttentionKernel::grad_v;
}

/// The mask input (stored in its own shape, bool or f32) and its broadcast strides.
void set_mask(LowerContext& ctx, int node, const TensorBox& mask, AttentionSpec& spec) {
  spec.bool_mask = mask.dtype == DType::Bool;
  spec.mask = contiguous_buffer(ctx, node, mask, spec.bool_mask ? DType::Bool : DType::F32);
  // Contiguous strides of the mask's own shape, right-aligned to [B, H, Tq, Tk]; 0 where it
  // broadcasts (size 1 or a missing leading dim).
  const auto ms = static_sizes_of(mask.sizes);
  int64_t stride = 1;
  for (size_t d = ms.size(); d-- > 0;) {
    spec.mask_strides[d + 4 - ms.size()] = ms[d] == 1 ? 0 : stride;
    stride *= ms[d];
  }
}

}  // namespace

void store_attention_operands(LowerContext& ctx, const Node& node, std::vector<TensorBox>& boxes) {
  const std::string op(node.op->name);
  if ((op != "attention" && op != "attention_lse" && op != "attention_grad") ||
      node.inputs.size() < 2)
    return;
  const DType dtype = boxes[static_cast<size_t>(node.inputs[0])].dtype;
  const bool grad = op == "attention_grad";
  const size_t mask_at = op == "attention_lse" ? 2 : grad ? 6 : 3;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    TensorBox& x = boxes[static_cast<size_t>(node.inputs[i])];
    if (x.buffer >= 0) continue;  // a buffer already (or read through one)
    bool empty = false;
    for (const sym::Expr& d : x.sizes) empty = empty || (d.is_const() && d.const_value() == 0);
    if (empty) continue;
    // What the lowering below reads: q, k, v (and out, grad_out) in q's dtype, lse in f32, a
    // bool or f32 mask; anything else it converts per reader anyway.
    const DType want = i == mask_at     ? (x.dtype == DType::Bool ? DType::Bool : DType::F32)
                       : grad && i == 5 ? DType::F32
                                        : dtype;
    if (x.dtype != want) continue;
    if (i < 3 && i != mask_at && x.sizes.size() == 4 && in_place_view(ctx, x, want)) continue;
    x = ctx.realize(x);
  }
}

// attention, attention_lse and attention_grad: one Extern each (the inputs are q, k[, v, out,
// grad_out, lse][, mask]).
TensorBox lower_attention(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  const DType dtype = in[0].dtype;
  COIL_ASSERT(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
              "{} {}: dtype {} reaches the kernel (f64 is decomposed)", node.op->name, node.name,
              dtype_name(dtype));
  auto spec = std::make_shared<AttentionSpec>();
  spec->kernel = kernel_of(node);
  const bool lse_only = spec->kernel == AttentionKernel::logsumexp;
  const bool grad = !lse_only && spec->kernel != AttentionKernel::forward;
  const std::string op(node.op->name);
  spec->dtype = dtype;
  const auto& from = node.inputs;  // the graph nodes of `in`
  strided_operand(ctx, from[0], in[0], dtype, spec->q, spec->q_offset, spec->q_strides);
  strided_operand(ctx, from[1], in[1], dtype, spec->k, spec->k_offset, spec->k_strides);
  const auto qs = static_sizes_of(in[0].sizes), ks = static_sizes_of(in[1].sizes);
  spec->batch = qs[0];
  spec->heads = qs[1];
  spec->q_len = qs[2];
  spec->head_dim = qs[3];
  spec->kv_heads = ks[1];
  spec->kv_len = ks[2];
  if (!lse_only) {
    strided_operand(ctx, from[2], in[2], dtype, spec->v, spec->v_offset, spec->v_strides);
    spec->value_dim = static_sizes_of(in[2].sizes)[3];
  }
  if (grad) {
    spec->out = contiguous_buffer(ctx, from[3], in[3], dtype);
    spec->grad_out = contiguous_buffer(ctx, from[4], in[4], dtype);
    spec->lse = contiguous_buffer(ctx, from[5], in[5], DType::F32);
  }
  spec->scale =
      node.attrs.get_float_or(op, "scale", 1.0 / std::sqrt(static_cast<double>(spec->head_dim)));
  spec->causal = node.attrs.get_bool_or(op, "causal", false);
  const size_t mask_at = lse_only ? 2 : grad ? 6 : 3;
  if (in.size() > mask_at) set_mask(ctx, from[mask_at], in[mask_at], *spec);
  const Shape& out_shape = node.type.shape;
  const DType out_dtype = lse_only ? DType::F32 : dtype;
  int id =
      ctx.program.add_buffer(BufferKind::Intermediate, contiguous_layout(out_dtype, out_shape));
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Extern;
  c.ranges = out_shape;
  c.attention = spec;
  // The body only names the operands (read whole by the kernel) and the result.
  int first = -1;
  for (int buffer : {spec->q, spec->k, spec->v, spec->out, spec->grad_out, spec->lse, spec->mask}) {
    if (buffer < 0) continue;
    int v =
        c.body.load(buffer, sym::Expr(0), compute_dtype(ctx.program.buffer(buffer).layout.dtype));
    if (first < 0) first = v;
  }
  Index idx;
  for (size_t i = 0; i < out_shape.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  c.body.store(id, ctx.program.buffer(id).layout.offset_of(idx), first);
  COIL_LOG(ir, "{} {}: B={} H={}/{} Tq={} Tk={} D={} Dv={}{}{}", op, node.name, spec->batch,
           spec->heads, spec->kv_heads, spec->q_len, spec->kv_len, spec->head_dim, spec->value_dim,
           spec->causal ? " causal" : "", spec->mask >= 0 ? " masked" : "");
  ctx.add_computation(std::move(c));
  return ctx.buffer_box(id);
}

}  // namespace coil
