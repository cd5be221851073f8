// recognize_attention: matmul(q, k^T) [* or / scale] [+ mask | where(bool mask, ., -inf)] ->
// softmax(-1) -> matmul(., v) into attention (what torch 1.13's nn.MultiheadAttention, GPT
// blocks' masked_fill, exported ONNX transformers and coil's demo model contain), in any
// floating dtype, the 4-D products also as torch's bmm decomposition (expand, reshape to 3-D,
// bmm, reshape back). The match walks back from the second matmul; each step must be the only
// reader of the value before it, so no replaced value is needed elsewhere.
#include "graph/recognize_attention.h"

#include <cmath>
#include <optional>

#include "graph/graph_copy.h"
#include "support/check.h"
#include "support/log.h"

namespace coil {
namespace {

struct AttentionMatch {
  int q = -1, k = -1, v = -1, mask = -1;
  /// A bool mask that is true where a key is masked out (where(m, -inf, s)): the attention op
  /// reads true as "attend", so the rewrite negates it.
  bool negate_mask = false;
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
    // torch's bmm decomposition of a 4-D product (functorch): y = reshape(bmm(a3, b3)) back to
    // [B, H, ., .], each operand a3 = reshape(expand(a)) of a 4-D a. Then every operand is
    // peeled back to 4-D and the match is that of the 4-D products.
    const Node* pv = split_product(y);
    const bool peeled = pv != nullptr;
    if (!peeled) pv = &y;
    if (!is_matmul(*pv) || !is_floating(y.type.dtype)) return std::nullopt;
    auto operand = [&](int id) { return peeled ? merged_view(node(id)) : &node(id); };
    const Node* pp = operand(pv->inputs[0]);
    if (!pp || pp->op_name() != "softmax" || !only_reader(*pp)) return std::nullopt;
    const Node& p = *pp;
    const int64_t axis = p.attrs.get_int_or("softmax", "axis", -1);
    if (axis != -1 && axis != p.type.rank() - 1) return std::nullopt;
    AttentionMatch m;
    const Node* x = &node(p.inputs[0]);
    if (x->op_name() == "add" && only_reader(*x)) {
      // The mask is the operand that is not the scores (either side), floating, never widening
      // them nor changing their dtype.
      for (size_t side : {0, 1}) {
        const Node& s = node(x->inputs[side]);
        const Node& mask = node(x->inputs[1 - side]);
        if (is_scores(s) && s.type == x->type && is_floating(mask.type.dtype) &&
            mask.type.rank() <= x->type.rank()) {
          m.mask = mask.id;
          x = &s;
          break;
        }
      }
      if (m.mask < 0) return std::nullopt;
    } else if (x->op_name() == "where" && only_reader(*x)) {
      // masked_fill(s, m, -inf) is where(m, -inf, s) (m true: masked out); where(m, s, -inf)
      // keeps where m is true. Only exactly -inf: a fully masked row is then NaN in both the
      // written-out graph and the attention op; a finite fill (finfo.min) would give a mean.
      const Node& cond = node(x->inputs[0]);
      for (size_t side : {1, 2}) {
        const Node& s = node(x->inputs[side]);
        std::optional<double> fill = scalar_constant(node(x->inputs[3 - side]));
        if (is_scores(s) && s.type == x->type && cond.type.dtype == DType::Bool &&
            cond.type.rank() <= x->type.rank() && fill && std::isinf(*fill) && *fill < 0) {
          m.mask = cond.id;
          m.negate_mask = side == 2;
          x = &s;
          break;
        }
      }
      if (m.mask < 0) return std::nullopt;
      // where(logical_not(c), -inf, s) keeps where c is true: read c itself.
      const Node& c = node(m.mask);
      if (c.op_name() == "logical_not" && node(c.inputs[0]).type.dtype == DType::Bool) {
        m.mask = c.inputs[0];
        m.negate_mask = !m.negate_mask;
      }
    }
    if ((x->op_name() == "mul" || x->op_name() == "div") && only_reader(*x)) {
      const bool div = x->op_name() == "div";
      int scores = x->inputs[0];
      std::optional<double> c = scalar_constant(node(x->inputs[1]));
      if (!c && !div) {
        c = scalar_constant(node(x->inputs[0]));
        scores = x->inputs[1];
      }
      if (!c || node(scores).type != x->type) return std::nullopt;
      m.scale = div ? 1.0 / *c : *c;
      x = &node(scores);
    }
    if (peeled) {
      if (!only_reader(*x)) return std::nullopt;
      x = split_product(*x);
      if (!x) return std::nullopt;
    }
    if (!is_matmul(*x) || !only_reader(*x)) return std::nullopt;
    const Node* qp = operand(x->inputs[0]);
    const Node* ktp = operand(x->inputs[1]);
    const Node* vp = operand(pv->inputs[1]);
    if (!qp || !ktp || !vp) return std::nullopt;
    const Node &q = *qp, &kt = *ktp, &v = *vp;
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
    // One floating dtype, the result's: the attention op computes f16/bf16 in f32 and f64 in
    // f64 (written out again).
    for (const Node* t : {&q, &k_source, &v})
      if (t->type.rank() != m.rank || t->type.dtype != y.type.dtype) return std::nullopt;
    const Shape &qs = q.type.shape, &ks = k_shape, &vs = v.type.shape;
    const size_t nb = static_cast<size_t>(m.rank) - 2;
    for (size_t d = 0; d < nb; ++d)
      if (ks[d] != qs[d] || vs[d] != qs[d]) return std::nullopt;
    if (ks[nb + 1] != qs[nb + 1] || vs[nb] != ks[nb]) return std::nullopt;
    // The scores and the result are [batch, Tq, Tk] and [batch, Tq, Dv] of q's batch dims (a
    // peeled reshape could split the merged batch differently).
    Shape scores = Shape(qs.begin(), qs.begin() + static_cast<std::ptrdiff_t>(nb));
    Shape result = scores;
    scores.push_back(qs[nb]);
    scores.push_back(ks[nb]);
    result.push_back(qs[nb]);
    result.push_back(vs[nb + 1]);
    if (p.type.shape != scores || y.type.shape != result) return std::nullopt;
    m.q = q.id;
    m.k = k_source.id;
    m.v = v.id;
    return m;
  }

