// The C ABI (include/coil/coil_c.h) through libcoil_c.so, as Python's ctypes calls it: graphs
// built and parsed, compiled with JSON options, run on contiguous, strided, broadcast and
// reversed caller memory (compared with the reference interpreter or values computed here), and
// every kind of bad argument: a status and a message, never a crash.
#include "coil/coil_c.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "coil/coil.h"
#include "conformance/onnx_model_builder.h"
#include "graph/interpreter.h"
#include "graph/text_format.h"
#include "runtime/compare.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

// Owning wrappers, so that a failed assertion frees what the test made.
struct GraphHandle {
  coil_graph* g = nullptr;
  GraphHandle() { EXPECT_EQ(coil_graph_new(&g), COIL_OK); }
  explicit GraphHandle(coil_graph* p) : g(p) {}
  ~GraphHandle() { coil_graph_free(g); }
  GraphHandle(const GraphHandle&) = delete;
  GraphHandle& operator=(const GraphHandle&) = delete;
};

struct ModelHandle {
  coil_model* m = nullptr;
  ~ModelHandle() { coil_model_free(m); }
};

std::string take(char* s) {
  std::string out = s ? s : "";
  coil_free_string(s);
  return out;
}

int32_t add_input(coil_graph* g, const char* name, const char* type) {
  int32_t id = -1;
  EXPECT_EQ(coil_graph_add_input(g, name, type, &id), COIL_OK) << coil_last_error();
  return id;
}

int32_t add_node(coil_graph* g, const char* op, std::vector<int32_t> inputs,
                 const char* attrs = nullptr, const char* name = nullptr) {
  int32_t id = -1;
  EXPECT_EQ(coil_graph_add_node(g, op, inputs.data(), static_cast<int32_t>(inputs.size()), attrs,
                                name, &id),
            COIL_OK)
      << coil_last_error();
  return id;
}

// A view of a host tensor for the C ABI (strides as given, or NULL for contiguous).
struct View {
  std::vector<int64_t> shape, strides;
  coil_tensor t{};
  View(void* data, const char* dtype, std::vector<int64_t> sh, std::vector<int64_t> st = {})
      : shape(std::move(sh)), strides(std::move(st)) {
    t.data = data;
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shape.size());
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
};

// The status and message of a call.
struct Result {
  coil_status status;
  std::string message;
};
Result result(coil_status s) {
  return {s, s == COIL_OK ? "" : coil_last_error()};
}

float value(int64_t i) {
  return static_cast<float>((i * 37 % 23) - 11) / 4.0f;
}

TEST(Capi, VersionMatchesTheCli) {
  EXPECT_EQ(coil_abi_version(), COIL_C_ABI_VERSION);
  fs::path log = fs::temp_directory_path() / fmt::format("coil_capi_version_{}.txt", getpid());
  ASSERT_EQ(std::system(fmt::format("'{}' --version > '{}'", COIL_CLI, log.string()).c_str()), 0);
  std::string first;
  std::getline(std::ifstream(log) >> std::ws, first);
  fs::remove(log);
  EXPECT_EQ(coil_version(), first);
}

// x: f32[s0, 7], b: f32[7] and a constant w (given reversed: stride -1) through mul, add, relu
// and a row sum, at odd and even s0, against the reference interpreter.
TEST(Capi, BuildCompileRunAgainstTheInterpreter) {
  GraphHandle g;
  int32_t x = add_input(g.g, "x", "f32[s0, 7]");
  int32_t b = add_input(g.g, "b", "f32[7]");
  std::vector<float> wdata(7);
  for (int i = 0; i < 7; ++i) wdata[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i) - 1;
  View wview(wdata.data() + 6, "f32", {7}, {-1});
  int32_t w = -1;
  ASSERT_EQ(coil_graph_add_constant(g.g, "w", &wview.t, &w), COIL_OK) << coil_last_error();
  int32_t t = add_node(g.g, "mul", {x, w});
  int32_t u = add_node(g.g, "add", {t, b});
  int32_t r = add_node(g.g, "relu", {u}, "", "r");
  int32_t s = add_node(g.g, "sum", {r}, "{axes=[1], keepdim=true}");
  ASSERT_EQ(coil_graph_add_output(g.g, r, nullptr), COIL_OK);
  ASSERT_EQ(coil_graph_add_output(g.g, s, "rowsum"), COIL_OK);
  EXPECT_EQ(take([&] {
              char* type = nullptr;
              EXPECT_EQ(coil_graph_value_type(g.g, s, &type), COIL_OK);
              return type;
            }()),
            "f32[s0, 1]");
  char* text = nullptr;
  ASSERT_EQ(coil_graph_to_text(g.g, &text), COIL_OK);
  Graph reference = parse_graph(take(text));

  for (int64_t rows : {1, 5, 13}) {
    ModelHandle m;
    std::string options = fmt::format(R"({{"sizes": {{"s0": {}}}, "autotune": false}})", rows);
    ASSERT_EQ(coil_compile(g.g, options.c_str(), &m.m), COIL_OK) << coil_last_error();
    Tensor xt = Tensor::empty(DType::F32, {rows, 7}), bt = Tensor::empty(DType::F32, {7});
    for (int64_t i = 0; i < xt.numel(); ++i) xt.set_from_double(i, value(i));
    for (int64_t i = 0; i < 7; ++i) bt.set_from_double(i, value(i + 100));
    std::vector<Tensor> expected = interpret(reference, {xt, bt});

    std::vector<float> rout(static_cast<size_t>(rows * 7)), sout(static_cast<size_t>(rows));
    View in[] = {View(xt.data(), "f32", {rows, 7}), View(bt.data(), "f32", {7})};
    View out[] = {View(rout.data(), "f32", {rows, 7}), View(sout.data(), "f32", {rows, 1})};
    coil_tensor ins[] = {in[0].t, in[1].t}, outs[] = {out[0].t, out[1].t};
    ASSERT_EQ(coil_model_run(m.m, ins, 2, outs, 2), COIL_OK) << coil_last_error();
    for (int64_t i = 0; i < rows * 7; ++i)
      EXPECT_FLOAT_EQ(rout[static_cast<size_t>(i)], expected[0].item_as_double(i)) << i;
    for (int64_t i = 0; i < rows; ++i)
      EXPECT_NEAR(sout[static_cast<size_t>(i)], expected[1].item_as_double(i), 1e-5) << i;
  }
}

