// Data-dependent indexing as one-hot comparisons (as the torch bridge lowers scatters and
// gathers, python/coil/torch/lowering_scatter.py): GatherElements, GatherND, ScatterElements
// (and Scatter, its old name), ScatterND, MaxUnpool, ReverseSequence. An index tensor is compared
// with an iota over the indexed positions; a gather sums where(hit, data, 0) over the positions
// (exactly one term is the element, the others are zeros, so infinities and NaNs of other elements
// do not leak), a scatter reduces the updates that hit each position. This works for any index
// values at run time and on every device, at the cost of (indices x positions) comparisons. An
// index outside [-size, size) selects nothing: a gather gives 0, a scatter leaves the element.
// ScatterND with reduction "add" (rows of updates added at their positions) is coil's
// index_add instead: no one-hot, any size, and an index out of range is a run-time error.
#include <algorithm>
#include <limits>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int64_t kMaxOneHot = int64_t{1} << 28;  // elements of the comparison tensor

// The product of v[from, to).
int64_t product(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, v.size());
  int64_t p = 1;
  for (auto it = v.begin() + static_cast<int64_t>(std::min(from, to));
       it != v.begin() + static_cast<int64_t>(to); ++it)
    p *= *it;
  return p;
}

void require_indices(OnnxNode& n, int idx) {
  DType t = n.dtype(idx);
  if (t != DType::I32 && t != DType::I64)
    n.error("indices must be int32 or int64, got {}", dtype_name(t));
}

void check_one_hot_size(OnnxNode& n, int64_t indices, int64_t positions) {
  if (positions > 0 && indices > kMaxOneHot / positions)
    unsupported("{} indices into {} positions (a one-hot of more than 2^28 elements)", indices,
                positions);
}

// x with its dims padded at the end to `shape` with `value` (concats of full blocks).
int pad_to(OnnxNode& n, int x, const std::vector<int64_t>& shape, double value) {
  std::vector<int64_t> s = n.static_shape(x, "the input");
  for (size_t a = 0; a < s.size(); ++a) {
    if (s[a] == shape[a]) continue;
    s[a] = shape[a] - s[a];
    int f = n.add("full", {}, Attrs{{"shape", s}, {"value", value}, {"dtype", n.dtype(x)}});
    x = n.add("concat", {x, f}, Attrs{{"dim", static_cast<int64_t>(a)}});
    s[a] = shape[a];
  }
  return x;
}

// Bool values are selected as uint8 (sum and where work on numbers).
int as_number(OnnxNode& n, int x) {
  return n.dtype(x) == DType::Bool ? n.cast(x, DType::U8) : x;
}

// Component j of the last dim of `idx` ([..., k], i64) made non-negative with sizes[j], and
// combined into a row-major linear index over those sizes: [...]. A row with a component out of
// range becomes `bad_value` (-1 by default: no one-hot position is hit; index_add's own check
// catches the number of positions).
int linear_index(OnnxNode& n, int idx, const std::vector<int64_t>& sizes, int64_t bad_value = -1) {
  auto k = static_cast<int64_t>(sizes.size());
  Tensor sz = Tensor::empty(DType::I64, {k}), stride = Tensor::empty(DType::I64, {k});
  int64_t s = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    sz.set_from_double(j, static_cast<double>(sizes[static_cast<size_t>(j)]));
    stride.set_from_double(j, static_cast<double>(s));
    s *= sizes[static_cast<size_t>(j)];
  }
  int zero = n.scalar(0, DType::I64);
  int fixed =
      n.add("where", {n.add("lt", {idx, zero}), n.add("add", {idx, n.add_constant(sz)}), idx});
  // A component out of range would alias another position: make the whole index -1.
  int bad =
      n.add("logical_or", {n.add("lt", {fixed, zero}), n.add("ge", {fixed, n.add_constant(sz)})});
  int any_bad =
      n.add("gt", {reduce(n, "sum", n.cast(bad, DType::I64), {n.rank(idx) - 1}, false), zero});
  int lin =
      reduce(n, "sum", n.add("mul", {fixed, n.add_constant(stride)}), {n.rank(idx) - 1}, false);
  return n.add("where", {any_bad, n.scalar(static_cast<double>(bad_value), DType::I64), lin});
}

}  // namespace

int normalize_index(OnnxNode& n, int idx, int64_t size) {
  idx = n.cast(idx, DType::I64);
  int zero = n.scalar(0, DType::I64);
  return n.add("where",
               {n.add("lt", {idx, zero}),
                n.add("add", {idx, n.scalar(static_cast<double>(size), DType::I64)}), idx});
}

