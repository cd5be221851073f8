// The GPU code generator's decisions (codegen/triton): masks, size hints, persistent vs looped,
// split reductions, tiling, and the kernels small graphs become; plus `coil --device cuda`.
// Nothing here runs Triton (CI has no GPU): tests/gpu runs the modules on a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "codegen/triton/triton_plan.h"
#include "codegen/triton/triton_split.h"
#include "driver/pipeline.h"
#include "graph/text_format.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

TEST(TritonMask, DroppedOnlyWhereEveryBlockDividesTheNumel) {
  // Multiples of the largest block.
  EXPECT_FALSE(triton_needs_mask(4194304, kTritonMaxXBlock));
  EXPECT_FALSE(triton_needs_mask(3072, kTritonMaxXBlock));
  // Powers of two below it: blocks are clamped to the size hint.
  EXPECT_FALSE(triton_needs_mask(512, kTritonMaxXBlock));
  EXPECT_FALSE(triton_needs_mask(1, kTritonMaxXBlock));
  // Everything else.
  EXPECT_TRUE(triton_needs_mask(1000, kTritonMaxXBlock));
  EXPECT_TRUE(triton_needs_mask(1536, kTritonMaxXBlock));
  EXPECT_TRUE(triton_needs_mask(17, kTritonMaxXBlock));
  EXPECT_TRUE(triton_needs_mask(1000003, kTritonMaxXBlock));
  EXPECT_TRUE(triton_needs_mask(1024 + 2048, kTritonMaxLoopedR0Block));
  EXPECT_FALSE(triton_needs_mask(16384, kTritonMaxLoopedR0Block));
  // Symbolic sizes: only what is provable.
  sym::Expr s0 = sym::make_symbol("s0");
  EXPECT_FALSE(triton_needs_mask(s0 * 2048, kTritonMaxXBlock));
  EXPECT_TRUE(triton_needs_mask(s0 * 512, kTritonMaxXBlock));
  EXPECT_TRUE(triton_needs_mask(s0, kTritonMaxXBlock));
}

TEST(TritonSizeHints, NextPowerOfTwo) {
  EXPECT_EQ(triton_size_hint(1), 1);
  EXPECT_EQ(triton_size_hint(17), 32);
  EXPECT_EQ(triton_size_hint(1000), 1024);
  EXPECT_EQ(triton_size_hint(1024), 1024);
  EXPECT_EQ(triton_size_hint(1000003), 1048576);
  EXPECT_EQ(triton_size_hint(4194304), 4194304);
}

TEST(TritonReduction, PersistentThresholdsDependOnTheAccessPattern) {
  EXPECT_TRUE(use_persistent_reduction(1000, ReductionHint::Inner));
  EXPECT_TRUE(use_persistent_reduction(1024, ReductionHint::Inner));
  EXPECT_FALSE(use_persistent_reduction(1025, ReductionHint::Inner));
  EXPECT_TRUE(use_persistent_reduction(1024, ReductionHint::Default));
  EXPECT_TRUE(use_persistent_reduction(64, ReductionHint::Outer));
  EXPECT_FALSE(use_persistent_reduction(65, ReductionHint::Outer));
}

TEST(TritonReduction, SplitShapes) {
  // sum(x, dim=0) of [65536, 1024]: 64 interleaved chunks of 1024 rows (Inductor: 128
  // contiguous chunks of 512).
  auto outer = choose_split(1024, 65536, ReductionHint::Outer);
  ASSERT_TRUE(outer.has_value());
  EXPECT_EQ(outer->splits, 64);
  EXPECT_EQ(outer->chunk, 1024);
  EXPECT_TRUE(outer->outputs_contiguous);
  EXPECT_TRUE(outer->interleaved);
  // A full sum of a prime count: no divisor, so the last chunk is partial.
  auto full = choose_split(1, 1000003, ReductionHint::Inner);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->splits, 128);
  EXPECT_EQ(full->chunk, 7813);
  EXPECT_FALSE(full->outputs_contiguous);
  EXPECT_FALSE(full->interleaved);
  // A divisor near the target is preferred.
  auto even = choose_split(8, 3 * 65536, ReductionHint::Inner);
  ASSERT_TRUE(even.has_value());
  EXPECT_EQ(even->splits * even->chunk, 3 * 65536);
  // Enough outputs, or short rows: one kernel.
  EXPECT_FALSE(choose_split(4096, 1000, ReductionHint::Inner).has_value());
  EXPECT_FALSE(choose_split(256, 16384, ReductionHint::Inner).has_value());
  EXPECT_FALSE(choose_split(16384, 65536, ReductionHint::Outer).has_value());
  EXPECT_FALSE(choose_split(1024, 1024, ReductionHint::Outer).has_value());
}

/// The Triton module of a graph in the text format.
TritonModule triton_of(const std::string& text) {
  CompileOptions o;
  o.device = "cuda";
  return generate_program(parse_graph(text, "<test>"), o).triton;
}