 private:
  const Node& node(int id) const { return g_.node(id); }
  bool only_reader(const Node& n) const { return uses_[static_cast<size_t>(n.id)] == 1; }
  static bool is_matmul(const Node& n) { return n.op_name() == "matmul" || n.op_name() == "bmm"; }
  /// What the mask step may find under it: the product, its scaling, or (peeled) its reshape.
  static bool is_scores(const Node& n) {
    return is_matmul(n) || n.op_name() == "mul" || n.op_name() == "div" || n.op_name() == "reshape";
  }
  static bool same_size(const sym::Expr& a, const sym::Expr& b) {
    auto ca = a.as_const(), cb = b.as_const();
    return a == b || (ca && cb && *ca == *cb);
  }
  /// True when `merged` (rank 3) is `split` (rank 4) with its two leading dims merged.
  static bool merges_batch(const Shape& split, const Shape& merged) {
    return split.size() == 4 && merged.size() == 3 && same_size(split[0] * split[1], merged[0]) &&
           split[2] == merged[1] && split[3] == merged[2];
  }
  /// The rank-3 product r is a reshape of, when r splits its batch dim into two and is its
  /// only reader; nullptr otherwise.
  const Node* split_product(const Node& r) const {
    if (r.op_name() != "reshape") return nullptr;
    const Node& mm = node(r.inputs[0]);
    if (!is_matmul(mm) || !only_reader(mm) || !merges_batch(r.type.shape, mm.type.shape))
      return nullptr;
    return &mm;
  }
  /// The 4-D value a rank-3 product operand is a pure view of: reshape(a) or
  /// reshape(expand(a)) with the expand an identity, merging a's two leading dims; each view
  /// read only by the next. nullptr otherwise.
  const Node* merged_view(const Node& r) const {
    if (r.op_name() != "reshape" || !only_reader(r)) return nullptr;
    const Node* a = &node(r.inputs[0]);
    if (a->op_name() == "expand") {
      const Node& src = node(a->inputs[0]);
      if (!only_reader(*a) || src.type.shape != a->type.shape) return nullptr;
      a = &src;
    }
    return merges_batch(a->type.shape, r.type.shape) ? a : nullptr;
  }

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

  /// The value of a one-element floating constant or full, as its dtype stores it (a bf16
  /// full of 0.1 holds 0.10009765625); nullopt otherwise.
  static std::optional<double> scalar_constant(const Node& c) {
    for (const auto& d : c.type.shape)
      if (d != sym::Expr(1)) return std::nullopt;
    if (!is_floating(c.type.dtype)) return std::nullopt;
    if (c.op_name() == "full") {
      alignas(8) unsigned char stored[8];
      store_from_double(c.type.dtype, stored, c.attrs.get_float("full", "value"));
      return load_as_double(c.type.dtype, stored);
    }
    if (c.op_name() == "constant" && c.data) return c.data->item_as_double(0);
    return std::nullopt;
  }

