// The shared code generation core (src/codegen/): every loop op has a spelling in every
// printer, and kernel names come from structured provenance (codegen/kernel_names.h).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen/cpp/cpp_printer.h"
#include "codegen/kernel_names.h"
#include "codegen/triton/triton_printer.h"
#include "driver/pipeline.h"
#include "graph/decompositions.h"
#include "graph/op_registry.h"
#include "graph/text_format.h"

namespace coil {
namespace {

// The list's sub-lists partition it in enum order, and tables sized by kNumLoopOps cover it.
#define COIL_TEST_COUNT(name, arity, doc) +1
static_assert(kNumLoopOps == static_cast<int>(LoopOp::store) + 1);
static_assert(kNumLoopOps == 0 COIL_LOOP_SOURCE_OPS(COIL_TEST_COUNT)
                                 COIL_LOOP_MATH_OPS(COIL_TEST_COUNT)
                                     COIL_LOOP_EFFECT_OPS(COIL_TEST_COUNT));
#undef COIL_TEST_COUNT

std::vector<LoopOp> math_ops() {
  return {
#define COIL_TEST_OP(name, arity, doc) LoopOp::name,
      COIL_LOOP_MATH_OPS(COIL_TEST_OP)
#undef COIL_TEST_OP
  };
}

TEST(LoopOpSpellings, EveryMathOpHasAScalarAndATritonSpelling) {
  // The compile-time guarantee is -Werror=switch over switches without `default:` (loop_ops.h);
  // this checks that each spelling is also a real one (no op falls through to an error).
  for (LoopOp o : math_ops()) {
    for (DType t : {DType::F32, DType::I64}) {
      BodyOp op;
      op.op = o;
      op.dtype = t;
      std::vector<std::string> args = {"a", "b", "c"};
      std::vector<DType> dts(3, t);
      args.resize(static_cast<size_t>(loop_op_arity(o)));
      dts.resize(args.size());
      if (o == LoopOp::where) dts[0] = DType::Bool;
      std::string cpp, triton;
      EXPECT_NO_THROW(cpp = cpp_scalar_op(op, args, dts)) << loop_op_name(o);
      EXPECT_NO_THROW(triton = triton_op(op, args, dts)) << loop_op_name(o);
      EXPECT_FALSE(cpp.empty()) << loop_op_name(o);
      EXPECT_FALSE(triton.empty()) << loop_op_name(o);
      for (const std::string& a : args) {
        EXPECT_NE(cpp.find(a), std::string::npos) << loop_op_name(o) << ": " << cpp;
        EXPECT_NE(triton.find(a), std::string::npos) << loop_op_name(o) << ": " << triton;
      }
    }
  }
}

TEST(LoopOpSpellings, TheIrDumpNamesEveryOp) {
  LoopBody body;
  int x = body.load(0, sym::Expr(0), DType::F32);
  for (LoopOp o : math_ops()) {
    BodyOp op;
    op.op = o;
    for (int k = 0; k < loop_op_arity(o); ++k) op.args[static_cast<size_t>(k)] = x;
    body.append(op);
  }
  std::string dump = to_string(body);
  for (LoopOp o : math_ops())
    EXPECT_NE(dump.find(fmt::format(" = {}(", loop_op_name(o))), std::string::npos)
        << loop_op_name(o);
}

Origin origin(int node, std::string op, std::string composite = "", bool data = false) {
  Origin o;
  o.node = node;
  o.name = fmt::format("n{}", node);
  o.op = std::move(op);
  o.composite = std::move(composite);
  o.data_movement = data;
  return o;
}

TEST(KernelNames, CompositesFirstInGraphOrderThenOpsDeduplicated) {
  // Given in any order, with repeats: named in graph order.
  std::vector<Origin> o = {
      origin(5, "mul"),  origin(2, "sum", "layer_norm"), origin(1, "transpose", "", true),
      origin(3, "relu"), origin(4, "exp", "softmax"),    origin(2, "sum", "layer_norm"),
      origin(6, "relu")};
  EXPECT_EQ(fused_kernel_name("cpp_fused", o, 3), "cpp_fused_layer_norm_softmax_relu_mul_3");
  // Views and sources name a kernel only when nothing else does.
  EXPECT_EQ(fused_kernel_name("triton_poi_fused", {origin(1, "transpose", "", true)}, 0),
            "triton_poi_fused_transpose_0");
  // Bounded: at most kMaxKernelNameParts ops.
  std::vector<Origin> many;
  for (int i = 0; i < 10; ++i) many.push_back(origin(i, fmt::format("op{}", i)));
  EXPECT_EQ(kernel_name_parts(many).size(), kMaxKernelNameParts);
  EXPECT_EQ(fused_kernel_name("cpp_fused", many, 1), "cpp_fused_op0_op1_op2_op3_1");
}

GeneratedProgram generate(const std::string& text, const std::string& device = "cpu") {
  CompileOptions o;
  o.device = device;
  return generate_program(parse_graph(text, "<test>"), o);
}

std::vector<std::string> cpu_names(const GeneratedProgram& g) {
  std::vector<std::string> out;
  for (const auto& k : g.module.kernels) out.push_back(k.name);
  return out;
}

std::vector<std::string> triton_names(const GeneratedProgram& g) {
  std::vector<std::string> out;
  for (const auto& k : g.triton.kernels) out.push_back(k.name);
  return out;
}

constexpr const char* kLayerNorm = R"(
input x: f32[32, 64]
input w: f32[64]
input b: f32[64]
y = layer_norm(x, w, b)
output y
)";

constexpr const char* kSoftmax = R"(
input x: f32[128, 1000]
y = softmax(x) {axis=-1}
output y
)";