// z = sub(x, y) on [4, 6]: x transposed, y a broadcast row, then x with reversed rows; z into a
// strided (every other column) and a transposed output, whose gaps stay untouched.
TEST(Capi, StridedBroadcastAndReversedTensors) {
  GraphHandle g;
  int32_t x = add_input(g.g, "x", "f32[4, 6]");
  int32_t y = add_input(g.g, "y", "f32[4, 6]");
  ASSERT_EQ(coil_graph_add_output(g.g, add_node(g.g, "sub", {x, y}), "z"), COIL_OK);
  ModelHandle m;
  ASSERT_EQ(coil_compile(g.g, R"({"autotune": false, "fusion": true})", &m.m), COIL_OK)
      << coil_last_error();

  std::vector<float> xbuf(24), ybuf(6);
  for (size_t i = 0; i < 24; ++i) xbuf[i] = static_cast<float>(i) * 1.5f;
  for (size_t j = 0; j < 6; ++j) ybuf[j] = static_cast<float>(j) * 10.0f;
  // x[i][j] = xbuf[j * 4 + i] (the transpose of a [6, 4] buffer); y[i][j] = ybuf[j].
  View xt(xbuf.data(), "f32", {4, 6}, {1, 4});
  View yb(ybuf.data(), "f32", {4, 6}, {0, 1});
  const float sentinel = -12345.0f;
  std::vector<float> wide(4 * 12, sentinel);
  View zs(wide.data(), "f32", {4, 6}, {12, 2});
  coil_tensor ins[] = {xt.t, yb.t};
  ASSERT_EQ(coil_model_run(m.m, ins, 2, &zs.t, 1), COIL_OK) << coil_last_error();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 12; ++j) {
      float got = wide[static_cast<size_t>(i * 12 + j)];
      if (j % 2 == 1) {
        EXPECT_EQ(got, sentinel) << i << "," << j;
      } else {
        size_t c = static_cast<size_t>(j / 2);
        EXPECT_EQ(got, xbuf[c * 4 + static_cast<size_t>(i)] - ybuf[c]) << i << "," << j;
      }
    }

  // x with reversed rows and columns (negative strides) into a transposed output.
  std::vector<float> xc(24);
  for (size_t i = 0; i < 24; ++i) xc[i] = static_cast<float>(i * i % 17);
  View xr(xc.data() + 23, "f32", {4, 6}, {-6, -1});
  std::vector<float> zt(24, sentinel);
  View ztv(zt.data(), "f32", {4, 6}, {1, 4});
  coil_tensor ins2[] = {xr.t, yb.t};
  ASSERT_EQ(coil_model_run(m.m, ins2, 2, &ztv.t, 1), COIL_OK) << coil_last_error();
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 6; ++j)
      EXPECT_EQ(zt[j * 4 + i], xc[23 - (i * 6 + j)] - ybuf[j]) << i << "," << j;
}

