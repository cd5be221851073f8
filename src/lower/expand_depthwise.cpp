// fuse_expand_depthwise: an inverted residual block's expand conv (mobilenet_v2's and
// efficientnet's 1x1 conv to six times the channels, with its bias and activation) and the
// depthwise conv that reads it become one call of kernels/coil_expand_depthwise.h, which
// computes the expanded rows that a band of output rows needs into a per-thread scratch and the
// depthwise conv from there: the expanded tensor (4.8 MB at mobilenet_v2's 112x112 stage) is
// never written to memory and read back.
//
// The IR of the pattern, as lowering leaves it:
//   Extern bufY ranges [N, C, H, W] conv2d(bufX, bufW1, bufB1)          1x1, stride 1, no padding
//   Pointwise bufA ranges [N, C, H, W]   act(bufY) (relu, clamp or silu; optional)
//   Extern bufD ranges [N, C, OH, OW] conv2d(bufA, bufWd, bufBd) groups=C   (coil's depthwise)
// with bufY read only by the activation (or the depthwise conv), bufA only by the depthwise conv,
// becomes
//   Extern bufD ranges [N, C, OH, OW] conv2d(bufX, bufWd, bufBd) groups=C
//                                     expand(c=C_in, w=bufW1, bias=bufB1, activation=act)
// whose body loads x, w, bias, expand w, expand bias in that order (ir/verify.cpp checks it).
// fold_conv_activations then folds the depthwise conv's own activation into the call as before.
//
// Only where the depthwise kernel takes its planes path (fewer than 8 channels or output rows
// wider than 14: coil_depthwise.h's detail::cblock::preferred): narrower planes fit the caches
// whole (mobilenet_v2's 14x14 stage: 576 x 196 floats) and channel blocks would need the
// expanded tensor transposed. Measured in bench/expand_depthwise_bench.cpp and in the models
// (docs/benchmarks.md, "Expand and depthwise convs fused").
//
// CPU only (run by the pipeline before convs_as_matmuls, which would otherwise make the 1x1 conv
// a matmul template); skipped where every intermediate is stored for inspection.

#include <algorithm>
#include <array>
#include <optional>

#include "lower/lowering.h"
#include "support/log.h"

