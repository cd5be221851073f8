// The ONNX recurrent ops (LSTM, GRU, RNN; src/frontend/onnx/onnx_ops_rnn.cpp) against a plain
// loop implementation of ONNX's equations written here in double precision: every direction,
// both layouts, with and without bias, initial states and peepholes, clip, input_forget,
// linear_before_reset, non-default activations and omitted outputs, at odd sizes. The grid runs
// the imported graph through the reference interpreter; a few cases also compile and run
// (against the interpreter). ONNX's node tests of these ops are in allowlist.txt, torch's
// nn.LSTM / nn.GRU / nn.RNN in onnx_models_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/interpreter.h"
#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

using namespace onnx_test;
using coil::testing::error_of;

struct RnnCase {
  std::string op;  // LSTM, GRU, RNN
  std::string direction;
  int64_t seq, batch, input, hidden;
  int layout = 0;
  bool bias = true, initial = false, peepholes = false, seq_lens = false;
  double clip = 0;  // 0: no clip attribute
  bool input_forget = false, linear_before_reset = false;
  std::vector<std::string> activations = {};  // empty: the attribute is absent (the defaults)
  bool want_y = true, want_c = true;          // Y and (LSTM) Y_c; Y_h is always wanted
  bool f64 = false;                           // double instead of float

  int64_t dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int64_t gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  bool lstm() const { return op == "LSTM"; }
};

void PrintTo(const RnnCase& c, std::ostream* os) {
  *os << c.op << " " << c.direction << " S" << c.seq << " B" << c.batch << " I" << c.input << " H"
      << c.hidden << " layout " << c.layout << (c.bias ? " bias" : "")
      << (c.initial ? " initial" : "") << (c.peepholes ? " P" : "") << (c.clip ? " clip" : "")
      << (c.input_forget ? " input_forget" : "") << (c.linear_before_reset ? " lbr" : "")
      << (c.f64 ? " f64" : "");
  for (const auto& a : c.activations) *os << " " << a;
}

// The inputs of the node in ONNX's order (X, W, R, B, sequence_lens, initial_h, initial_c, P);
// names of absent ones are "".
struct RnnData {
  std::vector<std::string> names;
  std::vector<Tensor> tensors;  // graph inputs, in order (sequence_lens is an initializer)
};

std::vector<int64_t> state_shape(const RnnCase& c) {
  return c.layout == 0 ? std::vector<int64_t>{c.dirs(), c.batch, c.hidden}
                       : std::vector<int64_t>{c.batch, c.dirs(), c.hidden};
}

