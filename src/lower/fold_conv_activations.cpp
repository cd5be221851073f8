// fold_conv_activations: a conv2d call absorbs the activation that is its output's only reader
// (silu: x * sigmoid(x), relu; on coil's depthwise and direct kernels also clamp), so that the
// call applies it to each output block while the block is in cache (oneDNN's eltwise post-op,
// or the epilogue of kernels/coil_depthwise.h or coil_direct_conv.h) and the conv writes the
// activation's buffer directly. Without it every convolution of a CNN is followed by a pointwise
// kernel that reads and writes the whole activation once more (efficientnet_b0: 48 `x * sigmoid(x)`
// kernels after its convolutions), plus its parallel region.
//
// The loop IR of the pattern, as lowering leaves it:
//   Extern buf7 ranges [N, OC, OH, OW] conv2d          (stores buf7 at the flat index)
//   Pointwise buf8 ranges [N, OC, OH, OW]
//     tmp0 = load(buf7, idx); tmp1 = sigmoid(tmp0); tmp2 = mul(tmp0, tmp1);
//     tmp3 = store(buf8, idx, tmp2)
// becomes one Extern that stores buf8 with activation silu; buf7 is left unused.
//
// Not a clamp (relu6) into a oneDNN call: oneDNN 2.6's relu and clip post-ops turn a NaN into 0
// where torch and the reference keep it (the NaN test of fold_conv_activations_test.cpp showed
// it), a silent wrong answer for a model whose input has a NaN; silu keeps the NaN. relu folds
// into oneDNN as elu with alpha 0 then 1 * y + 0, which keeps the NaN and gives +0 for y <= 0
// (kernels/extern/extern_kernels.cpp); relu6 has no exact NaN-keeping post-op chain. coil's
// depthwise and direct (stem) kernels compute relu and clamp with coil_vec.h's NaN-propagating
// maximum and minimum, in the operand order the pointwise body has, so both fold there.
//
// Only where the conv's output is read by nothing else, the reader's loops and index are the
// conv's own, and the reader's buffer has the conv's layout (a contiguous NCHW f32 output is
// what the library writes). CPU only: the GPU's convolution (torch through cuDNN) has no such
// post-op here, and its pointwise consumer becomes a Triton kernel that may fuse more.

#include <algorithm>
#include <optional>

#include "lower/lowering.h"
#include "support/log.h"

