// Composite ops rebuilt from primitives. Low-precision (f16/bf16) inputs are computed in f32
// and rounded once at the end, as PyTorch's kernels for these ops do.
#include "graph/decompositions.h"

#include <cmath>
#include <limits>
#include <set>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

/// Adds nodes named "<node>__<composite>_<k>" (y__layer_norm_3), so that temporaries name the
/// op they belong to and never collide with user names, and records that composite on each
/// (Node::composite, the provenance kernel names are built from). A composite inside another
/// (layer_norm's mean) keeps the outer one's name and op.
class Builder {
 public:
  Builder(Graph& g, const Node& node)
      : g_(g),
        base_(node.composite.empty() ? node.name : node.composite_node),
        composite_(node.composite.empty() ? std::string(node.op_name()) : node.composite) {}
  int op(std::string_view name, std::vector<int> in, Attrs attrs = {}) {
    int id = g_.add_node(name, std::move(in), std::move(attrs), fresh());
    g_.set_composite(id, composite_, base_);
    return id;
  }
  /// Names of the graph being decomposed: temporaries must not take one a later node uses.
  static inline thread_local const std::set<std::string>* reserved = nullptr;
  /// A 0-dim constant combined with `like`: f64 for an f64 tensor (its eps or count stays
  /// exact), else f32, the compute dtype of every other dtype (f16/bf16 compute in f32, as
  /// ATen's opmath does). A 0-dim operand never changes the result's dtype.
  int scalar(double v, int like) {
    DType t = type(like).dtype == DType::F64 ? DType::F64 : DType::F32;
    return op("full", {}, Attrs{{"shape", std::vector<int64_t>{}}, {"value", v}, {"dtype", t}});
  }
  const TensorType& type(int id) const { return g_.node(id).type; }
  /// Casts to f32 when low precision or integral; returns the input otherwise.
  int to_compute(int x) {
    DType t = type(x).dtype;
    return is_low_precision(t) || !is_floating(t) ? op("cast", {x}, Attrs{{"dtype", DType::F32}})
                                                  : x;
  }
  int cast_back(int x, DType t) {
    return type(x).dtype == t ? x : op("cast", {x}, Attrs{{"dtype", t}});
  }

 private:
  std::string fresh() {
    std::string n;
    do n = fmt::format("{}__{}_{}", base_, composite_, k_++);
    while (g_.find(n) >= 0 || (reserved && reserved->count(n)));
    return n;
  }

 public:
 private:
  Graph& g_;
  std::string base_, composite_;
  int k_ = 0;
};

std::vector<int64_t> last_axes(int64_t rank, int64_t k) {
  std::vector<int64_t> axes;
  for (int64_t i = rank - k; i < rank; ++i) axes.push_back(i);
  return axes;
}

/// The number of elements `axes` of `t` reduce; nullopt when a reduced size is symbolic (a
/// size-generic compile's).
std::optional<int64_t> reduced_count(const TensorType& t, const std::vector<int64_t>& axes) {
  int64_t n = 1;
  for (int64_t a : axes) {
    auto c = t.shape[static_cast<size_t>(a)].as_const();
    if (!c) return std::nullopt;
    n *= *c;
  }
  return n;
}

/// The count of the elements a reduction of `x` over `axes` reduces, minus `minus` and at
/// least 0, as a value that divides the reduction's result: a scalar constant where the sizes
/// are constants, else the sum over `axes` of ones shaped like `x` (where(isnan(x), 1, 1)),
/// which fuses into the reduction's own loop.
int reduced_count_value(Builder& b, int x, const std::vector<int64_t>& axes, bool keepdim, int like,
                        double minus = 0) {
  if (auto n = reduced_count(b.type(x), axes))
    return b.scalar(std::max(static_cast<double>(*n) - minus, 0.0), like);
  int one = b.scalar(1.0, like);
  int ones = b.op("where", {b.op("isnan", {x}), one, one});
  int n = b.op("sum", {ones}, Attrs{{"axes", axes}, {"keepdim", keepdim}});
  if (minus == 0) return n;
  return b.op("maximum", {b.op("sub", {n, b.scalar(minus, like)}), b.scalar(0.0, like)});
}

