// TfIdfVectorizer (opset 9) over integer tokens: the n-gram counts as comparisons of shifted
// slices of the input with the pool's n-grams. For n-grams of length n and a skip s, the n-gram
// starting at position i is (x[i], x[i + (s + 1)], ..., x[i + (n - 1)(s + 1)]); slice k of the
// input (start k (s + 1), one element per start i) compared with the pool's k-th tokens gives
// [.., starts, pool n-grams] booleans, their AND over k is a match, its sum over the starts a
// count. Every skip from 0 to max_skip_count adds its count (unigrams are counted once, as
// ONNX Runtime does: a skip means nothing for them). The counts go to the output positions of
// ngram_indexes, then TF, IDF or TFIDF weighting. Exact: counts are sums of 0/1 in f32, far below
// 2^24. Memory: the input times the pool's n-grams of one length per comparison.
#include <algorithm>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kMaxCompare = int64_t{1} << 28;  // elements of one comparison tensor

struct PoolLevel {
  int64_t n = 0;      // tokens per n-gram
  int64_t first = 0;  // index of its first n-gram among all the pool's n-grams
  std::vector<std::vector<int64_t>> tokens;  // [k][j]: token k of n-gram j
};

// The pool's n-grams of each length, from pool_int64s and ngram_counts (the start of each
// length's tokens in the pool; the lengths 1, 2, ... in order).
std::vector<PoolLevel> pool_levels(OnnxNode& n, const std::vector<int64_t>& pool,
                                   const std::vector<int64_t>& counts) {
  std::vector<PoolLevel> levels;
  int64_t total = static_cast<int64_t>(pool.size()), ngrams = 0;
  for (size_t l = 0; l < counts.size(); ++l) {
    int64_t start = counts[l], end = l + 1 < counts.size() ? counts[l + 1] : total;
    auto len = static_cast<int64_t>(l + 1);
    if (start < 0 || end < start || end > total)
      n.error("ngram_counts [{}] does not split pool_int64s ({} tokens) into ascending ranges",
              fmt::join(counts, ", "), total);
    if ((end - start) % len != 0)
      n.error(
          "the {}-grams of the pool ({} tokens from ngram_counts[{}] = {}) are not a "
          "multiple of {}",
          len, end - start, l, start, len);
    PoolLevel p;
    p.n = len;
    p.first = ngrams;
    p.tokens.assign(static_cast<size_t>(len), {});
    for (int64_t j = start; j < end; j += len)
      for (int64_t k = 0; k < len; ++k)
        p.tokens[static_cast<size_t>(k)].push_back(pool[static_cast<size_t>(j + k)]);
    ngrams += (end - start) / len;
    levels.push_back(std::move(p));
  }
  return levels;
}

int int64_constant(OnnxNode& n, const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DType::I64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), static_cast<int64_t*>(t.data()));
  return n.add_constant(t);
}

}  // namespace

