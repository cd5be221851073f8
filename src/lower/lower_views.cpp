// Lowerings of views (index remaps, never copies), concat, and reductions.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "lower/lower_ops.h"
#include "support/check.h"
#include "sym/size_hints.h"

namespace coil {

using Index = std::vector<sym::Expr>;

/// Row-major linear position of `idx` in `sizes`.
static sym::Expr linearize(const Index& idx, const Shape& sizes) {
  sym::Expr lin = 0;
  for (size_t i = 0; i < sizes.size(); ++i) lin = lin * sizes[i] + idx[i];
  return lin;
}

/// The index of linear position `lin` in `sizes` (div/mod; the simplifier folds them).
static Index delinearize(const sym::Expr& lin, const Shape& sizes) {
  Index out(sizes.size(), sym::Expr(0));
  // An empty tensor's loops never run: any index will do (and div/mod by 0 must not be built).
  for (const auto& s : sizes)
    if (s == sym::Expr(0)) return out;
  sym::Expr stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    out[i] =
        sizes[i] == sym::Expr(1) ? sym::Expr(0) : sym::mod(sym::floordiv(lin, stride), sizes[i]);
    stride = stride * sizes[i];
  }
  return out;
}

/// The input index that output index `o` of view `node` reads.
static Index view_source_index(const Node& node, const Shape& in, const Shape& out,
                               const Index& o) {
  std::string_view op = node.op_name();
  if (op == "reshape" || op == "flatten") return delinearize(linearize(o, out), in);
  if (op == "permute") {
    Index r(in.size());
    const auto& dims = node.attrs.get_ints("permute", "dims");
    for (size_t i = 0; i < dims.size(); ++i)
      r[static_cast<size_t>(normalize_axis("permute", dims[i], static_cast<int64_t>(in.size())))] =
          o[i];
    return r;
  }
  if (op == "transpose") {
    Index r = o;
    if (!in.empty()) {
      int64_t rank = static_cast<int64_t>(in.size());
      auto a = static_cast<size_t>(
          normalize_axis(op, node.attrs.get_int_or(std::string(op), "dim0", 0), rank));
      auto b = static_cast<size_t>(
          normalize_axis(op, node.attrs.get_int_or(std::string(op), "dim1", 1), rank));
      std::swap(r[a], r[b]);
    }
    return r;
  }
  if (op == "expand") {
    Index r;
    size_t lead = out.size() - in.size();
    for (size_t i = 0; i < in.size(); ++i)
      r.push_back(in[i] == sym::Expr(1) && out[i + lead] != sym::Expr(1) ? sym::Expr(0)
                                                                         : o[i + lead]);
    return r;
  }
  if (op == "slice") {
    SliceParams p = slice_params(node, in);
    Index r = o;
    r[static_cast<size_t>(p.dim)] = p.start_e + sym::Expr(p.step) * o[static_cast<size_t>(p.dim)];
    return r;
  }
  if (op == "squeeze" || op == "unsqueeze") {
    // Both only add or drop size-1 dims: match the non-1 dims in order, 0 for the rest.
    Index r;
    size_t j = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == sym::Expr(1)) {
        r.push_back(0);
        continue;
      }
      while (j < out.size() && out[j] == sym::Expr(1)) ++j;
      COIL_ASSERT(j < out.size(), "{}: cannot match {} to {}", op, shape_str(in), shape_str(out));
      r.push_back(o[j++]);
    }
    return r;
  }
  COIL_UNREACHABLE("no view lowering for {}", op);
}

TensorBox lower_view(LowerContext&, const Node& node, const std::vector<TensorBox>& in) {
  TensorBox src = in[0];
  Shape out = node.type.shape;
  const Node* np = &node;
  return TensorBox{node.type.dtype, out, [src, out, np](LoopBody& b, const Index& idx) {
                     return src.load(b, view_source_index(*np, src.sizes, out, idx));
                   }};
}

