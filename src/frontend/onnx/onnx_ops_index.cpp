// Indexing ops built from coil's slices, concats and iota masks: Slice, Split, Gather (constant
// indices; dynamic indices map to coil's gather), Tile, Pad, EyeLike, Trilu, OneHot.
#include <algorithm>
#include <limits>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil::onnxfe {
namespace {

constexpr size_t kMaxPieces = 64;
constexpr int64_t kMaxGatherDim = int64_t{1} << 24;  // Pad's edge and reflect modes

int64_t static_dim(OnnxNode& n, int x, int64_t axis, std::string_view what) {
  // OnnxNode::axis accepts axis 0 of a rank-0 value, which has no dim to read: Split of a scalar
  // read past the end of its shape (found by tests/fuzz/parsers/onnx_parser_fuzzer).
  if (axis >= n.rank(x))
    n.error("{} needs an input with a dim {}, got rank {}", what, axis, n.rank(x));
  auto c = n.type(x).shape[static_cast<size_t>(axis)].as_const();
  if (!c) unsupported("{} along the symbolic dim {}", what, axis);
  return *c;
}

int slice(OnnxNode& n, int x, int64_t axis, int64_t start, int64_t end, int64_t step = 1) {
  return n.add("slice", {x}, Attrs{{"dim", axis}, {"start", start}, {"end", end}, {"step", step}});
}

// A Slice of a symbolic dim: coil's slice writes python's clamped bounds as min/max of the
// size (type_rules.cpp), right at every size; a negative step would need its elements listed
// and is unsupported.
int symbolic_slice(OnnxNode& n, int x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  const bool to_end = end >= std::numeric_limits<int32_t>::max();
  if (step < 0)
    unsupported("Slice [{}, {}) step {} along the symbolic dim {} ({}): a negative step", start,
                end, step, axis, sym::to_string(n.type(x).shape[static_cast<size_t>(axis)]));
  Attrs attrs{{"dim", axis}, {"start", std::max(start, -(int64_t{1} << 62))}, {"step", step}};
  if (!to_end) attrs.set("end", std::max(end, -(int64_t{1} << 62)));
  return n.add("slice", {x}, std::move(attrs));
}

}  // namespace

int iota_along(OnnxNode& n, int64_t size, int64_t axis, int64_t rank) {
  int v = n.add("iota", {}, Attrs{{"size", size}});
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = size;
  return n.add("reshape", {v}, Attrs{{"shape", shape}});
}

int gather_const(OnnxNode& n, int x, int64_t axis, const std::vector<int64_t>& idx) {
  int64_t size = static_dim(n, x, axis, "indexing");
  std::vector<int> pieces;
  for (size_t i = 0; i < idx.size();) {
    // A run: equal indices (a broadcast piece), or an arithmetic progression with step > 0.
    size_t j = i + 1;
    int64_t step = j < idx.size() ? idx[j] - idx[i] : 1;
    if (step < 0) step = 1;
    while (j < idx.size() && idx[j] - idx[j - 1] == step) ++j;
    if (j == i + 1) step = 1;
    if (pieces.size() == kMaxPieces)
      unsupported("indexing with more than {} separate runs of constant indices", kMaxPieces);
    if (step == 0) {
      int one = slice(n, x, axis, idx[i], idx[i] + 1);
      std::vector<int64_t> shape(static_cast<size_t>(n.rank(x)), -1);
      shape[static_cast<size_t>(axis)] = static_cast<int64_t>(j - i);
      pieces.push_back(n.add("expand", {one}, Attrs{{"shape", shape}}));
    } else if (idx[i] == 0 && step == 1 && j - i == static_cast<size_t>(size)) {
      pieces.push_back(x);
    } else {
      pieces.push_back(slice(n, x, axis, idx[i], idx[j - 1] + 1, step));
    }
    i = j;
  }
  if (pieces.empty()) return slice(n, x, axis, 0, 0);
  return pieces.size() == 1 ? pieces[0] : n.add("concat", pieces, Attrs{{"dim", axis}});
}