onnx::ModelProto rnn_model(const RnnCase& c, RnnData* data, uint64_t seed) {
  onnx::ModelProto m = empty_model(14);
  auto* g = m.mutable_graph();
  int64_t d = c.dirs(), gh = c.gates() * c.hidden;
  int32_t elem = c.f64 ? TP::DOUBLE : TP::FLOAT;
  DType dtype = c.f64 ? DType::F64 : DType::F32;
  auto input = [&](const std::string& name, std::vector<int64_t> shape, double scale) {
    set_type(g->add_input(), name, elem, shape);
    data->tensors.push_back(random_tensor(dtype, shape, seed++, -scale, scale));
    data->names.push_back(name);
  };
  auto absent = [&] { data->names.push_back(""); };
  std::vector<int64_t> x_shape = c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input}
                                               : std::vector<int64_t>{c.batch, c.seq, c.input};
  // Weights of about 1 / sqrt(H), as torch initializes them, so that the states neither
  // vanish nor saturate over the steps.
  double w = 1.0 / std::sqrt(static_cast<double>(c.hidden));
  input("X", x_shape, 1.0);
  input("W", {d, gh, c.input}, w);
  input("R", {d, gh, c.hidden}, w);
  if (c.bias) {
    input("B", {d, 2 * gh}, w);
  } else if (c.seq_lens || c.initial || c.peepholes) {
    absent();
  }
  if (c.seq_lens) {
    auto* t = g->add_initializer();
    t->set_name("sequence_lens");
    t->set_data_type(TP::INT32);
    t->add_dims(c.batch);
    for (int64_t b = 0; b < c.batch; ++b) t->add_int32_data(static_cast<int32_t>(c.seq));
    data->names.push_back("sequence_lens");
  } else if (c.initial || c.peepholes) {
    absent();
  }
  if (c.initial) {
    input("initial_h", state_shape(c), 1.0);
    if (c.lstm()) input("initial_c", state_shape(c), 1.0);
  } else if (c.peepholes) {
    absent(), absent();
  }
  if (c.peepholes) input("P", {d, 3 * c.hidden}, 1.0);

  std::vector<std::string> outs{c.want_y ? "Y" : "", "Y_h"};
  if (c.lstm() && c.want_c) outs.push_back("Y_c");
  auto* node = add_node(m, c.op, data->names, outs, "rnn");
  add_int_attr(node, "hidden_size", c.hidden);
  if (c.layout) add_int_attr(node, "layout", c.layout);
  if (c.input_forget) add_int_attr(node, "input_forget", 1);
  if (c.linear_before_reset) add_int_attr(node, "linear_before_reset", 1);
  auto* dir = node->add_attribute();
  dir->set_name("direction");
  dir->set_type(onnx::AttributeProto::STRING);
  dir->set_s(c.direction);
  if (c.clip > 0) {
    auto* a = node->add_attribute();
    a->set_name("clip");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(c.clip));
  }
  if (!c.activations.empty()) {
    auto* a = node->add_attribute();
    a->set_name("activations");
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const auto& s : c.activations) a->add_strings(s);
  }
  std::vector<int64_t> y_shape = c.layout == 0 ? std::vector<int64_t>{c.seq, d, c.batch, c.hidden}
                                               : std::vector<int64_t>{c.batch, c.seq, d, c.hidden};
  if (c.want_y) set_type(g->add_output(), "Y", elem, y_shape);
  set_type(g->add_output(), "Y_h", elem, state_shape(c));
  if (c.lstm() && c.want_c) set_type(g->add_output(), "Y_c", elem, state_shape(c));
  return m;
}

// --- the reference: ONNX's equations, one element at a time, in double ---

