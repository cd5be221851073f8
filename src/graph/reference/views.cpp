// Reference kernels of the view ops (reshape .. flatten), concat and gather.
//
// A view is computed as an index remap: the output's shape and strides are derived from the
// input's (the input may itself be strided), and the elements are copied out in row-major
// order into a contiguous tensor. Raw elements are copied, so every dtype is exact.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>

#include "graph/op_registry.h"
#include "graph/reference/reference_kernels.h"
#include "graph/reference/reference_util.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil {
namespace {

// The output sizes of `node` applied to `x`, from the op's own shape rule (which also
// validates the attributes against the actual shape).
std::vector<int64_t> out_sizes(const Node& node, const Tensor& x) {
  TensorType t{x.dtype(), make_shape(x.shape())};
  TensorType r = node.op->infer(node, {&t});
  auto sizes = static_sizes(r.shape);
  COIL_ASSERT(sizes.has_value(), "{}: view of a concrete tensor has shape {}", node.op_name(),
              shape_str(r.shape));
  return *sizes;
}

// The dims squeeze keeps. Without `dims`, the graph drops the dims that are statically 1, and
// keeps a symbolic size even when it is bound to 1: a size-1 dim is kept where the node's type
// has a symbolic size (constant sizes in the type equal the actual ones; a run of size-1 dims
// reads the same data whichever of them is kept).
std::vector<int64_t> squeeze_kept(const Node& node, const Tensor& x) {
  std::string_view op = node.op_name();
  const std::vector<int64_t>& s = x.shape();
  std::vector<int64_t> kept;
  if (node.attrs.has("dims")) {
    std::set<int64_t> dims;
    for (int64_t d : node.attrs.get_ints(op, "dims")) {
      int64_t a = normalize_axis(op, d, x.dim());
      COIL_USER_CHECK(s.empty() || s[static_cast<size_t>(a)] == 1,
                      "squeeze: dim {} has size {}, not 1", d, s[static_cast<size_t>(a)]);
      dims.insert(a);
    }
    for (int64_t i = 0; i < x.dim(); ++i)
      if (!dims.count(i)) kept.push_back(i);
    return kept;
  }
  const Shape& out_type = node.type.shape;
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool symbolic_here = kept.size() < out_type.size() && !out_type[kept.size()].is_const();
    if (s[static_cast<size_t>(i)] != 1 || symbolic_here) kept.push_back(i);
  }
  return kept;
}

struct Layout {
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};

// Layout of the view, in elements of x's buffer (relative to x.data()).
Layout view_layout(const Node& node, const Tensor& x, const std::vector<int64_t>& out) {
  std::string_view op = node.op_name();
  const std::vector<int64_t>& s = x.shape();
  const std::vector<int64_t>& st = x.strides();
  int64_t rank = x.dim();
  Layout l{out, std::vector<int64_t>(out.size(), 0), 0};
  if (op == "permute") {
    const auto& dims = node.attrs.get_ints(op, "dims");
    for (size_t i = 0; i < dims.size(); ++i)
      l.strides[i] = st[static_cast<size_t>(normalize_axis(op, dims[i], rank))];
  } else if (op == "transpose") {
    l.strides = st;
    if (rank > 0) {
      auto a = static_cast<size_t>(normalize_axis(op, node.attrs.get_int_or(op, "dim0", 0), rank));
      auto b = static_cast<size_t>(normalize_axis(op, node.attrs.get_int_or(op, "dim1", 1), rank));
      std::swap(l.strides[a], l.strides[b]);
    }
  } else if (op == "expand") {
    size_t lead = out.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i)
      l.strides[lead + i] = s[i] == out[lead + i] ? st[i] : 0;  // else size 1 broadcast
  } else if (op == "slice") {
    SliceParams p = slice_params(node, make_shape(s));
    auto d = static_cast<size_t>(p.dim);
    l.strides = st;
    l.strides[d] = st[d] * p.step;
    if (p.size > 0) l.offset = p.start * st[d];
  } else if (op == "squeeze") {
    l.shape.clear();
    l.strides.clear();
    for (int64_t i : squeeze_kept(node, x)) {
      l.shape.push_back(s[static_cast<size_t>(i)]);
      l.strides.push_back(st[static_cast<size_t>(i)]);
    }
  } else if (op == "unsqueeze") {
    int64_t d = node.attrs.get_int(op, "dim");
    if (d < 0) d += rank + 1;
    l.strides = st;
    l.strides.insert(l.strides.begin() + d, 0);
  } else {
    COIL_UNREACHABLE("no reference for view op {}", op);
  }
  COIL_ASSERT(l.strides.size() == l.shape.size(), "{}: {} strides for {} dims", op,
              l.strides.size(), l.shape.size());
  return l;
}

}  // namespace

