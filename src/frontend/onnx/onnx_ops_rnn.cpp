// Recurrent ops: LSTM, GRU, RNN, as coil graph ops with the time loop unrolled. The sequence
// length must be static. Per direction, the whole input sequence is multiplied by W^T once (one
// matmul [S, B, I] @ [I, G*H], with Wb + Rb added), then each step adds h_{t-1} @ R^T (one
// matmul [B, H] @ [H, G*H]) and applies the gates: elementwise ops on slices of that row, which
// the fuser joins into a kernel or two per step. W^T and R^T are transposes of the per-direction
// slices of W and R; constant weights fold into constants at import. A missing initial state is
// zero, and the terms it would zero (h_0 @ R^T, f * c_0, P * c_0) are left out.
//
// Semantics are ONNX's (and ONNX Runtime's where ONNX is silent): `clip` clamps the input of
// every gate activation (not c_t before h), `input_forget` makes f = 1 - i, the peepholes of i
// and f see c_{t-1} and that of o sees c_t, and a reverse direction walks the sequence backwards
// but writes Y at each step's own time index.
#include <algorithm>
#include <cctype>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

enum class Cell { kRnn, kGru, kLstm };

constexpr int64_t kMaxUnrolledSteps = 1024;

struct CellInfo {
  int64_t gates;       // rows of W and R per hidden unit: LSTM i, o, f, c; GRU z, r, h; RNN i
  size_t activations;  // activation functions per direction: LSTM f, g, h; GRU f, g; RNN f
  const char* defaults[3];
};

CellInfo cell_info(Cell c) {
  switch (c) {
    case Cell::kLstm:
      return {4, 3, {"Sigmoid", "Tanh", "Tanh"}};
    case Cell::kGru:
      return {3, 2, {"Sigmoid", "Tanh", nullptr}};
    case Cell::kRnn:
      return {1, 1, {"Tanh", nullptr, nullptr}};
  }
  COIL_UNREACHABLE("cell_info");
}

// The activation names ONNX lists for recurrent ops (in canonical spelling), and whether coil
// supports them here.
constexpr std::string_view kSupportedActivations[] = {"Relu", "Tanh", "Sigmoid"};
constexpr std::string_view kOtherActivations[] = {"Affine",     "LeakyRelu",   "ThresholdedRelu",
                                                  "ScaledTanh", "HardSigmoid", "Elu",
                                                  "Softsign",   "Softplus"};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The graph-building helpers of one recurrent node. A value id of -1 stands for a zero tensor
// that was never built (a missing initial state or bias); add and mul simplify around it.
struct Rnn {
  OnnxNode& n;
  Cell cell;
  DType t;
  int64_t hidden = 0;
  int layout = 0;
  std::optional<double> clip = std::nullopt;
  std::vector<std::string> activations = {};  // cell_info().activations per direction
  size_t dir = 0;                             // the direction being built

  int64_t time_dim() const { return layout == 0 ? 0 : 1; }