int softmax_impl(Graph& g, const Node& node, const std::vector<int>& in, bool log) {
  Builder b(g, node);
  int64_t axis = normalize_axis(node.op_name(), node.attrs.get_int_or(node.op_name(), "axis", -1),
                                b.type(in[0]).rank());
  Attrs keep{{"axes", std::vector<int64_t>{axis}}, {"keepdim", true}};
  int x = b.to_compute(in[0]);
  // An empty softmax dim means an empty result: nothing to normalize (and max has no identity).
  if (b.type(x).rank() > 0 && b.type(x).shape[static_cast<size_t>(axis)] == sym::Expr(0))
    return b.cast_back(x, node.type.dtype);
  int m = b.op("max", {x}, keep);
  int d = b.op("sub", {x, m});
  int e = b.op("exp", {d});
  int s = b.op("sum", {e}, keep);
  // e * (1 / s) rather than e / s, as ATen's CPU softmax computes it: one division per row
  // (the reciprocal is loop-invariant in the row's vector loop), not one per element, which
  // costs a quarter of softmax's time on a 2-core AVX-512 CPU (docs/numerics.md).
  int y = log ? b.op("sub", {d, b.op("log", {s})}) : b.op("mul", {e, b.op("reciprocal", {s})});
  return b.cast_back(y, node.type.dtype);
}

}  // namespace

int decompose_softmax(Graph& g, const Node& node, const std::vector<int>& in) {
  return softmax_impl(g, node, in, false);
}
int decompose_log_softmax(Graph& g, const Node& node, const std::vector<int>& in) {
  return softmax_impl(g, node, in, true);
}

int decompose_mean(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  auto axes = reduction_axes(node, b.type(in[0]).rank());
  Attrs a{{"axes", axes}, {"keepdim", node.attrs.get_bool_or("mean", "keepdim", false)}};
  int x = b.to_compute(in[0]);
  int s = b.op("sum", {x}, a);
  const bool keepdim = node.attrs.get_bool_or("mean", "keepdim", false);
  int y = b.op("div", {s, reduced_count_value(b, x, axes, keepdim, s)});
  return b.cast_back(y, node.type.dtype);
}

int decompose_var(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  auto axes = reduction_axes(node, b.type(in[0]).rank());
  double correction = node.attrs.get_float_or("var", "correction", 1.0);
  const bool keepdim = node.attrs.get_bool_or("var", "keepdim", false);
  int x = b.to_compute(in[0]);
  int mean = b.op("mean", {x}, Attrs{{"axes", axes}, {"keepdim", true}});
  int d = b.op("sub", {x, mean});
  int ss = b.op("sum", {b.op("mul", {d, d})}, Attrs{{"axes", axes}, {"keepdim", keepdim}});
  int y = b.op("div", {ss, reduced_count_value(b, x, axes, keepdim, ss, correction)});
  return b.cast_back(y, node.type.dtype);
}

int decompose_layer_norm(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  int64_t k = node.attrs.get_int_or("layer_norm", "dims", 1);
  Attrs keep{{"axes", last_axes(b.type(in[0]).rank(), k)}, {"keepdim", true}};
  int x = b.to_compute(in[0]);
  // The mean of shifted data, x0 + mean(x - x0), x0 the row's first element: a constant row
  // gets its value back exactly, so d = 0, as ATen's Welford moments give (sum(x) / n is not x
  // in f32: fuzz case seed 400 index 6650 got 1.9e-5 instead of 0 once d was divided by
  // sqrt(eps)). One subtraction per element, in the first pass only.
  int first = x;
  const int64_t rank = b.type(x).rank();
  for (int64_t a = rank - k; a < rank; ++a)
    first = b.op("slice", {first}, Attrs{{"dim", a}, {"start", int64_t{0}}, {"end", int64_t{1}}});
  int mean = b.op("add", {first, b.op("mean", {b.op("sub", {x, first})}, keep)});
  int d = b.op("sub", {x, mean});
  int var = b.op("mean", {b.op("mul", {d, d})}, keep);
  double eps = node.attrs.get_float_or("layer_norm", "eps", 1e-5);
  int rstd = b.op("rsqrt", {b.op("add", {var, b.scalar(eps, var)})});
  int y = b.op("mul", {d, rstd});
  if (in.size() > 1) y = b.op("mul", {y, in[1]});
  if (in.size() > 2) y = b.op("add", {y, in[2]});
  return b.cast_back(y, node.type.dtype);
}

