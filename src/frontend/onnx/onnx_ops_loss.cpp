// The losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (log_softmax, then the same).
// The picked log-probability input[n, target[n, d...], d...] is a one-hot selection over the
// class dim (where(target == iota, input, 0) summed over it), so a target of an ignored entry
// may be any value, in range or not. The weights follow ONNX's reference: with `weight` or
// `ignore_index`, each entry has a weight (weight[target], 0 where target == ignore_index), and
// the mean divides by the sum of those weights rather than by the count of entries.
#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

// The loss of log-probabilities `logp` [N, C, d...] for `target` [N, d...], reduced as ONNX's
// `reduction` attribute says.
int nll_loss(OnnxNode& n, int logp, int target, int weight) {
  std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    n.error("reduction '{}' is not one of none, sum, mean", printable(reduction));
  DType t = n.dtype(logp);
  if (!is_floating(t)) n.error("the scores must be floating point, got {}", dtype_name(t));
  int64_t r = n.rank(logp);
  if (r < 2) n.error("the scores must be [N, C, ...], got {}", shape_str(n.type(logp).shape));
  DType tt = n.dtype(target);
  if (tt != DType::I32 && tt != DType::I64)
    n.error("the target must be int32 or int64, got {}", dtype_name(tt));
  Shape expect = n.type(logp).shape;
  expect.erase(expect.begin() + 1);
  if (n.type(target).shape != expect)
    n.error("the target is {}, expected {} for scores {}", shape_str(n.type(target).shape),
            shape_str(expect), shape_str(n.type(logp).shape));
  int64_t classes = n.static_shape(logp, "the scores")[1];
  int tgt = n.cast(target, DType::I64);
  int hit = n.add(
      "eq", {n.add("unsqueeze", {tgt}, Attrs{{"dim", int64_t{1}}}), iota_along(n, classes, 1, r)});
  int zero = n.scalar(0, t);
  auto pick = [&](int v) { return reduce(n, "sum", n.add("where", {hit, v, zero}), {1}, false); };
  int loss = n.add("neg", {pick(logp)});
  int w = -1;  // the weight of each entry, when there are weights
  if (weight >= 0) {
    if (n.type(weight).shape != make_shape({classes}))
      n.error("the weight must be [{}], got {}", classes, shape_str(n.type(weight).shape));
    std::vector<int64_t> bshape(static_cast<size_t>(r), 1);
    bshape[1] = classes;
    w = pick(n.add("reshape", {n.cast(weight, t)}, Attrs{{"shape", bshape}}));
  }
  if (n.has_attr("ignore_index")) {
    int keep = n.add(
        "ne", {tgt, n.scalar(static_cast<double>(n.attr_int("ignore_index", 0)), DType::I64)});
    w = n.add("where", {keep, w >= 0 ? w : n.scalar(1, t), zero});
  }
  if (w >= 0) loss = n.add("mul", {loss, w});
  if (reduction == "none") return loss;
  std::vector<int64_t> all;
  for (int64_t i = 0; i + 1 < r; ++i) all.push_back(i);
  int total = reduce(n, "sum", loss, all, false);
  if (reduction == "sum") return total;
  if (w < 0) return reduce(n, "mean", loss, all, false);
  // ONNX's reference divides by the sum of the weights even when it is 0 (a NaN or inf). w has
  // the loss's shape: a where with the full-shaped target mask, or a pick over the classes.
  return n.add("div", {total, reduce(n, "sum", w, all, false)});
}

}  // namespace

void map_nll_loss(OnnxNode& n) {
  n.set_output(0, nll_loss(n, n.in(0), n.in(1), n.has_input(2) ? n.in(2) : -1));
}

void map_softmax_cross_entropy(OnnxNode& n) {
  int x = n.in(0);
  if (n.rank(x) < 2) n.error("the scores must be [N, C, ...], got {}", shape_str(n.type(x).shape));
  int logp = n.add("log_softmax", {x}, Attrs{{"axis", int64_t{1}}});
  n.set_output(0, nll_loss(n, logp, n.in(1), n.has_input(2) ? n.in(2) : -1));
  if (n.wants_output(1)) n.set_output(1, logp);
}

}  // namespace coil::onnxfe