TEST(Capi, ValueInfoReportAndNumThreads) {
  GraphHandle g(nullptr);
  const char* text = "input a: i32[s0, 3]\ninput b: i32[3]\nc = mul(a, b)\noutput out = c\n";
  ASSERT_EQ(coil_graph_parse(text, "m.coil", &g.g), COIL_OK) << coil_last_error();
  ModelHandle m;
  ASSERT_EQ(coil_compile(g.g, R"({"sizes": {"s0": 3}})", &m.m), COIL_OK) << coil_last_error();
  EXPECT_EQ(coil_model_num_inputs(m.m), 2);
  EXPECT_EQ(coil_model_num_outputs(m.m), 1);
  const char *name = nullptr, *dtype = nullptr;
  int32_t ndim = -1;
  const int64_t* shape = nullptr;
  ASSERT_EQ(coil_model_value_info(m.m, 0, 0, &name, &dtype, &ndim, &shape), COIL_OK);
  EXPECT_STREQ(name, "a");
  EXPECT_STREQ(dtype, "i32");
  ASSERT_EQ(ndim, 2);
  EXPECT_EQ(shape[0], 3);
  EXPECT_EQ(shape[1], 3);
  ASSERT_EQ(coil_model_value_info(m.m, 1, 0, &name, &dtype, &ndim, &shape), COIL_OK);
  EXPECT_STREQ(name, "out");
  EXPECT_EQ(ndim, 2);
  Result r = result(coil_model_value_info(m.m, 1, 1, &name, &dtype, &ndim, &shape));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message,
            "coil_model_value_info: output index 1 is out of range (the model has 1 outputs)");
  std::string report = coil_model_report_json(m.m);
  EXPECT_NE(report.find("\"kernels\""), std::string::npos) << report;
  EXPECT_NE(report.find("\"cache\""), std::string::npos) << report;

  EXPECT_EQ(coil_set_num_threads(0), COIL_OK);
  EXPECT_EQ(coil_set_num_threads(1), COIL_OK);
  std::vector<int32_t> a(9, 2), b = {1, 2, 3}, out(9, 0);
  View va(a.data(), "i32", {3, 3}), vb(b.data(), "i32", {3}), vo(out.data(), "i32", {3, 3});
  coil_tensor ins[] = {va.t, vb.t};
  ASSERT_EQ(coil_model_run(m.m, ins, 2, &vo.t, 1), COIL_OK) << coil_last_error();
  EXPECT_EQ(out, (std::vector<int32_t>{2, 4, 6, 2, 4, 6, 2, 4, 6}));
  r = result(coil_set_num_threads(-2));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "coil_set_num_threads: -2 threads (expected >= 0; 0 leaves it as is)");
}