void map_tfidf_vectorizer(OnnxNode& n) {
  int x = n.in(0);
  DType xt = n.dtype(x);
  if (xt != DType::I32 && xt != DType::I64)
    unsupported("input dtype {} (coil has no string tensors; int32 and int64 tokens only)",
                dtype_name(xt));
  if (n.has_attr("pool_strings")) unsupported("pool_strings (coil has no string tensors)");
  int64_t r = n.rank(x);
  if (r != 1 && r != 2) n.error("the input must be 1-D [C] or 2-D [N, C], got rank {}", r);
  std::string mode = n.attr_string("mode", "");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF")
    n.error("mode '{}' is not TF, IDF or TFIDF", printable(mode));
  int64_t min_n = n.attr_int("min_gram_length", -1), max_n = n.attr_int("max_gram_length", -1);
  int64_t max_skip = n.attr_int("max_skip_count", -1);
  if (min_n < 1 || max_n < min_n)
    n.error("min_gram_length {} and max_gram_length {} must satisfy 1 <= min <= max", min_n, max_n);
  if (max_skip < 0) n.error("max_skip_count {} is negative (or missing)", max_skip);
  std::vector<int64_t> pool = n.attr_ints("pool_int64s").value_or(std::vector<int64_t>{});
  if (!n.has_attr("pool_int64s")) n.error("pool_int64s is missing");
  std::vector<int64_t> counts = n.attr_ints("ngram_counts").value_or(std::vector<int64_t>{});
  std::vector<int64_t> indexes = n.attr_ints("ngram_indexes").value_or(std::vector<int64_t>{});
  std::vector<PoolLevel> levels = pool_levels(n, pool, counts);
  int64_t ngrams = levels.empty()
                       ? 0
                       : levels.back().first + static_cast<int64_t>(levels.back().tokens[0].size());
  if (ngrams == 0) n.error("the pool holds no n-grams");
  if (static_cast<int64_t>(indexes.size()) != ngrams)
    n.error("ngram_indexes has {} entries for the pool's {} n-grams", indexes.size(), ngrams);
  if (max_n > static_cast<int64_t>(levels.size()))
    n.error("max_gram_length {} exceeds the {} n-gram lengths of ngram_counts", max_n,
            levels.size());
  int64_t out_size = 0;
  for (int64_t v : indexes) {
    if (v < 0) n.error("ngram_indexes holds the negative index {}", v);
    out_size = std::max(out_size, v + 1);
  }
  std::vector<double> weights = n.attr_floats("weights").value_or(std::vector<double>{});
  // ONNX Runtime weighs output position i by weights[i].
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != out_size)
    n.error("weights has {} entries for an output of {} (one per output position)", weights.size(),
            out_size);

  int64_t c = n.static_shape(x, "the input")[static_cast<size_t>(r - 1)];
  int64_t rows = r == 2 ? n.static_shape(x, "the input")[0] : 1;
  int xi = n.add("unsqueeze", {n.cast(x, DType::I64)}, Attrs{{"dim", r}});  // [.., C, 1]
  // counts of every pool n-gram (those of unused lengths stay 0): [.., ngrams]
  std::vector<int> level_counts;
  for (const PoolLevel& p : levels) {
    auto j = static_cast<int64_t>(p.tokens[0].size());
    bool used = p.n >= min_n && p.n <= max_n && j > 0;
    std::vector<int64_t> zshape;
    if (r == 2) zshape.push_back(rows);
    zshape.push_back(j);
    if (!used) {
      if (j > 0) level_counts.push_back(n.add_constant(Tensor::zeros(DType::F32, zshape)));
      continue;
    }
    if (rows * c * j > kMaxCompare)
      unsupported("{} tokens against {} pool n-grams (comparisons of more than 2^28 elements)",
                  rows * c, j);
    int sum = -1;
    for (int64_t s = 0; s <= (p.n == 1 ? 0 : max_skip); ++s) {
      int64_t starts = c - (p.n - 1) * (s + 1);
      if (starts <= 0) break;
      int match = -1;
      for (int64_t k = 0; k < p.n; ++k) {
        int64_t b = k * (s + 1);
        int xs = n.add("slice", {xi}, Attrs{{"dim", r - 1}, {"start", b}, {"end", b + starts}});
        int eq = n.add("eq", {xs, int64_constant(n, p.tokens[static_cast<size_t>(k)])});
        match = match < 0 ? eq : n.add("logical_and", {match, eq});
      }
      int cnt = reduce(n, "sum", n.cast(match, DType::F32), {r - 1}, false);
      sum = sum < 0 ? cnt : n.add("add", {sum, cnt});
    }
    if (sum < 0) sum = n.add_constant(Tensor::zeros(DType::F32, zshape));
    level_counts.push_back(sum);
  }
  int all = level_counts.size() == 1 ? level_counts[0]
                                     : n.add("concat", level_counts, Attrs{{"dim", r - 1}});
  // To the output positions: out[.., o] = sum of counts[.., j] with ngram_indexes[j] == o, a
  // 0/1 matrix [ngrams, out] (its products with the counts are exact).
  Tensor sel = Tensor::zeros(DType::F32, {ngrams, out_size});
  for (int64_t j = 0; j < ngrams; ++j)
    sel.set_from_double(j * out_size + indexes[static_cast<size_t>(j)], 1.0);
  int prod = n.add("mul", {n.add("unsqueeze", {all}, Attrs{{"dim", r}}), n.add_constant(sel)});
  int tf = reduce(n, "sum", prod, {r - 1}, false);  // [.., out]
  int y = tf;
  if (mode != "TF") {
    int w = -1;
    if (!weights.empty()) {
      Tensor wt = Tensor::empty(DType::F32, {out_size});
      for (int64_t i = 0; i < out_size; ++i) wt.set_from_double(i, weights[static_cast<size_t>(i)]);
      w = n.add_constant(wt);
    }
    if (mode == "IDF") {
      int seen = n.add("gt", {tf, n.scalar(0, DType::F32)});
      y = n.add("where", {seen, w < 0 ? n.scalar(1, DType::F32) : w, n.scalar(0, DType::F32)});
    } else if (w >= 0) {
      y = n.add("mul", {tf, w});
    }
  }
  n.set_output(0, y);
}

}  // namespace coil::onnxfe