namespace coil {

namespace {

bool f32(const IrProgram& p, int b) {
  return b < 0 || p.buffer(b).layout.dtype == DType::F32;
}

/// A 1x1 conv with no padding, stride 1 and one group over f32 NCHW tensors, nothing folded.
bool is_expand_conv(const IrProgram& p, const ComputedBuffer& c) {
  if (c.kind != LoopKind::Extern || !c.conv) return false;
  const Conv2dSpec& s = *c.conv;
  return s.kh == 1 && s.kw == 1 && s.stride == std::array<int64_t, 2>{1, 1} && s.groups == 1 &&
         s.padding == std::array<int64_t, 4>{0, 0, 0, 0} &&
         s.activation == Conv2dSpec::Activation::none && !s.expand && !s.x_nhwc && !s.y_nhwc &&
         f32(p, s.x) && f32(p, s.w) && f32(p, s.bias) && f32(p, c.buffer);
}

/// A depthwise conv on coil's kernel that takes its planes path (the rule of
/// coil_depthwise.h's detail::cblock::preferred, which forward() applies: at least 8 channels
/// and output rows of at most 14 go to channel blocks).
bool is_planes_depthwise(const IrProgram& p, const ComputedBuffer& c) {
  if (c.kind != LoopKind::Extern || !c.conv) return false;
  const Conv2dSpec& s = *c.conv;
  if (!runs_on_coil_depthwise(s) || s.expand || s.activation != Conv2dSpec::Activation::none ||
      s.x_nhwc || s.y_nhwc)
    return false;
  const int64_t ow =
      (s.wd + s.padding[1] + s.padding[3] - s.dilation[1] * (s.kw - 1) - 1) / s.stride[1] + 1;
  return !(s.c >= 8 && ow <= 14) && f32(p, s.x) && f32(p, s.w) && f32(p, s.bias);
}

}  // namespace

void fuse_expand_depthwise(IrProgram& program) {
  auto& comps = program.computations;
  std::vector<int> writer(program.buffers.size(), -1);
  std::vector<std::vector<size_t>> readers(program.buffers.size());
  for (size_t j = 0; j < comps.size(); ++j) {
    writer[static_cast<size_t>(comps[j].buffer)] = static_cast<int>(j);
    for (int b : comps[j].reads()) readers[static_cast<size_t>(b)].push_back(j);
  }
  auto only_reader = [&](int buffer, size_t reader) {
    return program.buffer(buffer).kind == BufferKind::Intermediate &&
           readers[static_cast<size_t>(buffer)] == std::vector<size_t>{reader};
  };
  std::vector<bool> removed(comps.size(), false);
  for (size_t di = 0; di < comps.size(); ++di) {
    ComputedBuffer& dw = comps[di];
    if (!is_planes_depthwise(program, dw)) continue;
    const Conv2dSpec& d = *dw.conv;
    if (d.x == d.w || d.x == d.bias) continue;
    const int wi = writer[static_cast<size_t>(d.x)];
    if (wi < 0 || !only_reader(d.x, di)) continue;
    // The depthwise conv's input: the expand conv's output, or an activation of it.
    size_t ei = static_cast<size_t>(wi);
    std::optional<size_t> act_index;
    ConvActivation act{Conv2dSpec::Activation::none};
    if (comps[ei].kind == LoopKind::Pointwise) {
      const ComputedBuffer& a = comps[ei];
      const auto& ops = a.body.ops();
      if (ops.empty() || ops[0].op != LoopOp::load) continue;
      const int y = ops[0].buffer;
      const int yi = y >= 0 ? writer[static_cast<size_t>(y)] : -1;
      if (yi < 0 || !only_reader(y, ei) || !is_expand_conv(program, comps[static_cast<size_t>(yi)]))
        continue;
      const ComputedBuffer& e = comps[static_cast<size_t>(yi)];
      const Layout& from = program.buffer(y).layout;
      const Layout& to = program.buffer(a.buffer).layout;
      if (a.ranges != e.ranges || to.dtype != from.dtype || to.sizes != from.sizes ||
          to.strides != from.strides)
        continue;
      std::optional<ConvActivation> folded =
          conv_activation_of(a.body, y, store_index(e), /*clamps=*/true);
      if (!folded) continue;
      act = *folded;
      act_index = ei;
      ei = static_cast<size_t>(yi);
    } else if (!is_expand_conv(program, comps[ei])) {
      continue;
    }
    const ComputedBuffer& e = comps[ei];
    const Conv2dSpec& s = *e.conv;
    if (s.oc != d.c || s.n != d.n || s.h != d.h || s.wd != d.wd) continue;
    // The depthwise weights and bias are no value the fused call stops storing.
    if (d.w == e.buffer || d.bias == e.buffer) continue;

    auto spec = std::make_shared<Conv2dSpec>(d);
    spec->x = s.x;
    spec->expand = Conv2dSpec::Expand{s.w, s.bias, s.c, act.activation, act.lo, act.hi};
    LoopBody body;
    const int first = body.load(spec->x, sym::Expr(0), DType::F32);
    for (int b : {spec->w, spec->bias, s.w, s.bias})
      if (b >= 0) body.load(b, sym::Expr(0), DType::F32);
    body.store(dw.buffer, store_index(dw), first);
    std::vector<Origin> origins = e.origins;
    if (act_index)
      origins.insert(origins.end(), comps[*act_index].origins.begin(),
                     comps[*act_index].origins.end());
    origins.insert(origins.end(), dw.origins.begin(), dw.origins.end());
    COIL_LOG(fusion, "fuse the expand conv {} ({} -> {} channels{}{}) into the depthwise conv {}",
             program.buffer(e.buffer).name, s.c, s.oc, act_index ? ", then " : "",
             act_index ? activation_name(act.activation) : "", program.buffer(dw.buffer).name);
    dw.conv = spec;
    dw.body = std::move(body);
    dw.origins = std::move(origins);
    dw.origin_names = describe_origins(dw.origins);
    removed[ei] = true;
    if (act_index) removed[*act_index] = true;
  }
  std::vector<ComputedBuffer> kept;
  for (size_t i = 0; i < comps.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(comps[i]));
  comps = std::move(kept);
  drop_unused_buffers(program);  // the expanded tensors, now neither written nor read
}

}  // namespace coil