namespace coil {

namespace {

using Activation = Conv2dSpec::Activation;
using Folded = ConvActivation;

}  // namespace

const sym::Expr& store_index(const ComputedBuffer& c) {
  return c.body.ops().back().index;
}

std::optional<ConvActivation> conv_activation_of(const LoopBody& body, int in,
                                                 const sym::Expr& index, bool clamps) {
  const auto& ops = body.ops();
  auto is_input = [&](int i) {
    const BodyOp& op = ops[static_cast<size_t>(i)];
    return op.op == LoopOp::load && op.buffer == in && op.args[0] < 0 && op.index == index &&
           op.dtype == DType::F32;
  };
  auto stores = [&](int value) {
    const BodyOp& st = ops.back();
    return st.op == LoopOp::store && st.index == index && st.args[0] == value;
  };
  if (ops.size() == 4 && is_input(0) && ops[1].op == LoopOp::sigmoid && ops[1].args[0] == 0 &&
      ops[1].dtype == DType::F32 && ops[2].op == LoopOp::mul && ops[2].dtype == DType::F32 &&
      std::minmax(ops[2].args[0], ops[2].args[1]) == std::minmax(0, 1) && stores(2))
    return Folded{Activation::silu};
  if (ops.size() == 3 && is_input(0) && ops[1].op == LoopOp::relu && ops[1].args[0] == 0 &&
      ops[1].dtype == DType::F32 && stores(1))
    return Folded{Activation::relu};
  if (!clamps) return std::nullopt;
  auto f32_constant = [&](int i) {
    const BodyOp& op = ops[static_cast<size_t>(i)];
    return op.op == LoopOp::constant && op.dtype == DType::F32;
  };
  // load, constant lo, maximum(lo, x), constant hi, minimum(hi, .), store
  if (ops.size() == 6 && is_input(0) && f32_constant(1) && ops[2].op == LoopOp::maximum &&
      ops[2].dtype == DType::F32 && ops[2].args[0] == 1 && ops[2].args[1] == 0 && f32_constant(3) &&
      ops[4].op == LoopOp::minimum && ops[4].dtype == DType::F32 && ops[4].args[0] == 3 &&
      ops[4].args[1] == 2 && stores(4) && ops[1].fvalue <= ops[3].fvalue)
    return Folded{Activation::clamp, ops[1].fvalue, ops[3].fvalue};
  return std::nullopt;
}

void drop_unused_buffers(IrProgram& p) {
  std::vector<bool> used(p.buffers.size(), false);
  for (const Buffer& b : p.buffers)
    used[static_cast<size_t>(b.id)] = b.kind != BufferKind::Intermediate;
  for (const ComputedBuffer& c : p.computations) {
    used[static_cast<size_t>(c.buffer)] = true;
    for (int b : c.reads()) used[static_cast<size_t>(b)] = true;
  }
  if (std::all_of(used.begin(), used.end(), [](bool u) { return u; })) return;
  std::vector<int> id(p.buffers.size(), -1);
  std::vector<Buffer> kept;
  for (Buffer& b : p.buffers) {
    if (!used[static_cast<size_t>(b.id)]) continue;
    id[static_cast<size_t>(b.id)] = static_cast<int>(kept.size());
    b.id = static_cast<int>(kept.size());
    kept.push_back(std::move(b));
  }
  p.buffers = std::move(kept);
  auto to = [&](int& b) {
    if (b >= 0) b = id[static_cast<size_t>(b)];
  };
  for (ComputedBuffer& c : p.computations) {
    to(c.buffer);
    LoopBody body;
    for (BodyOp op : c.body.ops()) {
      to(op.buffer);
      body.append(std::move(op));
    }
    c.body = std::move(body);
    if (c.matmul) {
      auto m = std::make_shared<MatmulSpec>(*c.matmul);
      to(m->a.buffer);
      to(m->b.buffer);
      c.matmul = m;
    }
    if (c.conv) {
      auto v = std::make_shared<Conv2dSpec>(*c.conv);
      to(v->x);
      to(v->w);
      to(v->bias);
      if (v->expand) {
        to(v->expand->w);
        to(v->expand->bias);
      }
      c.conv = v;
    }
  }
  for (auto* list : {&p.input_buffers, &p.constant_buffers, &p.output_buffers})
    for (int& b : *list) to(b);
}

void fold_conv_activations(IrProgram& program) {
  auto& comps = program.computations;
  std::vector<bool> removed(comps.size(), false);
  // Each buffer's readers, once: a fold removes a reader that read only its conv's output,
  // so the other convs' reader lists stay right.
  std::vector<std::vector<size_t>> readers_of(program.buffers.size());
  for (size_t j = 0; j < comps.size(); ++j)
    for (int b : comps[j].reads()) readers_of[static_cast<size_t>(b)].push_back(j);
  for (size_t ci = 0; ci < comps.size(); ++ci) {
    ComputedBuffer& conv = comps[ci];
    if (conv.kind != LoopKind::Extern || !conv.conv || conv.conv->activation != Activation::none)
      continue;
    const int out = conv.buffer;
    if (program.buffer(out).kind != BufferKind::Intermediate) continue;
    const std::vector<size_t>& readers = readers_of[static_cast<size_t>(out)];
    if (readers.size() != 1) continue;
    ComputedBuffer& act = comps[readers[0]];
    if (act.kind != LoopKind::Pointwise || act.ranges != conv.ranges) continue;
    const Layout& from = program.buffer(out).layout;
    const Layout& to = program.buffer(act.buffer).layout;
    if (to.dtype != from.dtype || to.sizes != from.sizes || to.strides != from.strides) continue;
    const std::optional<Folded> a =
        conv_activation_of(act.body, out, store_index(conv), runs_on_coil_conv(*conv.conv));
    if (!a) continue;

    auto spec = std::make_shared<Conv2dSpec>(*conv.conv);
    spec->activation = a->activation;
    spec->clamp_min = a->lo;
    spec->clamp_max = a->hi;
    conv.conv = spec;
    // The conv's body: its operand loads, then the store, now into the activation's buffer.
    LoopBody body;
    for (BodyOp op : conv.body.ops()) {
      if (op.op == LoopOp::store) op.buffer = act.buffer;
      body.append(std::move(op));
    }
    conv.body = std::move(body);
    COIL_LOG(fusion, "fold {} into the conv2d call of {} ({} {})", program.buffer(act.buffer).name,
             program.buffer(out).name, activation_name(a->activation),
             runs_on_coil_depthwise(*spec) ? "in coil's depthwise kernel"
             : runs_on_coil_direct(*spec)  ? "in coil's direct kernel"
                                           : "as a oneDNN post-op");
    conv.buffer = act.buffer;
    conv.origins.insert(conv.origins.end(), act.origins.begin(), act.origins.end());
    conv.origin_names = describe_origins(conv.origins);
    removed[readers[0]] = true;
  }
  std::vector<ComputedBuffer> kept;
  for (size_t i = 0; i < comps.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(comps[i]));
  comps = std::move(kept);
  drop_unused_buffers(program);
}

}  // namespace coil
