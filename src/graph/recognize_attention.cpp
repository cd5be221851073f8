// recognize_attention: matmul(q, k^T) [* or / scale] [+ mask] -> softmax(-1) -> matmul(., v)
// into attention (what torch 1.13's nn.MultiheadAttention, exported ONNX transformers and
// coil's demo model contain). The match walks back from the second matmul; each step must be
// the only reader of the value before it, so no replaced value is needed elsewhere.
#include "graph/recognize_attention.h"

#include <optional>

#include "graph/graph_copy.h"
#include "support/check.h"
#include "support/log.h"

namespace coil {
namespace {

struct AttentionMatch {
  int q = -1, k = -1, v = -1, mask = -1;
  /// k is permute(node k) {dims=k_dims} when k_dims is not empty (k^T was a permute or
  /// transpose of a tensor other than k itself, as torch's ONNX export writes [T, N, D] ->
  /// [N, D, T]).
  std::vector<int64_t> k_dims;
  double scale = 1.0;
  int64_t rank = 4;
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), uses_(g.use_counts()) {}

  std::optional<AttentionMatch> match(const Node& y) const {
    if (!is_matmul(y) || y.type.dtype != DType::F32) return std::nullopt;
    const Node& p = node(y.inputs[0]);
    if (p.op_name() != "softmax" || !only_reader(p)) return std::nullopt;
    const int64_t axis = p.attrs.get_int_or("softmax", "axis", -1);
    if (axis != -1 && axis != p.type.rank() - 1) return std::nullopt;
    AttentionMatch m;
    const Node* x = &node(p.inputs[0]);
    if (x->op_name() == "add" && only_reader(*x)) {
      // The mask is the operand that is not the scores (either side), f32, never widening them.
      for (size_t side : {0, 1}) {
        const Node& s = node(x->inputs[side]);
        const Node& mask = node(x->inputs[1 - side]);
        if ((is_matmul(s) || s.op_name() == "mul" || s.op_name() == "div") &&
            s.type.shape == x->type.shape && mask.type.dtype == DType::F32 &&
            mask.type.rank() <= x->type.rank()) {
          m.mask = mask.id;
          x = &s;
          break;
        }
      }
      if (m.mask < 0) return std::nullopt;
    }
    if ((x->op_name() == "mul" || x->op_name() == "div") && only_reader(*x)) {
      const bool div = x->op_name() == "div";
      int scores = x->inputs[0];
      std::optional<double> c = scalar_constant(node(x->inputs[1]));
      if (!c && !div) {
        c = scalar_constant(node(x->inputs[0]));
        scores = x->inputs[1];
      }
      if (!c || node(scores).type.shape != x->type.shape) return std::nullopt;
      m.scale = div ? 1.0 / *c : *c;
      x = &node(scores);
    }
    if (!is_matmul(*x) || !only_reader(*x)) return std::nullopt;
    const Node& q = node(x->inputs[0]);
    const Node& kt = node(x->inputs[1]);
    const Node& v = node(y.inputs[1]);
    std::optional<std::vector<int64_t>> kt_dims = permutation(kt);
    if (!kt_dims) return std::nullopt;
    // k = k^T with its last two dims swapped back: a permute of k^T's source, or the source.
    std::vector<int64_t> k_dims = *kt_dims;
    std::swap(k_dims[k_dims.size() - 2], k_dims.back());
    bool identity = true;
    for (size_t d = 0; d < k_dims.size(); ++d) identity = identity && k_dims[d] == int64_t(d);
    if (!identity) m.k_dims = k_dims;
    const Node& k_source = node(kt.inputs[0]);
    Shape k_shape;
    for (int64_t d : k_dims) k_shape.push_back(k_source.type.shape[static_cast<size_t>(d)]);
    m.rank = q.type.rank();
    if (m.rank != 3 && m.rank != 4) return std::nullopt;
    for (const Node* t : {&q, &k_source, &v})
      if (t->type.rank() != m.rank || t->type.dtype != DType::F32) return std::nullopt;
    const Shape &qs = q.type.shape, &ks = k_shape, &vs = v.type.shape;
    const size_t nb = static_cast<size_t>(m.rank) - 2;
    for (size_t d = 0; d < nb; ++d)
      if (ks[d] != qs[d] || vs[d] != qs[d]) return std::nullopt;
    if (ks[nb + 1] != qs[nb + 1] || vs[nb] != ks[nb]) return std::nullopt;
    m.q = q.id;
    m.k = k_source.id;
    m.v = v.id;
    return m;
  }

 private:
  const Node& node(int id) const { return g_.node(id); }
  bool only_reader(const Node& n) const { return uses_[static_cast<size_t>(n.id)] == 1; }
  static bool is_matmul(const Node& n) { return n.op_name() == "matmul" || n.op_name() == "bmm"; }