// Sizes left unbound make a size-generic model: -1 in its specs, output shapes per call from
// coil_model_output_shape, runs at any size against the interpreter, and a misspelled size is
// still an error.
TEST(Capi, SizeGenericModelRunsAnySize) {
  GraphHandle g(nullptr);
  const char* text =
      "input x: f32[n, 6]\ninput b: f32[6]\nt = add(x, b)\ny = softmax(t) {axis=-1}\n"
      "s = sum(t) {axes=[1]}\noutput y\noutput s\n";
  ASSERT_EQ(coil_graph_parse(text, nullptr, &g.g), COIL_OK) << coil_last_error();
  ModelHandle m;
  ASSERT_EQ(coil_compile(g.g, nullptr, &m.m), COIL_OK) << coil_last_error();
  EXPECT_EQ(nlohmann::json::parse(coil_model_report_json(m.m)),
            nlohmann::json::parse(R"({"size_generic": true, "symbols": ["n"]})"));
  int32_t ndim = 0;
  const int64_t* shape = nullptr;
  ASSERT_EQ(coil_model_value_info(m.m, 1, 0, nullptr, nullptr, &ndim, &shape), COIL_OK);
  EXPECT_EQ(std::vector<int64_t>(shape, shape + ndim), (std::vector<int64_t>{-1, 6}));
  Graph ref = parse_graph(text);
  for (int64_t n : {1, 2, 7, 100}) {
    Tensor x = random_tensor(DType::F32, {n, 6}, static_cast<uint64_t>(n), -2, 2);
    Tensor b = random_tensor(DType::F32, {6}, 3, -2, 2);
    View xv(x.data(), "f32", {n, 6}), bv(b.data(), "f32", {6});
    coil_tensor ins[] = {xv.t, bv.t};
    int64_t dims[4];
    ASSERT_EQ(coil_model_output_shape(m.m, ins, 2, 1, &ndim, dims, 4), COIL_OK)
        << coil_last_error();
    EXPECT_EQ(std::vector<int64_t>(dims, dims + ndim), std::vector<int64_t>{n});
    // Every output's shape in one call: the ranks, then the sizes output after output.
    int32_t ndims[2] = {-1, -1};
    int64_t all[3] = {0, 0, 0};
    ASSERT_EQ(coil_model_output_shapes(m.m, ins, 2, ndims, 2, all, 3), COIL_OK)
        << coil_last_error();
    EXPECT_EQ(std::vector<int32_t>(ndims, ndims + 2), (std::vector<int32_t>{2, 1}));
    EXPECT_EQ(std::vector<int64_t>(all, all + 3), (std::vector<int64_t>{n, 6, n}));
    Tensor y = Tensor::zeros(DType::F32, {n, 6}), s = Tensor::zeros(DType::F32, {n});
    View yv(y.data(), "f32", {n, 6}), sv(s.data(), "f32", {n});
    coil_tensor outs[] = {yv.t, sv.t};
    ASSERT_EQ(coil_model_run(m.m, ins, 2, outs, 2), COIL_OK) << coil_last_error();
    std::vector<Tensor> want = interpret(ref, {x, b});
    EXPECT_TRUE(compare_tensors(y, want[0], default_tolerance(DType::F32)).ok) << n;
    EXPECT_TRUE(compare_tensors(s, want[1], default_tolerance(DType::F32)).ok) << n;
    // An output of another size is refused, naming it.
    Tensor wrong = Tensor::zeros(DType::F32, {n + 1});
    View wv(wrong.data(), "f32", {n + 1});
    coil_tensor bad_outs[] = {yv.t, wv.t};
    Result r = result(coil_model_run(m.m, ins, 2, bad_outs, 2));
    EXPECT_EQ(r.status, COIL_ERROR_INPUT);
    EXPECT_NE(r.message.find("output s: expected f32"), std::string::npos) << r.message;
  }
  int64_t one[1];
  Tensor x = Tensor::zeros(DType::F32, {3, 6}), b = Tensor::zeros(DType::F32, {6});
  View xv(x.data(), "f32", {3, 6}), bv(b.data(), "f32", {6});
  coil_tensor ins[] = {xv.t, bv.t};
  Result r = result(coil_model_output_shape(m.m, ins, 2, 0, &ndim, one, 1));
  EXPECT_EQ(r.message, "coil_model_output_shape: output y has 2 dims, over the capacity 1");
  int32_t ndims[2];
  int64_t two[2];
  r = result(coil_model_output_shapes(m.m, ins, 2, ndims, 2, two, 2));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message,
            "coil_model_output_shapes: the outputs have 3 dims in all, over the capacity 2");
  r = result(coil_model_output_shapes(m.m, ins, 2, ndims, 1, two, 2));
  EXPECT_EQ(r.message, "coil_model_output_shapes: the model has 2 outputs, got num_outputs 1");
  r = result(coil_model_output_shapes(m.m, ins, 1, ndims, 2, two, 2));
  EXPECT_EQ(r.message, "the model takes 2 inputs, got 1");
}

TEST(Capi, ParseAndToTextRoundTrip) {
  const char* text =
      "input x: f32[4, s0]\n"
      "const w: f32[3] = [0.5, -1.0, 2.0]\n"
      "t0 = sum(x) {axes=[1], keepdim=true}\n"
      "output y = t0\n";
  GraphHandle g(nullptr);
  ASSERT_EQ(coil_graph_parse(text, nullptr, &g.g), COIL_OK) << coil_last_error();
  char* printed = nullptr;
  ASSERT_EQ(coil_graph_to_text(g.g, &printed), COIL_OK);
  std::string once = take(printed);
  EXPECT_EQ(once, to_text(parse_graph(text)));
  GraphHandle again(nullptr);
  ASSERT_EQ(coil_graph_parse(once.c_str(), "printed.coil", &again.g), COIL_OK);
  ASSERT_EQ(coil_graph_to_text(again.g, &printed), COIL_OK);
  EXPECT_EQ(take(printed), once);

  GraphHandle bad(nullptr);
  Result r = result(coil_graph_parse("input x: f32[4]\ny = relu(x\n", nullptr, &bad.g));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "<text>:2:11: expected ')' but found end of line");
  EXPECT_EQ(bad.g, nullptr);
}

TEST(Capi, GpuModule) {
  GraphHandle g(nullptr);
  ASSERT_EQ(coil_graph_parse("input x: f32[s0, 32]\ny = exp(x)\noutput y\n", nullptr, &g.g),
            COIL_OK);
  char *source = nullptr, *report = nullptr;
  ASSERT_EQ(coil_generate_gpu_module(g.g, R"({"sizes": {"s0": 8}})", &source, &report), COIL_OK)
      << coil_last_error();
  EXPECT_NE(take(source).find("def call("), std::string::npos);
  EXPECT_NE(take(report).find("\"device\": \"cuda\""), std::string::npos);
  ASSERT_EQ(
      coil_generate_gpu_module(g.g, R"({"sizes": {"s0": 8}, "device": "cuda"})", &source, nullptr),
      COIL_OK);
  EXPECT_NE(take(source).find("def call("), std::string::npos);
  Result r = result(coil_generate_gpu_module(g.g, R"({"device": "cpu"})", &source, &report));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message,
            "coil_generate_gpu_module: options' device must be \"cuda\" (or absent), got \"cpu\"");
  EXPECT_EQ(source, nullptr);
  EXPECT_EQ(report, nullptr);
  // compile() is the CPU's: device "cuda" is refused with the C++ API's message.
  ModelHandle m;
  r = result(coil_compile(g.g, R"({"device": "cuda", "sizes": {"s0": 8}})", &m.m));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_NE(r.message.find("device 'cuda' needs a GPU"), std::string::npos) << r.message;
}