void map_slice(OnnxNode& n) {
  int x = n.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset() < 10) {
    starts = n.attr_ints("starts").value_or(std::vector<int64_t>{});
    ends = n.attr_ints("ends").value_or(std::vector<int64_t>{});
    axes = n.attr_ints("axes").value_or(std::vector<int64_t>{});
  } else {
    starts = n.const_ints(1, "starts");
    ends = n.const_ints(2, "ends");
    if (n.has_input(3)) axes = n.const_ints(3, "axes");
    if (n.has_input(4)) steps = n.const_ints(4, "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    n.error("starts, ends, axes and steps have different lengths");
  int y = x;
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t axis = n.axis(axes[k], n.rank(x)), step = steps[k];
    if (step == 0) n.error("step is 0");
    int64_t start = starts[k], end = ends[k];
    bool whole = step == 1 && start == 0 && end >= std::numeric_limits<int32_t>::max();
    if (whole) continue;  // also for symbolic dims
    if (!n.type(y).shape[static_cast<size_t>(axis)].is_const()) {
      y = symbolic_slice(n, y, axis, start, end, step);
      continue;
    }
    int64_t d = static_dim(n, y, axis, "Slice");
    auto norm = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v = v < -d ? -d - 1 : v + d;  // avoid overflow near INT64_MIN
      return std::clamp(v, lo, hi);
    };
    if (step > 0) {
      y = slice(n, y, axis, norm(start, 0, d), norm(end, 0, d), step);
      continue;
    }
    // Negative steps: the elements start, start + step, ... down to end (exclusive).
    int64_t s = norm(start, 0, d - 1), e = norm(end, -1, d - 1);
    std::vector<int64_t> idx;
    for (int64_t i = s; i > e && d > 0; i += step) {
      idx.push_back(i);
      if (idx.size() > 4096) unsupported("a negative-step slice of more than 4096 elements");
    }
    y = gather_const(n, y, axis, idx);
  }
  n.set_output(0, y);
}

void map_split(OnnxNode& n) {
  int x = n.in(0);
  int64_t axis = n.axis(n.attr_int("axis", 0), n.rank(x));
  int64_t d = static_dim(n, x, axis, "Split");
  std::vector<int64_t> sizes;
  if ((n.opset() >= 13 || n.opset() < 2) && n.has_input(1)) {  // Split-1 had it as an input too
    sizes = n.const_ints(1, "the split input");
  } else if (n.opset() < 13 && n.has_attr("split")) {
    sizes = *n.attr_ints("split");
  } else {
    int64_t k = n.num_outputs();
    if (k == 0 || d % k != 0)
      n.error("dim {} of size {} does not split into {} equal parts", axis, d, k);
    sizes.assign(static_cast<size_t>(k), d / k);
  }
  if (static_cast<int>(sizes.size()) != n.num_outputs())
    n.error("{} split sizes for {} outputs", sizes.size(), n.num_outputs());
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || start + sizes[i] > d)
      n.error("split sizes [{}] exceed {}", fmt::join(sizes, ", "), d);
    if (n.wants_output(static_cast<int>(i)))
      n.set_output(static_cast<int>(i), slice(n, x, axis, start, start + sizes[i]));
    start += sizes[i];
  }
  if (start != d) n.error("split sizes [{}] do not add up to {}", fmt::join(sizes, ", "), d);
}

void map_gather(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r == 0) n.error("data must have at least one dim");
  int64_t axis = n.axis(n.attr_int("axis", 0), r);
  if (!n.constant(n.in(1))) {
    // Dynamic indices (an embedding lookup): coil's gather, an indirect load.
    DType it = n.dtype(n.in(1));
    if (it != DType::I32 && it != DType::I64)
      n.error("indices must be int32 or int64, got {}", dtype_name(it));
    n.set_output(0, n.add("gather", {x, n.in(1)}, Attrs{{"axis", axis}}));
    return;
  }
  std::vector<int64_t> idx = n.const_ints(1, "the indices input");
  int64_t d = static_dim(n, x, axis, "Gather");
  for (int64_t& i : idx) {
    if (i < -d || i >= d) n.error("index {} is out of range for a dim of size {}", i, d);
    if (i < 0) i += d;
  }
  int y = gather_const(n, x, axis, idx);
  // [data dims before axis] + indices' shape + [data dims after axis]
  const Shape& s = n.type(x).shape;
  Shape out(s.begin(), s.begin() + axis);
  for (int64_t k : n.constant(n.in(1))->shape()) out.push_back(k);
  out.insert(out.end(), s.begin() + axis + 1, s.end());
  n.set_output(0, reshape_to(n, y, out));
}