int decompose_rms_norm(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  int64_t k = node.attrs.get_int_or("rms_norm", "dims", 1);
  Attrs keep{{"axes", last_axes(b.type(in[0]).rank(), k)}, {"keepdim", true}};
  int x = b.to_compute(in[0]);
  int ms = b.op("mean", {b.op("mul", {x, x})}, keep);
  double eps = node.attrs.get_float_or("rms_norm", "eps", 1e-6);
  int y = b.op("mul", {x, b.op("rsqrt", {b.op("add", {ms, b.scalar(eps, ms)})})});
  if (in.size() > 1) y = b.op("mul", {y, in[1]});
  return b.cast_back(y, node.type.dtype);
}

// linear(x, w, b?) = matmul(x, transpose(w)) + b. f16/bf16: the product is rounded to the
// dtype before the bias is added, as torch's CPU kernels do; the reference interpreter rounds
// the same way (graph/reference/linalg.cpp), and so does addmm below.
int decompose_linear(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  int wt = b.op("transpose", {in[1]}, Attrs{{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  int y = b.op("matmul", {in[0], wt});
  if (in.size() > 2) y = b.op("add", {y, in[2]});
  return y;
}

// addmm(bias, a, b) {alpha, beta} = beta * bias + alpha * (a @ b); a factor of 1 is no
// multiplication, and beta = 0 drops the bias (as torch: its NaN and inf do not propagate).
int decompose_addmm(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  double alpha = node.attrs.get_float_or("addmm", "alpha", 1.0);
  double beta = node.attrs.get_float_or("addmm", "beta", 1.0);
  DType t = node.type.dtype;
  int y = b.op("matmul", {in[1], in[2]});
  if (alpha != 1.0) y = b.op("mul", {y, b.scalar(alpha, y)});
  if (beta != 0.0) {
    int bias = beta == 1.0 ? in[0] : b.op("mul", {in[0], b.scalar(beta, in[0])});
    y = b.op("add", {bias, y});
  }
  return b.cast_back(y, t);
}

// global_avg_pool2d(x) = mean over the last two dims, kept as size 1.
int decompose_global_avg_pool2d(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  int64_t r = b.type(in[0]).rank();
  return b.op("mean", {in[0]}, Attrs{{"axes", last_axes(r, 2)}, {"keepdim", true}});
}

namespace {

/// attention's written-out scores and the operands its backward needs: q in its compute
/// dtype, k and v broadcast to q's heads (head h reads kv head h / (H / Hkv)), and
/// s = (q @ k^T) * scale with the mask applied (a bool mask's false and causal's hidden keys
/// -inf; a floating mask added). Causal keeps key j <= i + Tk - Tq (bottom-right aligned).
struct WrittenOutScores {
  int q, k, v, s;
  int64_t heads, kv_heads, q_len, kv_len, head_dim;
  double scale;
};

WrittenOutScores written_out_scores(Builder& b, const Node& node, int q_in, int k_in, int v_in,
                                    int mask_in) {
  WrittenOutScores w;
  const Shape& qs = b.type(q_in).shape;
  const Shape& ks = b.type(k_in).shape;
  w.heads = *qs[1].as_const(), w.kv_heads = *ks[1].as_const();
  w.q_len = *qs[2].as_const(), w.kv_len = *ks[2].as_const();
  w.head_dim = *qs[3].as_const();
  const std::string op(node.op_name());
  w.scale = node.attrs.get_float_or(op, "scale", 1.0 / std::sqrt(static_cast<double>(w.head_dim)));
  auto to_heads = [&](int x) {
    x = b.to_compute(x);
    if (w.kv_heads == w.heads) return x;
    std::vector<int64_t> s;
    for (const auto& d : b.type(x).shape) s.push_back(*d.as_const());
    int u = b.op("unsqueeze", {x}, Attrs{{"dim", int64_t{2}}});
    int e =
        b.op("expand", {u},
             Attrs{{"shape", std::vector<int64_t>{s[0], s[1], w.heads / w.kv_heads, s[2], s[3]}}});
    return b.op("reshape", {e}, Attrs{{"shape", std::vector<int64_t>{s[0], w.heads, s[2], s[3]}}});
  };
  w.q = b.to_compute(q_in);
  w.k = to_heads(k_in);
  w.v = v_in >= 0 ? to_heads(v_in) : -1;
  int kt = b.op("transpose", {w.k}, Attrs{{"dim0", int64_t{2}}, {"dim1", int64_t{3}}});
  int s = b.op("mul", {b.op("matmul", {w.q, kt}), b.scalar(w.scale, w.q)});
  auto minus_inf = [&] { return b.scalar(-std::numeric_limits<double>::infinity(), s); };
  if (mask_in >= 0) {
    const bool is_bool = b.type(mask_in).dtype == DType::Bool;
    s = is_bool ? b.op("where", {mask_in, s, minus_inf()})
                : b.op("add", {s, b.to_compute(mask_in)});
  }
  if (node.attrs.get_bool_or(op, "causal", false)) {
    auto iota = [&](int64_t size, int64_t start, std::vector<int64_t> shape) {
      int r = b.op("iota", {}, Attrs{{"size", size}, {"start", start}});
      return b.op("reshape", {r}, Attrs{{"shape", std::move(shape)}});
    };
    int last_key = iota(w.q_len, w.kv_len - w.q_len, {w.q_len, 1});  // i + Tk - Tq
    int key = iota(w.kv_len, 0, {1, w.kv_len});
    s = b.op("where", {b.op("le", {key, last_key}), s, minus_inf()});
  }
  w.s = s;
  return w;
}

/// x [B, H, T, E] summed over the query heads of each kv head: [B, Hkv, T, E].
int sum_over_group(Builder& b, int x, const WrittenOutScores& w) {
  if (w.heads == w.kv_heads) return x;
  std::vector<int64_t> s;
  for (const auto& d : b.type(x).shape) s.push_back(*d.as_const());
  int r = b.op(
      "reshape", {x},
      Attrs{{"shape", std::vector<int64_t>{s[0], w.kv_heads, w.heads / w.kv_heads, s[2], s[3]}}});
  return b.op("sum", {r}, Attrs{{"axes", std::vector<int64_t>{2}}, {"keepdim", false}});
}

int transpose_last(Builder& b, int x) {
  return b.op("transpose", {x}, Attrs{{"dim0", int64_t{2}}, {"dim1", int64_t{3}}});
}

}  // namespace

// attention(q, k, v[, mask]) {causal, scale} written out: softmax(scores) @ v, f16/bf16
// computed in f32 and rounded once. f64, and on cuda head dims above the flash template's 256,
// compile this form.
int decompose_attention(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  const WrittenOutScores w =
      written_out_scores(b, node, in[0], in[1], in[2], in.size() > 3 ? in[3] : -1);
  int p = b.op("softmax", {w.s}, Attrs{{"axis", int64_t{-1}}});
  return b.cast_back(b.op("matmul", {p, w.v}), node.type.dtype);
}

// attention_lse(q, k[, mask]) written out: m + log(sum(exp(s - m))) with m the row's max
// taken as 0 where it is -inf (a row that sees no key: exp gives 0s, log(0) = -inf, not
// exp(-inf - -inf) = NaN). No keys (Tk = 0): -inf everywhere.
int decompose_attention_lse(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  const WrittenOutScores w =
      written_out_scores(b, node, in[0], in[1], -1, in.size() > 2 ? in[2] : -1);
  const double inf = std::numeric_limits<double>::infinity();
  if (w.kv_len == 0) {
    std::vector<int64_t> shape;
    for (const auto& d : node.type.shape) shape.push_back(*d.as_const());
    return b.op("full", {}, Attrs{{"shape", shape}, {"value", -inf}, {"dtype", node.type.dtype}});
  }
  Attrs keep{{"axes", std::vector<int64_t>{3}}, {"keepdim", true}};
  int m = b.op("max", {w.s}, keep);
  m = b.op("where", {b.op("eq", {m, b.scalar(-inf, m)}), b.scalar(0.0, m), m});
  int sum = b.op("sum", {b.op("exp", {b.op("sub", {w.s, m})})}, keep);
  int lse = b.op("add", {m, b.op("log", {sum})});
  lse = b.op("squeeze", {lse}, Attrs{{"dims", std::vector<int64_t>{3}}});
  return b.cast_back(lse, node.type.dtype);
}

// attention_grad(q, k, v, out, grad_out, lse[, mask]) {wrt} written out, in f32 (f64 for f64):
// P = exp(s - lse) (a row whose lse is -inf contributes nothing), dV = P^T dO, dS = P * (dO V^T -
// rowsum(dO * out)), dQ = scale * dS K, dK = scale * dS^T Q; k's and v's summed over the query
// heads of their group.
int decompose_attention_grad(Graph& g, const Node& node, const std::vector<int>& in) {
  Builder b(g, node);
  const WrittenOutScores w =
      written_out_scores(b, node, in[0], in[1], in[2], in.size() > 6 ? in[6] : -1);
  const std::string wrt = node.attrs.get_string("attention_grad", "wrt");
  const double inf = std::numeric_limits<double>::infinity();
  int dout = b.to_compute(in[4]);
  int lse = b.op("unsqueeze", {in[5]}, Attrs{{"dim", int64_t{3}}});  // f32, or f64 as s
  int no_key = b.op("eq", {lse, b.scalar(-inf, lse)});
  int p = b.op("where", {no_key, b.scalar(0.0, w.s), b.op("exp", {b.op("sub", {w.s, lse})})});
  if (wrt == "v")
    return b.cast_back(sum_over_group(b, b.op("matmul", {transpose_last(b, p), dout}), w),
                       node.type.dtype);
  Attrs keep{{"axes", std::vector<int64_t>{3}}, {"keepdim", true}};
  // A row with no visible key contributes nothing, whatever its out (NaN: softmax of all -inf).
  int delta = b.op("sum", {b.op("mul", {dout, b.to_compute(in[3])})}, keep);
  delta = b.op("where", {no_key, b.scalar(0.0, delta), delta});
  int dp = b.op("matmul", {dout, transpose_last(b, w.v)});
  int ds = b.op("mul", {b.op("mul", {p, b.op("sub", {dp, delta})}), b.scalar(w.scale, p)});
  if (wrt == "q") return b.cast_back(b.op("matmul", {ds, w.k}), node.type.dtype);
  return b.cast_back(sum_over_group(b, b.op("matmul", {transpose_last(b, ds), w.q}), w),
                     node.type.dtype);
}

// An op lowered on some targets and decomposed on the others (its registry row has both).
// `g` holds n's inputs. A head dim not known yet (a symbol before binding) is checked again on
// the bound graph (decompose_and_bind's second pass).
static bool decomposed_here(const Graph& g, const Node& n, const DecomposeOptions& options) {
  const std::string_view op = n.op->name;
  if (op != "attention" && op != "attention_lse" && op != "attention_grad") return false;
  if (options.decompose_attention || g.node(n.inputs[0]).type.dtype == DType::F64) return true;
  if (op != "attention" && options.decompose_attention_backward) return true;
  if (options.attention_max_head_dim <= 0) return false;
  // q's head dim, and v's (input 2) where the op reads v: attention_lse does not.
  const auto head_dim = g.node(n.inputs[0]).type.shape[3].as_const();
  const auto value_dim =
      op == "attention_lse" ? decltype(head_dim){} : g.node(n.inputs[2]).type.shape[3].as_const();
  return (head_dim && *head_dim > options.attention_max_head_dim) ||
         (value_dim && *value_dim > options.attention_max_head_dim);
}

static std::string bindings_str(const std::map<sym::Expr, sym::Expr>& bind) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : bind) parts.push_back(sym::to_string(k) + "=" + sym::to_string(v));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The options of a second pass over a graph whose symbols are renamed already: each new
// name stays itself.
static DecomposeOptions renamed_options(const DecomposeOptions& options) {
  DecomposeOptions again = options;
  again.rename_symbols.clear();
  for (const auto& [name, to] : options.rename_symbols) again.rename_symbols[to] = to;
  return again;
}

Graph decompose_and_bind(const Graph& g, const std::map<std::string, int64_t>& sizes,
                         const DecomposeOptions& options) {
  std::map<sym::Expr, sym::Expr> bind;
  for (const auto& [name, value] : sizes) {
    COIL_USER_CHECK(value >= 0, "size {} = {} is negative", name, value);
    bind[sym::make_symbol(name)] = sym::Expr(value);
  }
  for (const auto& [name, to] : options.rename_symbols)
    if (!sizes.count(name)) bind[sym::make_symbol(name)] = sym::make_symbol(to);
  auto bound = [&](const sym::Expr& e) {
    if (e.is_const()) return true;
    for (const sym::Expr& s : sym::free_symbols(e)) {
      bool renamed = false;
      for (const auto& [name, to] : options.rename_symbols)
        renamed = renamed || s == sym::make_symbol(to);
      if (!renamed) return false;
    }
    return true;
  };
  Graph out;
  std::set<std::string> names;
  for (const auto& np : g.nodes()) names.insert(np->name);
  Builder::reserved = &names;
  struct Reset {
    ~Reset() { Builder::reserved = nullptr; }
  } reset;
  // Nodes no output depends on are dropped, so that no kernel computes a value nobody reads
  // (an unread matmul had a kernel but no buffer).
  std::vector<bool> live = live_nodes(g);
  std::vector<int> map(static_cast<size_t>(g.num_nodes()), -1);
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (!live[static_cast<size_t>(n.id)] && n.op->name != "input") continue;
    std::vector<int> in;
    for (int i : n.inputs) in.push_back(map[static_cast<size_t>(i)]);
    int id;
    try {
      if (n.op->name == "input") {
        Shape s;
        for (const auto& d : n.type.shape) {
          sym::Expr e = sym::substitute(d, bind);
          COIL_USER_CHECK(bound(e),
                          "input {}: size '{}' is not bound; give it a value (e.g. --size {}=N)",
                          n.name, sym::to_string(d), sym::to_string(d));
          s.push_back(e);
        }
        id = out.add_input(n.name, n.type.dtype, s);
      } else if (n.op->name == "constant") {
        id = out.add_constant(*n.data, n.name);
      } else if (n.op->kind == OpKind::Composite || decomposed_here(g, n, options)) {
        // Decompositions add their nodes to `out`; composites they use (var uses mean) are
        // expanded by the second pass below.
        Node copy = n;
        copy.inputs = in;
        id = n.op->decompose(out, copy, in);
      } else {
        Attrs attrs = n.attrs;
        const std::string_view op = n.op_name();
        if (!bind.empty() && (op == "full" || op == "reshape" || op == "expand") &&
            attrs.has("sizes")) {
          // Target sizes as text (full, reshape, expand): their symbols bound as the types' are.
          attrs.set("sizes",
                    substitute_sizes(n.op_name(), attrs.get_string(n.op_name(), "sizes"), bind));
        }
        id = out.add_node(n.op->name, in, attrs, n.name);
        if (!n.composite.empty()) out.set_composite(id, n.composite, n.composite_node);
      }
    } catch (const Error& e) {
      if (bind.empty()) throw;
      std::string message =
          fmt::format("{}{} (with {})", error_context(n), e.what(), bindings_str(bind));
      if (dynamic_cast<const UnsupportedError*>(&e)) throw UnsupportedError(message);
      throw Error(message);
    }
    // No op's meaning depends on the bound sizes (Graph::add_node writes out squeeze's dims), so
    // a bound type is the declared type with the sizes substituted; anything else would
    // silently change an output's shape.
    Shape want;
    for (const auto& d : n.type.shape) want.push_back(sym::substitute(d, bind));
    COIL_USER_CHECK(out.node(id).type == (TensorType{n.type.dtype, want}),
                    "{}{}: with {} its type is {}, but the graph declares {}", error_context(n),
                    n.op_name(), bindings_str(bind), type_str(out.node(id).type), type_str(n.type));
    if (out.node(id).location.empty()) out.set_location(id, n.location);
    map[static_cast<size_t>(n.id)] = id;
  }
  for (const auto& o : g.outputs()) out.add_output(map[static_cast<size_t>(o.node)], o.name);
  // Decompositions may produce composites (var uses mean), and may leave a live operand unread
  // (addmm with beta = 0 drops its bias: ONNX's test_operator_mm, found by the IR verifier):
  // repeat until no composite and no dead node remains.
  const std::vector<bool> live_after = live_nodes(out);
  for (const auto& np : out.nodes())
    if (np->op->kind == OpKind::Composite || decomposed_here(out, *np, options) ||
        (!live_after[static_cast<size_t>(np->id)] && np->op->name != "input"))
      return decompose_and_bind(out, {}, renamed_options(options));
  return out;
}

}  // namespace coil