  /// The input dim of each result dim of a transpose or permute (normalized); nullopt for
  /// any other op.
  static std::optional<std::vector<int64_t>> permutation(const Node& n) {
    const int64_t r = n.type.rank();
    if (r < 2) return std::nullopt;
    auto norm = [r](int64_t d) { return d < 0 ? d + r : d; };
    std::vector<int64_t> dims;
    if (n.op_name() == "transpose") {
      for (int64_t d = 0; d < r; ++d) dims.push_back(d);
      std::swap(dims[static_cast<size_t>(norm(n.attrs.get_int_or("transpose", "dim0", 0)))],
                dims[static_cast<size_t>(norm(n.attrs.get_int_or("transpose", "dim1", 1)))]);
    } else if (n.op_name() == "permute") {
      for (int64_t d : n.attrs.get_ints("permute", "dims")) dims.push_back(norm(d));
    } else {
      return std::nullopt;
    }
    return dims;
  }

  /// The value of a one-element floating constant or full; nullopt otherwise.
  static std::optional<double> scalar_constant(const Node& c) {
    for (const auto& d : c.type.shape)
      if (d != sym::Expr(1)) return std::nullopt;
    if (c.op_name() == "full" && is_floating(c.type.dtype))
      return c.attrs.get_float("full", "value");
    if (c.op_name() == "constant" && c.data) {
      if (c.type.dtype == DType::F32) return static_cast<double>(*c.data->data_as<float>());
      if (c.type.dtype == DType::F64) return *c.data->data_as<double>();
    }
    return std::nullopt;
  }

  const Graph& g_;
  std::vector<int> uses_;
};

}  // namespace

Graph recognize_attention(const Graph& g, int* rewrites) {
  Matcher matcher(g);
  Graph out;
  std::vector<int> map(static_cast<size_t>(g.num_nodes()), -1);
  int count = 0;
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int i = 1; g.find(name) >= 0 || out.find(name) >= 0; ++i)
      name = fmt::format("{}_{}", base, i);
    return name;
  };
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    std::vector<int> in;
    for (int i : n.inputs) in.push_back(map[static_cast<size_t>(i)]);
    int id = copy_source_node(out, n);
    if (id >= 0) {
      // an input or a constant, copied as it is
    } else if (std::optional<AttentionMatch> m = matcher.match(n)) {
      // Rank-3 operands [N, T, D] are one batch of N heads: [1, N, T, D].
      auto operand = [&](int src, const char* what) {
        int o = map[static_cast<size_t>(src)];
        if (m->rank == 4 || g.node(src).type.rank() < 3) return o;
        return out.add_node("unsqueeze", {o}, Attrs{{"dim", int64_t{0}}},
                            fresh(fmt::format("{}__attention_{}", n.name, what)));
      };
      int k = map[static_cast<size_t>(m->k)];
      if (!m->k_dims.empty())
        k = out.add_node("permute", {k}, Attrs{{"dims", m->k_dims}},
                         fresh(fmt::format("{}__attention_kt", n.name)));
      if (m->rank == 3)
        k = out.add_node("unsqueeze", {k}, Attrs{{"dim", int64_t{0}}},
                         fresh(fmt::format("{}__attention_k", n.name)));
      std::vector<int> ops{operand(m->q, "q"), k, operand(m->v, "v")};
      if (m->mask >= 0) ops.push_back(operand(m->mask, "mask"));
      Attrs attrs{{"scale", m->scale}};
      if (m->rank == 4) {
        id = out.add_node("attention", ops, attrs, n.name);
      } else {
        int a = out.add_node("attention", ops, attrs, fresh(n.name + "__attention"));
        id = out.add_node("squeeze", {a}, Attrs{{"dims", std::vector<int64_t>{0}}}, n.name);
      }
      COIL_LOG(graph,
               "recognize_attention: {} = softmax(...) @ {} is attention(q={}, k={}, v={}{}) "
               "{{scale={}}}",
               n.name, g.node(m->v).name, g.node(m->q).name, g.node(m->k).name, g.node(m->v).name,
               m->mask >= 0 ? ", mask=" + g.node(m->mask).name : std::string(), m->scale);
      ++count;
    } else {
      id = out.add_node(n.op_name(), in, n.attrs, n.name);
    }
    if (!n.location.empty()) out.set_location(id, n.location);
    map[static_cast<size_t>(n.id)] = id;
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const GraphOutput& o = g.outputs()[i];
    out.add_output(map[static_cast<size_t>(o.node)], o.name);
    if (!o.source_name.empty()) out.set_output_source_name(i, o.source_name);
  }
  if (rewrites) *rewrites = count;
  return out;
}

}  // namespace coil