/// Concat as a select chain: every part is read (at a clamped index, so that every load stays
/// in bounds) at every element of the result, and `where` picks. `sizes` is the result's.
static TensorBox select_concat(const std::vector<TensorBox>& parts, size_t dim, DType t,
                               const Shape& sizes) {
  return TensorBox{t, sizes, [parts, dim, t](LoopBody& b, const Index& idx) {
                     std::vector<sym::Expr> offsets{0};
                     for (const auto& p : parts) offsets.push_back(offsets.back() + p.sizes[dim]);
                     int result = -1;
                     for (size_t k = parts.size(); k-- > 0;) {
                       Index local = idx;
                       sym::Expr last = sym::max(parts[k].sizes[dim] - 1, 0);
                       local[dim] = sym::min(sym::max(idx[dim] - offsets[k], 0), last);
                       int v = b.to_dtype(parts[k].load(b, local), t);
                       if (result < 0) {
                         result = v;
                         continue;
                       }
                       int in_part = b.compute(LoopOp::lt, DType::Bool,
                                               {b.index_expr(idx[dim], DType::I64),
                                                b.index_expr(offsets[k + 1], DType::I64)});
                       result = b.compute(LoopOp::where, compute_dtype(t), {in_part, v, result});
                     }
                     return result;
                   }};
}

TensorBox lower_concat(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  auto dim = static_cast<size_t>(
      normalize_axis("concat", node.attrs.get_int_or("concat", "dim", 0), node.type.rank()));
  DType t = node.type.dtype;
  // An empty part holds no element to pick, and no index of it is in bounds: leave it out (its
  // load would read an empty buffer, on a GPU through a null pointer), unless all are empty.
  std::vector<TensorBox> parts;
  for (const auto& p : in)
    if (p.sizes[dim].as_const() != std::optional<int64_t>(0)) parts.push_back(p);
  if (parts.empty()) parts = in;
  // Every part is evaluated at every element of the result (the selects pick one), so an
  // expensive inlined part is computed parts.size() times over: the last step of an unrolled
  // LSTM, whose gates have no other reader, concatenated into its output sequence with the
  // other 12 steps, took 13x its work, scalar (issue 27). Such a part is stored first, as a
  // value with several readers is (should_realize in lowering.cpp).
  if (parts.size() > 1)
    for (auto& p : parts)
      if (p.buffer < 0 && loader_cost(p) > kRealizeCostThreshold) p = ctx.realize(p);
  // For the same reason a concat of n parts costs n loads per element: the 64 steps of an
  // unrolled LSTM's output took 75% of its run. Beyond kConcatDirectParts parts, groups of
  // about sqrt(n) parts are joined and stored first, then the groups: about 2 sqrt(n) loads per
  // element (16 for 64 parts) and one more pass over the result.
  if (parts.size() > kConcatDirectParts) {
    auto group = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(parts.size()))));
    std::vector<TensorBox> groups;
    for (size_t first = 0; first < parts.size(); first += group) {
      std::vector<TensorBox> members(
          parts.begin() + static_cast<std::ptrdiff_t>(first),
          parts.begin() + static_cast<std::ptrdiff_t>(std::min(parts.size(), first + group)));
      if (members.size() == 1) {
        groups.push_back(members[0]);
        continue;
      }
      Shape sizes = members[0].sizes;
      sizes[dim] = 0;
      std::vector<int> nodes;
      for (const auto& m : members) {
        sizes[dim] = sizes[dim] + m.sizes[dim];
        std::vector<int> merged;
        std::set_union(nodes.begin(), nodes.end(), m.nodes.begin(), m.nodes.end(),
                       std::back_inserter(merged));
        nodes = std::move(merged);
      }
      TensorBox joined = select_concat(members, dim, t, sizes);
      joined.nodes = std::move(nodes);
      joined.nodes.push_back(node.id);  // the computation is (part of) this concat
      groups.push_back(ctx.realize(joined));
    }
    parts = std::move(groups);
  }
  return select_concat(parts, dim, t, node.type.shape);
}