TEST(KernelNames, LayerNormIsNamedForTheComposite) {
  EXPECT_EQ(cpu_names(generate(kLayerNorm)), std::vector<std::string>{"cpp_fused_layer_norm_0"});
  EXPECT_EQ(triton_names(generate(kLayerNorm, "cuda")),
            std::vector<std::string>{"triton_per_fused_layer_norm_0"});
}

TEST(KernelNames, SoftmaxIsNamedForTheComposite) {
  EXPECT_EQ(cpu_names(generate(kSoftmax)), std::vector<std::string>{"cpp_fused_softmax_0"});
  EXPECT_EQ(triton_names(generate(kSoftmax, "cuda")),
            std::vector<std::string>{"triton_per_fused_softmax_0"});
}

TEST(KernelNames, LayerNormFeedingAMatmulNamesBoth) {
  GeneratedProgram g = generate(R"(
input x: f32[32, 64]
input w: f32[64]
input b: f32[64]
input m: f32[64, 48]
h = layer_norm(x, w, b)
y = matmul(h, m)
output y
)");
  std::vector<std::string> names = cpu_names(g);
  std::string all = fmt::format("{}", fmt::join(names, " "));
  EXPECT_NE(all.find("layer_norm"), std::string::npos) << all;
  EXPECT_NE(all.find("matmul"), std::string::npos) << all;
  // The layer_norm's kernel is not named for the matmul it feeds, nor for its primitives.
  for (const std::string& n : names) {
    if (n.find("layer_norm") == std::string::npos) continue;
    EXPECT_EQ(n.find("matmul"), std::string::npos) << n;
    EXPECT_EQ(n.find("sum"), std::string::npos) << n;
  }
}

TEST(KernelNames, DecompositionTemporariesNameTheirComposite) {
  Graph g = decompose_and_bind(parse_graph(kLayerNorm, "<test>"), {});
  int temporaries = 0;
  for (const auto& n : g.nodes()) {
    if (n->op->name == "input") continue;
    ++temporaries;
    EXPECT_EQ(n->name.rfind("y__layer_norm_", 0), 0u) << n->name;
    EXPECT_EQ(n->composite, "layer_norm") << n->name;
    EXPECT_EQ(n->composite_node, "y") << n->name;
    EXPECT_EQ(n->name.find("__", n->name.find("__") + 2), std::string::npos)
        << n->name << ": nested decompositions (layer_norm's mean) keep one prefix";
  }
  EXPECT_GT(temporaries, 5);
  // The loop IR records them: computed nodes and the producers inlined into each.
  GeneratedProgram p = generate(kLayerNorm);
  bool inlined = false;
  for (const ComputedBuffer& c : p.program.computations) {
    ASSERT_FALSE(c.origins.empty());
    for (const Origin& o : c.origins) {
      EXPECT_EQ(o.composite, "layer_norm") << o.name;
      inlined = inlined || o.inlined;
    }
  }
  EXPECT_TRUE(inlined);
  EXPECT_NE(p.module.source.find("// graph nodes: y__layer_norm_"), std::string::npos);
}

}  // namespace
}  // namespace coil
