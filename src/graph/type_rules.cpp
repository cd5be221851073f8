#include "graph/type_rules.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "graph/op_registry.h"
#include "support/check.h"
#include "sym/analyzer.h"
#include "sym/size_hints.h"

namespace coil {

int64_t normalize_axis(std::string_view op, int64_t axis, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);  // scalars accept axis 0 / -1 (as torch does)
  COIL_USER_CHECK(axis >= -r && axis < r, "{}: axis {} is out of range for a tensor of rank {}", op,
                  axis, rank);
  return axis < 0 ? axis + r : axis;
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    sym::Expr da = i < rank - a.size() ? sym::Expr(1) : a[i - (rank - a.size())];
    sym::Expr db = i < rank - b.size() ? sym::Expr(1) : b[i - (rank - b.size())];
    if (da == db || db == sym::Expr(1)) {
      out[i] = da;
    } else if (da == sym::Expr(1)) {
      out[i] = db;
    } else {
      user_error("{}: cannot broadcast shapes {} and {} (dim {}: {} vs {})", op, shape_str(a),
                 shape_str(b), i, sym::to_string(da), sym::to_string(db));
    }
  }
  return out;
}

std::vector<int64_t> reduction_axes(const Node& node, int64_t rank) {
  std::vector<int64_t> axes;
  // An empty axes list reduces every dim, as torch.sum(x, dim=[]) and ONNX's ReduceSum with
  // noop_with_empty_axes=0 do (the ONNX importer turns the no-op form into an identity).
  COIL_USER_CHECK(!node.attrs.has("axes") || !node.attrs.has("axis"),
                  "{}: give 'axes' or 'axis', not both", node.op_name());
  if (node.attrs.has("axes") && !node.attrs.get_ints(node.op_name(), "axes").empty()) {
    for (int64_t a : node.attrs.get_ints(node.op_name(), "axes"))
      axes.push_back(normalize_axis(node.op_name(), a, rank));
  } else if (node.attrs.has("axis")) {
    axes.push_back(
        normalize_axis(node.op_name(), node.attrs.get_int(node.op_name(), "axis"), rank));
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::sort(axes.begin(), axes.end());
  COIL_USER_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(),
                  "{}: axis {} is listed twice", node.op_name(), fmt::join(axes, ", "));
  if (rank == 0) axes.clear();
  return axes;
}

static int category(DType t) {
  return t == DType::Bool ? 0 : is_floating(t) ? 2 : 1;
}

DType elementwise_promoted_dtype(const std::vector<const TensorType*>& inputs) {
  // torch.result_type: tensors with dims take priority over 0-dim tensors, unless a 0-dim
  // tensor is of a higher category (bool < integer < float).
  std::optional<DType> dim_t, zero_t;
  for (const TensorType* t : inputs) {
    auto& slot = t->rank() > 0 ? dim_t : zero_t;
    slot = slot ? promote_types(*slot, t->dtype) : t->dtype;
  }
  if (!dim_t) return *zero_t;
  if (!zero_t || category(*zero_t) <= category(*dim_t)) return *dim_t;
  return *zero_t;
}

DType elementwise_result_dtype(const Node& node, const std::vector<const TensorType*>& inputs) {
  std::string_view op = node.op_name();
  if (op == "cast") return node.attrs.get_dtype(op, "dtype");
  std::vector<const TensorType*> values = inputs;
  if (op == "where") {  // the condition does not take part in promotion
    COIL_USER_CHECK(inputs[0]->dtype == DType::Bool, "where: condition must be bool, got {}",
                    dtype_name(inputs[0]->dtype));
    values.erase(values.begin());
  }
  DType t = elementwise_promoted_dtype(values);
  switch (node.op->dtype_rule) {
    case DTypeRule::Same:
      return t;
    case DTypeRule::Float:
      return is_floating(t) ? t : DType::F32;
    case DTypeRule::Bool:
      return DType::Bool;
    case DTypeRule::NotBool:
      COIL_USER_CHECK(t != DType::Bool, "{}: not supported for bool inputs", op);
      return t;
  }
  COIL_UNREACHABLE("bad dtype rule");
}

TensorType infer_elementwise(const Node& node, const std::vector<const TensorType*>& in) {
  Shape shape = in[0]->shape;
  for (size_t i = 1; i < in.size(); ++i)
    shape = broadcast_shapes(node.op_name(), shape, in[i]->shape);
  std::string_view op = node.op_name();
  if (op == "clamp") {
    COIL_USER_CHECK(node.attrs.has("min") || node.attrs.has("max"),
                    "clamp: needs at least one of the attributes min and max");
    COIL_USER_CHECK(in[0]->dtype != DType::Bool, "clamp: not supported for bool inputs");
  }
  return TensorType{elementwise_result_dtype(node, in), shape};
}

std::vector<sym::Expr> parse_sizes(std::string_view op, const std::string& list) {
  const int64_t lowest = op == "full" ? 0 : -1;
  std::vector<sym::Expr> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = std::min(list.find(',', at), list.size());
    std::string entry = list.substr(at, comma - at);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    const bool number =
        !entry.empty() && entry.find_first_not_of("-0123456789") == std::string::npos;
    const bool name =
        !entry.empty() && (std::isalpha(static_cast<unsigned char>(entry[0])) || entry[0] == '_') &&
        std::all_of(entry.begin(), entry.end(),
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    COIL_USER_CHECK(number || name,
                    "{}: sizes=\"{}\": entry '{}' is neither an integer nor a size symbol", op,
                    list, entry);
    if (number) {
      int64_t v = 0;
      try {
        v = std::stoll(entry);
      } catch (const std::exception&) {
        COIL_USER_CHECK(false, "{}: sizes=\"{}\": '{}' is not an int64", op, list, entry);
      }
      COIL_USER_CHECK(v >= lowest, "{}: sizes=\"{}\": size {} is invalid", op, list, v);
      out.push_back(v);
    } else {
      out.push_back(sym::make_symbol(entry));
    }
    if (comma == list.size()) break;
    at = comma + 1;
  }
  return out;
}

