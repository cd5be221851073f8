// Einsum as coil's existing ops: each operand's repeated labels become a diagonal (a where with
// an iota mask, summed), labels used nowhere else are summed out, then the operands are joined
// left to right, two at a time: floating point through one batched matmul ([batch, M, K] @
// [batch, K, N] after permutes and reshapes), integers through a broadcast multiply and a sum.
// The result is permuted to the output's label order.
#include <algorithm>
#include <map>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

// Labels: letters are their character; the dims an ellipsis stands for are 1000 + k, k counted
// from the last of them, so that operands with fewer of them line up on the right (numpy
// broadcasting).
using Labels = std::vector<int>;
constexpr int kEllipsis = 1000;

struct Operand {
  int id;
  Labels labels;
};

// One term ("ij", "...k") of an operand of rank `rank` (or the output, rank -1: the ellipsis
// then stands for `ell` dims).
Labels parse_term(OnnxNode& n, std::string_view term, int64_t rank, int64_t* ell) {
  Labels out;
  size_t dots = term.find("...");
  int64_t letters = static_cast<int64_t>(term.size()) - (dots == std::string_view::npos ? 0 : 3);
  for (size_t i = 0; i < term.size(); ++i) {
    if (i == dots) {
      int64_t k = rank >= 0 ? rank - letters : *ell;
      if (k < 0)
        n.error("the term '{}' has more labels than its operand has dims ({})", term, rank);
      if (rank >= 0) *ell = std::max(*ell, k);
      for (int64_t j = 0; j < k; ++j) out.push_back(kEllipsis + static_cast<int>(k - 1 - j));
      i += 2;
      continue;
    }
    char c = term[i];
    if (!std::isalpha(static_cast<unsigned char>(c)))
      n.error("'{}' is not a letter or '...' in the term '{}'", c, term);
    out.push_back(c);
  }
  if (rank >= 0 && dots == std::string_view::npos && letters != rank)
    n.error("the term '{}' has {} labels for an operand of rank {}", term, letters, rank);
  return out;
}

std::vector<int64_t> dims_of(OnnxNode& n, const Operand& o) {
  return n.static_shape(o.id, "an operand");
}

// Removes a repeated label of one operand by taking the diagonal.
void take_diagonals(OnnxNode& n, Operand& o) {
  for (size_t p = 0; p < o.labels.size(); ++p)
    for (size_t q = p + 1; q < o.labels.size(); ++q) {
      if (o.labels[p] != o.labels[q]) continue;
      std::vector<int64_t> s = dims_of(n, o);
      if (s[p] != s[q])
        n.error("label '{}' has sizes {} and {} in one operand", static_cast<char>(o.labels[p]),
                s[p], s[q]);
      auto r = static_cast<int64_t>(s.size());
      int mask = n.add("eq", {iota_along(n, s[p], static_cast<int64_t>(p), r),
                              iota_along(n, s[q], static_cast<int64_t>(q), r)});
      int picked = n.add("where", {mask, o.id, n.scalar(0, n.dtype(o.id))});
      o.id = n.cast(reduce(n, "sum", picked, {static_cast<int64_t>(q)}, false), n.dtype(o.id));
      o.labels.erase(o.labels.begin() + static_cast<int64_t>(q));
      --q;
    }
}

// Sums the labels of `o` that `keep` does not contain.
void sum_unused(OnnxNode& n, Operand& o, const std::vector<int>& keep) {
  std::vector<int64_t> axes;
  Labels rest;
  for (size_t i = 0; i < o.labels.size(); ++i) {
    if (std::find(keep.begin(), keep.end(), o.labels[i]) == keep.end())
      axes.push_back(static_cast<int64_t>(i));
    else
      rest.push_back(o.labels[i]);
  }
  if (axes.empty()) return;
  o.id = n.cast(reduce(n, "sum", o.id, axes, false), n.dtype(o.id));  // integer sums are i64
  o.labels = rest;
}

// o permuted to `order` (each label of o once), with size-1 dims for labels o lacks, expanded to
// `sizes` (per label of order).
int arrange(OnnxNode& n, const Operand& o, const Labels& order, const std::map<int, int64_t>& sizes,
            bool expand) {
  std::vector<int64_t> perm, shape, full;
  for (int l : order) {
    auto it = std::find(o.labels.begin(), o.labels.end(), l);
    if (it != o.labels.end()) perm.push_back(it - o.labels.begin());
  }
  int v = o.id;
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (!identity) v = n.add("permute", {v}, Attrs{{"dims", perm}});
  std::vector<int64_t> s = n.static_shape(v, "an operand");
  size_t k = 0;
  for (int l : order) {
    bool has = std::find(o.labels.begin(), o.labels.end(), l) != o.labels.end();
    shape.push_back(has ? s[k++] : 1);
    full.push_back(sizes.at(l));
  }
  if (shape != s) v = n.add("reshape", {v}, Attrs{{"shape", shape}});
  if (expand && shape != full) v = n.add("expand", {v}, Attrs{{"shape", full}});
  return v;
}