double activation(const std::string& name, double v) {
  if (name == "Sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (name == "Tanh") return std::tanh(v);
  if (name == "Relu") return v > 0 ? v : 0;
  ADD_FAILURE() << "activation " << name;
  return 0;
}

struct Reference {
  std::vector<double> y, y_h, y_c;  // in the layout of the case
};

Reference reference(const RnnCase& c, const RnnData& data) {
  auto get = [&](const std::string& name) -> const Tensor* {
    size_t k = 0;
    for (const auto& n : data.names) {
      if (n == name) return &data.tensors[k];
      if (!n.empty() && n != "sequence_lens") ++k;
    }
    return nullptr;
  };
  const Tensor &X = *get("X"), &W = *get("W"), &R = *get("R");
  const Tensor *B = get("B"), *H0 = get("initial_h"), *C0 = get("initial_c"), *P = get("P");
  int64_t S = c.seq, N = c.batch, I = c.input, H = c.hidden, D = c.dirs(), G = c.gates();
  size_t acts = c.lstm() ? 3 : c.op == "GRU" ? 2 : 1;
  std::vector<std::string> names = c.activations;
  if (names.empty()) {
    for (int64_t d = 0; d < D; ++d) {
      if (c.lstm()) names.insert(names.end(), {"Sigmoid", "Tanh", "Tanh"});
      if (c.op == "GRU") names.insert(names.end(), {"Sigmoid", "Tanh"});
      if (c.op == "RNN") names.push_back("Tanh");
    }
  }
  auto x_at = [&](int64_t t, int64_t b, int64_t i) {
    return X.item_as_double(c.layout == 0 ? (t * N + b) * I + i : (b * S + t) * I + i);
  };
  auto state_index = [&](int64_t d, int64_t b, int64_t j) {
    return c.layout == 0 ? (d * N + b) * H + j : (b * D + d) * H + j;
  };
  auto y_index = [&](int64_t t, int64_t d, int64_t b, int64_t j) {
    return c.layout == 0 ? ((t * D + d) * N + b) * H + j : ((b * S + t) * D + d) * H + j;
  };
  Reference out;
  out.y.assign(static_cast<size_t>(S * D * N * H), 0);
  out.y_h.assign(static_cast<size_t>(D * N * H), 0);
  out.y_c = out.y_h;
  // The attribute is a float: 0.9 is 0.89999998.
  double threshold = static_cast<float>(c.clip);
  auto clip = [&](double v) { return c.clip > 0 ? std::clamp(v, -threshold, threshold) : v; };
  for (int64_t d = 0; d < D; ++d) {
    auto act = [&](size_t which, double v) {
      return activation(names[static_cast<size_t>(d) * acts + which], v);
    };
    // W row r of gate k is W[d, k * H + j]; the bias of gate k: Wb then Rb.
    auto wb = [&](int64_t k, int64_t j) {
      return B ? B->item_as_double(d * 2 * G * H + k * H + j) : 0.0;
    };
    auto rb = [&](int64_t k, int64_t j) {
      return B ? B->item_as_double(d * 2 * G * H + G * H + k * H + j) : 0.0;
    };
    auto xw = [&](int64_t t, int64_t b, int64_t k, int64_t j) {
      double s = 0;
      for (int64_t i = 0; i < I; ++i)
        s += x_at(t, b, i) * W.item_as_double((d * G * H + k * H + j) * I + i);
      return s;
    };
    auto hr = [&](const std::vector<double>& h, int64_t b, int64_t k, int64_t j) {
      double s = 0;
      for (int64_t i = 0; i < H; ++i)
        s += h[static_cast<size_t>(b * H + i)] * R.item_as_double((d * G * H + k * H + j) * H + i);
      return s;
    };
    std::vector<double> h(static_cast<size_t>(N * H), 0), cs = h;
    for (int64_t b = 0; b < N; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        if (H0) h[static_cast<size_t>(b * H + j)] = H0->item_as_double(state_index(d, b, j));
        if (C0) cs[static_cast<size_t>(b * H + j)] = C0->item_as_double(state_index(d, b, j));
      }
    }
    bool reverse = c.direction == "reverse" || d == 1;
    for (int64_t step = 0; step < S; ++step) {
      int64_t t = reverse ? S - 1 - step : step;
      std::vector<double> nh = h, nc = cs;
      for (int64_t b = 0; b < N; ++b) {
        for (int64_t j = 0; j < H; ++j) {
          size_t at = static_cast<size_t>(b * H + j);
          auto pre = [&](int64_t k) {
            return xw(t, b, k, j) + hr(h, b, k, j) + wb(k, j) + rb(k, j);
          };
          if (c.lstm()) {  // gates i, o, f, c; peepholes i, o, f
            auto p = [&](int64_t k) { return P ? P->item_as_double(d * 3 * H + k * H + j) : 0.0; };
            double i = act(0, clip(pre(0) + p(0) * cs[at]));
            double f = c.input_forget ? 1 - i : act(0, clip(pre(2) + p(2) * cs[at]));
            double g = act(1, clip(pre(3)));
            nc[at] = f * cs[at] + i * g;
            double o = act(0, clip(pre(1) + p(1) * nc[at]));
            nh[at] = o * act(2, nc[at]);
          } else if (c.op == "GRU") {  // gates z, r, h
            double z = act(0, clip(pre(0))), r = act(0, clip(pre(1)));
            double hin;
            if (c.linear_before_reset) {
              hin = xw(t, b, 2, j) + wb(2, j) + r * (hr(h, b, 2, j) + rb(2, j));
            } else {
              std::vector<double> rh(h.size());
              for (int64_t i = 0; i < H; ++i) {
                size_t ai = static_cast<size_t>(b * H + i);
                rh[ai] =
                    act(0, clip(xw(t, b, 1, i) + hr(h, b, 1, i) + wb(1, i) + rb(1, i))) * h[ai];
              }
              hin = xw(t, b, 2, j) + wb(2, j) + hr(rh, b, 2, j) + rb(2, j);
            }
            double hh = act(1, clip(hin));
            nh[at] = (1 - z) * hh + z * h[at];
          } else {
            nh[at] = act(0, clip(pre(0)));
          }
          out.y[static_cast<size_t>(y_index(t, d, b, j))] = nh[at];
        }
      }
      h = nh, cs = nc;
    }
    for (int64_t b = 0; b < N; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        out.y_h[static_cast<size_t>(state_index(d, b, j))] = h[static_cast<size_t>(b * H + j)];
        out.y_c[static_cast<size_t>(state_index(d, b, j))] = cs[static_cast<size_t>(b * H + j)];
      }
    }
  }
  return out;
}

