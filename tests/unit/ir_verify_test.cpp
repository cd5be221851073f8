// The verifiers run after every compile pass (driver/pass_checks.h): they accept what every
// graph of the golden and fuzz corpora compiles to, and reject hand-broken graphs, loop IR and
// schedules with a message naming what is broken. Each negative test first checks that the
// unbroken version verifies, so that it can only pass through the mutation it makes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "driver/pass_checks.h"
#include "driver/pipeline.h"
#include "graph/decompositions.h"
#include "graph/text_format.h"
#include "graph/verify.h"
#include "ir/verify.h"
#include "lower/lowering.h"
#include "sched/verify.h"
#include "support/log.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

std::string joined(const std::vector<std::string>& errors) {
  return fmt::format("{}", fmt::join(errors, "\n"));
}

/// Exactly the errors of `errors` that contain `needle`: at least one.
::testing::AssertionResult has_error(const std::vector<std::string>& errors,
                                     std::string_view needle) {
  for (const auto& e : errors)
    if (e.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no error contains '" << needle << "'; errors:\n"
                                       << (errors.empty() ? "(none)" : joined(errors));
}

// ---- every real graph verifies ----------------------------------------------------------------

std::vector<fs::path> coil_files(const char* dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(COIL_SOURCE_DIR) / dir))
    if (e.path().extension() == ".coil") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

void expect_valid(const GeneratedProgram& gen) {
  EXPECT_EQ(joined(verify_graph(gen.graph, GraphStage::decomposed)), "");
  EXPECT_EQ(joined(verify_program(gen.program)), "");
  EXPECT_EQ(joined(verify_schedule(gen.program, gen.schedule, true)), "");
}

TEST(IrVerify, TestsRunWithVerificationOn) {
  // tests/support/test_main.cpp sets COIL_VERIFY_IR=1: every compile of the suites verifies.
  EXPECT_TRUE(ir_verification_enabled());
}

TEST(IrVerify, EveryCorpusGraphVerifiesOnBothTargets) {
  int verified = 0;
  for (const char* dir : {"tests/golden/data", "tests/golden/triton", "tests/fuzz/seeds"}) {
    for (const fs::path& path : coil_files(dir)) {
      SCOPED_TRACE(path.string());
      Graph g = load_graph_file(path);
      for (const char* device : {"cpu", "cuda"}) {
        CompileOptions o;
        o.isa = "avx512";
        o.autotune = false;
        o.device = device;
        GeneratedProgram gen;
        try {
          gen = generate_program(g, o);  // verifies after every pass (COIL_VERIFY_IR=1)
        } catch (const InternalError&) {
          throw;
        } catch (const Error&) {
          continue;  // a seed needing sizes, or an op the target lacks: nothing to verify
        }
        expect_valid(gen);
        ++verified;
      }
    }
  }
  EXPECT_GE(verified, 80);
}

TEST(IrVerify, VerifiesWithFusionOffAndEverythingStored) {
  Graph g = parse_graph(
      "input x: f32[16, 32]\ninput w: f32[32, 8]\ns = softmax(x) {axis=1}\n"
      "m = matmul(s, w)\ny = relu(m)\nn = layer_norm(x)\n"
      "output y\noutput n\n");
  for (bool fusion : {true, false}) {
    CompileOptions o;
    o.isa = "avx512";
    o.autotune = false;
    o.fusion = fusion;
    o.store_all_intermediates = !fusion;
    expect_valid(generate_program(g, o));
  }
}

// ---- the graph verifier -----------------------------------------------------------------------

TEST(IrVerify, GraphCompositeLeftAfterDecomposition) {
  Graph g = parse_graph("input x: f32[4, 8]\ny = softmax(x) {axis=1}\noutput y\n");
  EXPECT_EQ(joined(verify_graph(g, GraphStage::input)), "");
  EXPECT_EQ(joined(verify_graph(decompose_and_bind(g, {}), GraphStage::decomposed)), "");
  EXPECT_TRUE(has_error(verify_graph(g, GraphStage::decomposed),
                        "node y (softmax): composite op left after decomposition"));
}

