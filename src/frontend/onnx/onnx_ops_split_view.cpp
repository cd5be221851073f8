// Reshapes whose target has several symbolic sizes, and the ops that carry their unmerged form
// (SplitView, onnx_context.h). torch's multi-head attention exported with a dynamic batch and a
// dynamic sequence length reshapes
//   q [seq, batch, 64] -> [seq, 4*batch, 16] -> ... -> [seq*batch, 64] -> Gemm -> [seq, batch, 64]
// coil's `reshape` takes integer sizes and infers one, so a result with two symbolic dims can
// only be a merge (`flatten`) of dims that are already apart. Each such Reshape is therefore
// written as: split the input's dims into the common refinement of both shapes (only constant
// dims can be split: into slices joined along a new dim), then flatten each group of the
// refinement that makes one target dim. The refined value is kept as the result's SplitView, so
// that a later Reshape splitting `seq*batch` again reads `seq` and `batch` from it; Transpose,
// MatMul, Gemm, Softmax, Cast, Where and elementwise ops with a broadcast operand compute on the
// refined value to keep it through the attention.
#include <algorithm>
#include <map>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil::onnxfe {
namespace {

// A size as coef * (product of non-constant factors), the factors sorted: sizes multiply and
// divide as monomials, so `4*batch*seq` / `seq` is `4*batch` without a simplifier.
struct Mono {
  int64_t coef = 1;
  std::vector<sym::Expr> f;
  bool one() const { return coef == 1 && f.empty(); }
  bool operator==(const Mono& o) const { return coef == o.coef && f == o.f; }
};

std::optional<Mono> mono(const sym::Expr& e) {
  if (auto c = e.as_const()) {
    if (*c <= 0) return std::nullopt;
    return Mono{*c, {}};
  }
  Mono m;
  if (e.kind() == sym::ExprKind::Mul) {
    for (const auto& op : e.operands()) {
      if (auto c = op.as_const()) {
        if (__builtin_mul_overflow(m.coef, *c, &m.coef)) return std::nullopt;
      } else
        m.f.push_back(op);
    }
  } else {
    m.f.push_back(e);
  }
  if (m.coef <= 0) return std::nullopt;
  std::sort(m.f.begin(), m.f.end());
  return m;
}

// a * b; nullopt past int64 (a fuzzed model's sizes).
std::optional<Mono> times(const Mono& a, const Mono& b) {
  Mono m{1, a.f};
  if (__builtin_mul_overflow(a.coef, b.coef, &m.coef)) return std::nullopt;
  m.f.insert(m.f.end(), b.f.begin(), b.f.end());
  std::sort(m.f.begin(), m.f.end());
  return m;
}

// b / a when a divides b.
std::optional<Mono> divide(const Mono& b, const Mono& a) {
  if (b.coef % a.coef != 0) return std::nullopt;
  Mono q{b.coef / a.coef, {}};
  std::vector<sym::Expr> rest = b.f;
  for (const auto& x : a.f) {
    auto it = std::find(rest.begin(), rest.end(), x);
    if (it == rest.end()) return std::nullopt;
    rest.erase(it);
  }
  q.f = std::move(rest);
  return q;
}

// How the dims of `in` (no 1s) refine into `target` (no 1s): per input dim, the sizes it
// splits into (outer first; one entry when it stays whole), and per target dim, how many
// refined dims it merges. Empty when no such refinement exists with only constant dims split.
struct Refinement {
  std::vector<std::vector<int64_t>> splits;
  std::vector<int> groups;
};

std::optional<Refinement> refine(const Shape& in, const Shape& target) {
  std::vector<Mono> d, t;
  for (const auto& e : in) {
    auto m = mono(e);
    if (!m) return std::nullopt;
    d.push_back(*m);
  }
  for (const auto& e : target) {
    auto m = mono(e);
    if (!m) return std::nullopt;
    t.push_back(*m);
  }
  Refinement r;
  r.splits.resize(d.size());
  size_t i = 0;
  Mono cur = d.empty() ? Mono{} : d[0];  // what is left of input dim i
  std::vector<int64_t> pieces;           // the parts of dim i taken so far (constant dims)
  auto take_rest = [&] {
    if (!pieces.empty()) pieces.push_back(cur.coef);
    r.splits[i] = pieces;
    pieces.clear();
    ++i;
    cur = i < d.size() ? d[i] : Mono{};
  };
  for (const Mono& want : t) {
    Mono need = want;
    int count = 0;
    while (!need.one()) {
      if (i >= d.size()) return std::nullopt;
      if (auto q = divide(need, cur)) {  // the rest of dim i goes into this target dim
        need = *q;
        take_rest();
      } else if (auto rest = divide(cur, need); rest && d[i].f.empty()) {
        pieces.push_back(need.coef);  // a constant dim splits: its outer part is `need`
        cur = *rest;
        need = Mono{};
      } else {
        return std::nullopt;  // a symbolic dim would split, or the dims mix across groups
      }
      ++count;
    }
    r.groups.push_back(count);
  }
  if (i != d.size()) return std::nullopt;
  return r;
}

// x with constant dim `k` (of size a * b) split into [a, b]: a slices of b elements stacked
// along a new dim (coil's reshape cannot split one dim next to two symbolic ones).
constexpr int64_t kMaxSplit = 256;

int split_dim(OnnxNode& n, int x, int64_t k, int64_t a, int64_t b) {
  if (a == 1) return n.add("unsqueeze", {x}, Attrs{{"dim", k}});
  if (b == 1) return n.add("unsqueeze", {x}, Attrs{{"dim", k + 1}});
  if (a > kMaxSplit)
    unsupported("splitting a dim of {} into {} x {} next to symbolic dims (at most {} slices)",
                a * b, a, b, kMaxSplit);
  std::vector<int> pieces;
  for (int64_t p = 0; p < a; ++p) {
    int s = n.add("slice", {x}, Attrs{{"dim", k}, {"start", p * b}, {"end", (p + 1) * b}});
    pieces.push_back(n.add("unsqueeze", {s}, Attrs{{"dim", k}}));
  }
  return n.add("concat", pieces, Attrs{{"dim", k}});
}

int count_symbolic(const Shape& s) {
  return static_cast<int>(
      std::count_if(s.begin(), s.end(), [](const auto& e) { return !e.is_const(); }));
}

// The value and its groups: a SplitView's, or x itself with one dim per group.
SplitView view_of(OnnxNode& n, int x) {
  if (const SplitView* v = n.split_view(x)) return *v;
  return SplitView{x, std::vector<int>(static_cast<size_t>(n.rank(x)), 1)};
}

// The first dim of `base` of each group, and one past the last.
std::vector<int64_t> group_starts(const SplitView& v) {
  std::vector<int64_t> s{0};
  for (int g : v.groups) s.push_back(s.back() + g);
  return s;
}

// v with group `g` flattened into one dim of its base.
SplitView merge_group(OnnxNode& n, SplitView v, size_t g) {
  if (v.groups[g] <= 1) return v;
  int64_t start = group_starts(v)[g];
  v.base =
      n.add("flatten", {v.base}, Attrs{{"start_dim", start}, {"end_dim", start + v.groups[g] - 1}});
  v.groups[g] = 1;
  return v;
}

Shape base_dims(OnnxNode& n, const SplitView& v, size_t from, size_t to) {
  std::vector<int64_t> s = group_starts(v);
  const Shape& b = n.type(v.base).shape;
  return Shape(b.begin() + s[from], b.begin() + s[to]);
}

bool map_transpose_view(OnnxNode& n, const SplitView& v) {
  std::vector<int64_t> perm;
  auto r = static_cast<int64_t>(v.groups.size());
  if (auto p = n.attr_ints("perm")) {
    perm = *p;
  } else {
    for (int64_t i = r; i-- > 0;) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != r) return false;  // the usual error
  std::vector<int64_t> starts = group_starts(v), dims;
  std::vector<int> groups;
  for (int64_t p : perm) {
    int64_t a = n.axis(p, r);
    for (int64_t k = 0; k < v.groups[static_cast<size_t>(a)]; ++k)
      dims.push_back(starts[static_cast<size_t>(a)] + k);
    groups.push_back(v.groups[static_cast<size_t>(a)]);
  }
  int y = n.add("permute", {v.base}, Attrs{{"dims", dims}});
  n.set_output(0, n.add_split_view(y, groups));
  return true;
}

// Batched MatMul: both operands' batch groups must be the same dims; M, K, N one dim each.
bool map_matmul_view(OnnxNode& n) {
  int a = n.in(0), b = n.in(1);
  if (n.rank(a) < 2 || n.rank(b) < 2 || !is_floating(n.dtype(a))) return false;
  SplitView va = view_of(n, a), vb = view_of(n, b);
  size_t ra = va.groups.size(), rb = vb.groups.size();
  va = merge_group(n, merge_group(n, va, ra - 2), ra - 1);
  vb = merge_group(n, merge_group(n, vb, rb - 2), rb - 1);
  // A 2-D operand (weights) broadcasts; batched ones must have the same batch dims.
  if (ra > 2 && rb > 2 && (ra != rb || base_dims(n, va, 0, ra - 2) != base_dims(n, vb, 0, rb - 2)))
    return false;
  const SplitView& batch = ra >= rb ? va : vb;
  std::vector<int> groups(batch.groups.begin(), batch.groups.end() - 2);
  groups.push_back(1), groups.push_back(1);
  int y = n.add("matmul", {va.base, vb.base});
  n.set_output(0, n.add_split_view(y, groups));
  return true;
}

// Gemm of a merged A ([seq*batch, 64]) by a 2-D weight: a matmul on A's refined rows.
bool map_gemm_view(OnnxNode& n, SplitView va) {
  int b = n.in(1);
  if (n.attr_int("transA", 0) != 0 || n.rank(b) != 2 || va.groups.size() != 2) return false;
  if (n.opset() < 7) return false;  // the legacy broadcast rule of C: the plain mapping
  va = merge_group(n, va, 1);
  if (n.attr_int("transB", 0) != 0)
    b = n.add("transpose", {b}, Attrs{{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  int y = n.add("matmul", {va.base, b});
  if (alpha != 1.0) y = n.add("mul", {y, n.scalar(alpha, n.dtype(y))});
  if (n.has_input(2)) {
    // C of one row ([N], [1, N], a scalar) broadcasts over the refined rows as over M.
    int c = n.in(2);
    const Shape& cs = n.type(c).shape;
    if (cs.size() > 2 || (cs.size() == 2 && cs[0] != sym::Expr(1))) return false;
    if (beta != 1.0) c = n.add("mul", {c, n.scalar(beta, n.dtype(c))});
    y = n.add("add", {y, c});
  }
  std::vector<int> groups{va.groups[0], 1};
  n.set_output(0, n.add_split_view(y, groups));
  return true;
}

// Softmax / LogSoftmax along one dim (opset 13 on, or the last dim before).
bool map_softmax_view(OnnxNode& n, SplitView v) {
  auto r = static_cast<int64_t>(v.groups.size());
  bool coerce_2d = n.opset() < 13;
  int64_t axis = n.axis(n.attr_int("axis", coerce_2d ? 1 : -1), r);
  if (coerce_2d && axis != r - 1) return false;
  v = merge_group(n, v, static_cast<size_t>(axis));
  int64_t dim = group_starts(v)[static_cast<size_t>(axis)];
  int y =
      n.add(n.op_type() == "Softmax" ? "softmax" : "log_softmax", {v.base}, Attrs{{"axis", dim}});
  n.set_output(0, n.add_split_view(y, v.groups));
  return true;
}

// Whether two split views have the same groups over base dims that are equal or broadcast (a
// group of one dim of size 1 on either side): the attention scores [batch, 4, seq, seq] and a
// mask [batch, 4, 1, seq].
bool same_groups(OnnxNode& n, const SplitView& a, const SplitView& b) {
  if (a.groups != b.groups) return false;
  const Shape &sa = n.type(a.base).shape, &sb = n.type(b.base).shape;
  std::vector<int64_t> starts = group_starts(a);
  for (size_t g = 0; g < a.groups.size(); ++g) {
    auto from = static_cast<size_t>(starts[g]), to = static_cast<size_t>(starts[g + 1]);
    bool equal = std::equal(sa.begin() + from, sa.begin() + to, sb.begin() + from);
    bool one = to - from == 1 && (sa[from] == sym::Expr(1) || sb[from] == sym::Expr(1));
    if (!equal && !one) return false;
  }
  return true;
}

// An operand that broadcasts against a merged value `v` along its last dim only (a scalar, a
// bias, a broadcast value's 1s): it applies to v's base as it is.
bool broadcasts_on_last(OnnxNode& n, int other, const SplitView& v) {
  const Shape& s = n.type(other).shape;
  if (s.size() > v.groups.size()) return false;
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i] != sym::Expr(1)) return false;
  return s.empty() || s.back() == sym::Expr(1) || v.groups.back() == 1;
}

// Where(cond, a, b) and Cast with one merged operand, the others broadcasting on the last dim
// or merged the same way: on the base (torch's masked_fill of an attention mask).
bool map_where_cast_view(OnnxNode& n) {
  const SplitView* v = nullptr;
  for (int i = 0; i < n.num_inputs(); ++i)
    if (const SplitView* w = n.split_view(n.in(i))) {
      if (v && !same_groups(n, *v, *w)) return false;
      v = v ? v : w;
    }
  std::vector<int> in;
  for (int i = 0; i < n.num_inputs(); ++i) {
    const SplitView* w = n.split_view(n.in(i));
    if (!w && !broadcasts_on_last(n, n.in(i), *v)) return false;
    in.push_back(w ? w->base : n.in(i));
  }
  int y;
  if (n.op_type() == "Where") {
    if (in.size() != 3) return false;
    y = n.add("where", in);
  } else {
    if (n.opset() < 6 || !n.has_attr("to")) return false;  // Cast-1 names its type
    std::optional<DType> t = dtype_from_onnx(static_cast<int32_t>(n.attr_int("to", 0)));
    if (!t) return false;
    if (n.has_attr("saturate")) return false;
    y = n.cast(in[0], *t);
  }
  n.set_output(0, n.add_split_view(y, v->groups));
  return true;
}

// Add, Sub, Mul, Div of a merged value and one that broadcasts along its last dim only (a
// scalar, a bias), or of two with the same refinement.
bool map_binary_view(OnnxNode& n) {
  static const std::map<std::string, std::string_view, std::less<>> ops = {
      {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}};
  auto op = ops.find(n.op_type());
  if (op == ops.end() || n.opset() < 7) return false;
  int a = n.in(0), b = n.in(1);
  if (!is_floating(n.dtype(a)) || n.dtype(a) != n.dtype(b)) return false;
  const SplitView* va = n.split_view(a);
  const SplitView* vb = n.split_view(b);
  int x, y;
  const SplitView* v;
  if (va && vb) {
    if (!same_groups(n, *va, *vb)) return false;
    x = va->base, y = vb->base, v = va;
  } else {
    v = va ? va : vb;
    if (!broadcasts_on_last(n, va ? b : a, *v)) return false;
    x = va ? va->base : a, y = va ? b : vb->base;
  }
  SplitView out = *v;
  out.base = n.add(op->second, {x, y});
  n.set_output(0, n.add_split_view(out.base, out.groups));
  return true;
}

}  // namespace

int reshape_split_view(OnnxNode& n, int x, const Shape& target_in, bool split_constants) {
  SplitView v = view_of(n, x);
  Shape in = n.type(v.base).shape;
  Shape target = target_in;
  // A -1: the element count over the other sizes, as monomials.
  auto minus_one = std::find(target.begin(), target.end(), sym::Expr(-1));
  if (minus_one != target.end()) {
    Mono numel, known;
    for (const auto& d : in) {
      auto m = mono(d);
      auto p = m ? times(numel, *m) : std::nullopt;
      if (!p) return -1;
      numel = *p;
    }
    for (auto it = target.begin(); it != target.end(); ++it) {
      if (it == minus_one) continue;
      auto m = mono(*it);
      auto p = m ? times(known, *m) : std::nullopt;
      if (!p) return -1;
      known = *p;
    }
    auto q = divide(numel, known);
    if (!q) return -1;
    sym::Expr e = q->coef;
    for (const auto& f : q->f) e = e * f;
    *minus_one = e;
  }
  // Size-1 dims: squeezed out of the input and unsqueezed into the result.
  std::vector<int64_t> ones;
  Shape in1, t1;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == sym::Expr(1))
      ones.push_back(static_cast<int64_t>(i));
    else
      in1.push_back(in[i]);
  }
  for (const auto& d : target)
    if (d != sym::Expr(1)) t1.push_back(d);
  std::optional<Refinement> r = refine(in1, t1);
  if (!r) return -1;
  bool any_split =
      std::any_of(r->splits.begin(), r->splits.end(), [](const auto& s) { return s.size() > 1; });
  if (any_split && !split_constants) return -1;
  int y = v.base;
  if (!ones.empty()) y = n.add("squeeze", {y}, Attrs{{"dims", ones}});
  // Split the constant dims, from the last (earlier dims keep their indices). With at most one
  // symbolic dim, one reshape does it as a view.
  if (any_split && count_symbolic(in1) <= 1) {
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < in1.size(); ++i) {
      if (r->splits[i].size() > 1) {
        sizes.insert(sizes.end(), r->splits[i].begin(), r->splits[i].end());
      } else {
        auto c = in1[i].as_const();
        sizes.push_back(c ? *c : -1);
      }
    }
    y = n.add("reshape", {y}, Attrs{{"shape", sizes}});
  } else if (any_split) {
    for (size_t i = in1.size(); i-- > 0;) {
      const std::vector<int64_t>& s = r->splits[i];
      int64_t rest = *in1[i].as_const();
      for (size_t p = 0; p + 1 < s.size(); ++p) {
        rest /= s[p];
        y = split_dim(n, y, static_cast<int64_t>(i + p), s[p], rest);
      }
    }
  }
  // Size-1 target dims: a dim of their own.
  std::vector<int> groups;
  size_t g = 0;
  int64_t at = 0;
  for (const auto& d : target) {
    if (d == sym::Expr(1)) {
      y = n.add("unsqueeze", {y}, Attrs{{"dim", at}});
      groups.push_back(1);
      at += 1;
    } else {
      groups.push_back(r->groups[g]);
      at += r->groups[g++];
    }
  }
  return n.add_split_view(y, groups);
}

bool map_split_view(OnnxNode& n) {
  const std::string& op = n.op_type();
  bool any = false;
  for (int i = 0; i < n.num_inputs(); ++i) any |= n.has_input(i) && n.split_view(n.in(i));
  if (!any) return false;
  if (op == "Transpose") return map_transpose_view(n, *n.split_view(n.in(0)));
  if (op == "MatMul") return map_matmul_view(n);
  if (op == "Gemm" && n.split_view(n.in(0)) && !n.split_view(n.in(1)) &&
      (!n.has_input(2) || !n.split_view(n.in(2))))
    return map_gemm_view(n, *n.split_view(n.in(0)));
  if ((op == "Softmax" || op == "LogSoftmax") && n.split_view(n.in(0)))
    return map_softmax_view(n, *n.split_view(n.in(0)));
  if (op == "Where" || op == "Cast") return map_where_cast_view(n);
  if (n.num_inputs() == 2) return map_binary_view(n);
  return false;
}

}  // namespace coil::onnxfe
