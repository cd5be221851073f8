// convs_as_matmuls: a 1x1 convolution (no padding, one group, f32) is a matrix product over
// NCHW tensors, y[n] = W[OC, C] @ x[n][C, H*W] (+ bias[OC] per row; with a stride, x's pixels
// x[n, c, sh * i, sw * j] gathered into a contiguous [N, C, OH, OW] first), so it runs
// as coil's matmul template instead of a oneDNN call, and what follows it (bias, relu, clamp,
// silu, a residual add) fuses into the template's epilogue, computed by coil's own code.
//
// Why: oneDNN's fast convolutions want blocked or channels-last activations, so every call of
// the extern conv2d reorders its NCHW input and output around the primitive (efficientnet_b0 at
// one thread: about 7.5 ms of reorders against 10.5 ms of convolutions, ONEDNN_VERBOSE), and
// nothing fuses into an extern call: relu and relu6 cannot be oneDNN post-ops at all (they
// turn a NaN into 0, lower/fold_conv_activations.cpp), so each is one more pass over the
// activation. The template reads NCHW in place (the weight is A, the activation B) and writes
// NCHW; its epilogue keeps NaN as the reference does.
//
// The IR of the pattern, as lowering leaves it:
//   Extern bufY ranges [N, OC, H, W] conv2d(bufX, bufW, bufB)
//   Pointwise bufZ ranges [N, OC, H, W]   (reads bufY at its element: clamp, add, ...)
// becomes
//   Template bufT ranges [N, OC, H*W] matmul(A = bufW as [OC, C], B = bufX as [N][C, H*W])
//   Pointwise bufY ranges [N, OC, H*W]   bufY = bufT + bufB[oc] (a copy without bias)
//   Pointwise bufZ ranges [N, OC, H*W]   its H and W loops merged into one
// The template's epilogue takes computations over its own loops that read its values at the
// element they store (sched/fusion.cpp, try_epilogue), so bufY's readers get their H and W
// loops merged (exact: x2 -> x2 // W, x3 -> x2 % W, then simplified) where that makes them read
// bufY at the element the bias computation stores; others are left as they are.
//
// A conv input that is a per-channel scale of another buffer, x = X * g(n, c) (efficientnet's
// squeeze-and-excitation `x * sigmoid(se)`), read by nothing else, is folded into the weights
// when they are the smaller tensor (OC < H * W): the template multiplies X by
// W'[n] = W * g(n, .) and the scale pass over the whole activation disappears (scaled_weights).
//
// CPU only (run by the pipeline, like fold_conv_activations): the GPU keeps its cuDNN call.

#include <array>
#include <map>

#include "ir/loop_extents.h"
#include "lower/lowering.h"
#include "support/log.h"