TEST(Capi, ImportOnnx) {
  fs::path file = fs::temp_directory_path() / fmt::format("coil_capi_{}.onnx", getpid());
  std::ofstream(file, std::ios::binary) << onnx_test::relu_model().SerializeAsString();
  GraphHandle g(nullptr);
  ASSERT_EQ(coil_graph_import_onnx(file.c_str(), &g.g), COIL_OK) << coil_last_error();
  fs::remove(file);
  char* text = nullptr;
  ASSERT_EQ(coil_graph_to_text(g.g, &text), COIL_OK);
  EXPECT_NE(take(text).find("relu("), std::string::npos);
  GraphHandle missing(nullptr);
  Result r = result(coil_graph_import_onnx("/nonexistent/model.onnx", &missing.g));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "/nonexistent/model.onnx: cannot open the file");
}

TEST(CapiErrors, Nodes) {
  GraphHandle g;
  int32_t x = add_input(g.g, "x", "f32[3, 4]");
  int32_t v = add_input(g.g, "v", "f32[5]");
  int32_t id = 77;
  Result r = result(coil_graph_add_node(g.g, "rleu", &x, 1, nullptr, nullptr, &id));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "node t0: unknown op 'rleu' (did you mean 'relu'?)");
  EXPECT_EQ(id, 77);  // untouched on failure
  r = result(coil_graph_add_node(g.g, "sum", &x, 1, "{axes=[1], keepdims=true}", "s", nullptr));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "unknown attribute 'keepdims' of sum (node s); did you mean 'keepdim'?");
  r = result(coil_graph_add_node(g.g, "relu", &x, 1, "{alpha=1.0}", nullptr, nullptr));
  EXPECT_EQ(r.message, "unknown attribute 'alpha' of relu (node t0); relu takes no attributes");
  r = result(coil_graph_add_node(g.g, "sum", &x, 1, "{axes=[1}", nullptr, nullptr));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "node t0: attributes '{axes=[1}': expected ']' but found '}'");
  r = result(coil_graph_add_node(g.g, "sum", &x, 1, "axes=[1]", nullptr, nullptr));
  EXPECT_EQ(r.message, "node t0: attributes 'axes=[1]': expected '{' but found 'axes'");
  int32_t xv[] = {x, v};
  r = result(coil_graph_add_node(g.g, "add", xv, 2, nullptr, "z", nullptr));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "node z: add: cannot broadcast shapes [3, 4] and [5] (dim 1: 4 vs 5)");
  r = result(coil_graph_add_node(g.g, "exp", xv, 2, nullptr, nullptr, nullptr));
  EXPECT_EQ(r.message, "node t0: exp: expected 1 inputs, got 2");
  int32_t missing = 42;
  r = result(coil_graph_add_node(g.g, "exp", &missing, 1, nullptr, nullptr, nullptr));
  EXPECT_EQ(r.message, "node t0: exp: input id 42 does not exist");
  r = result(coil_graph_add_node(g.g, "input", nullptr, 0, nullptr, nullptr, nullptr));
  EXPECT_EQ(
      r.message,
      "node t0: input: use coil_graph_add_input or coil_graph_add_constant for source values");
  r = result(coil_graph_add_node(g.g, "exp", &x, 1, nullptr, "x", nullptr));
  EXPECT_EQ(r.message, "node x: value name 'x' is defined twice");
  r = result(coil_graph_add_node(g.g, "exp", nullptr, 1, nullptr, nullptr, nullptr));
  EXPECT_EQ(r.message, "coil_graph_add_node: inputs is NULL for 1 inputs");
  // The failures added nothing: the next unnamed node is still t0.
  EXPECT_EQ(add_node(g.g, "exp", {x}), 2);
  char* type = nullptr;
  ASSERT_EQ(coil_graph_value_type(g.g, 2, &type), COIL_OK);
  EXPECT_EQ(take(type), "f32[3, 4]");
  r = result(coil_graph_value_type(g.g, 3, &type));
  EXPECT_EQ(r.message, "coil_graph_value_type: value id 3 does not exist (the graph has 3 values)");
  r = result(coil_graph_add_output(g.g, 9, nullptr));
  EXPECT_EQ(r.message, "output: node id 9 does not exist");
}