std::string substitute_sizes(std::string_view op, const std::string& list,
                             const std::map<sym::Expr, sym::Expr>& bind) {
  std::vector<std::string> parts;
  for (const sym::Expr& e : parse_sizes(op, list))
    parts.push_back(sym::to_string(sym::substitute(e, bind)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<sym::Expr> target_sizes(const Node& node) {
  const std::string_view op = node.op_name();
  const bool ints = node.attrs.has("shape"), text = node.attrs.has("sizes");
  COIL_USER_CHECK(ints != text, "{}: needs exactly one of the attributes shape and sizes", op);
  if (text) return parse_sizes(op, node.attrs.get_string(op, "sizes"));
  std::vector<sym::Expr> out;
  for (int64_t v : node.attrs.get_ints(op, "shape")) out.push_back(v);
  return out;
}

std::string sizes_text(const std::vector<sym::Expr>& sizes) {
  std::vector<std::string> parts;
  for (const auto& e : sizes) parts.push_back(sym::to_string(e));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

TensorType infer_full(const Node& node, const std::vector<const TensorType*>&) {
  Shape s;  // sizes >= 0 (the attribute's declared range)
  for (const sym::Expr& v : target_sizes(node)) s.push_back(v);
  return TensorType{node.attrs.has("dtype") ? node.attrs.get_dtype("full", "dtype") : DType::F32,
                    s};
}

TensorType infer_iota(const Node& node, const std::vector<const TensorType*>&) {
  int64_t size = node.attrs.get_int("iota", "size");  // >= 0 (declared)
  return TensorType{node.attrs.has("dtype") ? node.attrs.get_dtype("iota", "dtype") : DType::I64,
                    Shape{size}};
}

TensorType infer_source(const Node& node, const std::vector<const TensorType*>&) {
  COIL_UNREACHABLE("{} nodes are typed when created", node.op_name());
}

namespace {

/// numel / known for the size a reshape infers, where both are products of a constant and
/// other factors (symbols): the quotient when known's factors are among numel's and its
/// constant divides numel's (b*t*768 / (b*t*12) = 64), else nullopt.
std::optional<sym::Expr> exact_quotient(const sym::Expr& numel, const sym::Expr& known) {
  auto split = [](const sym::Expr& e, int64_t& coef, std::vector<sym::Expr>& factors) {
    coef = 1;
    auto take = [&](const sym::Expr& f) {
      if (auto c = f.as_const())
        coef *= *c;
      else
        factors.push_back(f);
    };
    if (e.kind() == sym::ExprKind::Mul) {
      for (const sym::Expr& f : e.operands()) take(f);
    } else {
      take(e);
    }
  };
  int64_t nc = 1, kc = 1;
  std::vector<sym::Expr> nf, kf;
  split(numel, nc, nf);
  split(known, kc, kf);
  if (kc == 0 || nc % kc != 0) return std::nullopt;
  for (const sym::Expr& f : kf) {
    auto it = std::find(nf.begin(), nf.end(), f);
    if (it == nf.end()) return std::nullopt;
    nf.erase(it);
  }
  sym::Expr q = nc / kc;
  for (const sym::Expr& f : nf) q = q * f;
  return q;
}

}  // namespace

Shape reshape_target(const Node& node, const Shape& in) {
  const std::vector<sym::Expr> sizes = target_sizes(node);
  sym::Expr numel = 1;
  for (const auto& d : in) numel = numel * d;
  Shape out;
  int infer_at = -1;
  sym::Expr known = 1;
  int64_t known_count = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::optional<int64_t> c = sizes[i].as_const();
    if (c == -1) {
      COIL_USER_CHECK(infer_at < 0, "reshape: more than one -1 in shape {}", sizes_text(sizes));
      infer_at = static_cast<int>(i);
      out.push_back(0);
    } else {
      COIL_USER_CHECK(!c || *c >= 0, "reshape: size {} is invalid", c.value_or(0));
      // An element count past int64 is an error, not a wrapped (negative) divisor for the -1
      // (the text parser's libFuzzer target: shape=[-1, 7777777777777777772, 30, 66663]).
      COIL_USER_CHECK(!c || !__builtin_mul_overflow(known_count, *c, &known_count),
                      "reshape: the sizes of shape {} multiply past int64", sizes_text(sizes));
      out.push_back(sizes[i]);
      known = known * sizes[i];
    }
  }
  if (infer_at >= 0) {
    auto k = known.as_const();
    COIL_USER_CHECK(!k || *k != 0, "reshape: cannot infer -1 when other sizes multiply to 0");
    const std::optional<sym::Expr> q = k ? std::nullopt : exact_quotient(numel, known);
    out[static_cast<size_t>(infer_at)] =
        q ? *q : sym::Analyzer().simplify(sym::floordiv(numel, known));
    known = known * out[static_cast<size_t>(infer_at)];
  }
  auto a = numel.as_const(), b = known.as_const();
  COIL_USER_CHECK(numel == known || (a && b && *a == *b),
                  "reshape: cannot reshape {} ({} elements) to {}", shape_str(in),
                  sym::to_string(numel), sizes_text(sizes));
  return out;
}

TensorType infer_reshape(const Node& node, const std::vector<const TensorType*>& in) {
  return TensorType{in[0]->dtype, reshape_target(node, in[0]->shape)};
}

TensorType infer_permute(const Node& node, const std::vector<const TensorType*>& in) {
  const auto& dims = node.attrs.get_ints("permute", "dims");
  int64_t rank = in[0]->rank();
  COIL_USER_CHECK(static_cast<int64_t>(dims.size()) == rank,
                  "permute: dims [{}] has {} entries for a tensor of rank {}",
                  fmt::join(dims, ", "), dims.size(), rank);
  std::set<int64_t> seen;
  Shape out;
  for (int64_t d : dims) {
    int64_t a = normalize_axis("permute", d, rank);
    COIL_USER_CHECK(seen.insert(a).second, "permute: dim {} repeats in [{}]", d,
                    fmt::join(dims, ", "));
    out.push_back(in[0]->shape[static_cast<size_t>(a)]);
  }
  return TensorType{in[0]->dtype, out};
}

TensorType infer_transpose(const Node& node, const std::vector<const TensorType*>& in) {
  int64_t rank = in[0]->rank();
  int64_t a = normalize_axis("transpose", node.attrs.get_int_or("transpose", "dim0", 0), rank);
  int64_t b = normalize_axis("transpose", node.attrs.get_int_or("transpose", "dim1", 1), rank);
  Shape out = in[0]->shape;
  if (rank > 0) std::swap(out[static_cast<size_t>(a)], out[static_cast<size_t>(b)]);
  return TensorType{in[0]->dtype, out};
}

TensorType infer_expand(const Node& node, const std::vector<const TensorType*>& in) {
  const std::vector<sym::Expr> sizes = target_sizes(node);
  const Shape& s = in[0]->shape;
  COIL_USER_CHECK(sizes.size() >= s.size(), "expand: target {} has fewer dims than {}",
                  sizes_text(sizes), shape_str(s));
  Shape out;
  size_t lead = sizes.size() - s.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::optional<int64_t> c = sizes[i].as_const();
    if (i < lead) {
      COIL_USER_CHECK(!c || *c >= 0, "expand: size {} is invalid for a new dim", *c);
      out.push_back(sizes[i]);
      continue;
    }
    const sym::Expr& d = s[i - lead];
    if (c == -1 || d == sizes[i]) {
      out.push_back(d);
    } else {
      COIL_USER_CHECK(d == sym::Expr(1), "expand: cannot expand dim {} of size {} to {}", i,
                      sym::to_string(d), sym::to_string(sizes[i]));
      COIL_USER_CHECK(!c || *c >= 0, "expand: size {} is invalid", *c);
      out.push_back(sizes[i]);
    }
  }
  return TensorType{in[0]->dtype, out};
}

/// A slice of the symbolic dim `n` (size-generic graphs): python's bounds as expressions of n.
/// A bound of 0 or 1 from either end with step 1 (torch's `x[:, :-1]`, `x[:, 1:]` over a
/// symbolic length; start 1, end -1, start -1, end 1, the whole dim, the start not after the
/// end) is taken as is (`n - 1`): it equals python's clamped bound at every n >= 1, and at
/// n = 0 such a slice is an error (its declared size, n - 1, would be -1; torch specializes
/// size 0 anyway). Any other bounds and steps are written with python's clamping (min/max of
/// n), so that the slice is right at every size, 0 included.
SliceParams symbolic_slice_params(const Node& node, const sym::Expr& n, SliceParams p) {
  const int64_t a = node.attrs.get_int_or("slice", "start", 0);
  const bool to_end =
      !node.attrs.has("end") || node.attrs.get_int("slice", "end") >= (int64_t{1} << 62);
  const int64_t b = to_end ? 0 : node.attrs.get_int("slice", "end");
  // each bound's value at n = 1 (the smallest n the expressions must hold for)
  const bool a_end = a < 0, b_end = to_end || b < 0;
  const int64_t lo = a_end ? 1 + a : a, hi = to_end ? 1 : b_end ? 1 + b : b;
  const bool safe = p.step == 1 && (a_end ? a >= -1 : a <= 1) &&
                    (to_end || (b_end ? b >= -1 : b <= 1)) && lo <= hi && (b_end || !a_end);
  p.start = p.end = p.size = 0;  // (their values at the size hints where there are hints)
  if (safe) {
    const sym::Expr start = a_end ? n + sym::Expr(a) : sym::Expr(a);
    const sym::Expr end = to_end ? n : b_end ? n + sym::Expr(b) : sym::Expr(b);
    p.start_e = start;
    p.size_e = end - start;
  } else {
    // Any other bounds: python's clamping written out, min(a, n) or max(n + a, 0) for each,
    // and the size max(end - start, 0) in steps of `step` (x[:, :n - 3], x[:, 2:], x[:, ::2]);
    // the kernels compute them from the size at run time.
    sym::Analyzer an;
    for (const sym::Expr& s : sym::free_symbols(n))  // sizes (n may be an expression: t + 1)
      an.bind(s, 0, sym::Range::kPosInf);
    auto clamped = [&](int64_t v) {
      return v >= 0 ? sym::min(sym::Expr(v), n) : sym::max(n + sym::Expr(v), sym::Expr(0));
    };
    const sym::Expr start = an.simplify(clamped(a));
    const sym::Expr end = to_end ? n : an.simplify(clamped(b));
    // max(end - start, 0), with start's clamp dropped where it cannot matter (a start past
    // the end gives 0 either way): max(end - a, 0), or min(n, -a) for x[-a:]
    const sym::Expr span = a >= 0   ? sym::max(end - sym::Expr(a), sym::Expr(0))
                           : to_end ? sym::min(n, sym::Expr(-a))
                                    : sym::max(end - start, sym::Expr(0));
    p.start_e = start;
    p.size_e = an.simplify(
        p.step == 1 ? span : sym::floordiv(span + sym::Expr(p.step - 1), sym::Expr(p.step)));
  }
  auto start = sym::hint(p.start_e), size = sym::hint(p.size_e);
  if (start && size) {
    p.start = *start;
    p.size = *size;
    p.end = p.start + p.size * p.step;
  }
  return p;
}

SliceParams slice_params(const Node& node, const Shape& in) {
  SliceParams p;
  p.dim = normalize_axis("slice", node.attrs.get_int_or("slice", "dim", 0),
                         static_cast<int64_t>(in.size()));
  COIL_USER_CHECK(!in.empty(), "slice: cannot slice a scalar");
  auto n = in[static_cast<size_t>(p.dim)].as_const();
  p.step = node.attrs.get_int_or("slice", "step", 1);  // > 0 (declared)
  if (!n) return symbolic_slice_params(node, in[static_cast<size_t>(p.dim)], p);
  auto clampi = [&](int64_t v) {
    if (v < 0) v += *n;
    return std::clamp<int64_t>(v, 0, *n);
  };
  p.start = clampi(node.attrs.get_int_or("slice", "start", 0));
  p.end = clampi(node.attrs.get_int_or("slice", "end", INT64_MAX / 2));
  p.size = p.end > p.start ? (p.end - p.start - 1) / p.step + 1 : 0;  // no overflow for huge steps
  p.start_e = p.start;
  p.size_e = p.size;
  return p;
}

TensorType infer_slice(const Node& node, const std::vector<const TensorType*>& in) {
  SliceParams p = slice_params(node, in[0]->shape);
  Shape out = in[0]->shape;
  out[static_cast<size_t>(p.dim)] = p.size_e;
  return TensorType{in[0]->dtype, out};
}

TensorType infer_squeeze(const Node& node, const std::vector<const TensorType*>& in) {
  const Shape& s = in[0]->shape;
  std::set<int64_t> dims;
  if (node.attrs.has("dims")) {
    for (int64_t d : node.attrs.get_ints("squeeze", "dims")) {
      int64_t a = normalize_axis("squeeze", d, in[0]->rank());
      COIL_USER_CHECK(s.empty() || s[static_cast<size_t>(a)] == sym::Expr(1),
                      "squeeze: dim {} has size {}, not 1", d,
                      sym::to_string(s[static_cast<size_t>(a)]));
      dims.insert(a);
    }
  } else {
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == sym::Expr(1)) dims.insert(static_cast<int64_t>(i));
  }
  Shape out;
  for (size_t i = 0; i < s.size(); ++i)
    if (!dims.count(static_cast<int64_t>(i))) out.push_back(s[i]);
  return TensorType{in[0]->dtype, out};
}

TensorType infer_unsqueeze(const Node& node, const std::vector<const TensorType*>& in) {
  int64_t rank = in[0]->rank() + 1;
  int64_t d = node.attrs.get_int("unsqueeze", "dim");
  COIL_USER_CHECK(d >= -rank && d < rank, "unsqueeze: dim {} is out of range for rank {}", d,
                  rank - 1);
  if (d < 0) d += rank;
  Shape out = in[0]->shape;
  out.insert(out.begin() + d, sym::Expr(1));
  return TensorType{in[0]->dtype, out};
}

TensorType infer_flatten(const Node& node, const std::vector<const TensorType*>& in) {
  const Shape& s = in[0]->shape;
  int64_t rank = in[0]->rank();
  if (rank == 0) return TensorType{in[0]->dtype, Shape{1}};
  int64_t a = normalize_axis("flatten", node.attrs.get_int_or("flatten", "start_dim", 0), rank);
  int64_t b = normalize_axis("flatten", node.attrs.get_int_or("flatten", "end_dim", -1), rank);
  COIL_USER_CHECK(a <= b, "flatten: start_dim {} is after end_dim {}", a, b);
  Shape out(s.begin(), s.begin() + a);
  sym::Expr p = 1;
  for (int64_t i = a; i <= b; ++i) p = p * s[static_cast<size_t>(i)];
  out.push_back(p);
  out.insert(out.end(), s.begin() + b + 1, s.end());
  return TensorType{in[0]->dtype, out};
}

TensorType infer_concat(const Node& node, const std::vector<const TensorType*>& in) {
  int64_t rank = in[0]->rank();
  COIL_USER_CHECK(rank > 0, "concat: inputs must have at least one dim");
  int64_t dim = normalize_axis("concat", node.attrs.get_int_or("concat", "dim", 0), rank);
  Shape out = in[0]->shape;
  DType t = in[0]->dtype;
  for (size_t i = 1; i < in.size(); ++i) {
    COIL_USER_CHECK(in[i]->rank() == rank, "concat: input {} has rank {}, input 0 has rank {}", i,
                    in[i]->rank(), rank);
    for (int64_t d = 0; d < rank; ++d) {
      if (d == dim) continue;
      COIL_USER_CHECK(in[i]->shape[static_cast<size_t>(d)] == out[static_cast<size_t>(d)],
                      "concat: input {} has shape {}, which differs from {} outside dim {}", i,
                      shape_str(in[i]->shape), shape_str(in[0]->shape), dim);
    }
    out[static_cast<size_t>(dim)] =
        out[static_cast<size_t>(dim)] + in[i]->shape[static_cast<size_t>(dim)];
    t = promote_types(t, in[i]->dtype);
  }
  return TensorType{t, out};
}

TensorType infer_gather(const Node& node, const std::vector<const TensorType*>& in) {
  const TensorType& data = *in[0];
  const TensorType& indices = *in[1];
  COIL_USER_CHECK(data.rank() > 0, "gather: data must have at least one dim");
  COIL_USER_CHECK(indices.dtype == DType::I32 || indices.dtype == DType::I64,
                  "gather: indices must be i32 or i64, got {}", dtype_name(indices.dtype));
  auto axis = static_cast<size_t>(
      normalize_axis("gather", node.attrs.get_int_or("gather", "axis", 0), data.rank()));
  COIL_USER_CHECK(indices.shape.empty() || data.shape[axis] != sym::Expr(0),
                  "gather: cannot index dim {} of size 0", axis);
  Shape out(data.shape.begin(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1,
             data.shape.end());
  return TensorType{data.dtype, out};
}

TensorType infer_index_add(const Node& node, const std::vector<const TensorType*>& in) {
  const TensorType& x = *in[0];
  const TensorType& index = *in[1];
  const TensorType& src = *in[2];
  COIL_USER_CHECK(x.rank() > 0, "index_add: x must have at least one dim");
  COIL_USER_CHECK(x.dtype != DType::Bool, "index_add: x is bool (a sum of bools is no bool)");
  COIL_USER_CHECK(index.dtype == DType::I32 || index.dtype == DType::I64,
                  "index_add: index must be i32 or i64, got {}", dtype_name(index.dtype));
  COIL_USER_CHECK(index.rank() == 1, "index_add: index must be 1-D, got rank {}", index.rank());
  COIL_USER_CHECK(src.dtype == x.dtype, "index_add: src is {}, x is {} (they must match)",
                  dtype_name(src.dtype), dtype_name(x.dtype));
  COIL_USER_CHECK(src.rank() == x.rank(), "index_add: src has rank {}, x has rank {}", src.rank(),
                  x.rank());
  auto axis = static_cast<size_t>(
      normalize_axis("index_add", node.attrs.get_int_or("index_add", "axis", 0), x.rank()));
  for (size_t d = 0; d < x.shape.size(); ++d) {
    const sym::Expr& want = d == axis ? index.shape[0] : x.shape[d];
    COIL_USER_CHECK(src.shape[d] == want, "index_add: src dim {} is {}, expected {} ({})", d,
                    sym::to_string(src.shape[d]), sym::to_string(want),
                    d == axis ? "the index's length" : "x's size");
  }
  COIL_USER_CHECK(index.shape[0] == sym::Expr(0) || x.shape[axis] != sym::Expr(0),
                  "index_add: cannot add into dim {} of size 0", axis);
  return x;
}

static Shape reduced_shape(const Node& node, const Shape& s, const std::vector<int64_t>& axes) {
  bool keepdim = node.attrs.get_bool_or(node.op_name(), "keepdim", false);
  Shape out;
  for (size_t i = 0; i < s.size(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (!reduced)
      out.push_back(s[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

TensorType infer_reduction(const Node& node, const std::vector<const TensorType*>& in) {
  std::string_view op = node.op_name();
  auto axes = reduction_axes(node, in[0]->rank());
  if (op == "max" || op == "min") {
    for (int64_t a : axes)
      COIL_USER_CHECK(in[0]->shape[static_cast<size_t>(a)] != sym::Expr(0),
                      "{}: reduction over dim {} of extent 0 has no identity", op, a);
  }
  DType t = in[0]->dtype;
  if (op == "sum" || op == "prod") t = is_floating(t) ? t : DType::I64;
  if (op == "mean" || op == "var") t = is_floating(t) ? t : DType::F32;
  return TensorType{t, reduced_shape(node, in[0]->shape, axes)};
}

TensorType infer_arg_reduction(const Node& node, const std::vector<const TensorType*>& in) {
  std::string_view op = node.op_name();
  const Shape& s = in[0]->shape;
  Shape full;
  if (node.attrs.has("axis")) {
    int64_t a = normalize_axis(op, node.attrs.get_int(op, "axis"), in[0]->rank());
    COIL_USER_CHECK(s.empty() || s[static_cast<size_t>(a)] != sym::Expr(0),
                    "{}: reduction over dim {} of extent 0 has no result", op, a);
    return TensorType{DType::I64, reduced_shape(node, s, {a})};
  }
  for (const auto& d : s)
    COIL_USER_CHECK(d != sym::Expr(0), "{}: input {} is empty", op, shape_str(s));
  bool keepdim = node.attrs.get_bool_or(op, "keepdim", false);
  Shape out = keepdim ? Shape(s.size(), sym::Expr(1)) : Shape{};
  return TensorType{DType::I64, out};
}

TensorType infer_softmax(const Node& node, const std::vector<const TensorType*>& in) {
  normalize_axis(node.op_name(), node.attrs.get_int_or(node.op_name(), "axis", -1), in[0]->rank());
  return TensorType{is_floating(in[0]->dtype) ? in[0]->dtype : DType::F32, in[0]->shape};
}

TensorType infer_norm(const Node& node, const std::vector<const TensorType*>& in) {
  std::string_view op = node.op_name();
  int64_t k = node.attrs.get_int_or(op, "dims", 1);
  const Shape& s = in[0]->shape;
  COIL_USER_CHECK(k >= 1 && k <= in[0]->rank(), "{}: dims={} is out of range for input {}", op, k,
                  shape_str(s));
  COIL_USER_CHECK(is_floating(in[0]->dtype), "{}: input must be floating point, got {}", op,
                  dtype_name(in[0]->dtype));
  Shape normalized(s.end() - k, s.end());
  for (size_t i = 1; i < in.size(); ++i) {
    COIL_USER_CHECK(in[i]->shape == normalized, "{}: {} has shape {}, expected {}", op,
                    i == 1 ? "weight" : "bias", shape_str(in[i]->shape), shape_str(normalized));
  }
  return TensorType{in[0]->dtype, s};
}

// --- Linear algebra and convolution ---

namespace {

std::string types_str(const std::vector<const TensorType*>& in) {
  std::vector<std::string> parts;
  for (const TensorType* t : in) parts.push_back(type_str(*t));
  if (parts.size() == 2) return fmt::format("{} and {}", parts[0], parts[1]);
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The dtype of matmul-like ops: every input of one floating dtype.
DType linalg_dtype(std::string_view op, const std::vector<const TensorType*>& in) {
  DType t = in[0]->dtype;
  for (const TensorType* x : in)
    COIL_USER_CHECK(x->dtype == t, "{}: inputs must have the same dtype, got {}", op,
                    types_str(in));
  COIL_USER_CHECK(is_floating(t), "{}: inputs must be floating point (f32, f64, f16, bf16), got {}",
                  op, types_str(in));
  return t;
}

// An attribute of kind IntPair (height, width): a list of two, a list of one or an integer
// (both dims); `dflt` when absent. Its entries are in the declared range (attr_check.h).
std::array<int64_t, 2> int_pair(const Node& node, const std::string& name,
                                std::array<int64_t, 2> dflt) {
  if (!node.attrs.has(name)) return dflt;
  if (const auto* i = std::get_if<int64_t>(&node.attrs.items().at(name))) return {*i, *i};
  const auto& v = node.attrs.get_ints(node.op_name(), name);
  COIL_ASSERT(v.size() == 1 || v.size() == 2, "{}: '{}' has {} entries", node.op_name(), name,
              v.size());
  return v.size() == 1 ? std::array<int64_t, 2>{v[0], v[0]} : std::array<int64_t, 2>{v[0], v[1]};
}

std::string pair_str(const std::array<int64_t, 2>& p) {
  return fmt::format("[{}, {}]", p[0], p[1]);
}

// The spatial output sizes of a 2-D window over the last two dims of `x`; an error naming the
// op and the window when one is not positive.
std::array<sym::Expr, 2> window_output(std::string_view op, const Shape& x, const Window2d& w) {
  std::array<sym::Expr, 2> out;
  for (int d = 0; d < 2; ++d) out[d] = window_output_size(op, x[x.size() - 2 + d], w, d);
  for (int d = 0; d < 2; ++d) {
    auto c = out[d].as_const();
    COIL_USER_CHECK(!c || *c >= 1,
                    "{}: input {} is too small for the window: output size would be {}x{} "
                    "(kernel {}, stride {}, padding {}, dilation {})",
                    op, shape_str(x), sym::to_string(out[0]), sym::to_string(out[1]),
                    pair_str(w.kernel), pair_str(w.stride), pair_str(w.padding),
                    pair_str(w.dilation));
  }
  return out;
}

}  // namespace

Window2d conv2d_params(const Node& node) {
  std::string_view op = node.op_name();
  Window2d w;
  w.stride = int_pair(node, "stride", {1, 1});
  w.padding = int_pair(node, "padding", {0, 0});
  w.dilation = int_pair(node, "dilation", {1, 1});
  w.groups = node.attrs.get_int_or(op, "groups", 1);
  return w;
}

Window2d pool2d_params(const Node& node) {
  std::string_view op = node.op_name();
  bool is_max = op == "max_pool2d";
  // Each attribute is declared by one of the two ops only (the other leaves the default).
  Window2d w;
  w.kernel = int_pair(node, "kernel", {1, 1});  // required
  w.stride = int_pair(node, "stride", w.kernel);
  w.padding = int_pair(node, "padding", {0, 0});
  if (is_max) w.dilation = int_pair(node, "dilation", {1, 1});
  w.ceil_mode = node.attrs.get_bool_or(op, "ceil_mode", false);
  if (!is_max) w.count_include_pad = node.attrs.get_bool_or(op, "count_include_pad", true);
  for (int d = 0; d < 2; ++d)
    COIL_USER_CHECK(w.padding[d] <= w.kernel[d] / 2,
                    "{}: padding {} must be at most half of the kernel {}", op, pair_str(w.padding),
                    pair_str(w.kernel));
  return w;
}

sym::Expr window_output_size(std::string_view op, const sym::Expr& in, const Window2d& w, int dim) {
  auto d = static_cast<size_t>(dim);
  int64_t k = w.kernel[d], s = w.stride[d], p = w.padding[d];
  // The attributes are bounded below only: huge ones (an ONNX Conv with a dilation of 2^63 - 1)
  // overflowed int64 here (found by tests/fuzz/parsers/onnx_parser_fuzzer). span and
  // offset = 2p - span are checked; the constant case is computed in 128 bits.
  int64_t span = 0, offset = 0;
  bool overflow = __builtin_mul_overflow(w.dilation[d], k - 1, &span) ||
                  __builtin_add_overflow(span, 1, &span) || __builtin_mul_overflow(p, 2, &offset) ||
                  __builtin_sub_overflow(offset, span, &offset);
  auto too_large = [&] {
    user_error("{}: the window is too large (kernel {}, stride {}, padding {}, dilation {})", op,
               pair_str(w.kernel), pair_str(w.stride), pair_str(w.padding), pair_str(w.dilation));
  };
  if (overflow) too_large();
  if (auto n = in.as_const()) {
    __int128 num = __int128{*n} + offset + (w.ceil_mode ? s - 1 : 0);
    __int128 out = num / s - (num % s != 0 && num < 0 ? 1 : 0) + 1;  // floor division: s >= 1
    // ceil_mode: the last window must start inside the input or the left padding.
    if (w.ceil_mode && out > 0 && (out - 1) * s >= __int128{*n} + p) --out;
    if (out > std::numeric_limits<int64_t>::max()) too_large();
    return static_cast<int64_t>(out);
  }
  COIL_USER_CHECK(!w.ceil_mode, "{}: ceil_mode needs a static input size, got {}", op,
                  sym::to_string(in));
  return sym::floordiv(in + offset, s) + 1;
}

TensorType infer_matmul(const Node& node, const std::vector<const TensorType*>& in) {
  std::string_view op = node.op_name();
  const Shape &a = in[0]->shape, &b = in[1]->shape;
  if (op == "bmm") {
    COIL_USER_CHECK(a.size() == 3 && b.size() == 3, "bmm: inputs must be 3-D, got {}",
                    types_str(in));
    COIL_USER_CHECK(a[0] == b[0], "bmm: batch sizes differ: {}", types_str(in));
  }
  COIL_USER_CHECK(!a.empty() && !b.empty(), "{}: inputs must have at least 1 dim, got {}", op,
                  types_str(in));
  DType t = linalg_dtype(op, in);
  // A 1-D a is a row [1, K], a 1-D b a column [K, 1]; those dims are dropped from the result.
  Shape am = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape bm = b.size() == 1 ? Shape{b[0], 1} : b;
  const sym::Expr &ka = am.back(), &kb = bm[bm.size() - 2];
  COIL_USER_CHECK(ka == kb, "{}: cannot multiply {} by {} (K: {} vs {})", op, shape_str(a),
                  shape_str(b), sym::to_string(ka), sym::to_string(kb));
  Shape out =
      broadcast_shapes(fmt::format("{}: batch dims of {} and {}", op, shape_str(a), shape_str(b)),
                       Shape(am.begin(), am.end() - 2), Shape(bm.begin(), bm.end() - 2));
  if (a.size() > 1) out.push_back(am[am.size() - 2]);
  if (b.size() > 1) out.push_back(bm.back());
  return TensorType{t, out};
}

TensorType infer_linear(const Node& node, const std::vector<const TensorType*>& in) {
  const Shape &x = in[0]->shape, &w = in[1]->shape;
  COIL_USER_CHECK(w.size() == 2, "linear: weight must be 2-D [out, in], got {}", type_str(*in[1]));
  COIL_USER_CHECK(!x.empty(), "linear: input must have at least 1 dim, got {}", type_str(*in[0]));
  DType t = linalg_dtype("linear", in);
  COIL_USER_CHECK(x.back() == w[1], "linear: input {} has {} features, weight {} takes {}",
                  shape_str(x), sym::to_string(x.back()), shape_str(w), sym::to_string(w[1]));
  if (in.size() > 2)
    COIL_USER_CHECK(in[2]->shape == Shape{w[0]}, "linear: bias {} must have shape [{}]",
                    shape_str(in[2]->shape), sym::to_string(w[0]));
  Shape out = x;
  out.back() = w[0];
  return TensorType{t, out};
}

TensorType infer_addmm(const Node& node, const std::vector<const TensorType*>& in) {
  const Shape &bias = in[0]->shape, &a = in[1]->shape, &b = in[2]->shape;
  COIL_USER_CHECK(a.size() == 2 && b.size() == 2, "addmm: a and b must be 2-D, got {} and {}",
                  type_str(*in[1]), type_str(*in[2]));
  DType t = linalg_dtype("addmm", in);
  COIL_USER_CHECK(a[1] == b[0], "addmm: cannot multiply {} by {} (K: {} vs {})", shape_str(a),
                  shape_str(b), sym::to_string(a[1]), sym::to_string(b[0]));
  Shape out{a[0], b[1]};
  bool fits = bias.size() <= 2;
  for (size_t i = 0; fits && i < bias.size(); ++i) {
    const sym::Expr& o = out[out.size() - bias.size() + i];
    fits = bias[i] == o || bias[i] == sym::Expr(1);
  }
  COIL_USER_CHECK(fits, "addmm: bias {} does not broadcast to the product's shape {}",
                  shape_str(bias), shape_str(out));
  return TensorType{t, out};
}

TensorType infer_conv2d(const Node& node, const std::vector<const TensorType*>& in) {
  const Shape &x = in[0]->shape, &w = in[1]->shape;
  COIL_USER_CHECK(x.size() == 4, "conv2d: input must be 4-D [N, C, H, W], got {}",
                  type_str(*in[0]));
  COIL_USER_CHECK(w.size() == 4, "conv2d: weight must be 4-D [OC, C/groups, KH, KW], got {}",
                  type_str(*in[1]));
  DType t = linalg_dtype("conv2d", in);
  Window2d p = conv2d_params(node);
  const sym::Expr &c = x[1], &oc = w[0];
  if (auto cc = c.as_const())
    COIL_USER_CHECK(*cc % p.groups == 0,
                    "conv2d: input channels {} are not divisible by groups={} (input {})", *cc,
                    p.groups, shape_str(x));
  if (auto occ = oc.as_const())
    COIL_USER_CHECK(*occ % p.groups == 0,
                    "conv2d: output channels {} are not divisible by groups={} (weight {})", *occ,
                    p.groups, shape_str(w));
  COIL_USER_CHECK(w[1] * sym::Expr(p.groups) == c,
                  "conv2d: weight {} takes {} input channels per group, but the input {} has {} "
                  "channels for groups={}",
                  shape_str(w), sym::to_string(w[1]), shape_str(x), sym::to_string(c), p.groups);
  if (in.size() > 2)
    COIL_USER_CHECK(in[2]->shape == Shape{oc}, "conv2d: bias {} must have shape [{}]",
                    shape_str(in[2]->shape), sym::to_string(oc));
  for (int d = 0; d < 2; ++d) {
    auto k = w[static_cast<size_t>(2 + d)].as_const();
    COIL_USER_CHECK(k.has_value(), "conv2d: the kernel size of weight {} must be static",
                    shape_str(w));
    COIL_USER_CHECK(*k >= 1, "conv2d: weight {} has an empty kernel", shape_str(w));
    p.kernel[static_cast<size_t>(d)] = *k;
  }
  auto hw = window_output("conv2d", x, p);
  return TensorType{t, Shape{x[0], oc, hw[0], hw[1]}};
}

TensorType infer_pool2d(const Node& node, const std::vector<const TensorType*>& in) {
  std::string_view op = node.op_name();
  const Shape& x = in[0]->shape;
  DType t = in[0]->dtype;
  COIL_USER_CHECK(x.size() >= 3, "{}: input must have at least 3 dims ([..., C, H, W]), got {}", op,
                  type_str(*in[0]));
  if (op == "max_pool2d")
    COIL_USER_CHECK(t != DType::Bool, "{}: not supported for bool inputs", op);
  else
    COIL_USER_CHECK(is_floating(t), "{}: input must be floating point, got {}", op,
                    type_str(*in[0]));
  Window2d w = pool2d_params(node);
  auto hw = window_output(op, x, w);
  Shape out(x.begin(), x.end() - 2);
  out.push_back(hw[0]);
  out.push_back(hw[1]);
  return TensorType{t, out};
}

TensorType infer_global_pool2d(const Node& node, const std::vector<const TensorType*>& in) {
  std::string_view op = node.op_name();
  const Shape& x = in[0]->shape;
  COIL_USER_CHECK(x.size() >= 3, "{}: input must have at least 3 dims ([..., C, H, W]), got {}", op,
                  type_str(*in[0]));
  COIL_USER_CHECK(is_floating(in[0]->dtype), "{}: input must be floating point, got {}", op,
                  type_str(*in[0]));
  Shape out(x.begin(), x.end() - 2);
  out.push_back(1);
  out.push_back(1);
  return TensorType{in[0]->dtype, out};
}

namespace {

// The operands attention and its backward ops share: q [B, H, Tq, D], k [B, Hkv, Tk, D], v
// [B, Hkv, Tk, Dv] (null for attention_lse) of one floating dtype, Hkv dividing H, and a mask
// (null: none) that is bool or floating and broadcasts to [B, H, Tq, Tk]. `op` names the op in
// the messages.
void check_attention_operands(std::string_view op, const std::vector<const TensorType*>& in,
                              const TensorType& q, const TensorType& k, const TensorType* v,
                              const TensorType* mask) {
  const bool ranks = q.rank() == 4 && k.rank() == 4 && (v == nullptr || v->rank() == 4);
  COIL_USER_CHECK(ranks, "{}: q, k{} must be 4-D [B, H, T, D], got {}", op, v ? " and v" : "",
                  types_str(in));
  DType t = q.dtype;
  COIL_USER_CHECK(is_floating(t) && k.dtype == t && (v == nullptr || v->dtype == t),
                  "{}: q, k{} must have one floating dtype (f32, f64, f16, bf16), got {}", op,
                  v ? " and v" : "", types_str(in));
  COIL_USER_CHECK(k.shape[0] == q.shape[0] && (v == nullptr || v->shape[0] == q.shape[0]),
                  "{}: batch sizes differ: q {}, k {}{}", op, shape_str(q.shape),
                  shape_str(k.shape), v ? fmt::format(", v {}", shape_str(v->shape)) : "");
  COIL_USER_CHECK(k.shape[3] == q.shape[3], "{}: k's head dim {} differs from q's {} (q {}, k {})",
                  op, sym::to_string(k.shape[3]), sym::to_string(q.shape[3]), shape_str(q.shape),
                  shape_str(k.shape));
  if (v != nullptr)
    COIL_USER_CHECK(v->shape[1] == k.shape[1] && v->shape[2] == k.shape[2],
                    "{}: v {} must have k's heads and length {} (k {})", op, shape_str(v->shape),
                    shape_str(Shape{k.shape[1], k.shape[2]}), shape_str(k.shape));
  auto heads = q.shape[1].as_const(), kv_heads = k.shape[1].as_const();
  if (heads && kv_heads)
    COIL_USER_CHECK(*kv_heads > 0 ? *heads % *kv_heads == 0 : *heads == 0,
                    "{}: k{} {} heads, which does not divide q's {} (grouped-query "
                    "attention needs H % Hkv == 0)",
                    op, v ? " and v have" : " has", *kv_heads, *heads);
  if (mask == nullptr) return;
  const TensorType& m = *mask;
  COIL_USER_CHECK(m.dtype == DType::Bool || is_floating(m.dtype),
                  "{}: the mask must be bool (true: attend) or floating (added to the "
                  "scores), got {}",
                  op, type_str(m));
  COIL_USER_CHECK(m.rank() <= 4, "{}: the mask {} has more than 4 dims", op, type_str(m));
  Shape scores{q.shape[0], q.shape[1], q.shape[2], k.shape[2]};
  const size_t lead = 4 - static_cast<size_t>(m.rank());
  for (size_t d = 0; d < m.shape.size(); ++d)
    COIL_USER_CHECK(m.shape[d] == scores[d + lead] || m.shape[d] == sym::Expr(1),
                    "{}: the mask {} does not broadcast to the scores [B, H, Tq, Tk] = {}", op,
                    shape_str(m.shape), shape_str(scores));
}

/// The dtype of attention's logsumexp: f32 (f64 for f64 attention).
DType lse_dtype(DType t) {
  return t == DType::F64 ? DType::F64 : DType::F32;
}

}  // namespace

// attention(q, k, v[, mask]): q [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] ->
// [B, H, Tq, Dv]; Hkv divides H (grouped-query attention); the mask is bool or floating and
// broadcasts to [B, H, Tq, Tk].
TensorType infer_attention(const Node& node, const std::vector<const TensorType*>& in) {
  (void)node;
  const TensorType &q = *in[0], &v = *in[2];
  check_attention_operands("attention", in, q, *in[1], &v, in.size() > 3 ? in[3] : nullptr);
  return TensorType{q.dtype, Shape{q.shape[0], q.shape[1], q.shape[2], v.shape[3]}};
}

// attention_lse(q, k[, mask]) -> [B, H, Tq], f32 (f64 for f64 q): the logsumexp of each row
// of attention's scaled, masked scores.
TensorType infer_attention_lse(const Node& node, const std::vector<const TensorType*>& in) {
  (void)node;
  const TensorType& q = *in[0];
  check_attention_operands("attention_lse", in, q, *in[1], nullptr,
                           in.size() > 2 ? in[2] : nullptr);
  return TensorType{lse_dtype(q.dtype), Shape{q.shape[0], q.shape[1], q.shape[2]}};
}

// attention_grad(q, k, v, out, grad_out, lse[, mask]) {wrt}: out and grad_out [B, H, Tq, Dv]
// of q's dtype, lse [B, H, Tq] as attention_lse gives it -> the shape of q, k or v.
TensorType infer_attention_grad(const Node& node, const std::vector<const TensorType*>& in) {
  const TensorType &q = *in[0], &k = *in[1], &v = *in[2];
  check_attention_operands("attention_grad", in, q, k, &v, in.size() > 6 ? in[6] : nullptr);
  const Shape y{q.shape[0], q.shape[1], q.shape[2], v.shape[3]};
  for (int i : {3, 4})
    COIL_USER_CHECK(in[i]->dtype == q.dtype && in[i]->shape == y,
                    "attention_grad: {} must be {}{} (attention's result), got {}",
                    i == 3 ? "out" : "grad_out", dtype_name(q.dtype), shape_str(y),
                    type_str(*in[i]));
  const Shape rows{q.shape[0], q.shape[1], q.shape[2]};
  COIL_USER_CHECK(in[5]->dtype == lse_dtype(q.dtype) && in[5]->shape == rows,
                  "attention_grad: lse must be {}{} (attention_lse's result), got {}",
                  dtype_name(lse_dtype(q.dtype)), shape_str(rows), type_str(*in[5]));
  const std::string wrt = node.attrs.get_string("attention_grad", "wrt");
  return TensorType{q.dtype, wrt == "q" ? q.shape : wrt == "k" ? k.shape : v.shape};
}

}  // namespace coil
