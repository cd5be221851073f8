// Issue 19, limits: graphs at the edges of what coil handles either work or fail with a clear
// error (never a crash, a hang or std::bad_alloc): buffers too large to allocate, element
// counts that overflow int64, 10,000 nodes, views nested 1,000 deep.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "graph/text_format.h"
#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Limits, ElementCountOverflowingInt64IsAnError) {
  // 2^32 * 2^32 elements: the count itself overflows int64.
  std::string e = testing::error_of([] {
    Graph g = parse_graph("input x: f32[4294967296, 4294967296]\ny = neg(x)\noutput y\n");
    compile(g);
  });
  EXPECT_TRUE(contains(e, "2^62")) << e;
  EXPECT_TRUE(contains(e, "x")) << e;
  // The same through a bound size.
  e = testing::error_of([] {
    Graph g = parse_graph("input x: f32[s0, s0, s0]\ny = neg(x)\noutput y\n");
    CompileOptions o;
    o.sizes = {{"s0", int64_t{1} << 22}};
    compile(g, o);
  });
  EXPECT_TRUE(contains(e, "2^62")) << e;
}

TEST(Limits, BuilderAndTextFormatShareTheElementBound) {
  // 2^31 * 2^31 = 2^62 known elements beside a symbol: the ONNX importer (through
  // Graph::add_input) accepted it and the text format refused to parse its printed graph back
  // (found by the ONNX parser's libFuzzer run on the GPU host). Both refuse it now, and both
  // accept one element fewer.
  std::string e = testing::error_of([] {
    Graph g;
    g.add_input("boxes", DType::F32,
                {sym::make_const(int64_t{1} << 31), sym::make_const(int64_t{1} << 31),
                 sym::make_symbol("N")});
  });
  EXPECT_TRUE(contains(e, "boxes")) << e;
  EXPECT_TRUE(contains(e, "2^62 or more elements")) << e;
  e = testing::error_of(
      [] { parse_graph("input boxes: f32[2147483648, 2147483648, N]\noutput boxes\n"); });
  EXPECT_TRUE(contains(e, "2^62 or more")) << e;

  Graph g;
  int x = g.add_input("x", DType::F32,
                      {sym::make_const((int64_t{1} << 31) - 1), sym::make_const(int64_t{1} << 31),
                       sym::make_symbol("N")});
  g.add_output(x, "x");
  Graph back = parse_graph(to_text(g));
  EXPECT_EQ(to_text(back), to_text(g));
}

TEST(Limits, BuffersTooLargeToAllocateAreAnError) {
  // A 256 TiB output (more than the 128 TiB of user address space, so whatever the overcommit
  // policy) from a one-element input: compiles, and running it cannot get the memory.
  Graph g = parse_graph("input x: f32[1]\ny = expand(x) {shape=[4194304, 16777216]}\noutput y\n");
  std::string e = testing::error_of([&] {
    CompiledModel m = compile(g);
    m.run({Tensor::zeros(DType::F32, {1})});
  });
  EXPECT_TRUE(contains(e, "cannot allocate 281474976710656 bytes")) << e;
  // A tensor whose byte count overflows: Tensor::empty says so.
  e = testing::error_of([] { Tensor::empty(DType::F32, {int64_t{1} << 40, int64_t{1} << 22}); });
  EXPECT_TRUE(contains(e, "overflows int64")) << e;
}

TEST(Limits, TenThousandNodesCompileAndRun) {
  std::string text = "input x: f32[8, 16]\n";
  std::string prev = "x";
  for (int i = 0; i < 10000; ++i) {
    std::string op = i % 3 == 0 ? "add" : i % 3 == 1 ? "mul" : "sub";
    text += fmt::format("t{} = {}({}, x)\n", i, op, prev);
    prev = fmt::format("t{}", i);
  }
  text += fmt::format("y = tanh({})\noutput y\n", prev);
  Graph g = parse_graph(text);
  EXPECT_TRUE(testing::matches_reference(g));
}

TEST(Limits, ViewsNestedAThousandDeepCompileAndRun) {
  std::string text = "input x: f32[6, 10]\n";
  std::string prev = "x";
  for (int i = 0; i < 1000; ++i) {
    std::string v = fmt::format("v{}", i);
    if (i % 2 == 0)
      text += fmt::format("{} = transpose({})\n", v, prev);
    else
      text += fmt::format("{} = reshape({}) {{shape=[{}]}}\n", v, prev,
                          (i / 2) % 2 == 0 ? "10, 6" : "6, 10");
    prev = v;
  }
  text += fmt::format("y = add({}, {})\noutput y\n", prev, prev);
  Graph g = parse_graph(text);
  EXPECT_TRUE(testing::matches_reference(g));
}

}  // namespace
}  // namespace coil