TEST(CapiErrors, TypesAndDtypes) {
  GraphHandle g;
  Result r = result(coil_graph_add_input(g.g, "x", "f33[4]", nullptr));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "input x: type 'f33[4]': unknown dtype 'f33'");
  r = result(coil_graph_add_input(g.g, "x", "f32[4, 2.5]", nullptr));
  EXPECT_EQ(r.message,
            "input x: type 'f32[4, 2.5]': expected a size (an integer or a symbol name) but found "
            "'2.5'");
  r = result(coil_graph_add_input(g.g, "x", "f32[4] junk", nullptr));
  EXPECT_EQ(r.message, "input x: type 'f32[4] junk': expected end of input but found 'junk'");
  r = result(coil_graph_add_input(g.g, "1x", "f32[4]", nullptr));
  EXPECT_EQ(r.message, "value name '1x' is not an identifier (letters, digits, '_')");
  float data[2] = {1, 2};
  View c(data, "float32", {2});
  r = result(coil_graph_add_constant(g.g, "c", &c.t, nullptr));
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message,
            "constant c: unknown dtype 'float32'; the dtypes are bool, u8, i8, i32, i64, f16, "
            "bf16, f32, f64, i16, u16, u32, u64");
  View c2(data, "f23", {2});
  r = result(coil_graph_add_constant(g.g, nullptr, &c2.t, nullptr));
  EXPECT_EQ(r.message,
            "constant: unknown dtype 'f23' (did you mean 'f32'?); the dtypes are bool, u8, i8, "
            "i32, i64, f16, bf16, f32, f64, i16, u16, u32, u64");
  View c3(nullptr, "f32", {2});
  r = result(coil_graph_add_constant(g.g, "c", &c3.t, nullptr));
  EXPECT_EQ(r.message, "constant c: data is NULL");
  View c4(data, "f32", {-2});
  r = result(coil_graph_add_constant(g.g, "c", &c4.t, nullptr));
  EXPECT_EQ(r.message, "constant c: shape [-2] has a negative size");
}

// A valid graph coil cannot compile is COIL_ERROR_UNSUPPORTED, not an input error.
TEST(CapiErrors, UnsupportedIsItsOwnStatus) {
  GraphHandle g(nullptr);
  const char* text =
      "input x: f64[1, 2, 8, 8]\ninput w: f64[3, 2, 3, 3]\ny = conv2d(x, w)\noutput y\n";
  ASSERT_EQ(coil_graph_parse(text, nullptr, &g.g), COIL_OK) << coil_last_error();
  ModelHandle m;
  Result r = result(coil_compile(g.g, nullptr, &m.m));
  EXPECT_EQ(r.status, COIL_ERROR_UNSUPPORTED);
  EXPECT_EQ(r.message, "conv2d: dtype f64 is not supported (oneDNN computes in f32)");
  EXPECT_EQ(m.m, nullptr);
}