Tensor ref_view(const Node& node, const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  std::string_view op = node.op_name();
  // squeeze's rule re-run on concrete sizes would also drop symbolic dims bound to 1.
  std::vector<int64_t> out = op == "squeeze" ? std::vector<int64_t>() : out_sizes(node, x);
  if (op == "reshape" || op == "flatten") {
    // Row-major order is unchanged: read x in order, then reinterpret the sizes.
    Tensor dense = x.clone();
    COIL_ASSERT(shape_numel(out) == dense.numel(), "{}: {} to {}", op, shape_str(x.shape()),
                shape_str(out));
    return dense.strided(out, contiguous_strides(out));
  }
  Layout l = view_layout(node, x, out);
  return x.strided(l.shape, l.strides, l.offset).clone();
}

Tensor ref_concat(const Node& node, const std::vector<Tensor>& in) {
  int64_t rank = in[0].dim();
  COIL_USER_CHECK(rank > 0, "concat: inputs must have at least one dim");
  auto dim = static_cast<size_t>(
      normalize_axis("concat", node.attrs.get_int_or("concat", "dim", 0), rank));
  std::vector<int64_t> shape = in[0].shape();
  shape[dim] = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const auto& s = in[k].shape();
    COIL_USER_CHECK(in[k].dim() == rank, "concat: input {} has rank {}, input 0 has rank {}", k,
                    in[k].dim(), rank);
    for (size_t d = 0; d < s.size(); ++d)
      COIL_USER_CHECK(d == dim || s[d] == shape[d],
                      "concat: input {} has shape {}, which differs from {} outside dim {}", k,
                      shape_str(s), shape_str(in[0].shape()), dim);
    shape[dim] += s[dim];
  }
  Tensor out = Tensor::empty(node.type.dtype, shape);
  std::vector<int64_t> ostrides = contiguous_strides(shape);
  int64_t base = 0;  // offset of the current input along `dim`, in elements of out
  for (const Tensor& t : in) {
    std::vector<int64_t> targets;
    ref::for_each_index(t.shape(), [&](const std::vector<int64_t>& idx) {
      int64_t off = base;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * ostrides[d];
      targets.push_back(off);
    });
    // u64 into a floating result: read_doubles converts its values (read_ints has the bits).
    if (is_floating(t.dtype()) || (t.dtype() == DType::U64 && is_floating(out.dtype()))) {
      std::vector<double> v = ref::read_doubles(t);
      for (size_t i = 0; i < v.size(); ++i) ref::set_double(out, targets[i], v[i]);
    } else {
      std::vector<int64_t> v = ref::read_ints(t);
      for (size_t i = 0; i < v.size(); ++i) ref::set_int(out, targets[i], v[i]);
    }
    base += t.shape()[dim] * ostrides[dim];
  }
  return out;
}

/// `indices` as positions in a dim of size n: negative ones count from the end (ONNX, numpy);
/// anything else out of range is an error naming `op`.
static std::vector<int64_t> wrapped_indices(std::string_view op, const Tensor& indices, size_t axis,
                                            int64_t n) {
  std::vector<int64_t> idx = ref::read_ints(indices);
  for (int64_t& i : idx) {
    int64_t w = i < 0 ? i + n : i;
    COIL_USER_CHECK(w >= 0 && w < n, "{}: index {} is out of range for dim {} of size {}", op, i,
                    axis, n);
    i = w;
  }
  return idx;
}