int scatter_reduce(OnnxNode& n, int data, int hit, int updates, int64_t axis,
                   std::string_view reduction) {
  DType t = n.dtype(data);
  int64_t r = n.rank(hit);
  int64_t count = n.static_shape(hit, "the indices")[static_cast<size_t>(axis)];
  if (reduction == "none") {
    // The last update that hits a position wins (ONNX leaves duplicates undefined; its
    // reference assigns in order).
    int pos = iota_along(n, count, axis, r);
    int last = reduce(n, "max", n.add("where", {hit, pos, n.scalar(-1, DType::I64)}), {axis}, true);
    int sel = n.add("logical_and", {hit, n.add("eq", {pos, last})});
    int u = as_number(n, updates);
    int v = reduce(n, "sum", n.add("where", {sel, u, n.scalar(0, n.dtype(u))}), {axis}, false);
    int any = n.add("ge", {n.add("squeeze", {last}, Attrs{{"dims", std::vector<int64_t>{axis}}}),
                           n.scalar(0, DType::I64)});
    return n.add("where", {any, n.cast(v, t), data});
  }
  if (t == DType::Bool)
    n.error("reduction '{}' of bool data (only 'none' is defined for bool)",
            printable(std::string(reduction)));
  // Sums and products of integers are i64 in coil: cast back.
  if (reduction == "add")
    return n.cast(
        n.add("add", {data, reduce(n, "sum", n.add("where", {hit, updates, n.scalar(0, t)}), {axis},
                                   false)}),
        t);
  if (reduction == "mul")
    return n.cast(
        n.add("mul", {data, reduce(n, "prod", n.add("where", {hit, updates, n.scalar(1, t)}),
                                   {axis}, false)}),
        t);
  if (reduction != "max" && reduction != "min")
    n.error("reduction '{}' is not one of none, add, mul, max, min",
            printable(std::string(reduction)));
  bool is_max = reduction == "max";
  // A value that never wins; positions no update hits keep the data (the where below).
  double lowest =
      is_floating(t) ? (is_max ? -1.0 : 1.0) * std::numeric_limits<double>::infinity() : 0.0;
  int fill = n.scalar(lowest, t);
  if (!is_floating(t)) {  // integers: the data itself never wins over itself
    fill = n.add("unsqueeze", {data}, Attrs{{"dim", axis}});
  }
  int best = reduce(n, is_max ? "max" : "min", n.add("where", {hit, updates, fill}), {axis}, false);
  int any = n.add(
      "gt", {reduce(n, "sum", n.cast(hit, DType::I64), {axis}, false), n.scalar(0, DType::I64)});
  return n.add("where", {any, n.add(is_max ? "maximum" : "minimum", {data, best}), data});
}

void map_gather_elements(OnnxNode& n) {
  int data = n.in(0), idx = n.in(1);
  require_indices(n, idx);
  int64_t r = n.rank(data);
  if (r == 0 || n.rank(idx) != r)
    n.error("data and indices must have the same rank >= 1, got {} and {}",
            shape_str(n.type(data).shape), shape_str(n.type(idx).shape));
  int64_t axis = n.axis(n.attr_int("axis", 0), r);
  std::vector<int64_t> ds = n.static_shape(data, "data"), is = n.static_shape(idx, "indices");
  for (int64_t a = 0; a < r; ++a) {
    auto i = static_cast<size_t>(a);
    if (a == axis || is[i] == ds[i]) continue;
    if (is[i] > ds[i])
      n.error("indices {} exceed data {} in dim {}", shape_str(n.type(idx).shape),
              shape_str(n.type(data).shape), a);
    data = n.add("slice", {data}, Attrs{{"dim", a}, {"start", int64_t{0}}, {"end", is[i]}});
  }
  int64_t d = ds[static_cast<size_t>(axis)];
  check_one_hot_size(n, product(is), d);
  int ix = n.add("unsqueeze", {normalize_index(n, idx, d)}, Attrs{{"dim", axis + 1}});
  int hit = n.add("eq", {ix, iota_along(n, d, axis + 1, r + 1)});
  int v = as_number(n, n.add("unsqueeze", {data}, Attrs{{"dim", axis}}));
  int y = reduce(n, "sum", n.add("where", {hit, v, n.scalar(0, n.dtype(v))}), {axis + 1}, false);
  n.set_output(0, n.cast(y, n.dtype(data)));
}

