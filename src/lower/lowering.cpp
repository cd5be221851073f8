#include "lower/lowering.h"

#include <algorithm>
#include <iterator>

#include "graph/op_registry.h"
#include "ir/loop_extents.h"
#include "lower/lower_ops.h"
#include "lower/op_lowering.h"
#include "support/check.h"
#include "support/log.h"

namespace coil {

static std::vector<sym::Expr> loop_vars(size_t n, sym::Expr (*make)(int)) {
  std::vector<sym::Expr> v;
  for (size_t i = 0; i < n; ++i) v.push_back(make(static_cast<int>(i)));
  return v;
}

TensorBox LowerContext::buffer_box(int buffer_id) const {
  const Buffer& b = program.buffer(buffer_id);
  TensorBox box;
  box.dtype = b.layout.dtype;
  box.sizes = b.layout.sizes;
  box.buffer = buffer_id;
  Layout layout = b.layout;
  box.load = [buffer_id, layout](LoopBody& body, const std::vector<sym::Expr>& idx) {
    return body.load(buffer_id, layout.offset_of(idx), compute_dtype(layout.dtype));
  };
  return box;
}

static Origin origin_of(const Graph& g, int id, bool inlined) {
  const Node& n = g.node(id);
  Origin o;
  o.node = id;
  o.name = n.name;
  o.op = std::string(n.op_name());
  o.composite = n.composite;
  o.composite_node = n.composite_node;
  o.inlined = inlined;
  o.data_movement = n.op->kind == OpKind::Source || n.op->kind == OpKind::View;
  return o;
}

/// Sorted union of two node lists.
static std::vector<int> merge_nodes(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

TensorBox LowerContext::realize(const TensorBox& box, BufferKind kind, int external_index) {
  if (box.buffer >= 0 && kind == BufferKind::Intermediate) return box;
  int id = program.add_buffer(kind, contiguous_layout(box.dtype, box.sizes), external_index);
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Pointwise;
  c.ranges = box.sizes;
  auto idx = loop_vars(box.sizes.size(), loop_var);
  int v = box.load(c.body, idx);
  c.body.store(id, program.buffer(id).layout.offset_of(idx), v);
  // A copy of a stored value computes only the node being lowered.
  add_computation(std::move(c), box.buffer >= 0 ? origins : box.nodes);
  // What is stored now is read from memory by the node's other computations, not inlined.
  std::vector<int> rest;
  std::set_difference(inlined.begin(), inlined.end(), box.nodes.begin(), box.nodes.end(),
                      std::back_inserter(rest));
  inlined = std::move(rest);
  return buffer_box(id);
}

void LowerContext::add_computation(ComputedBuffer c) {
  add_computation(std::move(c), {});
}

void LowerContext::add_computation(ComputedBuffer c, const std::vector<int>& nodes) {
  std::vector<int> computed = origins, producers = inlined;
  if (!nodes.empty()) {
    computed = {nodes.back()};
    producers.assign(nodes.begin(), nodes.end() - 1);
  }
  for (int id : computed) c.origins.push_back(origin_of(graph, id, false));
  for (int id : producers)
    if (std::find(computed.begin(), computed.end(), id) == computed.end())
      c.origins.push_back(origin_of(graph, id, true));
  std::stable_sort(c.origins.begin(), c.origins.end(),
                   [](const Origin& a, const Origin& b) { return a.node < b.node; });
  c.origin_names = describe_origins(c.origins);
  program.computations.push_back(std::move(c));
}

TensorBox LowerContext::reduce(const TensorBox& input, const std::vector<int64_t>& axes,
                               ReductionType type, DType result_dtype, const Shape& out_shape) {
  int id = program.add_buffer(BufferKind::Intermediate, contiguous_layout(result_dtype, out_shape));
  ComputedBuffer c;
  c.buffer = id;
  c.kind = LoopKind::Reduction;
  // Kept dims become x vars, reduced dims r vars, both in input order.
  std::vector<sym::Expr> in_idx(input.sizes.size()), kept_vars;
  int nx = 0, nr = 0;
  for (size_t d = 0; d < input.sizes.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (reduced) {
      in_idx[d] = reduction_var(nr++);
      c.reduction_ranges.push_back(input.sizes[d]);
    } else {
      in_idx[d] = loop_var(nx++);
      kept_vars.push_back(in_idx[d]);
      c.ranges.push_back(input.sizes[d]);
    }
  }
  // The output index: kept vars in order, 0 for keepdim's size-1 dims.
  std::vector<sym::Expr> out_idx;
  size_t k = 0;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    bool is_kept = k < kept_vars.size() &&
                   (out_shape.size() == kept_vars.size() ||
                    std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end());
    out_idx.push_back(is_kept ? kept_vars[k++] : sym::Expr(0));
  }
  COIL_ASSERT(k == kept_vars.size(), "reduction output {} does not match kept dims",
              shape_str(out_shape));
  int v = input.load(c.body, in_idx);
  DType acc = compute_dtype(result_dtype);
  if (type == ReductionType::sum || type == ReductionType::prod) v = c.body.to_dtype(v, acc);
  int r = c.body.reduction(type, v, acc);
  c.body.store(id, program.buffer(id).layout.offset_of(out_idx), r);
  // The reduction node is computed; the producers inlined are the input's.
  std::vector<int> saved = inlined;
  if (input.buffer < 0 && !input.nodes.empty()) inlined = input.nodes;
  add_computation(std::move(c));
  inlined = std::move(saved);
  return buffer_box(id);
}

static bool is_cheap(const Node& n) {
  return n.op->kind == OpKind::Source || n.op->kind == OpKind::View;
}

int loader_cost(const TensorBox& box) {
  LoopBody scratch;
  std::vector<sym::Expr> idx;
  for (size_t i = 0; i < box.sizes.size(); ++i) idx.push_back(loop_var(static_cast<int>(i)));
  box.load(scratch, idx);
  int cost = 0;
  for (const BodyOp& op : scratch.ops()) {
    if (is_transcendental(op.op))
      cost += kTranscendentalCost;
    else if (op.op != LoopOp::constant)
      cost += 1;
  }
  return cost;
}

/// Whether a value with `readers` consumers is stored rather than recomputed by each.
static bool should_realize(const Node& node, const TensorBox& box, int readers,
                           const LowerOptions& o) {
  if (box.buffer >= 0 || is_cheap(node)) return false;
  if (o.realize_all) return true;
  if (readers <= 1) return false;
  return readers > kRealizeReadsThreshold || loader_cost(box) > kRealizeCostThreshold;
}

/// A reshape (keeping the last dim) of a computed value only the reshape reads and that costs
/// more than a few ops (kRealizeCostThreshold: cheap values gain nothing, and a cheap one
/// fused beside an output's copy kept that copy from being dropped), when the reshape must be
/// stored (a matmul operand, or a value with several readers): the value is
/// stored in its own shape instead and the reshape is a view of that buffer. The stored
/// computation then has its producers' loops and fuses with them: a layer norm's output
/// [B, T, D] is written by the layer norm's own kernel, where stored as the reshape [B*T, D] it
/// was a kernel of its own that read the input and the statistics again (loops of another
/// shape share no outer loop: fusion.cpp). Returns whether it did.
static bool store_before_reshape(LowerContext& ctx, const Graph& g, std::vector<TensorBox>& boxes,
                                 const std::vector<int>& uses, int r, TensorBox& view) {
  const Node& rn = g.node(r);
  const std::string_view op = rn.op_name();
  if (op != "reshape" && op != "flatten" && op != "unsqueeze" && op != "squeeze") return false;
  const int s = rn.inputs[0];
  TensorBox& source = boxes[static_cast<size_t>(s)];
  if (view.buffer >= 0 || source.buffer >= 0 || uses[static_cast<size_t>(s)] != 1 ||
      g.node(s).op->kind != OpKind::Elementwise || loader_cost(source) <= kRealizeCostThreshold ||
      source.sizes.empty() || view.sizes.empty() || !(source.sizes.back() == view.sizes.back()))
    return false;
  source = ctx.realize(source);
  TensorBox viewed = find_lowering(op)->lower(ctx, rn, {source});
  viewed.dtype = rn.type.dtype;
  viewed.inline_depth = 1;
  viewed.nodes = {r};
  view = viewed;
  return true;
}

IrProgram lower_graph(const Graph& g, const LowerOptions& options) {
  LowerContext ctx{g, options, {}, {}, {}};
  std::vector<TensorBox> boxes(static_cast<size_t>(g.num_nodes()));
  std::vector<int> uses = g.use_counts();
  // First output of each node: realized directly into that output buffer.
  std::vector<int> output_of(static_cast<size_t>(g.num_nodes()), -1);
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    int n = g.outputs()[k].node;
    if (output_of[static_cast<size_t>(n)] < 0)
      output_of[static_cast<size_t>(n)] = static_cast<int>(k);
  }
  std::vector<int> out_buffer(g.outputs().size(), -1);