std::vector<std::string> kernel_names(const TritonModule& m) {
  std::vector<std::string> names;
  for (const auto& k : m.kernels) names.push_back(k.name);
  return names;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(TritonKernels, PointwiseChainIsOneKernelWithoutMask) {
  TritonModule m = triton_of(
      "input x: f32[64, 1024]\ninput w: f32[1024]\nt = mul(x, w)\ny = gelu(t)\noutput y\n");
  ASSERT_EQ(kernel_names(m), std::vector<std::string>{"triton_poi_fused_mul_gelu_0"});
  const std::string& code = m.kernels[0].code;
  EXPECT_TRUE(contains(code, "xindex = xoffset + tl.arange(0, XBLOCK)[:]"));
  EXPECT_FALSE(contains(code, "xmask"));
  EXPECT_TRUE(contains(code, "eviction_policy='evict_last'"));  // w is broadcast
  EXPECT_TRUE(contains(code, "libdevice.erf"));
  EXPECT_EQ(m.kernels[0].numels, std::vector<int64_t>{65536});
  EXPECT_TRUE(contains(m.kernels[0].decorator, "size_hints={'x': 65536}"));
}

TEST(TritonKernels, SoftmaxIsOnePersistentReduction) {
  TritonModule m = triton_of("input x: f32[128, 1000]\ny = softmax(x) {axis=-1}\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  const TritonKernelSource& k = m.kernels[0];
  EXPECT_EQ(k.name, "triton_per_fused_softmax_0");
  EXPECT_TRUE(contains(k.decorator, "reduction_hint='INNER'"));
  EXPECT_TRUE(contains(k.code, "r0_mask = r0_index < r0_numel"));
  // The input is read once; exp(x - max) is forwarded in registers to the sum and the product
  // with the sum's reciprocal.
  EXPECT_EQ(k.args.size(), 2u);
  size_t loads = 0;
  for (size_t p = k.code.find("tl.load("); p != std::string::npos;
       p = k.code.find("tl.load(", p + 1))
    ++loads;
  EXPECT_EQ(loads, 1u);
}

TEST(TritonKernels, LongRowsLoopOncePerNest) {
  TritonModule m = triton_of("input x: f32[128, 8192]\ny = softmax(x) {axis=-1}\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  const std::string& code = m.kernels[0].code;
  EXPECT_TRUE(contains(m.kernels[0].name, "triton_red_fused_"));
  size_t loops = 0;
  for (size_t p = code.find("for r0_offset"); p != std::string::npos;
       p = code.find("for r0_offset", p + 1))
    ++loops;
  EXPECT_EQ(loops, 3u);
}

TEST(TritonKernels, TransposedReadIsTiled) {
  TritonModule m = triton_of(
      "input x: f32[96, 64]\ninput y: f32[64, 96]\nt = transpose(x)\nz = add(t, y)\noutput z\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_TRUE(contains(m.kernels[0].decorator, "tile_hint='TILE'"));
  EXPECT_TRUE(contains(m.kernels[0].code, "YBLOCK : tl.constexpr, XBLOCK : tl.constexpr"));
  EXPECT_EQ(m.kernels[0].numels, (std::vector<int64_t>{64, 96}));
}

constexpr const char* kQkvSplit = R"(input x: f32[8, 256, 192]
input b: f32[192]
t = add(x, b)
q0 = slice(t) {dim=2, start=0, end=64}
k0 = slice(t) {dim=2, start=64, end=128}
v0 = slice(t) {dim=2, start=128, end=192}
q1 = reshape(q0) {shape=[8, 256, 2, 32]}
k1 = reshape(k0) {shape=[8, 256, 2, 32]}
v1 = reshape(v0) {shape=[8, 256, 2, 32]}
q = permute(q1) {dims=[0, 2, 1, 3]}
k = permute(k1) {dims=[0, 2, 3, 1]}
v = permute(v1) {dims=[0, 2, 1, 3]}
output q
output k
output v
)";

TEST(TritonKernels, PointwiseNestsOfOneSizeAreOneFlatKernel) {
  // The q/k/v split after an attention input projection: three pointwise nests of one element
  // count (k's loops in another order) that the CPU schedule groups under its outer loops.
  // On the GPU they are one flat pointwise kernel over all 131072 elements, not a looped
  // "reduction" with one program per outer index (16 programs).
  TritonModule m = triton_of(kQkvSplit);
  ASSERT_EQ(kernel_names(m), std::vector<std::string>{"triton_poi_fused_add_0"});
  EXPECT_EQ(m.kernels[0].numels, std::vector<int64_t>{131072});
  EXPECT_FALSE(contains(m.kernels[0].code, "r0_"));
  EXPECT_EQ(m.kernels[0].args.size(), 5u);  // x, b and the three outputs
}

TEST(TritonKernels, ColumnSumOfManyRowsIsSplit) {
  TritonModule m = triton_of("input x: f32[65536, 1024]\ny = sum(x) {axes=[0]}\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 2u);
  EXPECT_EQ(m.kernels[0].numels, (std::vector<int64_t>{65536, 1024}));
  EXPECT_EQ(m.kernels[1].numels, (std::vector<int64_t>{1024, 64}));
  EXPECT_TRUE(contains(m.source, "part0 = runtime.empty_strided((64, 1024), (1024, 1)"));
  // Interleaved chunks: lane x' = s * 1024 + column reads rows s, s + 64, s + 128, ...
  EXPECT_TRUE(contains(m.kernels[0].code, "tl.load(in_ptr0 + (65536*r0_0 + x0)"))
      << m.kernels[0].code;
}

TEST(TritonKernels, MatmulTemplateFusesItsEpilogueWithAnExternChoice) {
  TritonModule m = triton_of(
      "input x: f32[64, 96]\ninput w: f32[96, 80]\ninput b: f32[80]\nm = matmul(x, w)\n"
      "s = add(m, b)\ny = relu(s)\noutput y\n");
  EXPECT_TRUE(m.externs.empty());
  ASSERT_EQ(kernel_names(m), (std::vector<std::string>{"triton_tem_fused_matmul_add_relu_0",
                                                       "triton_poi_fused_add_relu_1"}));
  const std::string& tem = m.kernels[0].code;
  EXPECT_TRUE(contains(tem, "acc = tl.dot(a, b, acc, input_precision='ieee')"));
  EXPECT_TRUE(contains(tem, "group_id = pid // width"));
  EXPECT_TRUE(contains(tem, "rbn = rn % N"));  // N = 80: not a multiple of every BLOCK_N
  EXPECT_TRUE(contains(tem, "xmask = (idx_m < M) & (idx_n < N)"));
  EXPECT_TRUE(contains(m.source, "@heuristics.template(mm={'m': 64, 'n': 80, 'k': 96, "));
  EXPECT_TRUE(
      contains(m.source, "triton_tem_fused_matmul_add_relu_0.run(arg0_1, arg1_1, arg2_1, out0)"));
  EXPECT_TRUE(contains(m.source,
                       "    with runtime.fp32_precision('highest'):\n"
                       "        torch.mm(arg0_1, arg1_1, out=buf3)\n"
                       "    triton_poi_fused_add_relu_1.run(buf3, arg2_1, out0, 5120)"));
  // relu(x @ w + b) with a 1-D bias: cuBLASLt can fuse the epilogue, a third choice.
  EXPECT_TRUE(contains(m.source, "    torch._addmm_activation(arg2_1, arg0_1, arg1_1, out=out0)"));
  EXPECT_TRUE(contains(m.source,
                       "triton_tem_fused_matmul_add_relu_0.attach_externs(extern_0, extern_0_lt)"));
}

// --precision: "highest" (the default) keeps every f32 product IEEE, in the template's tl.dot
// and in each library call; "high" allows TF32 in both. bf16 dots are the same in both.
TEST(TritonKernels, Fp32PrecisionReachesEveryDotAndLibraryCall) {
  auto module_of = [](const std::string& text, const std::string& precision) {
    CompileOptions o;
    o.device = "cuda";
    o.precision = precision;
    return generate_program(parse_graph(text, "<test>"), o).triton;
  };
  const std::string mm =
      "input x: f32[64, 96]\ninput w: f32[96, 80]\ninput b: f32[80]\nm = matmul(x, w)\n"
      "s = add(m, b)\ny = relu(s)\noutput y\n";
  const std::string conv =
      "input x: f32[1, 8, 14, 14]\ninput w: f32[16, 8, 3, 3]\n"
      "c = conv2d(x, w) {padding=[1, 1]}\ny = relu(c)\noutput y\n";
  for (const char* precision : {"highest", "high"}) {
    SCOPED_TRACE(precision);
    const bool ieee = std::string(precision) == "highest";
    TritonModule m = module_of(mm, precision);
    EXPECT_TRUE(
        contains(m.kernels[0].code, ieee ? "acc = tl.dot(a, b, acc, input_precision='ieee')"
                                         : "acc = tl.dot(a, b, acc, input_precision='tf32')"));
    const std::string with = fmt::format("    with runtime.fp32_precision('{}'):\n", precision);
    EXPECT_TRUE(contains(m.source, with + "        torch.mm(arg0_1, arg1_1, out=buf3)\n"))
        << m.source;
    EXPECT_TRUE(contains(m.source, with + "        torch._addmm_activation(")) << m.source;
    EXPECT_TRUE(contains(m.source, fmt::format("# fp32 precision: {} (", precision)));
    TritonModule c = module_of(conv, precision);
    const size_t at = c.source.find(with);
    ASSERT_NE(at, std::string::npos) << c.source;
    const size_t next = c.source.find('\n', at) + 1;
    const std::string call = c.source.substr(next, c.source.find('\n', next) - next);
    EXPECT_EQ(call.rfind("        buf", 0), 0u) << call;
    EXPECT_TRUE(contains(call, " = torch.nn.functional.conv2d(")) << call;
  }
  // bf16 products are not f32: the same dot in both modes.
  const std::string bf16 =
      "input x: bf16[64, 96]\ninput w: bf16[96, 80]\nm = matmul(x, w)\ny = relu(m)\noutput y\n";
  EXPECT_EQ(module_of(bf16, "high").kernels[0].code, module_of(bf16, "highest").kernels[0].code);
  // Anything else names the value.
  try {
    module_of(mm, "medium");
    FAIL() << "precision 'medium' was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "precision 'medium': expected highest")) << e.what();
  }
}

TEST(TritonKernels, CublasLtChoiceOnlyForABiasEpilogue) {
  auto source_of = [](const std::string& epilogue) {
    return triton_of("input x: f32[64, 96]\ninput w: f32[96, 80]\nm = matmul(x, w)\n" + epilogue)
        .source;
  };
  // A bias alone: addmm.
  std::string bias = source_of("input b: f32[80]\ny = add(m, b)\noutput y\n");
  EXPECT_TRUE(contains(bias, "torch.addmm(arg2_1, arg0_1, arg1_1, out=out0)")) << bias;
  // A residual [64, 80], another activation, a scale: not a cuBLASLt epilogue.
  for (const char* epilogue : {"input r: f32[64, 80]\ny = add(m, r)\noutput y\n",
                               "input b: f32[80]\nt = add(m, b)\ny = gelu(t)\noutput y\n",
                               "input b: f32[80]\nt = mul(m, b)\ny = relu(t)\noutput y\n"}) {
    std::string src = source_of(epilogue);
    EXPECT_TRUE(contains(src, ".attach_externs(extern_0)\n")) << src;
    EXPECT_FALSE(contains(src, "extern_0_lt")) << epilogue;
  }
}

// A kernel that only moves a result into an output (a transpose undone, a reshape, a squeeze
// of a reduction: torch's backward graphs are full of them) is no work for a kernel. A
// template's epilogue of that kind lets its torch.mm choice write the output itself; any
// other such copy is dropped and the producer writes the output's memory through a view
// (docs/gpu-results.md, nineteenth session: each was a launch and a pass over the data).
TEST(TritonKernels, KernelsThatOnlyCopyIntoAnOutputAreDropped) {
  const std::string mm = "input x: f32[64, 96]\ninput w: f32[96, 80]\nm = matmul(x, w)\n";
  TritonModule t = triton_of(
      mm + "u = transpose(m) {dim0=0, dim1=1}\ny = transpose(u) {dim0=0, dim1=1}\noutput y\n");
  ASSERT_EQ(kernel_names(t), std::vector<std::string>{"triton_tem_fused_matmul_0"}) << t.source;
  EXPECT_TRUE(contains(t.source,
                       "# triton_tem_fused_matmul_0's other choice: cuBLAS through "
                       "torch, into out0 itself\n"))
      << t.source;
  EXPECT_TRUE(contains(t.source, "        torch.mm(arg0_1, arg1_1, out=out0)\n")) << t.source;
  EXPECT_TRUE(contains(t.source, ".attach_externs(extern_0)\n")) << t.source;

  TritonModule r = triton_of(mm + "y = reshape(m) {shape=[2, 32, 80]}\noutput y\n");
  EXPECT_TRUE(r.kernels.empty()) << r.source;
  EXPECT_TRUE(contains(r.source,
                       "    out0 = runtime.empty_strided((2, 32, 80), (2560, 80, 1), "
                       "torch.float32)\n    buf2 = out0.view((64, 80))\n"))
      << r.source;
  EXPECT_TRUE(contains(r.source, "torch.mm(arg0_1, arg1_1, out=buf2)")) << r.source;

  TritonModule s = triton_of(
      "input x: f32[2048, 512]\ns = sum(x) {axes=[0], keepdim=true}\n"
      "y = reshape(s) {shape=[512]}\noutput y\n");
  ASSERT_EQ(s.kernels.size(), 1u) << s.source;
  EXPECT_TRUE(contains(s.source, "    buf1 = out0.view((1, 512))\n    " + s.kernels[0].name +
                                     ".run(arg0_1, buf1, 512, 2048)\n"))
      << s.source;

  // A copy into another dtype, one that also negates, or an output that is an input's copy
  // (the caller's tensor is not the module's to write through): the kernel stays.
  for (const std::string& text :
       {mm + "y = cast(m) {dtype=bf16}\noutput y\n", mm + "y = neg(m)\noutput y\n",
        std::string("input x: f32[64, 80]\ny = reshape(x) {shape=[5120]}\noutput y\n")}) {
    SCOPED_TRACE(text);
    TritonModule k = triton_of(text);
    EXPECT_EQ(k.kernels.size(), text.find("matmul") != std::string::npos ? 2u : 1u) << k.source;
    EXPECT_FALSE(contains(k.source, ".view((")) << k.source;
  }
}

TEST(TritonKernels, MatmulWhoseProductIsAlsoAnOutputStaysALibraryCall) {
  TritonModule m = triton_of(
      "input x: f32[64, 96]\ninput w: f32[96, 80]\nm = matmul(x, w)\ny = relu(m)\n"
      "output m\noutput y\n");
  ASSERT_EQ(m.externs.size(), 1u);
  ASSERT_EQ(kernel_names(m), std::vector<std::string>{"triton_poi_fused_relu_0"});
}

TEST(TritonKernels, LargeTensorsIndexWith64Bits) {
  TritonModule m = triton_of("input x: f32[65536, 65536]\ny = relu(x)\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_TRUE(contains(m.kernels[0].code, "tl.program_id(0).to(tl.int64)"));
  TritonModule small = triton_of("input x: f32[1024, 1024]\ny = relu(x)\noutput y\n");
  EXPECT_FALSE(contains(small.kernels[0].code, "int64"));
}

TEST(TritonKernels, EmptyTensorsAreNeverRead) {
  // A sum over a zero-sized dim is its identity; the empty relu output needs no kernel.
  TritonModule m =
      triton_of("input x: f32[4, 0]\ny = sum(x) {axes=[1]}\nz = relu(x)\noutput y\noutput z\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_FALSE(contains(m.kernels[0].code, "tl.load"));
  EXPECT_TRUE(contains(m.kernels[0].code, "tl.full([1], 0.0, tl.float32)"));
  EXPECT_TRUE(contains(m.source, "out1 = runtime.empty_strided((4, 0), (0, 1), torch.float32)"));
}

TEST(TritonKernels, ReductionOverAnEmptyDimOfSeveralDims) {
  // All dims reduced, one of them empty: the flat reduction index was decomposed with
  // mod(r0_index, 0), an internal error (fuzz case seed 1 index 79). The product is its identity.
  TritonModule m = triton_of("input x: bool[2, 1, 32, 0]\ny = prod(x) {keepdim=true}\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_FALSE(contains(m.kernels[0].code, "tl.load"));
  EXPECT_TRUE(contains(m.kernels[0].code, "tl.full([1], 1, tl.int64)"));
}

TEST(TritonKernels, IntegerConstantsWrapToTheirDtype) {
  // full(value=-3) of u8 holds 253, as the CPU's static_cast and the reference store it;
  // tl.full([1], -3, tl.uint8) is a CompilationError (16 graphs of fuzz seed 500, e.g. 941).
  TritonModule m = triton_of(
      "input x: u8[8]\nc = full() {dtype=u8, shape=[], value=-3.0}\ny = add(x, c)\n"
      "input z: i8[8]\nd = full() {dtype=i8, shape=[], value=200.0}\nw = add(z, d)\n"
      "output y\noutput w\n");
  std::string code;
  for (const auto& k : m.kernels) code += k.code;
  EXPECT_TRUE(contains(code, "tl.full([1], 253, tl.uint8)"));
  EXPECT_TRUE(contains(code, "tl.full([1], -56, tl.int8)"));
  EXPECT_FALSE(contains(code, "-3, tl.uint8"));
  EXPECT_FALSE(contains(code, "200, tl.int8"));
}

TEST(TritonKernels, EmptyConcatPartIsNeverLoaded) {
  // The empty part's load has an address computed from the clamped part index and a mask that
  // does not know the part is empty: it read through the empty buffer's null pointer (an
  // illegal memory access, fuzz seed 500 index 5110), or named a buffer call() never
  // allocated (an UnboundLocalError, index 5682).
  TritonModule m = triton_of(
      "input a: f32[1, 5]\ninput b: f32[5]\ns = slice(a) {dim=1, start=4, end=2, step=2}\n"
      "e = squeeze(s) {dims=[0]}\ny = concat(e, b, e) {dim=0}\noutput y\n");
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].args.size(), 2u);  // b and y
  size_t loads = 0;
  for (size_t p = m.kernels[0].code.find("tl.load("); p != std::string::npos;
       p = m.kernels[0].code.find("tl.load(", p + 1))
    ++loads;
  EXPECT_EQ(loads, 1u);
}

TEST(TritonKernels, EmptyPrologueOfAReductionStoresNothing) {
  // rms_norm over an empty last dim: the reduction's rows are not empty, but the pointwise
  // prologue merged into its nest (silu of the empty input) is, and its store went through a
  // null pointer (an illegal memory access, fuzz seed 500 index 8645).
  TritonModule m = triton_of(
      "input x: f16[2, 3, 4, 0]\ninput w: f16[0]\nt1 = log(x)\nt2 = silu(t1)\n"
      "t4 = rms_norm(t1, w) {eps=0.3}\noutput t2\noutput t4\n");
  for (const auto& k : m.kernels) {
    EXPECT_FALSE(contains(k.code, "tl.store")) << k.code;
    EXPECT_FALSE(contains(k.code, "tl.load")) << k.code;
  }
}

struct TritonCli : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::path(COIL_BINARY_DIR) / "test-triton-cli" / std::to_string(getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "model.coil") << "input x: f32[s0, 16]\ny = softmax(x)\noutput y\n";
  }
  void TearDown() override { fs::remove_all(dir); }
  int coil(const std::string& args) {
    return std::system(
        fmt::format("'{}' {} > '{}' 2>&1", COIL_CLI, args, (dir / "log.txt").string()).c_str());
  }
  std::string log() const {
    std::ifstream in(dir / "log.txt");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(TritonCli, CompileWritesTheModule) {
  std::string model = (dir / "model.coil").string(), out = (dir / "out").string();
  ASSERT_EQ(coil(fmt::format("compile '{}' --size s0=32 --device cuda -o '{}'", model, out)), 0)
      << log();
  EXPECT_TRUE(fs::exists(dir / "out" / "module.py"));
  EXPECT_TRUE(fs::exists(dir / "out" / "report.json"));
  EXPECT_FALSE(fs::exists(dir / "out" / "graph.coil")) << "graph.coil is written when asked";
  ASSERT_EQ(coil(fmt::format("compile '{}' --size s0=32 --device cuda -o '{}' --write-graph", model,
                             out)),
            0)
      << log();
  EXPECT_TRUE(fs::exists(dir / "out" / "graph.coil"));
  EXPECT_FALSE(fs::exists(dir / "out" / "module.so"));
  std::ifstream report(dir / "out" / "report.json");
  std::string json(std::istreambuf_iterator<char>(report), {});
  EXPECT_TRUE(contains(json, "\"device\": \"cuda\""));
  EXPECT_TRUE(contains(json, "\"precision\": \"highest\""));
  ASSERT_EQ(coil(fmt::format("compile '{}' --size s0=32 --device cuda --precision high -o '{}'",
                             model, out)),
            0)
      << log();
  std::ifstream high(dir / "out" / "report.json");
  EXPECT_TRUE(
      contains(std::string(std::istreambuf_iterator<char>(high), {}), "\"precision\": \"high\""));
  EXPECT_NE(coil(fmt::format("compile '{}' --size s0=32 --precision medium -o '{}'", model, out)),
            0);
  EXPECT_TRUE(contains(log(), "'medium' is not highest or high")) << log();
  EXPECT_TRUE(contains(json, "triton_per_fused_"));
}

// run/check/bench --device cuda write the module under the cache and spawn
// python/coil_runtime/run.py; here, with a Python that sees no GPU, they fail clearly.
TEST_F(TritonCli, CheckWithoutAGpuIsAClearError) {
  std::string model = (dir / "model.coil").string(), cache = (dir / "cache").string();
  std::string env =
      fmt::format("CUDA_VISIBLE_DEVICES= COIL_CACHE_DIR='{}' COIL_PYTHON='{}'", cache, COIL_PYTHON);
  int rc = std::system(fmt::format("{} '{}' check '{}' --size s0=32 --device cuda > '{}' 2>&1", env,
                                   COIL_CLI, model, (dir / "log.txt").string())
                           .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2) << log();
  EXPECT_TRUE(contains(log(), "--device cuda needs an NVIDIA GPU")) << log();
  EXPECT_TRUE(contains(log(), "no CUDA device")) << log();
  EXPECT_FALSE(contains(log(), "Traceback")) << log();
  // The module was generated (and named), and no inputs were left behind.
  int modules = 0, others = 0;
  for (const auto& e : fs::directory_iterator(dir / "cache" / "cuda"))
    (fs::exists(e.path() / "module.py") ? modules : others) += 1;
  EXPECT_EQ(modules, 1);
  EXPECT_EQ(others, 0);
  EXPECT_TRUE(contains(log(), (dir / "cache" / "cuda").string())) << log();

  // No such interpreter; a python/ directory without coil_runtime.
  rc = std::system(fmt::format("COIL_PYTHON=/nonexistent/python3 '{}' bench '{}' --size s0=32 "
                               "--device cuda > '{}' 2>&1",
                               COIL_CLI, model, (dir / "log.txt").string())
                       .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2) << log();
  EXPECT_TRUE(contains(log(), "COIL_PYTHON=/nonexistent/python3: not an executable")) << log();
  rc = std::system(fmt::format("COIL_PYTHON=no-such-python-coil '{}' run '{}' --size s0=32 "
                               "--device cuda > '{}' 2>&1",
                               COIL_CLI, model, (dir / "log.txt").string())
                       .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2) << log();
  EXPECT_TRUE(contains(log(), "'no-such-python-coil' is not on PATH")) << log();
  rc = std::system(fmt::format("COIL_PYTHON='{}' COIL_PYTHONPATH='{}' '{}' run '{}' --size s0=32 "
                               "--device cuda > '{}' 2>&1",
                               COIL_PYTHON, dir.string(), COIL_CLI, model,
                               (dir / "log.txt").string())
                       .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2) << log();
  EXPECT_TRUE(contains(log(), "set COIL_PYTHONPATH to coil's python/ directory")) << log();
}

TEST(TritonApi, CompileRefusesTheGpuTarget) {
  CompileOptions o;
  o.device = "cuda";
  Graph g = parse_graph("input x: f32[4]\ny = relu(x)\noutput y\n", "<test>");
  EXPECT_THROW(compile(g, o), Error);
  o.device = "tpu";
  EXPECT_THROW(generate_program(g, o), Error);
}

}  // namespace
}  // namespace coil

// ---- Op semantics of the Triton printer (fuzz seed 500's wrong answers on the H200) ----------

namespace coil {
namespace {

std::string all_code(const TritonModule& m) {
  std::string code;
  for (const auto& k : m.kernels) code += k.code;
  return code;
}

TEST(TritonOpSemantics, BoolAddIsLogicalOr) {
  // `+` on int1 wraps, so True + True stored False (18 graphs of seed 500, e.g. 922, 2288).
  TritonModule m = triton_of("input a: bool[6, 47]\ny = add(a, a)\noutput y\n");
  std::string code = all_code(m);
  EXPECT_TRUE(contains(code, "tmp1 = tmp0 | tmp0")) << code;
  EXPECT_FALSE(contains(code, "tmp0 + tmp0")) << code;
  // Integers still add.
  EXPECT_TRUE(contains(all_code(triton_of("input a: u8[8]\ny = add(a, a)\noutput y\n")),
                       "tmp1 = tmp0 + tmp0"));
}

TEST(TritonOpSemantics, F32DivisionIsCorrectlyRounded) {
  // Triton's f32 `/` is div.full.f32 (2 ulp): x / x was not 1 (ceil gave 2, argmax moved,
  // seed 500 indices 4736 and 123) and x / 1.0 was not x (var of one element gave inf).
  TritonModule m = triton_of(
      "input x: f32[17, 3]\nq = div(x, x)\nr = reciprocal(x)\nv = var(x) {axes=[1]}\n"
      "input d: f64[4]\nh = div(d, d)\noutput q\noutput r\noutput v\noutput h\n");
  std::string code = all_code(m);
  EXPECT_TRUE(contains(code, "tl.div_rn(tmp0, tmp0)")) << code;
  EXPECT_TRUE(contains(code, "tl.div_rn(1.0, tmp0)")) << code;
  // f64's `/` is div.rn.f64 already (and tl.div_rn takes only fp32).
  EXPECT_TRUE(contains(code, "tmp1 = tmp0 / tmp0")) << code;
}

TEST(TritonOpSemantics, SubnormalConstantIsAnF32Tensor) {
  // Triton types a subnormal Python float as fp64, which tl.div_rn rejects.
  TritonModule m = triton_of(
      "input x: f32[8]\nc = full() {dtype=f32, shape=[], value=1e-40}\ny = div(x, c)\n"
      "output y\n");
  std::string code = all_code(m);
  EXPECT_TRUE(contains(code, "tl.full([1], 1e-40, tl.float32)")) << code;
  EXPECT_TRUE(contains(code, "tl.div_rn(tmp0, tmp1)")) << code;
}

TEST(TritonOpSemantics, IntegerPowSquaresInTheIntegerType) {
  // Through libdevice's f64 pow, pow(3, 1) of u8 and i8 truncated to 2 (seed 500 indices 4373,
  // 9194) and u8 cubes beyond 255 converted to undefined values (index 573).
  TritonModule m = triton_of(
      "input x: u8[5, 7]\nc = full() {dtype=u8, shape=[], value=3.0}\ny = pow(x, c)\n"
      "input z: i64[4]\nw = pow(z, z)\ninput f: f32[4]\ng = pow(f, f)\n"
      "output y\noutput w\noutput g\n");
  std::string code = all_code(m);
  EXPECT_TRUE(contains(code, "= _coil_int_pow(tmp0, tmp1, 8)")) << code;
  EXPECT_TRUE(contains(code, "= _coil_int_pow(tmp0, tmp0, 63)")) << code;
  EXPECT_TRUE(contains(code, "libdevice.pow(tmp0, tmp0)")) << code;  // floats keep libdevice's
  EXPECT_FALSE(contains(code, "tl.float64")) << code;
  EXPECT_TRUE(contains(m.source, "def _coil_int_pow(base, exponent, BITS: tl.constexpr):\n"));
  EXPECT_TRUE(contains(m.source, "    for i in tl.static_range(BITS):\n"));
  EXPECT_TRUE(contains(m.source, "result = tl.where(((exponent >> i) & 1) != 0, result * base"));
}

// CompileOptions::mode reaches the module: max-autotune says so in a COIL_AUTOTUNE_MODE global
// that coil_runtime's decorators read; the default mode writes nothing (goldens unchanged).
TEST(TritonModule, MaxAutotuneModeIsWrittenIntoTheModule) {
  Graph g = parse_graph("input x: f32[64, 32]\ny = exp(x)\noutput y\n");
  CompileOptions o;
  o.device = "cuda";
  EXPECT_EQ(generate_gpu_module(g, o).source.find("COIL_AUTOTUNE_MODE"), std::string::npos);
  o.mode = "max-autotune";
  std::string source = generate_gpu_module(g, o).source;
  size_t at = source.find("COIL_AUTOTUNE_MODE = 'max-autotune'");
  ASSERT_NE(at, std::string::npos) << source;
  EXPECT_LT(at, source.find("@heuristics."));  // before any kernel is decorated
}

// Size-generic modules (docs/dynamic-shapes.md, "GPU"): what the text may not take from the
// sizes it was generated at.
std::string size_generic_source(const std::string& text) {
  CompileOptions o;
  o.device = "cuda";
  return generate_gpu_program(parse_graph(text), o).triton.source;
}

TEST(TritonSizeGeneric, IndexWidthFollowsTheNominalSizeNotTheHints) {
  // Rows of 2^24: at the representative sizes (97, and 157 for the check) the buffer's count
  // is 1.6e9 and 2.6e9, either side of int32; the nominal 1024 rows decide: int64 indexing,
  // and no int32 guard.
  std::string big = size_generic_source("input x: f32[n, 16777216]\ny = relu(x)\noutput y\n");
  EXPECT_NE(big.find("tl.program_id(0).to(tl.int64)"), std::string::npos) << big;
  EXPECT_EQ(big.find("<= 2147483647"), std::string::npos) << big;
  // Rows of 64: int32, under a guard the wrapper checks per call.
  std::string small = size_generic_source("input x: f32[n, 64]\ny = relu(x)\noutput y\n");
  EXPECT_EQ(small.find("tl.int64"), std::string::npos) << small;
  EXPECT_NE(small.find("(64*ks0 <= 2147483647, '64*ks0 <= 2147483647')"), std::string::npos)
      << small;
}

TEST(TritonSizeGeneric, SymbolicRowsAreLoopedAndKeepTheirMasks) {
  std::string s = size_generic_source("input x: f32[8, n]\ny = softmax(x) {axis=-1}\noutput y\n");
  EXPECT_NE(s.find("@heuristics.reduction(size_hints={'x': 8, 'r0_': 1024}"), std::string::npos)
      << s;
  EXPECT_EQ(s.find("persistent_reduction"), std::string::npos) << s;
  EXPECT_NE(s.find("r0_mask = r0_index < r0_numel"), std::string::npos) << s;
  EXPECT_EQ(s.find("    r0_numel = "), std::string::npos) << s;  // the argument itself
  // The same rows of a constant length stay persistent.
  std::string c =
      size_generic_source("input x: f32[n, 1000]\ny = softmax(x) {axis=-1}\noutput y\n");
  EXPECT_NE(c.find("persistent_reduction"), std::string::npos) << c;
}

TEST(TritonSizeGeneric, FusionRulesDoNotReadTheHintOfASymbolicRowLength) {
  // A decoder step's KV caches grow by one row each (bench/gpu/llama_decode.py): 4 rows of
  // (n + 1) * 64 elements, short at n = 97 and long at n = 157 for the outer-loop fusion rule
  // (kLongRowElements), which fused the value cache's concat into the key's kernel at one
  // size and not at the other. The module was refused, and on the H100 the Llama step was
  // compiled for every length (2026-12-07). A symbolic row counts as long.
  std::string s = size_generic_source(
      "input p: f32[1, 1, 512]\ninput ck: f32[1, 4, n, 64]\ninput cv: f32[1, 4, n, 64]\n"
      "r = reshape(p) {shape=[1, 1, 2, 4, 64]}\npm = permute(r) {dims=[2, 0, 3, 1, 4]}\n"
      "k1 = slice(pm) {dim=0, start=0, end=1}\nv1 = slice(pm) {dim=0, start=1, end=2}\n"
      "kr = reshape(k1) {shape=[1, 4, 1, 64]}\nvr = reshape(v1) {shape=[1, 4, 1, 64]}\n"
      "kn = sigmoid(kr)\nk = concat(ck, kn) {dim=2}\nv = concat(cv, vr) {dim=2}\n"
      "output k\noutput v\n");
  EXPECT_NE(s.find("# graph nodes: k (concat)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("# graph nodes: v (concat <- reshape, permute, slice)\n"), std::string::npos)
      << s;
}

TEST(TritonSizeGeneric, WhatCannotStaySymbolicIsRefusedNamingIt) {
  try {
    size_generic_source(
        "input x: f32[n, 2, 8, 8]\ninput w: f32[3, 2, 3, 3]\ny = conv2d(x, w)\noutput y\n");
    FAIL() << "expected an UnsupportedError";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d out0 has symbolic sizes"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace coil
