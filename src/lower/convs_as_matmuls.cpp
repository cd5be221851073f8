// convs_as_matmuls: a 1x1 convolution (stride 1, no padding, one group, f32) is a matrix
// product over NCHW tensors, y[n] = W[OC, C] @ x[n][C, H*W] (+ bias[OC] per row), so it runs
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
// CPU only (run by the pipeline, like fold_conv_activations): the GPU keeps its cuDNN call.

#include <map>

#include "ir/loop_extents.h"
#include "lower/lowering.h"
#include "support/log.h"

namespace coil {

namespace {

/// Whether the conv computes a plain matrix product over NCHW tensors.
bool is_matmul_conv(const IrProgram& p, const ComputedBuffer& c) {
  if (c.kind != LoopKind::Extern || !c.conv) return false;
  const Conv2dSpec& s = *c.conv;
  if (s.kh != 1 || s.kw != 1 || s.stride != std::array<int64_t, 2>{1, 1} || s.groups != 1 ||
      s.padding != std::array<int64_t, 4>{0, 0, 0, 0} ||
      s.activation != Conv2dSpec::Activation::none)
    return false;
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

/// The template and the bias (or copy) computation that replace conv `c`.
std::vector<ComputedBuffer> as_matmul(IrProgram& p, const ComputedBuffer& c) {
  const Conv2dSpec& s = *c.conv;
  const int64_t hw = s.h * s.wd;
  const std::vector<sym::Expr> ranges{sym::Expr(s.n), sym::Expr(s.oc), sym::Expr(hw)};
  const int product = p.add_buffer(BufferKind::Intermediate, contiguous_layout(DType::F32, ranges));

  auto spec = std::make_shared<MatmulSpec>();
  // A: the weight [OC, C, 1, 1] as [OC, C], the same for every image.
  spec->a = StridedOperand{s.w, 0, {0}, s.c, 1};
  // B: image n of x as [C, H*W]; a batch of one reads stride 0 (as lowering's operands do).
  spec->b = StridedOperand{s.x, 0, {s.n == 1 ? 0 : s.c * hw}, hw, 1};
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
  const int va = t.body.load(s.w, sym::Expr(0), DType::F32);
  t.body.load(s.x, sym::Expr(0), DType::F32);
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
  return {std::move(t), std::move(out)};
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
  for (ComputedBuffer& c : program.computations) {
    if (is_matmul_conv(program, c)) {
      const Conv2dSpec& s = *c.conv;
      COIL_LOG(fusion, "conv2d {} (1x1, {} -> {} channels, {}x{}) as a matmul template",
               program.buffer(c.buffer).name, s.c, s.oc, s.h, s.wd);
      converted[c.buffer] = {flat_index(s.n, s.oc, s.h * s.wd), s.n, s.oc, s.h, s.wd};
      for (ComputedBuffer& part : as_matmul(program, c)) out.push_back(std::move(part));
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
    out.push_back(std::move(c));
  }
  program.computations = std::move(out);
}

}  // namespace coil