  for (const auto& node_ptr : g.nodes()) {
    const Node& node = *node_ptr;
    ctx.origins = {node.id};
    ctx.inlined.clear();
    TensorBox box;
    if (node.op->name == "input") {
      int k = static_cast<int>(ctx.program.input_buffers.size());
      int id = ctx.program.add_buffer(BufferKind::Input,
                                      contiguous_layout(node.type.dtype, node.type.shape), k);
      ctx.program.input_buffers.push_back(id);
      box = ctx.buffer_box(id);
    } else if (node.op->name == "constant") {
      int k = static_cast<int>(ctx.program.constant_buffers.size());
      int id = ctx.program.add_buffer(BufferKind::Constant,
                                      contiguous_layout(node.type.dtype, node.type.shape), k);
      ctx.program.constant_buffers.push_back(id);
      ctx.program.constants.push_back(node.data);
      box = ctx.buffer_box(id);
    } else {
      const OpLowering* lowering = find_lowering(node.op_name());
      COIL_ASSERT(lowering != nullptr,
                  "op {} has no lowering (composites must be decomposed first)", node.op->name);
      // A conv2d stores an input that is not a buffer (conv2d's lowering would): stored here,
      // in the node's shared box, so that the input's other readers read that buffer rather
      // than recompute it from its own inputs (Inductor realizes the shared StorageBox). A
      // residual block's output relu(a + b), read by the next block's conv and its add, was
      // recomputed by the add from a and b, which then both stayed stored.
      if (node.op->name == "conv2d" && !node.inputs.empty()) {
        TensorBox& x = boxes[static_cast<size_t>(node.inputs[0])];
        bool empty = false;
        for (const sym::Expr& d : x.sizes) empty = empty || (d.is_const() && d.const_value() == 0);
        if (x.buffer < 0 && x.dtype == DType::F32 && !empty) x = ctx.realize(x);
      }
      // An attention node's operands that its kernel cannot read in place are stored in their
      // shared boxes too: the forward and its logsumexp, or dK and dV, read the same buffers
      // (and so share a kernel) and the operand is computed once.
      store_attention_operands(ctx, node, boxes);
      if (node.op->name == "matmul" || node.op->name == "bmm")
        for (int i : node.inputs)
          store_before_reshape(ctx, g, boxes, uses, i, boxes[static_cast<size_t>(i)]);
      std::vector<TensorBox> in;
      int depth = 0;
      for (int i : node.inputs) {
        TensorBox& b = boxes[static_cast<size_t>(i)];
        if (b.buffer < 0 && b.inline_depth >= kMaxInlineChain) b = ctx.realize(b);
        in.push_back(b);
        if (b.buffer < 0) depth = std::max(depth, b.inline_depth);
        if (b.buffer < 0) ctx.inlined = merge_nodes(ctx.inlined, b.nodes);
      }
      box = lowering->lower(ctx, node, in);
      box.inline_depth = box.buffer >= 0 ? 0 : depth + 1;
      box.nodes.clear();
      if (box.buffer < 0 && node.op->kind != OpKind::Source) {
        box.nodes = ctx.inlined;
        box.nodes.push_back(node.id);  // after its inputs' nodes: ids are in graph order
      }
      COIL_ASSERT(box.sizes == node.type.shape, "{} lowered to sizes {}, inferred {}", node.name,
                  shape_str(box.sizes), shape_str(node.type.shape));
      box.dtype = node.type.dtype;
    }
    int out_k = output_of[static_cast<size_t>(node.id)];
    if (out_k >= 0 && node.op->kind != OpKind::Source) {
      // A buffer this node just created (a reduction) becomes the output buffer itself;
      // anything else is computed into the output buffer.
      if (box.buffer >= 0 && ctx.program.buffer(box.buffer).kind == BufferKind::Intermediate &&
          !ctx.program.computations.empty() &&
          ctx.program.computations.back().buffer == box.buffer &&
          ctx.program.buffer(box.buffer).layout.sizes == node.type.shape) {
        Buffer& b = ctx.program.buffers[static_cast<size_t>(box.buffer)];
        b.kind = BufferKind::Output;
        b.external_index = out_k;
        b.name = fmt::format("out{}", out_k);
      } else {
        box = ctx.realize(box, BufferKind::Output, out_k);
      }
      out_buffer[static_cast<size_t>(out_k)] = box.buffer;
    } else if (should_realize(node, box, uses[static_cast<size_t>(node.id)], options)) {
      if (!store_before_reshape(ctx, g, boxes, uses, node.id, box)) box = ctx.realize(box);
    }
    boxes[static_cast<size_t>(node.id)] = box;
  }
  // Outputs not yet written: a second name for the same node, or an input/constant/full.
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    if (out_buffer[k] >= 0) continue;
    ctx.origins = {g.outputs()[k].node};
    ctx.inlined.clear();
    TensorBox b = boxes[static_cast<size_t>(g.outputs()[k].node)];
    out_buffer[k] = ctx.realize(b, BufferKind::Output, static_cast<int>(k)).buffer;
  }
  ctx.program.output_buffers = out_buffer;
  auto after = [&](std::string_view pass) {
    if (options.after_pass) options.after_pass(pass, ctx.program);
  };
  after("lower");
  simplify_indices(ctx.program);
  after("simplify_indices");
  elide_store_rounding(ctx.program);
  after("elide_store_rounding");
  COIL_LOG(ir, "loop IR:\n{}", to_string(ctx.program));
  return std::move(ctx.program);
}