// f32 results within 1e-5 + 1e-4 * |want| of the double reference; f64 ones within 1e-9 (the
// same arithmetic in another order).
::testing::AssertionResult near(const Tensor& got, const std::vector<double>& want,
                                const char* what) {
  double atol = got.dtype() == DType::F64 ? 1e-9 : 1e-5;
  double rtol = got.dtype() == DType::F64 ? 1e-9 : 1e-4;
  if (got.numel() != static_cast<int64_t>(want.size()))
    return ::testing::AssertionFailure()
           << what << ": " << got.numel() << " elements, expected " << want.size();
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.item_as_double(i), w = want[static_cast<size_t>(i)];
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w)))
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << g << ", expected " << w;
  }
  return ::testing::AssertionSuccess();
}

Graph import_rnn(const onnx::ModelProto& m) {
  return import_onnx_bytes(m.SerializeAsString(), "rnn.onnx");
}

// The grid: each op in each direction and layout, twice: once small (sequence 1 or an odd
// batch, hidden 1) and once with every option the op has switched on or varied.
std::vector<RnnCase> grid() {
  std::vector<RnnCase> cases;
  int k = 0;
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      for (int layout : {0, 1}) {
        ++k;
        RnnCase small{op, dir, k % 2 ? 1 : 3, k % 3 ? 3 : 1, 2, 1, layout};
        small.bias = k % 2 == 0;
        small.want_y = k % 4 != 1;
        small.want_c = k % 3 != 0;
        cases.push_back(small);
        RnnCase full{op, dir, 5 + k % 3, 3, 5, 7, layout};
        full.initial = true;
        full.seq_lens = k % 2 == 1;
        full.peepholes = full.lstm();
        full.clip = k % 2 ? 0.9 : 0;
        full.input_forget = full.lstm() && layout == 1;
        full.linear_before_reset = full.op == "GRU" && layout == 1;
        std::vector<std::string> acts;
        for (int64_t d = 0; d < full.dirs(); ++d) {
          if (full.lstm()) acts.insert(acts.end(), {"Tanh", "Sigmoid", "Relu"});
          if (full.op == "GRU") acts.insert(acts.end(), {"Sigmoid", d ? "Relu" : "Tanh"});
          if (full.op == "RNN") acts.push_back(d ? "Sigmoid" : "Relu");
        }
        if (k % 3 != 1) full.activations = acts;
        full.f64 = k % 6 == 5;  // one case of each op in double
        cases.push_back(full);
      }
    }
  }
  return cases;
}

class OnnxRnn : public ::testing::TestWithParam<RnnCase> {};