void map_tile(OnnxNode& n) {
  int x = n.in(0);
  if (n.opset() < 6)
    unsupported("Tile-1's tiles and axis inputs (coil reads Tile from opset 6 on)");
  std::vector<int64_t> reps = n.const_ints(1, "repeats");
  const Shape& s = n.type(x).shape;
  if (reps.size() != s.size()) n.error("{} repeats for rank {}", reps.size(), s.size());
  if (std::all_of(reps.begin(), reps.end(), [](int64_t v) { return v == 1; }))
    return n.set_output(0, x);
  // [d0, d1] -> [1, d0, 1, d1] -> expand [r0, d0, r1, d1] -> [r0 * d0, r1 * d1]
  Shape inter, out;
  std::vector<int64_t> expand;
  for (size_t i = 0; i < s.size(); ++i) {
    if (reps[i] < 0) n.error("repeat {} is negative", reps[i]);
    inter.push_back(1), inter.push_back(s[i]);
    expand.push_back(reps[i]), expand.push_back(-1);
    out.push_back(s[i] * reps[i]);
  }
  int y = n.add("expand", {reshape_to(n, x, inter)}, Attrs{{"shape", expand}});
  n.set_output(0, reshape_to(n, y, out));
}

void map_pad(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  std::string mode = n.attr_string("mode", "constant");
  std::vector<int64_t> pads;
  double value = 0;
  if (n.opset() < 11) {
    pads = n.attr_ints(n.opset() < 2 ? "paddings" : "pads").value_or(std::vector<int64_t>{});
    value = n.attr_float("value", 0);
  } else {
    pads = n.const_ints(1, "pads");
    if (n.has_input(2)) value = n.const_scalar(2, "constant_value");
    if (n.has_input(3)) unsupported("the axes input");
  }
  if (static_cast<int64_t>(pads.size()) != 2 * r) n.error("{} pads for rank {}", pads.size(), r);
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    unsupported("mode '{}'", printable(mode));
  int y = x;
  for (int64_t a = 0; a < r; ++a) {
    int64_t b = pads[static_cast<size_t>(a)], e = pads[static_cast<size_t>(a + r)];
    if (b == 0 && e == 0) continue;
    int64_t d = static_dim(n, y, a, "Pad");
    // Pads near 2^63 overflowed b + e + d (found by tests/fuzz/parsers/onnx_parser_fuzzer).
    int64_t padded = 0;
    if (__builtin_add_overflow(b, e, &padded) || __builtin_add_overflow(padded, d, &padded))
      n.error("pads {} and {} of dim {} (size {}) overflow int64", b, e, a, d);
    if (b < -d || e < -d || padded < 0) n.error("pads remove more than dim {} has", a);
    if (mode != "constant") {
      if (b < 0 || e < 0) unsupported("negative pads in mode '{}'", mode);
      if (b + e > 4096) unsupported("pads of more than 4096 elements in mode '{}'", mode);
      // The indices below are built one per element of the padded dim: edge padding of a dim of
      // 2^31 allocated 16 GiB (found by tests/fuzz/parsers/onnx_parser_fuzzer).
      if (padded > kMaxGatherDim)
        unsupported("mode '{}' along a dim of {} elements (at most {})", mode, padded,
                    kMaxGatherDim);
      if (d == 0 || (mode == "reflect" && d < 2 && b + e > 0))
        n.error("mode '{}' cannot pad an empty dim", mode);
      std::vector<int64_t> idx;
      for (int64_t i = -b; i < d + e; ++i) {
        int64_t j = i;
        if (mode == "edge")
          j = std::clamp<int64_t>(i, 0, d - 1);
        else
          while (j < 0 || j >= d) j = j < 0 ? -j : 2 * (d - 1) - j;  // reflect
        idx.push_back(j);
      }
      y = gather_const(n, y, a, idx);
      continue;
    }
    if (b < 0 || e < 0) y = slice(n, y, a, std::max<int64_t>(-b, 0), d - std::max<int64_t>(-e, 0));
    std::vector<int> parts;
    std::vector<int64_t> shape = n.static_shape(y, "the padded input");
    for (int64_t k : {b, e}) {
      if (k <= 0) continue;
      shape[static_cast<size_t>(a)] = k;
      int f = n.add("full", {}, Attrs{{"shape", shape}, {"value", value}, {"dtype", n.dtype(x)}});
      parts.insert(k == b ? parts.begin() : parts.end(), f);
    }
    if (parts.empty()) continue;
    parts.insert(b > 0 ? parts.begin() + 1 : parts.begin(), y);
    y = n.add("concat", parts, Attrs{{"dim", a}});
  }
  n.set_output(0, y);
}