void map_scatter_elements(OnnxNode& n) {
  int data = n.in(0), idx = n.in(1), upd = n.in(2);
  require_indices(n, idx);
  int64_t r = n.rank(data);
  if (r == 0 || n.rank(idx) != r || n.type(upd).shape != n.type(idx).shape)
    n.error(
        "data, indices and updates must have the same rank >= 1, indices and updates the "
        "same shape, got {}, {} and {}",
        shape_str(n.type(data).shape), shape_str(n.type(idx).shape), shape_str(n.type(upd).shape));
  if (n.dtype(upd) != n.dtype(data))
    n.error("updates are {}, data {}", dtype_name(n.dtype(upd)), dtype_name(n.dtype(data)));
  int64_t axis = n.axis(n.attr_int("axis", 0), r);
  std::string reduction = n.op_type() == "Scatter" ? "none" : n.attr_string("reduction", "none");
  std::vector<int64_t> ds = n.static_shape(data, "data"), is = n.static_shape(idx, "indices");
  int64_t d = ds[static_cast<size_t>(axis)];
  // Indices smaller than data in the other dims update only their part: pad them with an index
  // that hits nothing.
  std::vector<int64_t> padded = ds;
  padded[static_cast<size_t>(axis)] = is[static_cast<size_t>(axis)];
  for (int64_t a = 0; a < r; ++a)
    if (is[static_cast<size_t>(a)] > padded[static_cast<size_t>(a)])
      n.error("indices {} exceed data {} in dim {}", shape_str(n.type(idx).shape),
              shape_str(n.type(data).shape), a);
  check_one_hot_size(n, product(padded), d);
  int ix = pad_to(n, normalize_index(n, idx, d), padded, static_cast<double>(d));
  upd = pad_to(n, upd, padded, 0.0);
  int hit = n.add("eq", {n.add("unsqueeze", {ix}, Attrs{{"dim", axis + 1}}),
                         iota_along(n, d, axis + 1, r + 1)});
  int u = n.add("unsqueeze", {upd}, Attrs{{"dim", axis + 1}});
  n.set_output(0, scatter_reduce(n, data, hit, u, axis, reduction));
}

void map_gather_nd(OnnxNode& n) {
  int data = n.in(0), idx = n.in(1);
  require_indices(n, idx);
  std::vector<int64_t> ds = n.static_shape(data, "data"), is = n.static_shape(idx, "indices");
  int64_t b = n.attr_int("batch_dims", 0);
  if (is.empty()) n.error("indices must have at least one dim");
  int64_t k = is.back();
  auto rd = static_cast<int64_t>(ds.size()), ri = static_cast<int64_t>(is.size());
  if (b < 0 || b >= ri || k < 1 || b + k > rd)
    n.error("batch_dims {} and index length {} do not fit data {} and indices {}", b, k,
            shape_str(n.type(data).shape), shape_str(n.type(idx).shape));
  for (int64_t a = 0; a < b; ++a)
    if (ds[static_cast<size_t>(a)] != is[static_cast<size_t>(a)])
      n.error("batch dim {} differs: data {}, indices {}", a, shape_str(n.type(data).shape),
              shape_str(n.type(idx).shape));
  auto ub = static_cast<size_t>(b), uk = static_cast<size_t>(k);
  int64_t batch = product(ds, 0, ub), lookups = product(is, ub, is.size() - 1);
  int64_t positions = product(ds, ub, ub + uk), rest = product(ds, ub + uk);
  check_one_hot_size(n, batch * lookups * rest, positions);
  std::vector<int64_t> sizes(ds.begin() + b, ds.begin() + b + k);
  int lin = linear_index(n, n.cast(idx, DType::I64), sizes);
  lin = n.add("reshape", {lin}, Attrs{{"shape", std::vector<int64_t>{batch, lookups, 1, 1}}});
  int hit = n.add("eq", {lin, iota_along(n, positions, 2, 4)});
  int v = as_number(n, n.add("reshape", {data},
                             Attrs{{"shape", std::vector<int64_t>{batch, 1, positions, rest}}}));
  int y = reduce(n, "sum", n.add("where", {hit, v, n.scalar(0, n.dtype(v))}), {2}, false);
  std::vector<int64_t> out(is.begin(), is.end() - 1);
  out.insert(out.end(), ds.begin() + b + k, ds.end());
  n.set_output(0, n.cast(n.add("reshape", {y}, Attrs{{"shape", out}}), n.dtype(data)));
}