TensorBox lower_gather(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  const size_t rank = in[0].sizes.size();
  auto axis = static_cast<size_t>(normalize_axis(
      "gather", node.attrs.get_int_or("gather", "axis", 0), static_cast<int64_t>(rank)));
  // The data is read at a computed position, so it must be a buffer (one load per element).
  TensorBox data = ctx.realize(in[0]);
  const Layout layout = ctx.program.buffer(data.buffer).layout;
  // A dim that is a size symbol's (a size-generic compile) is checked and clamped against the
  // call's size; its value at the size hints stands for it where a number is needed.
  const sym::Expr dim = layout.sizes[axis];
  std::optional<int64_t> size = dim.as_const();
  if (!size) size = sym::hint(dim);
  COIL_USER_CHECK(size.has_value(), "gather: dim {} of the data must have a known size", axis);
  TensorBox indices = in[1];
  const size_t k = indices.sizes.size();
  const int buffer = data.buffer;
  const int64_t n = *size;
  const sym::Expr extent = dim.as_const() ? sym::Expr() : dim;
  const int site = static_cast<int>(ctx.program.run_checks.size());
  ctx.program.run_checks.push_back(
      {RunCheck::Kind::index_in_range,
       fmt::format("{} (node {}), dim {}", node.op_name(), node.name, axis)});
  return TensorBox{
      node.type.dtype, node.type.shape,
      [indices, layout, axis, k, buffer, n, extent, site](LoopBody& b, const Index& idx) {
        Index at(idx.begin() + static_cast<std::ptrdiff_t>(axis),
                 idx.begin() + static_cast<std::ptrdiff_t>(axis + k));
        int ind = b.indirect_index(indices.load(b, at), n, site, extent);
        Index src(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(axis));
        src.push_back(indirect_var());
        src.insert(src.end(), idx.begin() + static_cast<std::ptrdiff_t>(axis + k), idx.end());
        return b.load_indirect(buffer, layout.offset_of(src), compute_dtype(layout.dtype), ind);
      }};
}

static ReductionType reduction_type_of(std::string_view op) {
#define COIL_RED_MATCH(name, doc) \
  if (op == #name) return ReductionType::name;
  COIL_REDUCTION_TYPES(COIL_RED_MATCH)
#undef COIL_RED_MATCH
  COIL_UNREACHABLE("{} is not a reduction", op);
}

TensorBox lower_reduction(LowerContext& ctx, const Node& node, const std::vector<TensorBox>& in) {
  auto axes = reduction_axes(node, static_cast<int64_t>(in[0].sizes.size()));
  // max or min over size-1 dims only is its one element (NaN included): a view that fuses into
  // its readers, where a reduction kernel would store a buffer. torch's index_put at one
  // position reduces over its one index this way (a KV cache written per decode step: 16 such
  // buffers of the cache's size per step, 42% of a decoder's time). sum and prod keep their
  // kernel (0 + -0.0 is +0.0: the view would keep the sign).
  const std::string_view op = node.op_name();
  const bool single = !axes.empty() && std::all_of(axes.begin(), axes.end(), [&](int64_t a) {
    return in[0].sizes[static_cast<size_t>(a)] == sym::Expr(1);
  });
  if (single && (op == "max" || op == "min") && node.type.dtype == in[0].dtype) {
    const TensorBox src = in[0];
    const bool keepdim = node.type.shape.size() == src.sizes.size();
    return TensorBox{
        node.type.dtype, node.type.shape, [src, axes, keepdim](LoopBody& b, const Index& idx) {
          Index at;
          size_t k = 0;
          for (size_t d = 0; d < src.sizes.size(); ++d) {
            const bool reduced =
                std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
            at.push_back(reduced ? sym::Expr(0) : idx[keepdim ? d : k]);
            if (!reduced || keepdim) ++k;
          }
          return src.load(b, at);
        }};
  }
  return ctx.reduce(in[0], axes, reduction_type_of(node.op_name()), node.type.dtype,
                    node.type.shape);
}

TensorBox lower_arg_reduction(LowerContext& ctx, const Node& node,
                              const std::vector<TensorBox>& in) {
  std::vector<int64_t> axes;
  int64_t rank = static_cast<int64_t>(in[0].sizes.size());
  if (node.attrs.has("axis")) {
    axes.push_back(
        normalize_axis(node.op_name(), node.attrs.get_int(node.op_name(), "axis"), rank));
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  if (rank == 0) axes.clear();
  return ctx.reduce(in[0], axes, reduction_type_of(node.op_name()), DType::I64, node.type.shape);
}

}  // namespace coil