TEST(IrVerify, GraphUnboundSize) {
  Graph g = parse_graph("input x: f32[s0, 8]\ny = exp(x)\noutput y\n");
  EXPECT_EQ(joined(verify_graph(g, GraphStage::input)), "");
  EXPECT_EQ(joined(verify_graph(decompose_and_bind(g, {{"s0", 3}}), GraphStage::decomposed)), "");
  EXPECT_TRUE(has_error(verify_graph(g, GraphStage::decomposed),
                        "node x (input): size s0 of f32[s0, 8] is not a bound size"));
}

TEST(IrVerify, GraphDeadNode) {
  Graph g = parse_graph("input x: f32[4]\nt = exp(x)\ny = neg(x)\noutput y\n");
  EXPECT_EQ(joined(verify_graph(g, GraphStage::input)), "");
  EXPECT_EQ(joined(verify_graph(decompose_and_bind(g, {}), GraphStage::decomposed)), "");
  EXPECT_TRUE(has_error(verify_graph(g, GraphStage::decomposed), "node t (exp): dead"));
}

// ---- the loop-IR verifier ---------------------------------------------------------------------

/// out0[x0, x1] = exp(arg0[x0, x1]) over f32[4, 8]; `edit` may break it before the store.
struct Pointwise {
  IrProgram p;
  int in = -1, out = -1;
  Pointwise() {
    in = p.add_buffer(BufferKind::Input, contiguous_layout(DType::F32, make_shape({4, 8})), 0);
    p.input_buffers.push_back(in);
    out = p.add_buffer(BufferKind::Output, contiguous_layout(DType::F32, make_shape({4, 8})), 0);
    p.output_buffers.push_back(out);
  }
  static sym::Expr x(int i) { return loop_var(i); }
  ComputedBuffer computation(int buffer) const {
    ComputedBuffer c;
    c.buffer = buffer;
    c.kind = LoopKind::Pointwise;
    c.ranges = {sym::Expr(4), sym::Expr(8)};
    Origin o;
    o.node = 1;
    o.name = "y";
    o.op = "exp";
    c.origins = {o};
    c.origin_names = describe_origins(c.origins);
    return c;
  }
  /// The valid program with the given load index, load dtype and value op.
  void build(sym::Expr load_index, DType load_dtype = DType::F32, sym::Expr store_index = {}) {
    ComputedBuffer c = computation(out);
    int v = c.body.load(in, load_index, load_dtype);
    int e = c.body.compute(LoopOp::exp, load_dtype, {v});
    c.body.store(out, store_index.defined() ? store_index : 8 * x(0) + x(1), e);
    p.computations.push_back(std::move(c));
  }
};

TEST(IrVerify, ValidPointwiseProgram) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(1));
  EXPECT_EQ(joined(verify_program(t.p)), "");
}

TEST(IrVerify, LoadDtypeDisagreesWithBuffer) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(1), DType::F64);
  auto errors = verify_program(t.p);
  EXPECT_TRUE(has_error(errors, "loads arg0 as f64, but its buffer's compute dtype is f32"));
  EXPECT_TRUE(has_error(errors, "stores a f64 value into out0 of dtype f32"));
}

TEST(IrVerify, IndexUsesALoopVariableOutsideTheNest) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(2));
  EXPECT_TRUE(
      has_error(verify_program(t.p), "index uses x2, not a loop variable of ranges [4, 8]"));
}

TEST(IrVerify, IndexUsesASizeSymbol) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + sym::make_symbol("s0"));
  EXPECT_TRUE(has_error(verify_program(t.p), "index uses s0, not a loop variable"));
}

TEST(IrVerify, StoreNotProvablyInBounds) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(1), DType::F32,
          8 * Pointwise::x(0) + Pointwise::x(1) + 1);
  EXPECT_TRUE(has_error(verify_program(t.p), "store not provably inside out0 (32 elements)"));
}

TEST(IrVerify, LoadOutOfBoundsAtACorner) {
  Pointwise t;
  t.build(9 * Pointwise::x(0) + Pointwise::x(1));  // x0=3, x1=7: 34
  EXPECT_TRUE(
      has_error(verify_program(t.p), "reads arg0 out of bounds (32 elements) at x0=3, x1=7"));
}