namespace coil {

namespace {

/// Whether the conv computes a plain matrix product over NCHW tensors: a 1x1 conv with no
/// padding, of any stride (a strided one over the pixels it reads, gathered first).
bool is_matmul_conv(const IrProgram& p, const ComputedBuffer& c) {
  if (c.kind != LoopKind::Extern || !c.conv) return false;
  const Conv2dSpec& s = *c.conv;
  if (s.kh != 1 || s.kw != 1 || s.stride[0] < 1 || s.stride[1] < 1 || s.groups != 1 ||
      s.padding != std::array<int64_t, 4>{0, 0, 0, 0} ||
      s.activation != Conv2dSpec::Activation::none)
    return false;
  // A strided one with few input channels stays a conv (coil's direct kernel takes up to 4):
  // a product with K < 8 would pay the gather for a handful of multiply-adds per output.
  if (s.stride != std::array<int64_t, 2>{1, 1} && s.c < 8) return false;
  for (int b : {s.x, s.w, s.bias})
    if (b >= 0 && p.buffer(b).layout.dtype != DType::F32) return false;
  return p.buffer(c.buffer).layout.dtype == DType::F32;
}

/// The element (x0, x1, x2) of a contiguous [N, OC, HW], simplified as simplify_indices
/// leaves every index (a loop of extent 1 drops out): readers are compared with it as written.
sym::Expr flat_index(int64_t n, int64_t oc, int64_t hw) {
  const sym::Analyzer a = loop_analyzer(std::vector<int64_t>{n, oc, hw}, std::vector<int64_t>{});
  return a.simplify(loop_var(0) * sym::Expr(oc * hw) + loop_var(1) * sym::Expr(hw) + loop_var(2));
}

/// A conv input x = X * g(n, c) (squeeze-and-excitation's channel scale, efficientnet's
/// `x * sigmoid(se)`), whose only reader is the 1x1 conv, folded into the weights instead:
/// W @ (X * g) = (W * g^T) @ X, with W'[n, oc, c] = W[oc, c] * g(n, c) a small pointwise
/// computation of N * OC * C elements, where the scale pass reads and writes all N * C * H * W
/// (the conv then reads X itself). Only where OC < H * W, so that W' is the smaller: late
/// blocks with 7x7 images and many output channels keep the scale pass.
struct ScaledWeights {
  ComputedBuffer compute;  // writes `buffer`
  int buffer = -1;
  int x = -1;         // X, the conv's operand instead of x
  size_t scale_pass;  // the computation it replaces (program.computations index)
};

/// `scale` (the writer of conv `c`'s input) as ScaledWeights, or nullopt when its body is not
/// mul(load X at its own element, g) with g free of the H and W loops.
std::optional<ScaledWeights> scaled_weights(IrProgram& p, const ComputedBuffer& c,
                                            const ComputedBuffer& scale, size_t scale_index) {
  const Conv2dSpec& s = *c.conv;
  if (scale.kind != LoopKind::Pointwise || s.oc >= s.h * s.wd) return std::nullopt;
  const std::vector<sym::Expr> dims{sym::Expr(s.n), sym::Expr(s.c), sym::Expr(s.h),
                                    sym::Expr(s.wd)};
  if (scale.ranges != dims) return std::nullopt;
  const auto& ops = scale.body.ops();
  const int last = static_cast<int>(ops.size()) - 1;
  if (last < 2 || ops[static_cast<size_t>(last)].op != LoopOp::store ||
      ops[static_cast<size_t>(last)].args[0] != last - 1)
    return std::nullopt;
  const BodyOp& mul = ops[static_cast<size_t>(last - 1)];
  const sym::Expr& index = ops[static_cast<size_t>(last)].index;
  if (mul.op != LoopOp::mul || mul.dtype != DType::F32) return std::nullopt;
  // Which factor is X: a load at the stored element, of a contiguous f32 [N, C, H, W] buffer.
  auto is_x = [&](int i) {
    const BodyOp& op = ops[static_cast<size_t>(i)];
    if (op.op != LoopOp::load || is_indirect_load(op) || op.index != index ||
        op.dtype != DType::F32)
      return false;
    const Layout& l = p.buffer(op.buffer).layout;
    const Layout want = contiguous_layout(DType::F32, dims);
    return l.dtype == DType::F32 && l.sizes == want.sizes && l.strides == want.strides;
  };
  const int ix = is_x(mul.args[0]) ? mul.args[0] : is_x(mul.args[1]) ? mul.args[1] : -1;
  const int ig = ix == mul.args[0] ? mul.args[1] : mul.args[0];
  if (ix < 0 || ig == ix) return std::nullopt;
  // g: every other op, none reading X's value or the H and W loops.
  for (int i = 0; i < last - 1; ++i) {
    if (i == ix) continue;
    const BodyOp& op = ops[static_cast<size_t>(i)];
    if (is_indirect_load(op) || op.op == LoopOp::store) return std::nullopt;
    for (int a : op.args)
      if (a == ix) return std::nullopt;
    if (op.index.defined() &&
        (sym::depends_on(op.index, loop_var(2)) || sym::depends_on(op.index, loop_var(3))))
      return std::nullopt;
  }
  // W'[n, oc, c] over loops (x0, x1, x2) = (n, oc, c): g's loop x1 (its channel) becomes x2.
  ScaledWeights out;
  out.x = ops[static_cast<size_t>(ix)].buffer;
  out.scale_pass = scale_index;
  const std::vector<sym::Expr> ranges{sym::Expr(s.n), sym::Expr(s.oc), sym::Expr(s.c)};
  out.buffer = p.add_buffer(BufferKind::Intermediate, contiguous_layout(DType::F32, ranges));
  const sym::Expr ch = sym::make_symbol("coil_scaled_channel");
  const std::map<sym::Expr, sym::Expr> move{{loop_var(1), ch}};
  const std::map<sym::Expr, sym::Expr> rename{{ch, loop_var(2)}};
  const sym::Analyzer a = loop_analyzer(ranges, {});
  ComputedBuffer& w = out.compute;
  w.buffer = out.buffer;
  w.kind = LoopKind::Pointwise;
  w.ranges = ranges;
  w.origins = scale.origins;
  w.origin_names = scale.origin_names;
  std::vector<int> remap(ops.size(), -1);
  for (int i = 0; i < last - 1; ++i) {
    if (i == ix) continue;
    BodyOp op = ops[static_cast<size_t>(i)];
    for (int& arg : op.args)
      if (arg >= 0) arg = remap[static_cast<size_t>(arg)];
    if (op.index.defined())
      op.index = a.simplify(sym::substitute(sym::substitute(op.index, move), rename));
    remap[static_cast<size_t>(i)] = w.body.append(std::move(op));
  }
  const int wv =
      w.body.load(s.w, a.simplify(loop_var(1) * sym::Expr(s.c) + loop_var(2)), DType::F32);
  const int scaled = w.body.compute(LoopOp::mul, DType::F32, {wv, remap[static_cast<size_t>(ig)]});
  w.body.store(
      out.buffer,
      a.simplify(loop_var(0) * sym::Expr(s.oc * s.c) + loop_var(1) * sym::Expr(s.c) + loop_var(2)),
      scaled);
  return out;
}

/// The conv's output rows and columns, as its computation's ranges [N, OC, OH, OW] say.
std::array<int64_t, 2> output_hw(const ComputedBuffer& c) {
  return {c.ranges[2].const_value(), c.ranges[3].const_value()};
}

/// The pixels a strided 1x1 conv reads, x[n, c, sh * i, sw * j], gathered into a contiguous
/// [N, C, OH, OW] buffer (a pointwise computation: a stride-2 row is two vector loads and a
/// deinterleave), which the matmul then reads as [C, OH * OW] per image: resnet's downsample
/// convs (stride 2) ran on oneDNN at 1/3 of the template's speed with a reorder each way.
ComputedBuffer gathered_pixels(IrProgram& p, const ComputedBuffer& c, int* buffer) {
  const Conv2dSpec& s = *c.conv;
  const auto [oh, ow] = output_hw(c);
  const std::vector<sym::Expr> ranges{sym::Expr(s.n), sym::Expr(s.c), sym::Expr(oh), sym::Expr(ow)};
  *buffer = p.add_buffer(BufferKind::Intermediate, contiguous_layout(DType::F32, ranges));
  const sym::Analyzer a = loop_analyzer(std::vector<int64_t>{s.n, s.c, oh, ow}, {});
  ComputedBuffer g;
  g.buffer = *buffer;
  g.kind = LoopKind::Pointwise;
  g.ranges = ranges;
  const sym::Expr read = a.simplify(
      loop_var(0) * sym::Expr(s.c * s.h * s.wd) + loop_var(1) * sym::Expr(s.h * s.wd) +
      loop_var(2) * sym::Expr(s.stride[0] * s.wd) + loop_var(3) * sym::Expr(s.stride[1]));
  const sym::Expr write =
      a.simplify(loop_var(0) * sym::Expr(s.c * oh * ow) + loop_var(1) * sym::Expr(oh * ow) +
                 loop_var(2) * sym::Expr(ow) + loop_var(3));
  g.body.store(*buffer, write, g.body.load(s.x, read, DType::F32));
  return g;
}

/// The template and the bias (or copy) computation that replace conv `c` (after `scaled`'s
/// weights computation, or a strided conv's gathered pixels, when there is one).
std::vector<ComputedBuffer> as_matmul(IrProgram& p, const ComputedBuffer& c,
                                      std::optional<ScaledWeights> scaled) {
  const Conv2dSpec& s = *c.conv;
  const bool strided = s.stride != std::array<int64_t, 2>{1, 1};
  const int64_t hw = output_hw(c)[0] * output_hw(c)[1];
  const std::vector<sym::Expr> ranges{sym::Expr(s.n), sym::Expr(s.oc), sym::Expr(hw)};
  const int product = p.add_buffer(BufferKind::Intermediate, contiguous_layout(DType::F32, ranges));
  std::vector<ComputedBuffer> parts;
  int x = scaled ? scaled->x : s.x;
  if (strided) {
    parts.push_back(gathered_pixels(p, c, &x));
    parts.back().origins = c.origins;
    parts.back().origin_names = c.origin_names;
  }

  auto spec = std::make_shared<MatmulSpec>();
  // A: the weight [OC, C, 1, 1] as [OC, C], the same for every image (scaled: image n's own).
  // B: image n of x (or of its gathered pixels) as [C, OH*OW]. A batch of one reads stride 0
  // (as lowering's operands do).
  const int a = scaled ? scaled->buffer : s.w;
  spec->a = StridedOperand{a, 0, {scaled && s.n > 1 ? s.oc * s.c : 0}, s.c, 1};
  spec->b = StridedOperand{x, 0, {s.n == 1 ? 0 : s.c * hw}, hw, 1};
  spec->batch = {s.n};
  spec->m = s.oc;
  spec->n = hw;
  spec->k = s.c;
  spec->dtype = DType::F32;
  ComputedBuffer t;
  t.buffer = product;
  t.kind = LoopKind::Template;
  t.ranges = ranges;
  t.matmul = spec;
  t.origins = c.origins;
  t.origin_names = c.origin_names;
  // The body only names the operands (read whole by the template) and the result.
  const int va = t.body.load(a, sym::Expr(0), DType::F32);
  t.body.load(x, sym::Expr(0), DType::F32);
  const sym::Expr index = flat_index(s.n, s.oc, hw);
  t.body.store(product, index, va);

  ComputedBuffer out;
  out.buffer = c.buffer;
  out.kind = LoopKind::Pointwise;
  out.ranges = ranges;
  out.origins = c.origins;
  out.origin_names = c.origin_names;
  int v = out.body.load(product, index, DType::F32);
  if (s.bias >= 0)
    v = out.body.compute(LoopOp::add, DType::F32,
                         {v, out.body.load(s.bias, loop_var(1), DType::F32)});
  out.body.store(c.buffer, index, v);
  if (scaled) parts.insert(parts.begin(), std::move(scaled->compute));
  parts.push_back(std::move(t));
  parts.push_back(std::move(out));
  return parts;
}

/// `reader` with its loops [N, OC, H, W] merged into [N, OC, H*W] when it then reads `conv_out`
/// at `index` everywhere it reads it; nullopt otherwise.
std::optional<ComputedBuffer> merged_hw(const ComputedBuffer& reader, int conv_out,
                                        const sym::Expr& index, int64_t h, int64_t w) {
  if (reader.kind != LoopKind::Pointwise || reader.ranges.size() != 4) return std::nullopt;
  const sym::Expr q = sym::make_symbol("coil_merged_hw");
  const std::map<sym::Expr, sym::Expr> split{{loop_var(2), sym::floordiv(q, sym::Expr(w))},
                                             {loop_var(3), sym::mod(q, sym::Expr(w))}};
  const std::map<sym::Expr, sym::Expr> rename{{q, loop_var(2)}};
  ComputedBuffer m = reader;
  m.ranges = {reader.ranges[0], reader.ranges[1], sym::Expr(h * w)};
  const sym::Analyzer a = loop_analyzer(m.ranges, {});
  LoopBody body;
  bool reads_at_index = false;
  for (BodyOp op : reader.body.ops()) {
    if (is_indirect_load(op)) return std::nullopt;
    if (op.index.defined())
      op.index = a.simplify(sym::substitute(sym::substitute(op.index, split), rename));
    if (op.op == LoopOp::load && op.buffer == conv_out) {
      if (op.index != index) return std::nullopt;
      reads_at_index = true;
    }
    body.append(std::move(op));
  }
  if (!reads_at_index) return std::nullopt;
  m.body = std::move(body);
  return m;
}

}  // namespace

void convs_as_matmuls(IrProgram& program) {
  std::vector<ComputedBuffer> out;
  // Each converted conv's output buffer -> its store index and spatial sizes.
  struct Converted {
    sym::Expr index;
    int64_t n, oc, h, w;
  };
  std::map<int, Converted> converted;
  // Each buffer's writer and number of readers, and the scale passes folded into weights.
  std::vector<int> writer(program.buffers.size(), -1), readers(program.buffers.size(), 0);
  for (size_t j = 0; j < program.computations.size(); ++j) {
    writer[static_cast<size_t>(program.computations[j].buffer)] = static_cast<int>(j);
    for (int b : program.computations[j].reads()) ++readers[static_cast<size_t>(b)];
  }
  std::vector<bool> dropped(program.computations.size(), false);
  std::vector<size_t> position;  // out's entry -> program.computations index (SIZE_MAX: new)
  // program.computations index -> its entry of out (SIZE_MAX: replaced); the originals are
  // moved from as they are copied.
  std::vector<size_t> moved_to(program.computations.size(), SIZE_MAX);
  for (size_t j = 0; j < program.computations.size(); ++j) {
    ComputedBuffer& c = program.computations[j];
    if (is_matmul_conv(program, c)) {
      const Conv2dSpec& s = *c.conv;
      const auto [oh, ow] = output_hw(c);
      COIL_LOG(
          fusion, "conv2d {} (1x1, {} -> {} channels, {}x{}{}) as a matmul template",
          program.buffer(c.buffer).name, s.c, s.oc, s.h, s.wd,
          oh * ow == s.h * s.wd ? "" : fmt::format(", stride {}x{}", s.stride[0], s.stride[1]));
      converted[c.buffer] = {flat_index(s.n, s.oc, oh * ow), s.n, s.oc, oh, ow};
      std::optional<ScaledWeights> scaled;
      const int x_writer = writer[static_cast<size_t>(s.x)];
      if (s.stride == std::array<int64_t, 2>{1, 1} && x_writer >= 0 &&
          readers[static_cast<size_t>(s.x)] == 1 &&
          program.buffer(s.x).kind == BufferKind::Intermediate &&
          moved_to[static_cast<size_t>(x_writer)] != SIZE_MAX)
        scaled = scaled_weights(program, c, out[moved_to[static_cast<size_t>(x_writer)]],
                                static_cast<size_t>(x_writer));
      if (scaled) {
        COIL_LOG(fusion, "{}: its channel scale {} folded into the weights",
                 program.buffer(c.buffer).name, program.buffer(s.x).name);
        dropped[scaled->scale_pass] = true;
      }
      for (ComputedBuffer& part : as_matmul(program, c, std::move(scaled))) {
        out.push_back(std::move(part));
        position.push_back(SIZE_MAX);
      }
      continue;
    }
    // A reader of a converted conv's output over the conv's [N, OC, H, W] loops.
    for (int b : c.reads()) {
      auto it = converted.find(b);
      if (it == converted.end()) continue;
      const Converted& v = it->second;
      if (c.ranges !=
          std::vector<sym::Expr>{sym::Expr(v.n), sym::Expr(v.oc), sym::Expr(v.h), sym::Expr(v.w)})
        continue;
      if (auto m = merged_hw(c, b, v.index, v.h, v.w)) {
        COIL_LOG(fusion, "{}: H and W loops merged to read {} as the matmul's epilogue",
                 program.buffer(c.buffer).name, program.buffer(b).name);
        c = std::move(*m);
        break;
      }
    }
    moved_to[j] = out.size();
    out.push_back(std::move(c));
    position.push_back(j);
  }
  // The scale passes folded into weights go, and with them their buffers.
  std::vector<ComputedBuffer> kept;
  for (size_t i = 0; i < out.size(); ++i)
    if (position[i] == SIZE_MAX || !dropped[position[i]]) kept.push_back(std::move(out[i]));
  program.computations = std::move(kept);
  drop_unused_buffers(program);
}

}  // namespace coil
