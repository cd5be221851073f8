// Lowering of index_add (torch.index_add, what an embedding's gradient becomes): an Extern
// computation (ir.h IndexAddSpec) over contiguous operands seen as x [outer, n, inner],
// index [k] and src [outer, k, inner]. The loop IR has no store at a computed position, so
// the backends print it themselves: the C++ backend as loops that add the rows in order j
// (each thread its range of result rows: deterministic at any thread count), the Triton backend
// as torch.index_add (atomic adds). An x that is one value everywhere (the zeros a gradient
// starts from) is not stored: the kernel fills the result instead.
#include <optional>

#include <fmt/format.h>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "ir/loop_extents.h"
#include "lower/lower_ops.h"
#include "support/check.h"
#include "support/log.h"
#include "sym/analyzer.h"

namespace coil {
namespace {

/// The buffer whose elements, in order, are `box`'s: the box's own buffer, or the contiguous
/// buffer a view of it reads in order (a reshape of the token ids or of the gradient rows);
/// else a stored copy.
int contiguous_operand(LowerContext& ctx, const TensorBox& box) {
  std::vector<sym::Expr> idx;
  for (size_t i = 0; i < box.sizes.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  LoopBody scratch;
  box.load(scratch, idx);
  if (scratch.ops().size() == 1 && scratch.op(0).op == LoopOp::load) {
    const BodyOp& ld = scratch.op(0);
    const Layout& l = ctx.program.buffer(ld.buffer).layout;
    sym::Analyzer a;
    const std::vector<int64_t> extents = static_extents(box.sizes);
    for (size_t i = 0; i < idx.size(); ++i) a.bind_loop_var(idx[i], extents[i]);
    const sym::Expr in_order = contiguous_layout(box.dtype, box.sizes).offset_of(idx);
    if (l.dtype == box.dtype && l.strides == contiguous_layout(l.dtype, l.sizes).strides &&
        product(static_extents(l.sizes)) == product(extents) &&
        a.statically_known_equal(a.simplify(ld.index), a.simplify(in_order)))
      return ld.buffer;
  }
  TensorBox copy = box;
  copy.buffer = -1;  // a loader of the buffer's elements: stored again, contiguously
  return ctx.realize(copy).buffer;
}

/// x's value when it is one value everywhere: a `full` of x's dtype, seen through views that
/// keep every element equal to it (expand, reshape, ...).
std::optional<double> uniform_value(const Graph& g, int id, DType dtype) {
  for (;;) {
    const Node& n = g.node(id);
    const std::string_view op = n.op_name();
    if (op == "full")
      return n.type.dtype == dtype ? std::optional<double>(n.attrs.get_float("full", "value"))
                                   : std::nullopt;
    if (op != "expand" && op != "reshape" && op != "unsqueeze" && op != "squeeze" &&
        op != "flatten" && op != "permute" && op != "transpose")
      return std::nullopt;
    id = n.inputs[0];
  }
}

}  // namespace

TensorBox lower_index_add(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  const DType dtype = node.type.dtype;
  const std::vector<int64_t> xs = static_extents(in[0].sizes);
  const auto axis = static_cast<size_t>(normalize_axis(
      "index_add", node.attrs.get_int_or("index_add", "axis", 0), static_cast<int64_t>(xs.size())));
  auto spec = std::make_shared<IndexAddSpec>();
  spec->dtype = dtype;
  for (size_t d = 0; d < axis; ++d) spec->outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) spec->inner *= xs[d];
  spec->n = xs[axis];
  spec->k = static_extents(in[1].sizes)[0];
  if (auto fill = uniform_value(ctx.graph, node.inputs[0], dtype)) {
    spec->fill = *fill;
  } else {
    spec->x = contiguous_operand(ctx, in[0]);
  }
  spec->index = contiguous_operand(ctx, in[1]);
  spec->src = contiguous_operand(ctx, in[2]);
  spec->site = static_cast<int>(ctx.program.run_checks.size());
  ctx.program.run_checks.push_back(
      {RunCheck::Kind::index_in_range,
       fmt::format("{} (node {}), dim {}", node.op_name(), node.name, axis)});

  const Shape& out_shape = node.type.shape;
  const int id =
      ctx.program.add_buffer(BufferKind::Intermediate, contiguous_layout(dtype, out_shape));
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Extern;
  c.ranges = out_shape;
  c.index_add = spec;
  // The body only names the operands (read whole by the kernel) and the result.
  int v = -1;
  for (int b : {spec->x, spec->index, spec->src}) {
    if (b < 0) continue;
    int l = c.body.load(b, sym::Expr(0), compute_dtype(ctx.program.buffer(b).layout.dtype));
    if (v < 0 || b == spec->src) v = l;
  }
  std::vector<sym::Expr> idx;
  for (size_t i = 0; i < out_shape.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  c.body.store(id, ctx.program.buffer(id).layout.offset_of(idx), v);
  COIL_LOG(ir, "index_add {}: outer={} n={} k={} inner={}{}", node.name, spec->outer, spec->n,
           spec->k, spec->inner, spec->x < 0 ? fmt::format(" x=fill({})", spec->fill) : "");
  ctx.add_computation(std::move(c));
  return ctx.buffer_box(id);
}

}  // namespace coil