TEST(IrVerify, UseBeforeDefinition) {
  Pointwise t;
  int mid =
      t.p.add_buffer(BufferKind::Intermediate, contiguous_layout(DType::F32, make_shape({4, 8})));
  // out0 = exp(buf2) first, buf2 = exp(arg0) after it: the wrong order.
  ComputedBuffer reader = t.computation(t.out);
  int v = reader.body.load(mid, 8 * Pointwise::x(0) + Pointwise::x(1), DType::F32);
  reader.body.store(t.out, 8 * Pointwise::x(0) + Pointwise::x(1), v);
  ComputedBuffer writer = t.computation(mid);
  int w = writer.body.load(t.in, 8 * Pointwise::x(0) + Pointwise::x(1), DType::F32);
  writer.body.store(mid, 8 * Pointwise::x(0) + Pointwise::x(1), w);
  t.p.computations = {writer, reader};
  EXPECT_EQ(joined(verify_program(t.p)), "");
  t.p.computations = {reader, writer};
  EXPECT_TRUE(has_error(verify_program(t.p),
                        "tmp0 = load(buf2, 8*x0 + x1) : f32: reads buf2 (intermediate) before any "
                        "computation writes it"));
}

TEST(IrVerify, ReductionOpInAPointwise) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(1));
  ComputedBuffer& c = t.p.computations[0];
  LoopBody body;
  int v = body.load(t.in, 8 * Pointwise::x(0) + Pointwise::x(1), DType::F32);
  int r = body.reduction(ReductionType::sum, v, DType::F32);
  body.store(t.out, 8 * Pointwise::x(0) + Pointwise::x(1), r);
  c.body = body;
  EXPECT_TRUE(has_error(verify_program(t.p), "a reduction op in a Pointwise"));
}

TEST(IrVerify, ReductionVariableInAPointwiseAndInAStore) {
  Graph g = parse_graph("input x: f32[4, 8]\ny = sum(x) {axes=[1]}\noutput y\n");
  IrProgram p = lower_graph(decompose_and_bind(g, {}));
  EXPECT_EQ(joined(verify_program(p)), "");
  ComputedBuffer& c = p.computations.back();
  ASSERT_TRUE(c.is_reduction());
  // The store indexed by r0: every r0 would overwrite another element.
  IrProgram as_store = p;
  LoopBody b;
  for (BodyOp op : c.body.ops()) {
    if (op.op == LoopOp::store) op.index = op.index + reduction_var(0);
    b.append(op);
  }
  as_store.computations.back().body = b;
  EXPECT_TRUE(has_error(verify_program(as_store), "a store indexed by the reduction variable r0"));
  // The same body in a Pointwise: r0 is no loop variable there, and the reduction op is out of
  // place.
  IrProgram as_pointwise = p;
  as_pointwise.computations.back().kind = LoopKind::Pointwise;
  as_pointwise.computations.back().ranges = {sym::Expr(4)};
  as_pointwise.computations.back().reduction_ranges.clear();
  auto errors = verify_program(as_pointwise);
  EXPECT_TRUE(has_error(errors, "a reduction op in a Pointwise"));
  EXPECT_TRUE(has_error(errors, "index uses r0, not a loop variable of ranges [4]"));
}

TEST(IrVerify, MixedOperandDtypes) {
  Pointwise t;
  ComputedBuffer c = t.computation(t.out);
  int v = c.body.load(t.in, 8 * Pointwise::x(0) + Pointwise::x(1), DType::F32);
  int i = c.body.index_expr(Pointwise::x(1), DType::I64);
  int good = c.body.compute(LoopOp::add, DType::F32, {v, c.body.to_dtype(i, DType::F32)});
  c.body.store(t.out, 8 * Pointwise::x(0) + Pointwise::x(1), good);
  t.p.computations = {c};
  EXPECT_EQ(joined(verify_program(t.p)), "");
  ComputedBuffer bad = t.computation(t.out);
  v = bad.body.load(t.in, 8 * Pointwise::x(0) + Pointwise::x(1), DType::F32);
  i = bad.body.index_expr(Pointwise::x(1), DType::I64);
  bad.body.store(t.out, 8 * Pointwise::x(0) + Pointwise::x(1),
                 bad.body.compute(LoopOp::add, DType::F32, {v, i}));
  t.p.computations = {bad};
  EXPECT_TRUE(has_error(verify_program(t.p),
                        "= add(tmp0, tmp1) : f32: operands f32, i64 for a result of dtype f32"));
}

