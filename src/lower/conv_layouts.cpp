// keep_conv_layouts: a tensor that one oneDNN convolution writes and only another oneDNN
// convolution reads (resnet's conv1 -> relu -> conv2 in every basic block, once the relu is a
// post-op) is passed between the two calls channels-last (NHWC), the layout oneDNN's AVX-512
// kernels compute in, so neither call reorders it: the producer writes NHWC straight from its
// primitive and the consumer reads it as its source (kernels/coil_extern.h: src_nhwc,
// dst_nhwc). Every other activation stays NCHW, whose layout coil's kernels index.
//
// Why correctness holds: the buffer keeps its NCHW declaration (sizes, strides, bytes), and
// nothing but the two calls touches its contents. It is an intermediate (not a graph output),
// read by exactly one computation, which is a oneDNN conv reading it as x (not as weights or
// bias); the writer is the conv that computes it. Where every intermediate is stored for
// inspection (LowerOptions::realize_all, the debug dumps) the pass is not run, so what a dump
// shows is NCHW. If oneDNN chooses another layout (a machine without AVX-512: nChw8c), the NHWC
// tensor is reordered instead of the NCHW one: the same cost as before, the same values.
#include "lower/lowering.h"
#include "support/log.h"

namespace coil {

void keep_conv_layouts(IrProgram& program) {
  auto& comps = program.computations;
  auto onednn = [&](const ComputedBuffer& c) {
    return c.kind == LoopKind::Extern && c.conv && !runs_on_coil_conv(*c.conv) &&
           program.buffer(c.conv->x).layout.dtype == DType::F32 &&
           program.buffer(c.buffer).layout.dtype == DType::F32;
  };
  std::vector<std::vector<size_t>> readers_of(program.buffers.size());
  for (size_t j = 0; j < comps.size(); ++j)
    for (int b : comps[j].reads()) readers_of[static_cast<size_t>(b)].push_back(j);
  for (ComputedBuffer& producer : comps) {
    if (!onednn(producer)) continue;
    const int out = producer.buffer;
    if (program.buffer(out).kind != BufferKind::Intermediate) continue;
    const std::vector<size_t>& readers = readers_of[static_cast<size_t>(out)];
    if (readers.size() != 1) continue;
    ComputedBuffer& consumer = comps[readers[0]];
    if (!onednn(consumer) || consumer.conv->x != out || consumer.conv->w == out ||
        consumer.conv->bias == out)
      continue;
    auto p = std::make_shared<Conv2dSpec>(*producer.conv);
    p->y_nhwc = true;
    producer.conv = p;
    auto c = std::make_shared<Conv2dSpec>(*consumer.conv);
    c->x_nhwc = true;
    consumer.conv = c;
    COIL_LOG(fusion, "{} passes between two oneDNN convolutions channels-last (no reorders)",
             program.buffer(out).name);
  }
}

}  // namespace coil