  int slice(int x, int64_t dim, int64_t start, int64_t end) {
    return n.add("slice", {x}, Attrs{{"dim", dim}, {"start", start}, {"end", end}});
  }
  // x[..., index, ...] along dim, the dim dropped.
  int take(int x, int64_t dim, int64_t index) {
    return n.add("squeeze", {slice(x, dim, index, index + 1)},
                 Attrs{{"dims", std::vector<int64_t>{dim}}});
  }
  // Gate k (a block of `hidden` columns) of a [B, G*H] row of gate inputs.
  int gate(int x, int64_t k) { return x < 0 ? -1 : slice(x, 1, k * hidden, (k + 1) * hidden); }
  int add(int a, int b) { return a < 0 ? b : b < 0 ? a : n.add("add", {a, b}); }
  int mul(int a, int b) { return a < 0 || b < 0 ? -1 : n.add("mul", {a, b}); }
  int sub(int a, int b) { return n.add("sub", {a, b}); }
  int one() { return n.scalar(1.0, t); }
  int transpose(int x) {
    return n.add("transpose", {x}, Attrs{{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  }

  // Direction d of initial_h (input 5) or initial_c (6); -1 when absent or a constant zero
  // (torch exports its default state as an Expand of zeros, which folds).
  int initial_state(int input, int64_t state_dir_dim, int64_t d) {
    if (!n.has_input(input)) return -1;
    if (const Tensor* k = n.constant(n.in(input))) {
      bool zero = true;
      for (int64_t i = 0; i < k->numel() && zero; ++i) zero = k->item_as_double(i) == 0.0;
      if (zero) return -1;
    }
    return take(n.in(input), state_dir_dim, d);
  }
  int matmul(int a, int b) { return a < 0 ? -1 : n.add("matmul", {a, b}); }
  // The values, each unsqueezed at `dim`, joined along it.
  int stack(const std::vector<int>& values, int64_t dim) {
    std::vector<int> parts;
    for (int v : values) parts.push_back(n.add("unsqueeze", {v}, Attrs{{"dim", dim}}));
    return parts.size() == 1 ? parts[0] : n.add("concat", parts, Attrs{{"dim", dim}});
  }

  // Activation `which` (0: f, 1: g, 2: h) of the current direction on x, clipped first when
  // `clipped` (every gate input; not LSTM's c_t going into h, as in ONNX Runtime).
  int activate(int x, size_t which, bool clipped = true) {
    if (clip && clipped) x = n.add("clamp", {x}, Attrs{{"min", -*clip}, {"max", *clip}});
    const std::string& name = activations[dir * cell_info(cell).activations + which];
    if (iequals(name, "Sigmoid")) return n.add("sigmoid", {x});
    if (iequals(name, "Tanh")) return n.add("tanh", {x});
    return n.add("relu", {x});  // the only other accepted name
  }
};

}  // namespace

void map_rnn(OnnxNode& n) {
  const std::string& op = n.op_type();
  Cell cell = op == "LSTM" ? Cell::kLstm : op == "GRU" ? Cell::kGru : Cell::kRnn;
  CellInfo info = cell_info(cell);
  int x = n.in(0), w = n.in(1), r = n.in(2);
  if (!is_floating(n.dtype(x)))
    n.error("X has dtype {}; recurrent ops are floating point", dtype_name(n.dtype(x)));
  Rnn b{.n = n, .cell = cell, .t = n.dtype(x)};

  // --- attributes ---
  std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    n.error("direction '{}' is not forward, reverse or bidirectional", printable(direction));
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  b.layout = static_cast<int>(n.attr_int("layout", 0));
  if (b.layout != 0 && b.layout != 1) n.error("layout {} is not 0 or 1", b.layout);
  if (n.has_attr("clip")) {
    b.clip = n.attr_float("clip", 0.0);
    if (!(*b.clip > 0)) n.error("clip {} is not positive", *b.clip);
  }
  bool linear_before_reset = cell == Cell::kGru && n.attr_int("linear_before_reset", 0) != 0;
  bool input_forget = cell == Cell::kLstm && n.attr_int("input_forget", 0) != 0;
  // Opset 1's output_sequence said whether Y is wanted; coil computes Y when the node names it.
  n.ignore_attr("output_sequence");
  if (auto acts = n.attr_strings("activations")) {
    if (acts->size() != info.activations * static_cast<size_t>(dirs))
      n.error("activations has {} entries, expected {} ({} per direction)", acts->size(),
              info.activations * static_cast<size_t>(dirs), info.activations);
    for (const std::string& a : *acts) {
      auto is = [&](std::string_view s) { return iequals(a, s); };
      if (std::any_of(std::begin(kSupportedActivations), std::end(kSupportedActivations), is))
        continue;
      if (std::any_of(std::begin(kOtherActivations), std::end(kOtherActivations), is))
        unsupported("activation '{}' (coil's recurrent ops support Relu, Tanh and Sigmoid)",
                    printable(a));
      n.error("activation '{}' is not one of ONNX's recurrent activations", printable(a));
    }
    b.activations = *acts;
  } else {
    for (int64_t d = 0; d < dirs; ++d)
      for (size_t k = 0; k < info.activations; ++k) b.activations.emplace_back(info.defaults[k]);
  }
  // The parameters of Affine, LeakyRelu, ...; Relu, Tanh and Sigmoid take none.
  n.ignore_attr("activation_alpha");
  n.ignore_attr("activation_beta");

  // --- shapes: X [S, B, I] (layout 1: [B, S, I]), W [D, G*H, I], R [D, G*H, H] ---
  if (n.rank(x) != 3) n.error("X must be 3-D, got {}", shape_str(n.type(x).shape));
  const Shape& xs = n.type(x).shape;
  const sym::Expr& batch = xs[static_cast<size_t>(1 - b.time_dim())];
  auto seq = xs[static_cast<size_t>(b.time_dim())].as_const();
  if (!seq)
    unsupported("a symbolic sequence length ({})",
                sym::to_string(xs[static_cast<size_t>(b.time_dim())]));
  if (*seq < 1) n.error("the sequence length is {}", *seq);
  // Each step is a dozen graph nodes and two kernels; a longer loop belongs in a loop of the IR.
  if (*seq > kMaxUnrolledSteps)
    unsupported("a sequence of {} steps (coil unrolls at most {})", *seq, kMaxUnrolledSteps);
  std::vector<int64_t> ws = n.static_shape(w, "W"), rs = n.static_shape(r, "R");
  if (rs.size() != 3) n.error("R must be 3-D, got {}", shape_str(n.type(r).shape));
  b.hidden = n.attr_int("hidden_size", rs[2]);
  if (b.hidden < 1 || b.hidden != rs[2])
    n.error("hidden_size is {}; R is {}", b.hidden, shape_str(n.type(r).shape));
  int64_t gh = 0;  // G * H; a dim of 2^62 (with another of 0) would overflow it
  if (__builtin_mul_overflow(info.gates, b.hidden, &gh))
    n.error("hidden_size {} is too large", b.hidden);
  if (ws.size() != 3 || ws[0] != dirs || ws[1] != gh || xs[2] != sym::Expr(ws[2]))
    n.error("W is {}, expected [{}, {}, {}] (num_directions, {} * hidden_size, input_size)",
            shape_str(n.type(w).shape), dirs, gh, sym::to_string(xs[2]), info.gates);
  if (rs != std::vector<int64_t>{dirs, gh, b.hidden})
    n.error("R is {}, expected [{}, {}, {}]", shape_str(n.type(r).shape), dirs, gh, b.hidden);
  for (int i : {1, 2, 3, 5, 6, 7})
    if (n.has_input(i) && n.dtype(n.in(i)) != b.t)
      n.error("input {} has dtype {}, X {}", i, dtype_name(n.dtype(n.in(i))), dtype_name(b.t));
  auto expect_shape = [&](int i, const char* name, Shape want) {
    if (n.type(n.in(i)).shape != want)
      n.error("{} is {}, expected {}", name, shape_str(n.type(n.in(i)).shape), shape_str(want));
  };
  // initial_h, initial_c and the outputs Y_h, Y_c: [D, B, H] (layout 1: [B, D, H]).
  Shape state_shape = b.layout == 0 ? Shape{sym::Expr(dirs), batch, sym::Expr(b.hidden)}
                                    : Shape{batch, sym::Expr(dirs), sym::Expr(b.hidden)};
  int64_t state_dir_dim = b.layout == 0 ? 0 : 1;
  if (n.has_input(3)) expect_shape(3, "B", Shape{sym::Expr(dirs), sym::Expr(2 * gh)});
  if (n.has_input(4)) {
    std::vector<int64_t> lens = n.const_ints(4, "sequence_lens");
    for (int64_t len : lens) {
      if (len < 0 || len > *seq)
        n.error("sequence_lens [{}] has an entry outside 0 to the sequence length {}",
                fmt::join(lens, ", "), *seq);
      if (len != *seq)
        unsupported("sequence_lens [{}] (only lengths equal to the sequence length {})",
                    fmt::join(lens, ", "), *seq);
    }
  }
  if (n.has_input(5)) expect_shape(5, "initial_h", state_shape);
  if (cell == Cell::kLstm && n.has_input(6)) expect_shape(6, "initial_c", state_shape);
  if (cell == Cell::kLstm && n.has_input(7))
    expect_shape(7, "P", Shape{sym::Expr(dirs), sym::Expr(3 * b.hidden)});

  // Per direction: Y's [S, B, H] (layout 1: [B, S, H]), the last h and (LSTM) c, [B, H].
  std::vector<int> y_dirs, h_last, c_last;
  for (int64_t d = 0; d < dirs; ++d) {
    b.dir = static_cast<size_t>(d);
    // Weights of this direction, transposed: W^T [I, G*H], R^T [H, G*H].
    int wt = b.transpose(b.take(w, 0, d)), rt = b.transpose(b.take(r, 0, d));
    // The bias added to X @ W^T: Wb + Rb, but for GRU's h gate with linear_before_reset only
    // Wbh: its Rbh is added to h_{t-1} @ Rh^T, which the reset gate then multiplies.
    int x_bias = -1, rbh = -1;
    if (n.has_input(3)) {
      int bias = b.take(n.in(3), 0, d);
      int wb = b.slice(bias, 0, 0, gh), rb = b.slice(bias, 0, gh, 2 * gh);
      if (linear_before_reset) {
        rbh = b.slice(rb, 0, 2 * b.hidden, gh);
        int zr = b.add(b.slice(wb, 0, 0, 2 * b.hidden), b.slice(rb, 0, 0, 2 * b.hidden));
        x_bias =
            n.add("concat", {zr, b.slice(wb, 0, 2 * b.hidden, gh)}, Attrs{{"dim", int64_t{0}}});
      } else {
        x_bias = b.add(wb, rb);
      }
    }
    int xw = b.add(n.add("matmul", {x, wt}), x_bias);  // [S, B, G*H] (layout 1: [B, S, G*H])
    // GRU without linear_before_reset multiplies r * h_{t-1} by Rh^T: R^T's z, r and its h
    // columns are used apart.
    int rt_zr = -1, rt_h = -1;
    if (cell == Cell::kGru && !linear_before_reset) {
      rt_zr = b.slice(rt, 1, 0, 2 * b.hidden);
      rt_h = b.slice(rt, 1, 2 * b.hidden, gh);
    }
    int pi = -1, po = -1, pf = -1;  // peepholes
    if (cell == Cell::kLstm && n.has_input(7)) {
      int p = b.take(n.in(7), 0, d);
      pi = b.slice(p, 0, 0, b.hidden);
      po = b.slice(p, 0, b.hidden, 2 * b.hidden);
      pf = b.slice(p, 0, 2 * b.hidden, 3 * b.hidden);
    }
    int h = b.initial_state(5, state_dir_dim, d);
    int c = cell == Cell::kLstm ? b.initial_state(6, state_dir_dim, d) : -1;
    bool reverse = direction == "reverse" || d == 1;
    std::vector<int> ys(static_cast<size_t>(*seq));
    for (int64_t step = 0; step < *seq; ++step) {
      int64_t time = reverse ? *seq - 1 - step : step;
      int xw_t = b.take(xw, b.time_dim(), time);  // [B, G*H]
      if (cell == Cell::kLstm) {
        int gates = b.add(xw_t, b.matmul(h, rt));
        int i = b.activate(b.add(b.gate(gates, 0), b.mul(pi, c)), 0);
        int f =
            input_forget ? b.sub(b.one(), i) : b.activate(b.add(b.gate(gates, 2), b.mul(pf, c)), 0);
        int g = b.activate(b.gate(gates, 3), 1);
        c = b.add(b.mul(f, c), b.mul(i, g));
        int o = b.activate(b.add(b.gate(gates, 1), b.mul(po, c)), 0);
        h = b.mul(o, b.activate(c, 2, /*clipped=*/false));
      } else if (cell == Cell::kGru) {
        int rec = b.matmul(h, linear_before_reset ? rt : rt_zr);  // h_{t-1} @ R^T (z, r[, h])
        int z = b.activate(b.add(b.gate(xw_t, 0), b.gate(rec, 0)), 0);
        int rg = b.activate(b.add(b.gate(xw_t, 1), b.gate(rec, 1)), 0);
        int h_in = linear_before_reset ? b.mul(rg, b.add(b.gate(rec, 2), rbh))
                                       : b.matmul(b.mul(rg, h), rt_h);
        int hh = b.activate(b.add(b.gate(xw_t, 2), h_in), 1);
        h = b.add(b.mul(b.sub(b.one(), z), hh), b.mul(z, h));
      } else {
        h = b.activate(b.add(xw_t, b.matmul(h, rt)), 0);
      }
      ys[static_cast<size_t>(time)] = h;
    }
    if (n.wants_output(0)) y_dirs.push_back(b.stack(ys, b.time_dim()));
    h_last.push_back(h);
    c_last.push_back(c);
  }
  // Y [S, D, B, H] (layout 1: [B, S, D, H]); Y_h and Y_c [D, B, H] (layout 1: [B, D, H]).
  if (n.wants_output(0)) n.set_output(0, b.stack(y_dirs, b.layout == 0 ? 1 : 2));
  n.set_output(1, b.stack(h_last, state_dir_dim));
  if (cell == Cell::kLstm && n.wants_output(2)) n.set_output(2, b.stack(c_last, state_dir_dim));
}

}  // namespace coil::onnxfe
