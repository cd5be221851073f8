// Neural-network ops built from coil's composites and reductions: Softmax, LogSoftmax, Hardmax,
// LayerNormalization, BatchNormalization (inference), InstanceNormalization,
// MeanVarianceNormalization, GlobalAveragePool, GlobalMaxPool, LRN.
#include <algorithm>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

std::vector<int64_t> axes_from(int64_t first, int64_t rank) {
  std::vector<int64_t> axes;
  for (int64_t i = first; i < rank; ++i) axes.push_back(i);
  return axes;
}

// One-hot of the argmax along the last dim, in x's dtype.
int hardmax_last(OnnxNode& n, int x) {
  int64_t r = n.rank(x);
  int64_t size = n.static_shape(x, "the input")[static_cast<size_t>(r - 1)];
  int am = n.add("argmax", {x}, Attrs{{"axis", int64_t{-1}}, {"keepdim", true}});
  return n.cast(n.add("eq", {iota_along(n, size, r - 1, r), am}), n.dtype(x));
}

}  // namespace

void map_softmax(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  const std::string& op = n.op_type();
  bool coerce_2d = n.opset() < 13;  // over all dims from axis on, as if flattened
  int64_t axis = n.axis(n.attr_int("axis", coerce_2d ? 1 : -1), r);
  auto apply = [&](int v) {
    if (op == "Hardmax") return hardmax_last(n, v);
    return n.add(op == "Softmax" ? "softmax" : "log_softmax", {v}, Attrs{{"axis", int64_t{-1}}});
  };
  if (r == 0) n.error("the input must have at least one dim");
  if (!coerce_2d || axis == r - 1) {
    if (op == "Hardmax" && axis != r - 1) {
      int t = n.add("transpose", {x}, Attrs{{"dim0", axis}, {"dim1", int64_t{-1}}});
      return n.set_output(
          0, n.add("transpose", {apply(t)}, Attrs{{"dim0", axis}, {"dim1", int64_t{-1}}}));
    }
    if (op == "Hardmax") return n.set_output(0, apply(x));
    return n.set_output(
        0, n.add(op == "Softmax" ? "softmax" : "log_softmax", {x}, Attrs{{"axis", axis}}));
  }
  int flat = n.add("flatten", {x}, Attrs{{"start_dim", axis}});
  n.set_output(0, reshape_to(n, apply(flat), n.type(x).shape));
}

void map_layer_norm(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  int64_t axis = n.axis(n.attr_int("axis", -1), r);
  double eps = n.attr_float("epsilon", 1e-5);
  DType t = n.dtype(x);
  if (!is_floating(t)) n.error("the input must be floating point");
  Shape normalized(n.type(x).shape.begin() + axis, n.type(x).shape.end());
  int scale = n.in(1);
  int bias = n.has_input(2) ? n.in(2) : -1;
  auto fits = [&](int p) { return p < 0 || (n.type(p).shape == normalized && n.dtype(p) == t); };
  if (!n.wants_output(1) && !n.wants_output(2) && fits(scale) && fits(bias)) {
    std::vector<int> in = {x, scale};
    if (bias >= 0) in.push_back(bias);
    return n.set_output(0, n.add("layer_norm", in, Attrs{{"dims", r - axis}, {"eps", eps}}));
  }
  // Broadcast scale or bias, or the Mean and InvStdDev outputs: composed in the stash type,
  // so that the outputs share the reductions.
  DType stash = n.attr_int("stash_type", 1) == 1 && t != DType::F64 ? DType::F32 : t;
  int xs = n.cast(x, stash);
  std::vector<int64_t> axes = axes_from(axis, r);
  int mean = reduce(n, "mean", xs, axes, true);
  int d = n.add("sub", {xs, mean});
  int var = reduce(n, "mean", n.add("mul", {d, d}), axes, true);
  int inv = n.add("rsqrt", {n.add("add", {var, n.scalar(eps, stash)})});
  int y = n.add("mul", {n.add("mul", {d, inv}), scale});
  if (bias >= 0) y = n.add("add", {y, bias});
  n.set_output(0, n.cast(y, t));
  n.set_output(1, mean);
  n.set_output(2, inv);
}