void map_scatter_nd(OnnxNode& n) {
  int data = n.in(0), idx = n.in(1), upd = n.in(2);
  require_indices(n, idx);
  std::vector<int64_t> ds = n.static_shape(data, "data"), is = n.static_shape(idx, "indices");
  std::vector<int64_t> us = n.static_shape(upd, "updates");
  if (is.empty()) n.error("indices must have at least one dim");
  int64_t k = is.back();
  if (k < 1 || k > static_cast<int64_t>(ds.size()))
    n.error("index length {} exceeds the rank of data {}", k, shape_str(n.type(data).shape));
  std::vector<int64_t> expect(is.begin(), is.end() - 1);
  expect.insert(expect.end(), ds.begin() + k, ds.end());
  if (us != expect)
    n.error("updates are {}, expected {}", shape_str(n.type(upd).shape), shape_str(expect));
  if (n.dtype(upd) != n.dtype(data))
    n.error("updates are {}, data {}", dtype_name(n.dtype(upd)), dtype_name(n.dtype(data)));
  auto uk = static_cast<size_t>(k);
  int64_t lookups = product(is, 0, is.size() - 1), positions = product(ds, 0, uk),
          rest = product(ds, uk);
  const std::string reduction = n.attr_string("reduction", "none");
  if (reduction == "add" && n.dtype(data) != DType::Bool) {
    // Rows of updates added at their flat positions in order: index_add, any size (an index
    // row out of range becomes `positions`, which index_add reports as out of range).
    std::vector<int64_t> sizes(ds.begin(), ds.begin() + k);
    int lin = linear_index(n, n.cast(idx, DType::I64), sizes, positions);
    lin = n.add("reshape", {lin}, Attrs{{"shape", std::vector<int64_t>{lookups}}});
    int u = n.add("reshape", {upd}, Attrs{{"shape", std::vector<int64_t>{lookups, rest}}});
    int d2 = n.add("reshape", {data}, Attrs{{"shape", std::vector<int64_t>{positions, rest}}});
    int y = n.add("index_add", {d2, lin, u});
    n.set_output(0, n.add("reshape", {y}, Attrs{{"shape", ds}}));
    return;
  }
  check_one_hot_size(n, lookups * rest, positions);
  std::vector<int64_t> sizes(ds.begin(), ds.begin() + k);
  int lin = linear_index(n, n.cast(idx, DType::I64), sizes);
  lin = n.add("reshape", {lin}, Attrs{{"shape", std::vector<int64_t>{lookups, 1, 1}}});
  int hit = n.add("eq", {lin, iota_along(n, positions, 1, 3)});
  int u = n.add("reshape", {upd}, Attrs{{"shape", std::vector<int64_t>{lookups, 1, rest}}});
  int d2 = n.add("reshape", {data}, Attrs{{"shape", std::vector<int64_t>{positions, rest}}});
  int y = scatter_reduce(n, d2, hit, u, 0, reduction);
  n.set_output(0, n.add("reshape", {y}, Attrs{{"shape", ds}}));
}