TEST_P(OnnxRnn, InterpreterMatchesLoops) {
  const RnnCase& c = GetParam();
  RnnData data;
  Graph g = import_rnn(rnn_model(c, &data, 7));
  std::vector<Tensor> got = interpret(g, data.tensors);
  Reference want = reference(c, data);
  size_t i = 0;
  if (c.want_y) {
    EXPECT_TRUE(near(got[i++], want.y, "Y"));
  }
  EXPECT_TRUE(near(got[i++], want.y_h, "Y_h"));
  if (c.lstm() && c.want_c) {
    EXPECT_TRUE(near(got[i++], want.y_c, "Y_c"));
  }
  EXPECT_EQ(i, got.size());
}

std::string case_name(const ::testing::TestParamInfo<RnnCase>& info) {
  return fmt::format("{}_{}", info.index, info.param.op);
}

INSTANTIATE_TEST_SUITE_P(Grid, OnnxRnn, ::testing::ValuesIn(grid()), case_name);

// Compiled (fused kernels, the matmul template) against the interpreter, with initial states,
// peepholes and clip: a bidirectional LSTM, GRU with linear_before_reset (layout 1) and without
// (reverse). (RNN compiles in its node tests and in OnnxModels' rnn_relu.)
std::vector<RnnCase> compiled_cases() {
  std::vector<RnnCase> cases{RnnCase{"LSTM", "bidirectional", 6, 3, 5, 7, 0},
                             RnnCase{"GRU", "bidirectional", 5, 2, 3, 9, 1},
                             RnnCase{"GRU", "reverse", 4, 3, 3, 5, 0}};
  for (RnnCase& c : cases) {
    c.initial = true;
    c.peepholes = c.lstm();
    c.clip = 1.5;
    c.linear_before_reset = c.layout == 1;
  }
  return cases;
}

class OnnxRnnCompiled : public ::testing::TestWithParam<RnnCase> {};

TEST_P(OnnxRnnCompiled, MatchesInterpreter) {
  RnnData data;
  Graph g = import_rnn(rnn_model(GetParam(), &data, 11));
  EXPECT_TRUE(testing::matches_reference(g, data.tensors));
}

INSTANTIATE_TEST_SUITE_P(Cases, OnnxRnnCompiled, ::testing::ValuesIn(compiled_cases()), case_name);