  const Graph& g_;
  std::vector<int> uses_;
};

/// The kv heads that `r` repeats, as torch's repeat_interleave(x, rep, dim=1) of a
/// [B, Hkv, T, D] x is written in a decoder's graph (reshape(expand(unsqueeze(x, 2)))):
/// x's id and rep; nullopt for any other value.
std::optional<std::pair<int, sym::Expr>> repeated_heads(const Graph& g, const Node& r) {
  if (r.op_name() != "reshape" || r.type.rank() != 4) return std::nullopt;
  const Node& e = g.node(r.inputs[0]);
  if (e.op_name() != "expand" || e.type.rank() != 5) return std::nullopt;
  const Node& u = g.node(e.inputs[0]);
  if (u.op_name() != "unsqueeze" || u.type.rank() != 5) return std::nullopt;
  const Node& x = g.node(u.inputs[0]);
  const Shape& xs = x.type.shape;
  const Shape& us = u.type.shape;
  const Shape& es = e.type.shape;
  const Shape& rs = r.type.shape;
  // u = x with a 1 inserted at dim 2; e repeats it rep times; r merges the heads as kv * rep + i
  auto same = [](const sym::Expr& a, const sym::Expr& b) {
    auto ca = a.as_const(), cb = b.as_const();
    return a == b || (ca && cb && *ca == *cb);
  };
  if (xs.size() != 4 || us != Shape{xs[0], xs[1], sym::Expr(1), xs[2], xs[3]} ||
      es != Shape{xs[0], xs[1], es[2], xs[2], xs[3]} || rs[0] != xs[0] ||
      !same(rs[1], xs[1] * es[2]) || rs[2] != xs[2] || rs[3] != xs[3])
    return std::nullopt;
  return std::make_pair(x.id, es[2]);
}

/// attention's k and v (attention_lse's k; attention_grad's for the gradient of q, whose shape
/// does not follow them) read through repeated_heads: the kv heads themselves, which the op's
/// grouped-query heads read as the repeat did (head h reads kv head h / (H / Hkv)), instead of
/// a copy of each cache repeated per query head (a decoder step wrote and read both copies:
/// 3 MB of its 3.2 MB per layer in Llama 125M at 512 keys). Empty when nothing applies.
std::vector<int> grouped_kv_inputs(const Graph& g, const Node& n) {
  const std::string_view op = n.op_name();
  size_t kv_count = 0;
  if (op == "attention")
    kv_count = 2;
  else if (op == "attention_lse")
    kv_count = 1;
  else if (op == "attention_grad" && n.attrs.get_string_or("attention_grad", "wrt", "") == "q")
    kv_count = 2;
  if (kv_count == 0) return {};
  std::vector<int> inputs = n.inputs;
  std::optional<sym::Expr> rep;
  for (size_t i = 1; i <= kv_count; ++i) {
    auto m = repeated_heads(g, g.node(n.inputs[i]));
    if (!m || (rep && *rep != m->second)) return {};
    rep = m->second;
    inputs[i] = m->first;
  }
  return inputs;
}

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
      if (m->mask >= 0) {
        int mask = operand(m->mask, "mask");
        if (m->negate_mask)
          mask = out.add_node("logical_not", {mask}, Attrs{},
                              fresh(fmt::format("{}__attention_keep", n.name)));
        ops.push_back(mask);
      }
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
               m->mask < 0      ? std::string()
               : m->negate_mask ? ", mask=not " + g.node(m->mask).name
                                : ", mask=" + g.node(m->mask).name,
               m->scale);
      ++count;
    } else if (std::vector<int> grouped = grouped_kv_inputs(g, n); !grouped.empty()) {
      std::vector<int> ins;
      for (int i : grouped) ins.push_back(map[static_cast<size_t>(i)]);
      id = out.add_node(n.op_name(), ins, n.attrs, n.name);
      COIL_LOG(graph,
               "recognize_attention: {} reads the kv heads {} and {} (grouped-query), "
               "not their repeats",
               n.name, g.node(grouped[1]).name, g.node(grouped[grouped.size() > 2 ? 2 : 1]).name);
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