int64_t product_of(const Labels& ls, const std::map<int, int64_t>& sizes) {
  int64_t p = 1;
  for (int l : ls) p *= sizes.at(l);
  return p;
}

// a and b joined, keeping the labels in `keep`.
Operand join(OnnxNode& n, const Operand& a, const Operand& b, const std::vector<int>& keep) {
  std::map<int, int64_t> sizes;
  for (const Operand* o : {&a, &b}) {
    std::vector<int64_t> s = dims_of(n, *o);
    for (size_t i = 0; i < s.size(); ++i) {
      auto [it, fresh] = sizes.emplace(o->labels[i], s[i]);
      if (!fresh && it->second != s[i]) {
        if (it->second != 1 && s[i] != 1) n.error("label sizes {} and {} differ", it->second, s[i]);
        it->second = std::max(it->second, s[i]);
      }
    }
  }
  auto in = [](const Labels& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); };
  Labels batch, left, right, contracted;
  for (int l : a.labels) {
    if (!in(b.labels, l))
      left.push_back(l);
    else if (in(keep, l))
      batch.push_back(l);
    else
      contracted.push_back(l);
  }
  for (int l : b.labels)
    if (!in(a.labels, l)) right.push_back(l);
  Labels out = batch;
  out.insert(out.end(), left.begin(), left.end());
  out.insert(out.end(), right.begin(), right.end());
  if (!is_floating(n.dtype(a.id))) {
    // Integers: broadcast multiply over [out..., contracted...], then sum the contracted.
    Labels all = out;
    all.insert(all.end(), contracted.begin(), contracted.end());
    int prod = n.add("mul", {arrange(n, a, all, sizes, false), arrange(n, b, all, sizes, false)});
    std::vector<int64_t> axes;
    for (size_t i = out.size(); i < all.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    int sum = axes.empty() ? prod : reduce(n, "sum", prod, axes, false);
    return {n.cast(sum, n.dtype(a.id)), out};
  }
  Labels la = batch, lb = batch;
  la.insert(la.end(), left.begin(), left.end());
  la.insert(la.end(), contracted.begin(), contracted.end());
  lb.insert(lb.end(), contracted.begin(), contracted.end());
  lb.insert(lb.end(), right.begin(), right.end());
  int64_t nb = product_of(batch, sizes), m = product_of(left, sizes),
          k = product_of(contracted, sizes), nn = product_of(right, sizes);
  int va = n.add("reshape", {arrange(n, a, la, sizes, true)},
                 Attrs{{"shape", std::vector<int64_t>{nb, m, k}}});
  int vb = n.add("reshape", {arrange(n, b, lb, sizes, true)},
                 Attrs{{"shape", std::vector<int64_t>{nb, k, nn}}});
  std::vector<int64_t> shape;
  for (int l : out) shape.push_back(sizes.at(l));
  return {n.add("reshape", {n.add("matmul", {va, vb})}, Attrs{{"shape", shape}}), out};
}

}  // namespace

void map_einsum(OnnxNode& n) {
  std::string eq = n.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(terms.size()) != n.num_inputs())
    n.error("equation '{}' has {} operands, the node {} inputs", printable(eq), terms.size(),
            n.num_inputs());
  DType t = n.dtype(n.in(0));
  std::vector<Operand> ops;
  int64_t ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    int id = n.in(static_cast<int>(i));
    if (n.dtype(id) != t) n.error("operands of different dtypes");
    ops.push_back({id, parse_term(n, terms[i], n.rank(id), &ell)});
  }
  Labels output;
  if (arrow != std::string::npos) {
    output = parse_term(n, eq.substr(arrow + 2), -1, &ell);
  } else {
    // Implicit: the ellipsis dims, then the letters used once, in alphabetical order.
    std::map<int, int> count;
    for (const Operand& o : ops)
      for (int l : o.labels) ++count[l];
    for (int64_t j = ell - 1; j >= 0; --j) output.push_back(kEllipsis + static_cast<int>(j));
    for (auto [l, c] : count)
      if (l < kEllipsis && c == 1) output.push_back(l);
  }
  for (Operand& o : ops) take_diagonals(n, o);
  for (size_t i = 0; i < ops.size(); ++i) {
    // Labels the output or another operand uses.
    std::vector<int> keep = output;
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    sum_unused(n, ops[i], keep);
  }
  Operand acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<int> keep = output;
    for (size_t j = i + 1; j < ops.size(); ++j)
      keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    acc = join(n, acc, ops[i], keep);
    sum_unused(n, acc, keep);
  }
  sum_unused(n, acc, output);
  for (int l : output)
    if (std::find(acc.labels.begin(), acc.labels.end(), l) == acc.labels.end())
      n.error("output label '{}' is in no operand", static_cast<char>(l));
  std::map<int, int64_t> sizes;
  std::vector<int64_t> s = dims_of(n, acc);
  for (size_t i = 0; i < s.size(); ++i) sizes[acc.labels[i]] = s[i];
  n.set_output(0, n.cast(arrange(n, acc, output, sizes, false), t));  // integer sums are i64
}

}  // namespace coil::onnxfe
