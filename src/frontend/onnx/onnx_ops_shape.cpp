// Shape ops: Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Expand, Concat (views in coil), and
// the shape computations that fold to constants: Shape, Size, Constant, ConstantOfShape, Range.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "frontend/onnx/onnx_ops.h"
#include "frontend/onnx/onnx_tensor.h"

namespace coil::onnxfe {

int reshape_to(OnnxNode& n, int x, const Shape& target_in) {
  Shape target = target_in;
  const Shape& in = n.type(x).shape;
  // A value merged from dims that are apart in its SplitView: reshape from those, which keeps
  // them apart for a later split (onnx_ops_split_view.cpp). So does a merge of several symbolic
  // dims, which one `reshape` would make but could not split again.
  auto symbolic_dims =
      std::count_if(in.begin(), in.end(), [](const auto& d) { return !d.is_const(); });
  if (n.split_view(x) || symbolic_dims > 1) {
    int y = reshape_split_view(n, x, target, /*split_constants=*/n.split_view(x) != nullptr);
    if (y >= 0) return y;
  }
  // A -1 next to symbolic sizes: infer it here when it comes out constant ([s0, -1] of
  // [s0, 3, 4] is [s0, 12]), so that the one symbolic size can be coil's -1.
  auto minus_one = std::find(target.begin(), target.end(), sym::Expr(-1));
  if (minus_one != target.end()) {
    // Cancel the symbolic sizes that appear on both sides; the rest must be constants.
    std::vector<sym::Expr> rest(in.begin(), in.end());
    int64_t numel = 1, known = 1;
    bool constant = true;
    for (auto it = target.begin(); it != target.end(); ++it) {
      if (it == minus_one) continue;
      if (auto c = it->as_const()) {
        // Entries up to 2^63 - 1 overflowed the product (found by
        // tests/fuzz/parsers/onnx_parser_fuzzer).
        if (__builtin_mul_overflow(known, *c, &known))
          n.error("the target shape {} has more than 2^63 elements", shape_str(target_in));
      } else if (auto m = std::find(rest.begin(), rest.end(), *it); m != rest.end()) {
        rest.erase(m);
      } else {
        constant = false;
      }
    }
    for (const auto& d : rest) {
      if (auto c = d.as_const())
        numel *= *c;
      else
        constant = false;
    }
    if (constant && known > 0 && numel % known == 0) *minus_one = numel / known;
  }
  if (in == target) return x;
  std::vector<int64_t> sizes;
  int symbolic = 0;
  bool has_minus_one = false;
  for (const auto& d : target) {
    if (auto c = d.as_const()) {
      has_minus_one |= *c == -1;
      sizes.push_back(*c);
    } else {
      ++symbolic;
      sizes.push_back(-1);  // coil infers it from the element count
    }
  }
  if (symbolic > 1 || (symbolic == 1 && has_minus_one)) {
    int y = reshape_split_view(n, x, target, /*split_constants=*/true);
    if (y >= 0) return y;
    unsupported(
        "reshape of {} to the symbolic shape {}: no grouping of the dims into equal products "
        "that splits only constant dims",
        shape_str(in), shape_str(target_in));
  }
  return n.add("reshape", {x}, Attrs{{"shape", sizes}});
}

void map_reshape(OnnxNode& n) {
  int x = n.in(0);
  std::vector<sym::Expr> raw;  // constants, or size expressions (onnx_ops_symbolic.cpp)
  if (n.opset() < 5) {
    for (int64_t v : n.attr_ints("shape").value_or(std::vector<int64_t>{})) raw.emplace_back(v);
  } else {
    raw = n.sym_ints(1, "the target shape");
  }
  bool allow_zero = n.attr_int("allowzero", 0) != 0;
  const Shape& in = n.type(x).shape;
  Shape target;
  for (size_t i = 0; i < raw.size(); ++i) {
    auto c = raw[i].as_const();
    if (c && *c == 0 && !allow_zero) {
      if (i >= in.size()) n.error("shape entry {} is 0 but the input has rank {}", i, in.size());
      target.push_back(in[i]);  // 0 copies the input's size
    } else if (c && *c < -1) {
      n.error("shape entry {} is {}", i, *c);
    } else {
      target.push_back(raw[i]);
    }
  }
  n.set_output(0, reshape_to(n, x, target));
}

void map_flatten(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  int64_t axis = n.attr_int("axis", 1);
  if (axis < -r || axis > r) n.error("axis {} is out of range for rank {}", axis, r);
  if (axis < 0) axis += r;
  int y;
  if (r == 0) {
    y = n.add("reshape", {x}, Attrs{{"shape", std::vector<int64_t>{1, 1}}});
  } else if (axis == 0) {
    y = n.add("flatten", {n.add("unsqueeze", {x}, Attrs{{"dim", int64_t{0}}})},
              Attrs{{"start_dim", int64_t{1}}});
  } else if (axis == r) {
    y = n.add("unsqueeze", {n.add("flatten", {x}, Attrs{{"start_dim", int64_t{0}}})},
              Attrs{{"dim", int64_t{1}}});
  } else {
    int head = n.add("flatten", {x}, Attrs{{"start_dim", int64_t{0}}, {"end_dim", axis - 1}});
    y = n.add("flatten", {head}, Attrs{{"start_dim", int64_t{1}}});
  }
  n.set_output(0, y);
}

void map_transpose(OnnxNode& n) {
  int x = n.in(0);
  std::vector<int64_t> perm;
  if (auto p = n.attr_ints("perm")) {
    perm = *p;
  } else {
    for (int64_t i = n.rank(x); i-- > 0;) perm.push_back(i);
  }
  if (n.rank(x) == 0 && perm.empty()) return n.set_output(0, x);
  n.set_output(0, n.add("permute", {x}, Attrs{{"dims", perm}}));
}

namespace {

std::vector<int64_t> axes_arg(OnnxNode& n) {
  if (n.opset() >= 13)
    return n.has_input(1) ? n.const_ints(1, "the axes input") : std::vector<int64_t>{};
  return n.attr_ints("axes").value_or(std::vector<int64_t>{});
}

}  // namespace

void map_squeeze(OnnxNode& n) {
  int x = n.in(0);
  std::vector<int64_t> axes = axes_arg(n);
  Attrs a;
  if (!axes.empty() || (n.opset() < 13 && n.has_attr("axes"))) {
    std::set<int64_t> dims;
    for (int64_t d : axes) dims.insert(n.axis(d, n.rank(x)));
    a.set("dims", std::vector<int64_t>(dims.begin(), dims.end()));
  } else {
    for (const auto& d : n.type(x).shape)
      if (!d.is_const())
        unsupported("squeeze without axes of the symbolic shape {}", shape_str(n.type(x).shape));
  }
  n.set_output(0, n.add("squeeze", {x}, a));
}

void map_unsqueeze(OnnxNode& n) {
  int x = n.in(0);
  std::vector<int64_t> raw = axes_arg(n);
  int64_t out_rank = n.rank(x) + static_cast<int64_t>(raw.size());
  std::set<int64_t> axes;
  for (int64_t a : raw)
    if (!axes.insert(n.axis(a, out_rank)).second) n.error("axis {} is listed twice", a);
  int y = x;
  for (int64_t a : axes) y = n.add("unsqueeze", {y}, Attrs{{"dim", a}});
  n.set_output(0, y);
}

void map_expand(OnnxNode& n) {
  int x = n.in(0);
  // Constants, or size expressions (onnx_ops_symbolic.cpp) that must equal x's own sizes.
  std::vector<sym::Expr> target = n.sym_ints(1, "the target shape");
  const Shape& in = n.type(x).shape;
  // Bidirectional broadcasting: the result has the larger rank; 1s stretch either way.
  size_t rank = std::max(in.size(), target.size());
  std::vector<int64_t> sizes(rank);
  for (size_t i = 0; i < rank; ++i) {
    bool has_in = i >= rank - in.size(), has_t = i >= rank - target.size();
    sym::Expr te = has_t ? target[i - (rank - target.size())] : sym::Expr(1);
    const sym::Expr* d = has_in ? &in[i - (rank - in.size())] : nullptr;
    auto tc = te.as_const();
    if (!tc) {
      if (d && *d == te) {
        sizes[i] = -1;  // keep
        continue;
      }
      unsupported("expanding {} to the symbolic size {}", d ? sym::to_string(*d) : "a new dim",
                  sym::to_string(te));
    }
    int64_t t = *tc;
    if (t < 0) n.error("target size {} is negative", t);
    if (!d) {
      sizes[i] = t;
    } else if (t == 1 || *d == sym::Expr(t)) {
      sizes[i] = -1;  // keep
    } else if (*d == sym::Expr(1)) {
      sizes[i] = t;
    } else if (!d->is_const()) {
      unsupported("expanding the symbolic size {} to {}", sym::to_string(*d), t);
    } else {
      std::vector<std::string> ts;
      for (const auto& e : target) ts.push_back(sym::to_string(e));
      n.error("cannot broadcast {} to [{}]", shape_str(in), fmt::join(ts, ", "));
    }
  }
  n.set_output(0, n.add("expand", {x}, Attrs{{"shape", sizes}}));
}

void map_concat(OnnxNode& n) {
  // Concat-1's axis defaults to 1; from opset 4 on it is required.
  if (!n.has_attr("axis") && n.opset() >= 4) n.error("attribute 'axis' is required");
  if (n.num_inputs() == 0) n.error("needs at least one input");
  int64_t axis = n.axis(n.attr_int("axis", 1), n.rank(n.in(0)));
  std::vector<int> in;
  for (int i = 0; i < n.num_inputs(); ++i) {
    int v = n.in(i);
    // Empty pieces add nothing (ONNX allows them with any size elsewhere).
    if (n.rank(v) > axis && n.type(v).shape[static_cast<size_t>(axis)] == sym::Expr(0)) continue;
    in.push_back(v);
  }
  if (in.empty()) return n.set_output(0, n.in(0));
  n.set_output(0, in.size() == 1 ? in[0] : n.add("concat", in, Attrs{{"dim", axis}}));
}

namespace {

Tensor i64_tensor(const std::vector<int64_t>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::I64, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int64_t>()[i] = v[i];
  return t;
}

}  // namespace

// A constant, or with symbolic sizes a SymbolicInts value (onnx_ops_symbolic.cpp).
void map_shape(OnnxNode& n) {
  const Shape& s = n.type(n.in(0)).shape;
  auto r = static_cast<int64_t>(s.size());
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  int64_t start = clampi(n.attr_int("start", 0)), end = clampi(n.attr_int("end", r));
  std::vector<sym::Expr> v(s.begin() + start, s.begin() + std::max(start, end));
  n.set_output(0, n.add_ints(v, false, DType::I64));
}

void map_size(OnnxNode& n) {
  sym::Expr numel(1);
  for (const auto& d : n.type(n.in(0)).shape) numel = numel * d;
  n.set_output(0, n.add_ints({numel}, true, DType::I64));
}

void map_constant(OnnxNode& n) {
  if (n.proto().attribute_size() != 1) n.error("needs exactly one attribute");
  const onnx::AttributeProto& a = n.proto().attribute(0);
  const std::string& k = a.name();
  Tensor t;
  if (k == "value") {
    t = tensor_from_proto(*n.attr_tensor("value"), "attribute 'value'");
  } else if (k == "value_float") {
    t = Tensor::empty(DType::F32, {});
    t.data_as<float>()[0] = static_cast<float>(n.attr_float(k, 0));
  } else if (k == "value_int") {
    t = i64_tensor({n.attr_int(k, 0)}, {});
  } else if (k == "value_floats") {
    std::vector<double> v = *n.attr_floats(k);
    t = Tensor::empty(DType::F32, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.data_as<float>()[i] = static_cast<float>(v[i]);
  } else if (k == "value_ints") {
    std::vector<int64_t> v = *n.attr_ints(k);
    t = i64_tensor(v, {static_cast<int64_t>(v.size())});
  } else {
    unsupported("attribute '{}'", printable(k));
  }
  n.set_output(0, n.add_constant(t));
}

void map_constant_of_shape(OnnxNode& n) {
  Tensor value = Tensor::zeros(DType::F32, {1});
  if (const onnx::TensorProto* v = n.attr_tensor("value")) {
    value = tensor_from_proto(*v, "attribute 'value'");
    if (value.numel() != 1) n.error("attribute 'value' must have one element");
  }
  DType t = value.dtype();
  if (const auto* sizes = n.symbolic(n.in(0))) {
    // A symbolic shape: the value in a tensor of 1s of that rank, recorded as a broadcast value
    // (SplitViews, onnx_context.h) that only elementwise ops may read.
    if (n.rank(n.in(0)) != 1) n.error("the shape input must be 1-D");
    Tensor one = Tensor::empty(t, std::vector<int64_t>(sizes->size(), 1));
    std::memcpy(one.data(), value.data(), static_cast<size_t>(dtype_size(t)));
    int id = n.add_constant(one);
    n.set_broadcast_shape(id, Shape(sizes->begin(), sizes->end()));
    return n.set_output(0, id);
  }
  std::vector<int64_t> shape = n.const_ints(0, "the shape input");
  for (int64_t d : shape)
    if (d < 0) n.error("size {} is negative", d);
  int64_t numel = 1;  // saturates above kFoldLimit
  for (int64_t d : shape)
    numel = d > kFoldLimit ? kFoldLimit + 1 : std::min(numel * d, kFoldLimit + 1);
  for (int64_t d : shape) numel = d == 0 ? 0 : numel;
  if (numel <= kFoldLimit) {
    Tensor out = Tensor::empty(t, shape);
    int64_t bytes = dtype_size(t);
    for (int64_t i = 0; i < out.numel(); ++i)
      std::memcpy(static_cast<char*>(out.data()) + i * bytes, value.data(),
                  static_cast<size_t>(bytes));
    return n.set_output(0, n.add_constant(out));
  }
  n.set_output(0, n.add("full", {},
                        Attrs{{"shape", shape}, {"value", value.item_as_double(0)}, {"dtype", t}}));
}

void map_range(OnnxNode& n) {
  DType t = n.dtype(n.in(0));
  double start = n.const_scalar(0, "start"), limit = n.const_scalar(1, "limit"),
         delta = n.const_scalar(2, "delta");
  if (delta == 0) n.error("delta is 0");
  double count = std::ceil((limit - start) / delta);
  if (!(count < 1e15)) n.error("{:.3g} elements are too many", count);
  auto size = static_cast<int64_t>(std::max(count, 0.0));
  if (size <= kFoldLimit) {
    Tensor out = Tensor::empty(t, {size});
    for (int64_t i = 0; i < size; ++i)
      out.set_from_double(i, start + static_cast<double>(i) * delta);
    return n.set_output(0, n.add_constant(out));
  }
  Attrs a{{"size", size}, {"dtype", t}};
  if (is_floating(t)) {
    a.set("start", start), a.set("step", delta);
  } else {
    a.set("start", n.const_int_scalar(0, "start")), a.set("step", n.const_int_scalar(2, "delta"));
  }
  n.set_output(0, n.add("iota", {}, a));
}

void map_depth_space(OnnxNode& n) {
  int x = n.in(0);
  if (n.rank(x) != 4) n.error("the input must be [N, C, H, W], got {}", shape_str(n.type(x).shape));
  std::vector<int64_t> s = n.static_shape(x, "the input");
  int64_t b = n.attr_int("blocksize", 0), N = s[0], C = s[1], H = s[2], W = s[3];
  if (b < 1) n.error("blocksize must be at least 1, got {}", b);
  std::vector<int64_t> split, perm, out;
  if (n.op_type() == "SpaceToDepth") {
    if (H % b != 0 || W % b != 0)
      n.error("H = {} and W = {} must be multiples of blocksize {}", H, W, b);
    split = {N, C, H / b, b, W / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out = {N, C * b * b, H / b, W / b};
  } else {
    if (C % (b * b) != 0) n.error("C = {} must be a multiple of blocksize^2 = {}", C, b * b);
    std::string mode = n.attr_string("mode", "DCR");
    if (mode == "DCR") {
      split = {N, b, b, C / (b * b), H, W};
      perm = {0, 3, 4, 1, 5, 2};
    } else if (mode == "CRD") {
      split = {N, C / (b * b), b, b, H, W};
      perm = {0, 1, 4, 2, 5, 3};
    } else {
      n.error("mode '{}' is not DCR or CRD", printable(mode));
    }
    out = {N, C / (b * b), H * b, W * b};
  }
  int y = n.add("reshape", {x}, Attrs{{"shape", split}});
  y = n.add("permute", {y}, Attrs{{"dims", perm}});
  n.set_output(0, n.add("reshape", {y}, Attrs{{"shape", out}}));
}

}  // namespace coil::onnxfe