namespace {

// A per-channel parameter [C] reshaped to broadcast against x [N, C, D1, ...].
int per_channel(OnnxNode& n, int p, int64_t rank) {
  Shape s = n.type(p).shape;
  if (s.size() != 1) n.error("per-channel parameters must be 1-D, got {}", shape_str(s));
  for (int64_t i = 2; i < rank; ++i) s.push_back(1);
  return reshape_to(n, p, s);
}

}  // namespace

void map_batch_norm(OnnxNode& n) {
  int x = n.in(0);
  // training_mode=1 (opset 14 on): the batch's statistics normalize, and the running ones are
  // updated with momentum (ONNX's reference: population variance for both).
  bool training = n.attr_int("training_mode", 0) != 0;
  // Opsets 1 to 6: is_test=0 (the default) normalizes with the batch's statistics.
  if (n.opset() < 7 && n.attr_int("is_test", 0) == 0)
    unsupported("is_test=0 (training mode; opset {} needs is_test=1 for inference)", n.opset());
  if (n.opset() < 9 && n.attr_int("spatial", 1) == 0) unsupported("spatial=0");
  for (int i = training ? 3 : 1; i < n.num_outputs(); ++i)
    if (n.wants_output(i))
      unsupported("{}", training ? "outputs beyond the running mean and variance"
                                 : "the training outputs (running mean and variance)");
  double momentum = n.attr_float("momentum", 0.9);  // updates the running statistics
  int64_t r = n.rank(x);
  if (r < 2) n.error("the input must have at least 2 dims, got {}", shape_str(n.type(x).shape));
  DType t = n.dtype(x);
  double eps = n.attr_float("epsilon", 1e-5);
  int scale = per_channel(n, n.in(1), r), bias = per_channel(n, n.in(2), r);
  int mean = per_channel(n, n.in(3), r), var = per_channel(n, n.in(4), r);
  if (training) {
    std::vector<int64_t> axes = axes_from(2, r);
    axes.insert(axes.begin(), 0);
    int batch_mean = reduce(n, "mean", x, axes, false);
    int batch_var =
        n.add("var", {x}, Attrs{{"axes", axes}, {"keepdim", false}, {"correction", 0.0}});
    // running = running * momentum + batch * (1 - momentum), in the statistics' dtype.
    auto update = [&](int running, int batch) {
      DType rt = n.dtype(running);
      int kept = n.add("mul", {running, n.scalar(momentum, rt)});
      int added = n.add("mul", {n.cast(batch, rt), n.scalar(1 - momentum, rt)});
      return n.add("add", {kept, added});
    };
    if (n.wants_output(1)) n.set_output(1, update(n.in(3), batch_mean));
    if (n.wants_output(2)) n.set_output(2, update(n.in(4), batch_var));
    mean = per_channel(n, batch_mean, r);
    var = per_channel(n, batch_var, r);
  }
  // scale / sqrt(var + eps) is folded when the parameters are constants (the usual case).
  int inv = n.add("rsqrt", {n.add("add", {var, n.scalar(eps, n.dtype(var))})});
  int factor = n.add("mul", {scale, inv});
  int y = n.add("add", {n.add("mul", {n.add("sub", {x, mean}), factor}), bias});
  n.set_output(0, n.cast(y, t));
}

void map_instance_norm(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r < 3) n.error("the input must have at least 3 dims, got {}", shape_str(n.type(x).shape));
  double eps = n.attr_float("epsilon", 1e-5);
  std::vector<int64_t> axes = axes_from(2, r);
  int mean = reduce(n, "mean", x, axes, true);
  int var = n.add("var", {x}, Attrs{{"axes", axes}, {"keepdim", true}, {"correction", 0.0}});
  int inv = n.add("rsqrt", {n.add("add", {var, n.scalar(eps, n.dtype(var))})});
  int y = n.add("mul", {n.add("sub", {x, mean}), inv});
  y = n.add("add", {n.add("mul", {y, per_channel(n, n.in(1), r)}), per_channel(n, n.in(2), r)});
  n.set_output(0, n.cast(y, n.dtype(x)));
}