Tensor ref_gather(const Node& node, const std::vector<Tensor>& in) {
  const Tensor& data = in[0];
  const Tensor& indices = in[1];
  COIL_USER_CHECK(data.dim() > 0, "gather: data must have at least one dim");
  COIL_USER_CHECK(indices.dtype() == DType::I32 || indices.dtype() == DType::I64,
                  "gather: indices must be i32 or i64, got {}", dtype_name(indices.dtype()));
  auto axis = static_cast<size_t>(
      normalize_axis("gather", node.attrs.get_int_or("gather", "axis", 0), data.dim()));
  const std::vector<int64_t>& ds = data.shape();
  const int64_t n = ds[axis];
  const std::vector<int64_t> idx = wrapped_indices("gather", indices, axis, n);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= ds[d];
  for (size_t d = axis + 1; d < ds.size(); ++d) inner *= ds[d];
  std::vector<int64_t> shape(ds.begin(), ds.begin() + static_cast<std::ptrdiff_t>(axis));
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), ds.begin() + static_cast<std::ptrdiff_t>(axis) + 1, ds.end());
  Tensor out = Tensor::empty(node.type.dtype, shape);
  const auto k = static_cast<int64_t>(idx.size());
  // Source element (o, idx[j], r) of data, contiguous row-major, for output (o, j, r).
  auto source = [&](int64_t o, int64_t j, int64_t r) {
    return (o * n + idx[static_cast<size_t>(j)]) * inner + r;
  };
  if (is_floating(data.dtype())) {
    std::vector<double> v = ref::read_doubles(data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t r = 0; r < inner; ++r)
          ref::set_double(out, (o * k + j) * inner + r, v[static_cast<size_t>(source(o, j, r))]);
  } else {
    std::vector<int64_t> v = ref::read_ints(data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t r = 0; r < inner; ++r)
          ref::set_int(out, (o * k + j) * inner + r, v[static_cast<size_t>(source(o, j, r))]);
  }
  return out;
}

Tensor ref_index_add(const Node& node, const std::vector<Tensor>& in) {
  ref::check_inputs(node, in);
  const Tensor& x = in[0];
  const Tensor& index = in[1];
  const Tensor& src = in[2];
  auto axis = static_cast<size_t>(
      normalize_axis("index_add", node.attrs.get_int_or("index_add", "axis", 0), x.dim()));
  const std::vector<int64_t>& xs = x.shape();
  const int64_t n = xs[axis];
  const std::vector<int64_t> idx = wrapped_indices("index_add", index, axis, n);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const auto k = static_cast<int64_t>(idx.size());
  Tensor out = Tensor::empty(node.type.dtype, xs);
  // Row (o, idx[j]) of the result gains row (o, j) of src, j in order (the sums in double,
  // rounded once; integers wrap).
  auto target = [&](int64_t o, int64_t j, int64_t r) {
    return (o * n + idx[static_cast<size_t>(j)]) * inner + r;
  };
  if (is_floating(x.dtype())) {
    std::vector<double> v = ref::read_doubles(x), s = ref::read_doubles(src);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t r = 0; r < inner; ++r)
          v[static_cast<size_t>(target(o, j, r))] +=
              s[static_cast<size_t>((o * k + j) * inner + r)];
    for (size_t i = 0; i < v.size(); ++i) ref::set_double(out, static_cast<int64_t>(i), v[i]);
  } else {
    std::vector<int64_t> v = ref::read_ints(x), s = ref::read_ints(src);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t r = 0; r < inner; ++r) {
          auto& t = v[static_cast<size_t>(target(o, j, r))];
          t = static_cast<int64_t>(
              static_cast<uint64_t>(t) +
              static_cast<uint64_t>(s[static_cast<size_t>((o * k + j) * inner + r)]));
        }
    for (size_t i = 0; i < v.size(); ++i) ref::set_int(out, static_cast<int64_t>(i), v[i]);
  }
  return out;
}

}  // namespace coil