TEST(CapiErrors, Options) {
  GraphHandle g(nullptr);
  ASSERT_EQ(coil_graph_parse("input x: f32[s0]\ny = exp(x)\noutput y\n", nullptr, &g.g), COIL_OK);
  auto compile_error = [&](const char* options) {
    ModelHandle m;
    Result r = result(coil_compile(g.g, options, &m.m));
    EXPECT_EQ(r.status, COIL_ERROR_INPUT) << options;
    EXPECT_EQ(m.m, nullptr);
    return r.message;
  };
  EXPECT_EQ(compile_error(R"({"sizes": {"s0": 4}, "fusoin": false})"),
            "options: unknown key 'fusoin' (did you mean 'fusion'?); the keys are sizes, isa, "
            "fusion, store_all_intermediates, autotune, device, precision, output_dir, "
            "debug_dir, write_graph, graph_weights, mode, remote_cache");
  // A remote cache URL is checked when the compile starts: a bad one names itself.
  EXPECT_NE(compile_error(R"({"sizes": {"s0": 4}, "remote_cache": "http://cache:80"})")
                .find("remote cache URL 'http://cache:80': only redis:// is supported"),
            std::string::npos);
  EXPECT_EQ(compile_error(R"({"sizes": {"s0": 4}, "fusion": "yes"})"),
            "options: 'fusion' must be a boolean, got a string (\"yes\")");
  EXPECT_EQ(compile_error(R"({"sizes": {"s0": 4.5}})"),
            "options: 'sizes.s0' must be an integer, got a number (4.5)");
  EXPECT_EQ(compile_error(R"({"sizes": [4]})"),
            "options: 'sizes' must be an object of symbol sizes, got an array ([4])");
  EXPECT_EQ(compile_error(R"({"isa": 3})"), "options: 'isa' must be a string, got an integer (3)");
  EXPECT_EQ(compile_error(R"([1, 2])"), "options: expected a JSON object, got an array ([1,2])");
  EXPECT_EQ(compile_error(R"({"fusion": true, "fusion": false})"),
            "options: key 'fusion' is given twice");
  std::string bad = compile_error(R"({"sizes": {"s0": 4})");
  EXPECT_TRUE(bad.starts_with("options: invalid JSON: parse error at line 1, column 20")) << bad;
  // Keys of the right type with values coil rejects: coil's own messages.
  EXPECT_NE(compile_error(R"({"sizes": {"s0": 4}, "precision": "low"})").find("low"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"sizes": {"s1": 4}})").find("s1"), std::string::npos);
}

TEST(CapiErrors, RunTensors) {
  GraphHandle g(nullptr);
  ASSERT_EQ(coil_graph_parse("input x: f32[2, 3]\ny = neg(x)\noutput y\n", nullptr, &g.g), COIL_OK);
  ModelHandle m;
  ASSERT_EQ(coil_compile(g.g, nullptr, &m.m), COIL_OK) << coil_last_error();
  std::vector<float> xbuf(6, 1.0f), ybuf(12, 0.0f);
  std::vector<double> dbuf(6);
  View x(xbuf.data(), "f32", {2, 3}), y(ybuf.data(), "f32", {2, 3});
  auto run = [&](const View& in, const View& out) {
    return result(coil_model_run(m.m, &in.t, 1, &out.t, 1));
  };
  ASSERT_EQ(run(x, y).status, COIL_OK) << coil_last_error();
  EXPECT_EQ(ybuf[5], -1.0f);

  Result r = run(View(dbuf.data(), "f64", {2, 3}), y);
  EXPECT_EQ(r.status, COIL_ERROR_INPUT);
  EXPECT_EQ(r.message, "input x: expected f32[2, 3], got f64[2, 3]");
  EXPECT_EQ(run(View(xbuf.data(), "f32", {3, 2}), y).message,
            "input x: expected f32[2, 3], got f32[3, 2]");
  EXPECT_EQ(run(x, View(dbuf.data(), "f64", {2, 3})).message,
            "output y: expected f32[2, 3], got f64[2, 3]");
  EXPECT_EQ(run(x, View(ybuf.data(), "f32", {6})).message,
            "output y: expected f32[2, 3], got f32[6]");
  EXPECT_EQ(run(View(xbuf.data(), "f3", {2, 3}), y).message,
            "input x: unknown dtype 'f3' (did you mean 'f32'?); the dtypes are bool, u8, i8, "
            "i32, i64, f16, bf16, f32, f64, i16, u16, u32, u64");
  EXPECT_EQ(run(View(nullptr, "f32", {2, 3}), y).message, "input x: data is NULL");
  EXPECT_EQ(run(x, View(ybuf.data(), "f32", {2, 3}, {0, 1})).message,
            "output y: stride 0 in dim 0 of size 2 (an output cannot broadcast)");
  EXPECT_EQ(run(x, View(ybuf.data() + 5, "f32", {2, 3}, {-3, 1})).message,
            "output y: stride -3 of dim 0 is negative (outputs need strides >= 0)");
  EXPECT_EQ(run(x, View(xbuf.data(), "f32", {2, 3})).message,
            "output y overlaps input x (outputs must not alias inputs)");
  EXPECT_EQ(run(x, View(ybuf.data(), "f32", {2, 3}, {int64_t{1} << 62, 1})).message,
            "output y: strides [4611686018427387904, 1] with shape [2, 3] reach beyond 2^63 "
            "bytes");
  EXPECT_EQ(run(View(xbuf.data(), "f32", {int64_t{1} << 62, 4}), y).message,
            "input x: shape [4611686018427387904, 4] has 2^63 elements or more");
  EXPECT_EQ(run(View(xbuf.data(), "f32", {2, 3}, {INT64_MIN, 1}), y).message,
            "input x: strides [-9223372036854775808, 1] with shape [2, 3] reach beyond 2^63 bytes");
  View bad_rank(xbuf.data(), "f32", {2, 3});
  bad_rank.t.ndim = -1;
  EXPECT_EQ(run(bad_rank, y).message, "input x: ndim -1 is out of range (0 to 64)");
  bad_rank.t.ndim = 2;
  bad_rank.t.shape = nullptr;
  EXPECT_EQ(run(bad_rank, y).message, "input x: shape is NULL for 2 dims");
  EXPECT_EQ(result(coil_model_run(m.m, &x.t, 0, &y.t, 1)).message,
            "the model takes 1 inputs, got 0");
  EXPECT_EQ(result(coil_model_run(m.m, &x.t, 1, &y.t, 2)).message,
            "the model has 1 outputs, got 2");
  EXPECT_EQ(result(coil_model_run(m.m, &x.t, 1, nullptr, 1)).message,
            "coil_model_run: outputs is NULL for 1 outputs");
}

// Every handle and pointer argument that must not be NULL: COIL_ERROR_INPUT naming the function
// and the argument; the NULL-tolerant ones (free functions, optional outputs) do nothing.
TEST(CapiErrors, NullArguments) {
  GraphHandle g;
  coil_graph* gp = nullptr;
  coil_model* mp = nullptr;
  char* s = nullptr;
  int32_t id = 0;
  struct Case {
    std::function<coil_status()> call;
    const char* message;
  };
  const Case cases[] = {
      {[&] { return coil_graph_new(nullptr); }, "coil_graph_new: out is NULL"},
      {[&] { return coil_graph_parse(nullptr, nullptr, &gp); }, "coil_graph_parse: text is NULL"},
      {[&] { return coil_graph_parse("", nullptr, nullptr); }, "coil_graph_parse: out is NULL"},
      {[&] { return coil_graph_import_onnx(nullptr, &gp); },
       "coil_graph_import_onnx: path is NULL"},
      {[&] { return coil_graph_import_onnx("m.onnx", nullptr); },
       "coil_graph_import_onnx: out is NULL"},
      {[&] { return coil_graph_to_text(nullptr, &s); }, "coil_graph_to_text: graph is NULL"},
      {[&] { return coil_graph_to_text(g.g, nullptr); }, "coil_graph_to_text: out is NULL"},
      {[&] { return coil_graph_add_input(nullptr, "x", "f32[1]", &id); },
       "coil_graph_add_input: graph is NULL"},
      {[&] { return coil_graph_add_input(g.g, nullptr, "f32[1]", &id); },
       "coil_graph_add_input: name is NULL"},
      {[&] { return coil_graph_add_input(g.g, "x", nullptr, &id); },
       "coil_graph_add_input: type is NULL"},
      {[&] { return coil_graph_add_node(nullptr, "relu", &id, 1, nullptr, nullptr, &id); },
       "coil_graph_add_node: graph is NULL"},
      {[&] { return coil_graph_add_node(g.g, nullptr, &id, 1, nullptr, nullptr, &id); },
       "coil_graph_add_node: op is NULL"},
      {[&] { return coil_graph_add_constant(nullptr, "c", nullptr, &id); },
       "coil_graph_add_constant: graph is NULL"},
      {[&] { return coil_graph_add_constant(g.g, "c", nullptr, &id); },
       "coil_graph_add_constant: value is NULL"},
      {[&] { return coil_graph_add_output(nullptr, 0, nullptr); },
       "coil_graph_add_output: graph is NULL"},
      {[&] { return coil_graph_value_type(nullptr, 0, &s); },
       "coil_graph_value_type: graph is NULL"},
      {[&] { return coil_graph_value_type(g.g, 0, nullptr); },
       "coil_graph_value_type: type is NULL"},
      {[&] { return coil_compile(nullptr, nullptr, &mp); }, "coil_compile: graph is NULL"},
      {[&] { return coil_compile(g.g, nullptr, nullptr); }, "coil_compile: out is NULL"},
      {[&] { return coil_generate_gpu_module(nullptr, nullptr, &s, &s); },
       "coil_generate_gpu_module: graph is NULL"},
      {[&] { return coil_model_value_info(nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr); },
       "coil_model_value_info: model is NULL"},
      {[&] { return coil_model_run(nullptr, nullptr, 0, nullptr, 0); },
       "coil_model_run: model is NULL"},
  };
  for (const Case& c : cases) {
    Result r = result(c.call());
    EXPECT_EQ(r.status, COIL_ERROR_INPUT) << c.message;
    EXPECT_EQ(r.message, c.message);
  }
  EXPECT_EQ(gp, nullptr);
  EXPECT_EQ(mp, nullptr);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(coil_model_num_inputs(nullptr), -1);
  EXPECT_STREQ(coil_last_error(), "coil_model_num_inputs: model is NULL");
  EXPECT_EQ(coil_model_num_outputs(nullptr), -1);
  EXPECT_EQ(coil_model_report_json(nullptr), nullptr);
  EXPECT_STREQ(coil_last_error(), "coil_model_report_json: model is NULL");
  coil_graph_free(nullptr);
  coil_model_free(nullptr);
  coil_free_string(nullptr);
}

TEST(CapiErrors, LastErrorIsPerThread) {
  GraphHandle g;
  ASSERT_EQ(coil_graph_add_input(g.g, "x", "f99[1]", nullptr), COIL_ERROR_INPUT);
  std::string other;
  std::thread([&] {
    other = coil_last_error();  // nothing failed on this thread yet
    EXPECT_EQ(coil_graph_new(nullptr), COIL_ERROR_INPUT);
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(coil_last_error(), "input x: type 'f99[1]': unknown dtype 'f99'");
}

}  // namespace
}  // namespace coil