void map_mean_variance_norm(OnnxNode& n) {
  // (x - mean) / (sqrt(E[x^2] - E[x]^2) + 1e-9), ONNX's function body.
  int x = n.in(0);
  std::vector<int64_t> axes;
  for (int64_t a : n.attr_ints("axes").value_or(std::vector<int64_t>{0, 2, 3}))
    axes.push_back(n.axis(a, n.rank(x)));
  std::sort(axes.begin(), axes.end());
  int mean = reduce(n, "mean", x, axes, true);
  int mean_sq = reduce(n, "mean", n.add("mul", {x, x}), axes, true);
  int var = n.add("sub", {mean_sq, n.add("mul", {mean, mean})});  // as the function body
  int den = n.add("add", {n.add("sqrt", {var}), n.scalar(1e-9, n.dtype(var))});
  n.set_output(0, n.cast(n.add("div", {n.add("sub", {x, mean}), den}), n.dtype(x)));
}

void map_global_pool(OnnxNode& n) {
  int x = n.in(0);
  int64_t r = n.rank(x);
  if (r < 3) n.error("the input must have at least 3 dims, got {}", shape_str(n.type(x).shape));
  bool avg = n.op_type() == "GlobalAveragePool";
  n.set_output(0, n.cast(reduce(n, avg ? "mean" : "max", x, axes_from(2, r), true), n.dtype(x)));
}

void map_lrn(OnnxNode& n) {
  int x = n.in(0);
  DType t = n.dtype(x);
  if (!is_floating(t)) n.error("the input must be floating point, got {}", dtype_name(t));
  if (n.rank(x) < 3)
    n.error("the input must be [N, C, D1, ...], got {}", shape_str(n.type(x).shape));
  int64_t size = n.attr_int("size", 0);
  if (size < 1) n.error("size must be at least 1, got {}", size);
  double alpha = n.attr_float("alpha", 1e-4), beta = n.attr_float("beta", 0.75),
         bias = n.attr_float("bias", 1.0);
  std::vector<int64_t> s = n.static_shape(x, "the input");
  // Channels beyond the first and last add nothing: the window is cut at C - 1 on each side.
  int64_t channels = s[1], before = std::min((size - 1) / 2, std::max<int64_t>(channels - 1, 0)),
          after = std::min(size - 1 - (size - 1) / 2, std::max<int64_t>(channels - 1, 0));
  // square_sum[c] sums x^2 over channels [c - before, c + after] within [0, C): the squares
  // padded with zeros on both sides, then `size` shifted slices added.
  int sq = n.add("mul", {x, x});
  std::vector<int> parts;
  for (int64_t k : {before, after}) {
    s[1] = k;
    if (k > 0)
      parts.push_back(n.add("full", {}, Attrs{{"shape", s}, {"value", 0.0}, {"dtype", t}}));
  }
  if (!parts.empty()) {
    parts.insert(before > 0 ? parts.begin() + 1 : parts.begin(), sq);
    sq = n.add("concat", parts, Attrs{{"dim", int64_t{1}}});
  }
  int sum = -1;
  for (int64_t k = 0; k < before + 1 + after; ++k) {
    int part =
        n.add("slice", {sq}, Attrs{{"dim", int64_t{1}}, {"start", k}, {"end", k + channels}});
    sum = sum < 0 ? part : n.add("add", {sum, part});
  }
  int scaled = n.add("add", {n.scalar(bias, t),
                             n.add("mul", {sum, n.scalar(alpha / static_cast<double>(size), t)})});
  n.set_output(0, n.add("div", {x, n.add("pow", {scaled, n.scalar(beta, t)})}));
}

}  // namespace coil::onnxfe