// What coil refuses, and how it says so.
TEST(OnnxRnn, Errors) {
  auto message = [](RnnCase c, auto edit) {
    RnnData data;
    onnx::ModelProto m = rnn_model(c, &data, 1);
    edit(m.mutable_graph()->mutable_node(0), m);
    return error_of([&] { import_rnn(m); });
  };
  auto attr = [](onnx::NodeProto* n, const std::string& name) {
    for (auto& a : *n->mutable_attribute())
      if (a.name() == name) return &a;
    ADD_FAILURE() << "no attribute " << name;
    return n->add_attribute();
  };
  auto set_strings = [&](onnx::NodeProto* n, const std::string& name, std::vector<std::string> v) {
    attr(n, name)->clear_strings();
    for (auto& s : v) attr(n, name)->add_strings(s);
  };
  RnnCase rnn{"RNN", "forward", 3, 2, 2, 4};
  rnn.activations = {"Relu"};
  EXPECT_EQ(message(rnn, [&](onnx::NodeProto* n,
                             auto&) { set_strings(n, "activations", {"LeakyRelu"}); }),
            "rnn.onnx: unsupported ops: RNN (node 'rnn', opset 14: activation 'LeakyRelu' "
            "(coil's recurrent ops support Relu, Tanh and Sigmoid))");
  EXPECT_EQ(
      message(rnn, [&](onnx::NodeProto* n, auto&) { set_strings(n, "activations", {"Gelu"}); }),
      "rnn.onnx: node 'rnn' (RNN): activation 'Gelu' is not one of ONNX's recurrent "
      "activations");
  EXPECT_EQ(message(rnn,
                    [&](onnx::NodeProto* n, auto&) {
                      set_strings(n, "activations", {"Relu", "Tanh"});
                    }),
            "rnn.onnx: node 'rnn' (RNN): activations has 2 entries, expected 1 (1 per direction)");
  // sequence_lens: lengths other than the sequence's are unsupported, a non-constant one too.
  RnnCase lstm{"LSTM", "forward", 3, 2, 2, 4};
  lstm.seq_lens = true;
  EXPECT_EQ(message(lstm,
                    [](onnx::NodeProto*, onnx::ModelProto& m) {
                      m.mutable_graph()->mutable_initializer(0)->set_int32_data(1, 2);
                    }),
            "rnn.onnx: unsupported ops: LSTM (node 'rnn', opset 14: sequence_lens [3, 2] (only "
            "lengths equal to the sequence length 3))");
  EXPECT_EQ(message(lstm,
                    [](onnx::NodeProto*, onnx::ModelProto& m) {
                      m.mutable_graph()->mutable_initializer(0)->set_int32_data(1, 4);
                    }),
            "rnn.onnx: node 'rnn' (LSTM): sequence_lens [3, 4] has an entry outside 0 to the "
            "sequence length 3");
  EXPECT_EQ(message(lstm,
                    [](onnx::NodeProto*, onnx::ModelProto& m) {
                      auto* g = m.mutable_graph();
                      g->mutable_initializer()->Clear();
                      set_type(g->add_input(), "sequence_lens", TP::INT32, {2});
                    }),
            "rnn.onnx: unsupported ops: LSTM (node 'rnn', opset 14: sequence_lens is not a "
            "constant)");
  EXPECT_EQ(message(lstm, [&](onnx::NodeProto* n, auto&) { attr(n, "direction")->set_s("up"); }),
            "rnn.onnx: node 'rnn' (LSTM): direction 'up' is not forward, reverse or "
            "bidirectional");
  EXPECT_EQ(message(lstm,
                    [](onnx::NodeProto*, onnx::ModelProto& m) {
                      m.mutable_graph()
                          ->mutable_input(1)
                          ->mutable_type()
                          ->mutable_tensor_type()
                          ->set_elem_type(TP::DOUBLE);
                    }),
            "rnn.onnx: node 'rnn' (LSTM): input 1 has dtype f64, X f32");
  EXPECT_EQ(message(lstm,
                    [](onnx::NodeProto*, onnx::ModelProto& m) {
                      m.mutable_graph()
                          ->mutable_input(1)
                          ->mutable_type()
                          ->mutable_tensor_type()
                          ->mutable_shape()
                          ->mutable_dim(1)
                          ->set_dim_value(15);
                    }),
            "rnn.onnx: node 'rnn' (LSTM): W is [1, 15, 2], expected [1, 16, 2] (num_directions, "
            "4 * hidden_size, input_size)");
  // Beyond 1024 steps the unrolled graph is refused rather than built.
  RnnCase long_rnn{"RNN", "forward", 1025, 1, 1, 1};
  EXPECT_EQ(message(long_rnn, [](onnx::NodeProto*, auto&) {}),
            "rnn.onnx: unsupported ops: RNN (node 'rnn', opset 14: a sequence of 1025 steps (coil "
            "unrolls at most 1024))");
  // An attribute of another recurrent op is not LSTM's.
  EXPECT_EQ(
      message(lstm, [](onnx::NodeProto* n, auto&) { add_int_attr(n, "linear_before_reset", 1); }),
      "rnn.onnx: node 'rnn' (LSTM): attribute 'linear_before_reset' is not an attribute of "
      "LSTM in opset 14");
  // Weights of the wrong shape.
  EXPECT_EQ(message(lstm, [&](onnx::NodeProto* n, auto&) { attr(n, "hidden_size")->set_i(5); }),
            "rnn.onnx: node 'rnn' (LSTM): hidden_size is 5; R is [1, 16, 4]");
}

}  // namespace
}  // namespace coil
