// Lowering of matmul/bmm and conv2d.
//
// matmul (f32, bf16) becomes a Template computation (ir.h MatmulSpec): the C++ backend prints it
// with the CppMatmulKernel template, and pointwise consumers fuse into it as its epilogue.
// Operands are read in place through their strides when they are views of a buffer (x.t(),
// W^T of linear), and stored first otherwise. f16 operands are computed as f32 and rounded
// once; f64 has no template and becomes a plain reduction over k (exact enough, slow).
//
// conv2d (f32; f16/bf16 through f32) becomes an Extern computation (ir.h Conv2dSpec) that calls
// oneDNN; f64 is refused.
#include <numeric>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "ir/loop_extents.h"
#include "lower/lower_ops.h"
#include "support/check.h"
#include "support/log.h"
#include "sym/size_hints.h"

namespace coil {

using Index = std::vector<sym::Expr>;

namespace {

// Static sizes, or their values at the size hints of a size-generic compile: the specs of
// templates and library calls hold numbers (sym/size_hints.h says why that is safe).
std::vector<int64_t> sizes_of(const Shape& s) {
  return static_extents(s);
}

/// The element of `box` that a broadcast batched access reads: `batch` are the output batch
/// vars (right-aligned with the box's batch dims; size-1 dims read index 0), then `row`, `col`.
Index operand_index(const TensorBox& box, const Index& batch, const sym::Expr& row,
                    const sym::Expr& col) {
  size_t rank = box.sizes.size(), nb = rank - 2;
  Index idx(rank);
  for (size_t d = 0; d < nb; ++d) {
    const sym::Expr& v = batch[batch.size() - nb + d];
    idx[d] = box.sizes[d] == sym::Expr(1) ? sym::Expr(0) : v;
  }
  idx[nb] = row;
  idx[nb + 1] = col;
  return idx;
}

}  // namespace

std::optional<StridedOperand> as_strided(const TensorBox& box, size_t n_batch,
                                         const std::vector<int64_t>& batch_sizes) {
  Index batch;
  for (size_t i = 0; i < n_batch; ++i) batch.push_back(loop_var(static_cast<int>(i)));
  sym::Expr row = loop_var(static_cast<int>(n_batch)),
            col = loop_var(static_cast<int>(n_batch + 1));
  LoopBody scratch;
  box.load(scratch, operand_index(box, batch, row, col));
  if (scratch.ops().size() != 1 || scratch.op(0).op != LoopOp::load) return std::nullopt;
  const BodyOp& ld = scratch.op(0);
  sym::Analyzer a;
  std::vector<sym::Expr> vars = batch;
  vars.push_back(row);
  vars.push_back(col);
  std::vector<int64_t> extents = batch_sizes;
  auto rows = sym::hint(box.sizes[box.sizes.size() - 2]),
       cols = sym::hint(box.sizes[box.sizes.size() - 1]);
  extents.push_back(rows.value_or(1));
  extents.push_back(cols.value_or(1));
  for (size_t i = 0; i < vars.size(); ++i) a.bind_loop_var(vars[i], extents[i]);
  StridedOperand op;
  op.buffer = ld.buffer;
  std::map<sym::Expr, sym::Expr> zero;
  for (const auto& v : vars) zero[v] = 0;
  // Offset and strides may be symbolic in a size-generic compile: the spec holds their values
  // at the size hints.
  const sym::Expr offset_expr = a.simplify(sym::substitute(ld.index, zero));
  auto offset = sym::hint(offset_expr);
  if (!offset) return std::nullopt;
  op.offset = *offset;
  std::vector<int64_t> strides;
  std::vector<sym::Expr> stride_exprs;
  for (size_t i = 0; i < vars.size(); ++i) {
    auto s = a.linear_stride(ld.index, vars[i]);
    auto stride = s ? sym::hint(*s) : std::nullopt;
    if (!stride) return std::nullopt;
    strides.push_back(extents[i] == 1 ? 0 : *stride);
    stride_exprs.push_back(extents[i] == 1 ? sym::Expr(0) : *s);
  }
  // The index must be exactly offset + sum(var * stride) (no div/mod left over).
  sym::Expr rebuilt = offset_expr;
  for (size_t i = 0; i < vars.size(); ++i) rebuilt = rebuilt + vars[i] * stride_exprs[i];
  if (!a.statically_known_equal(a.simplify(ld.index), a.simplify(rebuilt))) {
    // Size-1 dims may hide a var from the index: compare with those vars dropped.
    std::map<sym::Expr, sym::Expr> drop;
    for (size_t i = 0; i < vars.size(); ++i)
      if (extents[i] == 1) drop[vars[i]] = 0;
    if (!a.statically_known_equal(a.simplify(sym::substitute(ld.index, drop)),
                                  a.simplify(sym::substitute(rebuilt, drop))))
      return std::nullopt;
  }
  op.batch_strides.assign(strides.begin(), strides.begin() + static_cast<long>(n_batch));
  op.row_stride = strides[n_batch];
  op.col_stride = strides[n_batch + 1];
  return op;
}

namespace {

/// A strided operand for `box`, storing it first when it is not a view of a buffer of `dtype`.
StridedOperand strided_operand(LowerContext& ctx, const TensorBox& box, size_t n_batch,
                               const std::vector<int64_t>& batch_sizes, DType dtype) {
  if (box.buffer < 0 || ctx.program.buffer(box.buffer).layout.dtype == dtype) {
    auto op = as_strided(box, n_batch, batch_sizes);
    if (op && ctx.program.buffer(op->buffer).layout.dtype == dtype) return *op;
  }
  TensorBox stored = ctx.realize(box.dtype == dtype ? box : cast_box(box, dtype));
  auto op = as_strided(stored, n_batch, batch_sizes);
  COIL_ASSERT(op.has_value(), "a stored matmul operand is not strided");
  return *op;
}

/// The product as a reduction over k: out[b.., i, j] = sum_k a[b.., i, k] * b[b.., k, j].
TensorBox matmul_reduction(LowerContext& ctx, const TensorBox& a, const TensorBox& b,
                           const Shape& out_full, DType dtype) {
  size_t nb = out_full.size() - 2;
  TensorBox prod;
  prod.dtype = dtype;
  prod.sizes = out_full;
  prod.sizes.push_back(a.sizes.back());
  prod.load = [a, b, nb, dtype](LoopBody& body, const Index& idx) {
    Index batch(idx.begin(), idx.begin() + static_cast<long>(nb));
    int va = a.load(body, operand_index(a, batch, idx[nb], idx[nb + 2]));
    int vb = b.load(body, operand_index(b, batch, idx[nb + 2], idx[nb + 1]));
    return body.compute(LoopOp::mul, compute_dtype(dtype), {va, vb});
  };
  return ctx.reduce(prod, {static_cast<int64_t>(out_full.size())}, ReductionType::sum, dtype,
                    out_full);
}

/// Reads `full` (the [*batch, M, N] product) as the node's shape, which lacks the M or N dim
/// of a 1-D operand.
TensorBox squeeze_to(const TensorBox& full, const Shape& node_shape, bool drop_m, bool drop_n) {
  if (!drop_m && !drop_n) return full;
  TensorBox out = full;
  out.sizes = node_shape;
  out.buffer = -1;
  out.load = [full, drop_m, drop_n](LoopBody& body, const Index& idx) {
    Index f = idx;
    size_t rank = full.sizes.size();
    if (drop_n) f.push_back(sym::Expr(0));
    if (drop_m) f.insert(f.begin() + static_cast<long>(rank - 2), sym::Expr(0));
    return full.load(body, f);
  };
  return out;
}

/// Reads a 1-D box as a matrix: [K] -> [1, K] (as_row) or [K, 1].
TensorBox as_matrix(const TensorBox& v, bool as_row) {
  TensorBox out = v;
  out.sizes = as_row ? Shape{sym::Expr(1), v.sizes[0]} : Shape{v.sizes[0], sym::Expr(1)};
  out.buffer = -1;
  out.load = [v, as_row](LoopBody& body, const Index& idx) {
    return v.load(body, {as_row ? idx[1] : idx[0]});
  };
  return out;
}

}  // namespace

// A box of `dtype` reading `box` converted (f16 operands of a template are computed in f32;
// a conv2d's f32 result read as bf16). A conversion to f16/bf16 rounds, then computes in f32:
// every reader sees the value the graph's dtype holds, as if it had been stored.
TensorBox cast_box(const TensorBox& box, DType dtype) {
  TensorBox out = box;
  out.dtype = dtype;
  out.buffer = -1;
  out.load = [box, dtype](LoopBody& body, const Index& idx) {
    return body.stored_value(box.load(body, idx), dtype);
  };
  return out;
}

TensorBox lower_matmul(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  TensorBox a = in[0], b = in[1];
  bool drop_m = a.sizes.size() == 1, drop_n = b.sizes.size() == 1;
  if (drop_m) a = as_matrix(a, true);
  if (drop_n) b = as_matrix(b, false);
  // The full output: broadcast batch dims, then M, N.
  size_t nb = std::max(a.sizes.size(), b.sizes.size()) - 2;
  Shape out_full;
  for (size_t d = 0; d < nb; ++d) {
    auto dim = [&](const TensorBox& t) -> sym::Expr {
      size_t tb = t.sizes.size() - 2;
      return d + tb >= nb ? t.sizes[d + tb - nb] : sym::Expr(1);
    };
    out_full.push_back(dim(a) == sym::Expr(1) ? dim(b) : dim(a));
  }
  out_full.push_back(a.sizes[a.sizes.size() - 2]);
  out_full.push_back(b.sizes.back());
  DType dtype = node.type.dtype;
  // An empty product (a zero batch, M, N or K) is a plain reduction: nothing to compute, or a
  // sum over nothing (zeros). The template and the library GEMMs assume every extent >= 1 (a
  // [0, 33, 4] @ [4, 28] product ran as one batch of 33 rows into an empty buffer).
  int64_t out_elements = 1;
  for (int64_t s : sizes_of(out_full)) out_elements *= s;
  const bool empty = out_elements == 0 || sizes_of(a.sizes).back() == 0;
  if (dtype == DType::F64 || empty)
    return squeeze_to(matmul_reduction(ctx, a, b, out_full, dtype), node.type.shape, drop_m,
                      drop_n);

  // The template reads f32 or bf16 operands; f16 goes through f32.
  DType operand_dtype = dtype == DType::BF16 ? DType::BF16 : DType::F32;
  std::vector<int64_t> full = sizes_of(out_full);
  std::vector<int64_t> batch(full.begin(), full.begin() + static_cast<long>(nb));
  // Operands with fewer dims than the output broadcast over the missing leading batch dims.
  auto pad = [&](const TensorBox& t) {
    if (t.sizes.size() == nb + 2) return t;
    TensorBox p = t;
    size_t missing = nb + 2 - t.sizes.size();
    p.sizes.insert(p.sizes.begin(), missing, sym::Expr(1));
    p.buffer = -1;
    p.load = [t, missing](LoopBody& body, const Index& idx) {
      return t.load(body, Index(idx.begin() + static_cast<long>(missing), idx.end()));
    };
    return p;
  };
  auto spec = std::make_shared<MatmulSpec>();
  spec->a = strided_operand(ctx, pad(a), nb, batch, operand_dtype);
  spec->b = strided_operand(ctx, pad(b), nb, batch, operand_dtype);
  spec->m = full[nb];
  spec->n = full[nb + 1];
  spec->k = sizes_of(a.sizes).back();
  spec->dtype = operand_dtype;
  spec->batch = batch;
  // Fold trailing batch dims that B broadcasts over into M when A's rows continue across them
  // (x[B, S, D] @ W[D, E]: one [B*S, D] product, so the weight is packed and reused once).
  while (!spec->batch.empty() && spec->b.batch_strides.back() == 0 &&
         spec->a.batch_strides.back() == spec->a.row_stride * spec->m) {
    spec->m *= spec->batch.back();
    spec->batch.pop_back();
    spec->a.batch_strides.pop_back();
    spec->b.batch_strides.pop_back();
  }

  DType out_dtype = dtype == DType::F16 ? DType::F32 : dtype;
  int id = ctx.program.add_buffer(BufferKind::Intermediate, contiguous_layout(out_dtype, out_full));
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Template;
  c.ranges = out_full;
  c.matmul = spec;
  // The body only names the operands (read whole by the template) and the result.
  int va = c.body.load(spec->a.buffer, sym::Expr(0), compute_dtype(operand_dtype));
  c.body.load(spec->b.buffer, sym::Expr(0), compute_dtype(operand_dtype));
  Index idx;
  for (size_t i = 0; i < out_full.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  c.body.store(id, ctx.program.buffer(id).layout.offset_of(idx), va);
  COIL_LOG(ir, "matmul {}: batch [{}] m={} n={} k={}, a strides {}x{}, b strides {}x{}", node.name,
           fmt::join(spec->batch, ", "), spec->m, spec->n, spec->k, spec->a.row_stride,
           spec->a.col_stride, spec->b.row_stride, spec->b.col_stride);
  ctx.add_computation(std::move(c));
  TensorBox result = ctx.buffer_box(id);
  if (out_dtype != dtype) result = cast_box(result, dtype);
  return squeeze_to(result, node.type.shape, drop_m, drop_n);
}

TensorBox lower_conv2d(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  DType dtype = node.type.dtype;
  COIL_SUPPORTED_CHECK(dtype != DType::F64,
                       "conv2d: dtype f64 is not supported (oneDNN computes in f32)");
  auto contiguous_f32 = [&](const TensorBox& box) -> int {
    TensorBox t = box.dtype == DType::F32 ? box : cast_box(box, DType::F32);
    if (t.buffer >= 0 && ctx.program.buffer(t.buffer).layout.dtype == DType::F32) return t.buffer;
    return ctx.realize(t).buffer;
  };
  // With an empty input or weight (N, C, H, W, OC, KH or KW of 0) every window sums nothing:
  // the output is the bias (or zeros), and oneDNN refuses such sizes ("sizes must be
  // positive"), as the GEMMs assumed every extent >= 1 before empty matmuls became reductions.
  bool empty = false;
  for (const TensorBox* t : {&in[0], &in[1]})
    for (int64_t v : sizes_of(t->sizes)) empty = empty || v == 0;
  if (empty) {
    TensorBox bias = in.size() > 2 ? in[2] : TensorBox{};
    const bool has_bias = in.size() > 2;
    return TensorBox{dtype, node.type.shape,
                     [bias, has_bias, dtype](LoopBody& b, const std::vector<sym::Expr>& idx) {
                       return has_bias ? b.to_dtype(bias.load(b, {idx[1]}), dtype)
                                       : b.constant(0.0, dtype);
                     }};
  }
  auto spec = std::make_shared<Conv2dSpec>();
  spec->x = contiguous_f32(in[0]);
  spec->w = contiguous_f32(in[1]);
  spec->bias = in.size() > 2 ? contiguous_f32(in[2]) : -1;
  spec->weights_constant = ctx.program.buffer(spec->w).kind == BufferKind::Constant;
  auto xs = sizes_of(in[0].sizes), ws = sizes_of(in[1].sizes);
  spec->n = xs[0];
  spec->c = xs[1];
  spec->h = xs[2];
  spec->wd = xs[3];
  spec->oc = ws[0];
  spec->kh = ws[2];
  spec->kw = ws[3];
  // Symmetric padding: ONNX's asymmetric pads arrive as an explicit pad before the conv.
  Window2d win = conv2d_params(node);
  spec->stride = win.stride;
  spec->dilation = win.dilation;
  spec->padding = {win.padding[0], win.padding[1], win.padding[0], win.padding[1]};
  spec->groups = win.groups;

  Shape out_shape = node.type.shape;
  int id =
      ctx.program.add_buffer(BufferKind::Intermediate, contiguous_layout(DType::F32, out_shape));
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Extern;
  c.ranges = out_shape;
  c.conv = spec;
  int vx = c.body.load(spec->x, sym::Expr(0), DType::F32);
  c.body.load(spec->w, sym::Expr(0), DType::F32);
  if (spec->bias >= 0) c.body.load(spec->bias, sym::Expr(0), DType::F32);
  Index idx;
  for (size_t i = 0; i < out_shape.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  c.body.store(id, ctx.program.buffer(id).layout.offset_of(idx), vx);
  ctx.add_computation(std::move(c));
  TensorBox result = ctx.buffer_box(id);
  return dtype == DType::F32 ? result : cast_box(result, dtype);
}

}  // namespace coil