TEST(IrVerify, OutputNotProducedAndBufferWrittenTwice) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(1));
  IrProgram none = t.p;
  none.computations.clear();
  EXPECT_TRUE(has_error(verify_program(none), "output buffer out0 is never written"));
  IrProgram twice = t.p;
  twice.computations.push_back(twice.computations[0]);
  EXPECT_TRUE(has_error(verify_program(twice), "writes out0, which computation 0 wrote already"));
}

TEST(IrVerify, MatmulOperandOutOfItsBuffer) {
  // x @ x: one load names both operands (the body CSEs identical loads).
  EXPECT_EQ(joined(verify_program(lower_graph(decompose_and_bind(
                parse_graph("input a: f32[8, 8]\ny = matmul(a, a)\noutput y\n"), {})))),
            "");
  Graph g = parse_graph("input a: f32[16, 32]\ninput b: f32[32, 8]\ny = matmul(a, b)\noutput y\n");
  IrProgram p = lower_graph(decompose_and_bind(g, {}));
  EXPECT_EQ(joined(verify_program(p)), "");
  for (ComputedBuffer& c : p.computations) {
    if (!c.matmul) continue;
    auto spec = std::make_shared<MatmulSpec>(*c.matmul);
    spec->a.row_stride += 1;  // rows of 33: the last row runs past a's 512 elements
    c.matmul = spec;
  }
  EXPECT_TRUE(has_error(verify_program(p), "matmul operand a addresses elements 0..526 of arg0"));
}

// ---- the schedule verifier --------------------------------------------------------------------

struct Scheduled {
  IrProgram program;
  Schedule schedule;
  explicit Scheduled(const char* text) {
    program = lower_graph(decompose_and_bind(parse_graph(text), {}));
    schedule = schedule_program(program);
  }
};

constexpr const char* kTwoKernels =
    "input x: f32[64, 64]\ns = sum(x) {axes=[0], keepdim=true}\nt = sub(x, s)\n"
    "u = exp(t)\nv = sum(u) {axes=[0], keepdim=true}\ny = div(u, v)\noutput y\n";

TEST(IrVerify, ScheduleOutOfOrderKernels) {
  Scheduled s(kTwoKernels);
  ASSERT_GE(s.schedule.kernels.size(), 2u);
  EXPECT_EQ(joined(verify_schedule(s.program, s.schedule, true)), "");
  std::swap(s.schedule.kernels.front(), s.schedule.kernels.back());
  EXPECT_TRUE(has_error(verify_schedule(s.program, s.schedule, false), "before"));
  EXPECT_TRUE(has_error(verify_schedule(s.program, s.schedule, false), "writes it"));
}

TEST(IrVerify, ScheduleMissingComputation) {
  Scheduled s(kTwoKernels);
  s.schedule.kernels.pop_back();
  EXPECT_TRUE(has_error(verify_schedule(s.program, s.schedule, false), "is in no kernel"));
}

TEST(IrVerify, ScheduleLocalBufferReadByAnotherKernel) {
  Scheduled s(kTwoKernels);
  ASSERT_GE(s.schedule.kernels.size(), 2u);
  // The first kernel's output, read by a later kernel, made local to it: a dangling reference.
  KernelGroup& first = s.schedule.kernels.front();
  int b = s.program.computations[static_cast<size_t>(first.computations().back())].buffer;
  ASSERT_EQ(s.program.buffer(b).kind, BufferKind::Intermediate);
  first.local_buffers.push_back(b);
  auto errors = verify_schedule(s.program, s.schedule, false);
  EXPECT_TRUE(
      has_error(errors, fmt::format("local buffer {} is read by", s.program.buffer(b).name)));
  EXPECT_TRUE(has_error(errors, "(a dangling reference)"));
}