void simplify_indices(IrProgram& program) {
  for (ComputedBuffer& c : program.computations) {
    sym::Analyzer a = loop_analyzer(c.ranges, c.reduction_ranges);
    LoopBody simplified;
    // Rebuild the body with simplified indices (CSE may merge loads that became equal).
    std::vector<int> remap;
    for (const BodyOp& op0 : c.body.ops()) {
      BodyOp op = op0;
      for (int& a2 : op.args)
        if (a2 >= 0) a2 = remap[static_cast<size_t>(a2)];
      if (is_indirect_load(op)) {
        // The indirect index is unknown, but within [0, size) (clamped in generated code).
        sym::Analyzer ai = a;
        ai.bind(indirect_var(), 0, c.body.op(op0.args[0]).ivalue - 1);
        op.index = ai.simplify(op.index);
      } else if (op.index.defined()) {
        op.index = a.simplify(op.index);
      }
      int id = simplified.append(std::move(op));
      remap.push_back(id);
    }
    c.body = std::move(simplified);
  }
}

static bool rounds_to(const BodyOp& op, DType storage) {
  return (op.op == LoopOp::round_to_bf16 && storage == DType::BF16) ||
         (op.op == LoopOp::round_to_f16 && storage == DType::F16);
}

void elide_store_rounding(IrProgram& program) {
  for (ComputedBuffer& c : program.computations) {
    std::vector<BodyOp> ops = c.body.ops();
    bool changed = false;
    for (BodyOp& op : ops) {
      if (op.op != LoopOp::store) continue;
      const BodyOp& value = ops[static_cast<size_t>(op.args[0])];
      if (!rounds_to(value, program.buffer(op.buffer).layout.dtype)) continue;
      op.args[0] = value.args[0];
      changed = true;
    }
    if (!changed) continue;
    // Keep what a store or reduction (the effects) still reaches.
    std::vector<bool> live(ops.size(), false);
    for (size_t i = ops.size(); i-- > 0;) {
      if (ops[i].op == LoopOp::store || ops[i].op == LoopOp::reduction) live[i] = true;
      if (!live[i]) continue;
      for (int a : ops[i].args)
        if (a >= 0) live[static_cast<size_t>(a)] = true;
    }
    LoopBody body;
    std::vector<int> remap(ops.size(), -1);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!live[i]) continue;
      BodyOp op = ops[i];
      for (int& a : op.args)
        if (a >= 0) a = remap[static_cast<size_t>(a)];
      remap[i] = body.append(std::move(op));
    }
    c.body = std::move(body);
  }
}

}  // namespace coil