void map_max_unpool(OnnxNode& n) {
  int x = n.in(0), idx = n.in(1);
  require_indices(n, idx);
  std::vector<int64_t> xs = n.static_shape(x, "X");
  if (xs.size() < 3) n.error("X must be [N, C, ...], got {}", shape_str(n.type(x).shape));
  if (n.type(idx).shape != n.type(x).shape)
    n.error("I is {}, X {}", shape_str(n.type(idx).shape), shape_str(n.type(x).shape));
  size_t spatial = xs.size() - 2;
  std::vector<int64_t> kernel = n.attr_ints("kernel_shape").value_or(std::vector<int64_t>{});
  if (kernel.size() != spatial) n.error("kernel_shape must have {} entries", spatial);
  std::vector<int64_t> strides = n.attr_ints("strides").value_or(std::vector<int64_t>(spatial, 1));
  std::vector<int64_t> pads = n.attr_ints("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  if (strides.size() != spatial || pads.size() != 2 * spatial)
    n.error("strides and pads must have {} and {} entries", spatial, 2 * spatial);
  std::vector<int64_t> out = xs;
  for (size_t d = 0; d < spatial; ++d)
    out[2 + d] = (xs[2 + d] - 1) * strides[d] + kernel[d] - pads[d] - pads[spatial + d];
  for (int64_t v : out)
    if (v < 0) n.error("the output shape [{}] is negative", fmt::join(out, ", "));
  // output_shape larger than the computed shape pads the result with zeros at the end of each
  // spatial dim; the indices keep addressing the computed shape (ONNX's test data).
  std::vector<int64_t> padded = out;
  if (n.has_input(2)) {
    padded = n.const_ints(2, "output_shape");
    bool fits = padded.size() == xs.size() && padded[0] == xs[0] && padded[1] == xs[1];
    for (size_t d = 2; fits && d < padded.size(); ++d) fits = padded[d] >= out[d];
    if (!fits)
      n.error("output_shape [{}] is not [N, C, ...] at least [{}]", fmt::join(padded, ", "),
              fmt::join(out, ", "));
  }
  // MaxPool's indices count over the whole tensor; each (n, c) plane's indices are taken
  // relative to its plane, so the comparison is per plane (an index outside its plane, which
  // MaxPool never produces, selects nothing).
  int64_t planes = xs[0] * xs[1], in_plane = product(xs, 2), out_plane = product(out, 2);
  check_one_hot_size(n, planes * in_plane, out_plane);
  int base = n.add(
      "mul", {iota_along(n, planes, 0, 2), n.scalar(static_cast<double>(out_plane), DType::I64)});
  int local = n.add("sub", {n.add("reshape", {n.cast(idx, DType::I64)},
                                  Attrs{{"shape", std::vector<int64_t>{planes, in_plane}}}),
                            base});
  int hit = n.add("eq", {n.add("unsqueeze", {local}, Attrs{{"dim", int64_t{2}}}),
                         iota_along(n, out_plane, 2, 3)});
  int v = n.add("reshape", {x}, Attrs{{"shape", std::vector<int64_t>{planes, in_plane, 1}}});
  int zeros = n.add("full", {},
                    Attrs{{"shape", std::vector<int64_t>{planes, out_plane}},
                          {"value", 0.0},
                          {"dtype", n.dtype(x)}});
  // Overlapping windows may repeat an index (with the same value): the last one is kept, not a
  // sum.
  int y = scatter_reduce(n, zeros, hit, v, 1, "none");
  n.set_output(0, pad_to(n, n.add("reshape", {y}, Attrs{{"shape", out}}), padded, 0.0));
}

void map_reverse_sequence(OnnxNode& n) {
  int x = n.in(0), lens = n.in(1);
  require_indices(n, lens);
  int64_t r = n.rank(x);
  if (r < 2) n.error("the input must have at least 2 dims, got {}", shape_str(n.type(x).shape));
  int64_t time = n.attr_int("time_axis", 0), batch = n.attr_int("batch_axis", 1);
  if (!((time == 0 && batch == 1) || (time == 1 && batch == 0)))
    n.error("time_axis {} and batch_axis {} must be 0 and 1 or 1 and 0", time, batch);
  std::vector<int64_t> xs = n.static_shape(x, "the input");
  int64_t steps = xs[static_cast<size_t>(time)], b = xs[static_cast<size_t>(batch)];
  if (n.type(lens).shape != make_shape({b}))
    n.error("sequence_lens must be [{}], got {}", b, shape_str(n.type(lens).shape));
  check_one_hot_size(n, product(xs), steps);
  // src[t, b] = t < len[b] ? len[b] - 1 - t : t, then x[src[t, b], b, ...] by a one-hot over a
  // new dim after the time dim.
  std::vector<int64_t> lshape(static_cast<size_t>(r), 1);
  lshape[static_cast<size_t>(batch)] = b;
  int len = n.add("reshape", {n.cast(lens, DType::I64)}, Attrs{{"shape", lshape}});
  int t = iota_along(n, steps, time, r);
  int rev = n.add("sub", {n.add("sub", {len, n.scalar(1, DType::I64)}), t});
  int src = n.add("where", {n.add("lt", {t, len}), rev, t});
  int hit = n.add("eq", {n.add("unsqueeze", {src}, Attrs{{"dim", time + 1}}),
                         iota_along(n, steps, time + 1, r + 1)});
  int v = as_number(n, n.add("unsqueeze", {x}, Attrs{{"dim", time}}));
  int y = reduce(n, "sum", n.add("where", {hit, v, n.scalar(0, n.dtype(v))}), {time + 1}, false);
  n.set_output(0, n.cast(y, n.dtype(x)));
}

}  // namespace coil::onnxfe