namespace {

// (j - i) for a [rows, cols] grid of i64, to compare with a diagonal offset.
int diagonal_offsets(OnnxNode& n, int64_t rows, int64_t cols) {
  return n.add("sub", {iota_along(n, cols, 1, 2), iota_along(n, rows, 0, 2)});
}

}  // namespace

void map_eye_like(OnnxNode& n) {
  int x = n.in(0);
  std::vector<int64_t> s = n.static_shape(x, "the input");
  if (s.size() != 2) n.error("the input must be 2-D");
  DType t = n.dtype(x);
  if (n.has_attr("dtype")) {
    auto et = static_cast<int32_t>(n.attr_int("dtype", 0));
    std::optional<DType> d = dtype_from_onnx(et);
    if (!d) unsupported("dtype {}", onnx_dtype_name(et));
    t = *d;
  }
  int k = n.scalar(static_cast<double>(n.attr_int("k", 0)), DType::I64);
  n.set_output(0, n.cast(n.add("eq", {diagonal_offsets(n, s[0], s[1]), k}), t));
}

void map_trilu(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r < 2) n.error("the input must have at least 2 dims");
  std::vector<int64_t> s = n.static_shape(x, "the input");
  int64_t k = n.has_input(1) ? n.const_int_scalar(1, "k") : 0;
  bool upper = n.attr_int("upper", 1) != 0;
  int off = diagonal_offsets(n, s[static_cast<size_t>(r - 2)], s[static_cast<size_t>(r - 1)]);
  int mask = n.add(upper ? "ge" : "le", {off, n.scalar(static_cast<double>(k), DType::I64)});
  n.set_output(0, n.add("where", {mask, x, n.scalar(0, n.dtype(x))}));
}

void map_one_hot(OnnxNode& n) {
  int idx = n.cast(n.in(0), DType::I64);
  int64_t depth = n.const_int_scalar(1, "depth");
  if (depth < 0) n.error("depth {} is negative", depth);
  int values = n.in(2);
  if (n.type(values).shape != make_shape({2})) n.error("values must have shape [2]");
  int64_t out_rank = n.rank(idx) + 1;
  int64_t axis = n.axis(n.attr_int("axis", -1), out_rank);
  int zero = n.scalar(0, DType::I64);
  idx =
      n.add("where", {n.add("lt", {idx, zero}),
                      n.add("add", {idx, n.scalar(static_cast<double>(depth), DType::I64)}), idx});
  int hit = n.add("eq", {n.add("unsqueeze", {idx}, Attrs{{"dim", axis}}),
                         iota_along(n, depth, axis, out_rank)});
  auto pick = [&](int64_t i) { return n.add("squeeze", {slice(n, values, 0, i, i + 1)}); };
  n.set_output(0, n.add("where", {hit, pick(1), pick(0)}));
}

}  // namespace coil::onnxfe