TEST(IrVerify, ScheduleOverlappingArenaBuffers) {
  Scheduled s(
      "input x: f32[64, 64]\na = exp(x)\nb = exp(a)\nc = sum(a) {axes=[0], keepdim=true}\n"
      "d = add(b, c)\noutput d\n");
  ScheduleOptions so;  // unfused: every intermediate is in the arena
  so.fusion.enabled = false;
  s.schedule = schedule_program(s.program, so);
  EXPECT_EQ(joined(verify_schedule(s.program, s.schedule, true)), "");
  std::vector<int> arena;
  for (const Buffer& b : s.program.buffers)
    if (s.schedule.memory.offsets[static_cast<size_t>(b.id)] >= 0) arena.push_back(b.id);
  ASSERT_GE(arena.size(), 2u);
  // a and b are both read by the last kernels: put them at one offset.
  s.schedule.memory.offsets[static_cast<size_t>(arena[1])] =
      s.schedule.memory.offsets[static_cast<size_t>(arena[0])];
  EXPECT_TRUE(has_error(verify_schedule(s.program, s.schedule, true),
                        "are live at once in overlapping arena bytes"));
}

TEST(IrVerify, ScheduleSameNestReadOfAReduction) {
  Scheduled s(
      "input x: f32[64, 64]\ns = sum(x) {axes=[1], keepdim=true}\ny = sub(x, s)\noutput y\n");
  EXPECT_EQ(joined(verify_schedule(s.program, s.schedule, true)), "");
  // Merge every nest of the kernel into one: the pointwise reads the sum inside the sum's nest.
  KernelGroup& k = s.schedule.kernels.front();
  ASSERT_GE(k.nests.size(), 2u);
  for (size_t n = 1; n < k.nests.size(); ++n)
    k.nests[0].computations.insert(k.nests[0].computations.end(), k.nests[n].computations.begin(),
                                   k.nests[n].computations.end());
  k.nests.resize(1);
  EXPECT_TRUE(has_error(verify_schedule(s.program, s.schedule, false),
                        "(a reduction's value is not ready inside its nest)"));
}

// ---- the pipeline: errors name the pass, the dump names every pass ----------------------------

TEST(IrVerify, FailureIsAnInternalErrorNamingThePass) {
  Pointwise t;
  t.build(8 * Pointwise::x(0) + Pointwise::x(2));
  try {
    after_ir_pass("simplify_indices", t.p);
    FAIL() << "no error";
  } catch (const InternalError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("IR verifier: the loop IR after pass simplify_indices breaks 1 invariant"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("index uses x2"), std::string::npos) << m;
  }
}

TEST(IrVerify, DumpNamesEveryPassInOrder) {
  Graph g = parse_graph(
      "input x: f32[16, 32]\ninput w: f32[32, 8]\nm = matmul(x, w)\ny = relu(m)\noutput y\n");
  CompileOptions o;
  o.isa = "avx512";
  o.autotune = false;
  set_log_channels("ir_passes");
  ::testing::internal::CaptureStderr();
  generate_program(g, o);
  std::string log = ::testing::internal::GetCapturedStderr();
  set_log_channels("");
  size_t at = 0;
  for (std::string_view pass : pipeline_passes()) {
    size_t next = log.find(fmt::format("[coil:ir_passes] after {} (", pass), at);
    EXPECT_NE(next, std::string::npos) << pass << " missing or out of order in:\n" << log;
    if (next != std::string::npos) at = next;
  }
  EXPECT_NE(log.find("after decompose_and_bind (graph):\ninput x: f32[16, 32]"), std::string::npos);
  EXPECT_NE(log.find("after fuse (schedule):\nkernel 0:"), std::string::npos) << log;
  EXPECT_NE(log.find("after plan_memory (schedule):"), std::string::npos);
  // Deterministic: a second run prints the same bytes.
  set_log_channels("ir_passes");
  ::testing::internal::CaptureStderr();
  generate_program(g, o);
  std::string again = ::testing::internal::GetCapturedStderr();
  set_log_channels("");
  EXPECT_EQ(log, again);
}

}  // namespace
}  // namespace coil
