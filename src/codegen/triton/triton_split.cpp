#include "codegen/triton/triton_split.h"

#include "support/check.h"
#include "sym/analyzer.h"
#include "sym/size_hints.h"

namespace coil {

std::optional<SplitShape> choose_split(int64_t xnumel, int64_t r0_numel, ReductionHint hint) {
  bool inner = hint == ReductionHint::Inner;
  if (inner && (xnumel >= kSplitMaxOutputsInner || r0_numel <= kSplitMinRowInner))
    return std::nullopt;
  if (!inner && (xnumel >= kSplitMaxOutputsOuter || r0_numel < kSplitMinRowOuter))
    return std::nullopt;
  int64_t target = inner ? kSplitChunkInner : kSplitChunkOuter;
  int64_t splits = std::min(kMaxSplits, (r0_numel + target - 1) / target);
  if (splits < 2) return std::nullopt;
  for (int64_t s = splits; s >= std::max<int64_t>(2, splits / 2); --s) {
    if (r0_numel % s == 0) {
      splits = s;
      break;
    }
  }
  SplitShape shape;
  shape.chunk = (r0_numel + splits - 1) / splits;
  shape.splits = (r0_numel + shape.chunk - 1) / shape.chunk;  // no empty chunk
  shape.outputs_contiguous = !inner;
  shape.interleaved = !inner;
  return shape;
}

namespace {

bool splittable(ReductionType t) {
  return t == ReductionType::sum || t == ReductionType::prod || t == ReductionType::max ||
         t == ReductionType::min;
}

/// Per op: depends on r0_index (a reduction's result does not).
std::vector<bool> row_dependent(const LoopBody& body) {
  std::vector<bool> rdep(body.ops().size(), false);
  for (size_t i = 0; i < body.ops().size(); ++i) {
    const BodyOp& op = body.op(static_cast<int>(i));
    if (op.op == LoopOp::reduction) continue;
    bool d = op.index.defined() && sym::depends_on(op.index, triton_rindex());
    for (int a : op.args)
      if (a >= 0 && rdep[static_cast<size_t>(a)]) d = true;
    rdep[i] = d;
  }
  return rdep;
}

/// Copies the ops of `src` for which `keep` holds into `dst` (operands remapped), with index
/// expressions rewritten by `map` and simplified; returns src position -> dst position.
template <typename Keep>
std::vector<int> copy_ops(const LoopBody& src, LoopBody& dst, const std::vector<bool>& src_reused,
                          std::vector<bool>& dst_reused, const std::map<sym::Expr, sym::Expr>& map,
                          const sym::Analyzer& a, Keep keep) {
  std::vector<int> remap(src.ops().size(), -1);
  for (size_t i = 0; i < src.ops().size(); ++i) {
    if (!keep(i)) continue;
    BodyOp op = src.op(static_cast<int>(i));
    for (int& arg : op.args) {
      if (arg < 0) continue;
      COIL_ASSERT(remap[static_cast<size_t>(arg)] >= 0, "split reduction: operand {} dropped", arg);
      arg = remap[static_cast<size_t>(arg)];
    }
    if (op.index.defined() && !map.empty()) op.index = a.simplify(sym::substitute(op.index, map));
    size_t before = dst.ops().size();
    remap[i] = dst.append(op);
    if (dst.ops().size() > before) dst_reused.push_back(src_reused[i]);
  }
  return remap;
}

/// Drops ops that no store depends on.
void remove_dead_ops(TritonKernelPlan& k) {
  const LoopBody& b = k.body;
  std::vector<bool> live(b.ops().size(), false);
  for (size_t i = b.ops().size(); i-- > 0;) {
    const BodyOp& op = b.op(static_cast<int>(i));
    if (op.op == LoopOp::store) live[i] = true;
    if (!live[i]) continue;
    for (int a : op.args)
      if (a >= 0) live[static_cast<size_t>(a)] = true;
  }
  LoopBody out;
  std::vector<bool> reused;
  copy_ops(b, out, k.reused, reused, {}, sym::Analyzer(), [&](size_t i) { return live[i]; });
  k.body = std::move(out);
  k.reused = std::move(reused);
  k.op_nest.assign(k.body.ops().size(), 0);
}

TritonKernelPlan empty_like(const TritonKernelPlan& k) {
  TritonKernelPlan s;
  s.origins = k.origins;
  s.provenance = k.provenance;
  s.int64_index = k.int64_index;
  return s;
}

}  // namespace

std::optional<std::pair<TritonKernelPlan, TritonKernelPlan>> split_reduction(
    const TritonKernelPlan& k, std::vector<TritonBuffer>& buffers) {
  if (k.kind != TritonKernelKind::Looped) return std::nullopt;
  const LoopBody& body = k.body;
  std::vector<bool> rdep = row_dependent(body);
  std::vector<int> reductions;
  for (size_t i = 0; i < body.ops().size(); ++i) {
    const BodyOp& op = body.op(static_cast<int>(i));
    if (op.op == LoopOp::store && rdep[i]) return std::nullopt;
    if (op.op != LoopOp::reduction) continue;
    if (!splittable(op.reduction)) return std::nullopt;
    reductions.push_back(static_cast<int>(i));
  }
  if (reductions.empty()) return std::nullopt;
  // The ops computing the reduced values; none may need another reduction's result.
  std::vector<bool> cone(body.ops().size(), false);
  for (int r : reductions) cone[static_cast<size_t>(r)] = true;
  for (size_t i = body.ops().size(); i-- > 0;) {
    if (!cone[i]) continue;
    for (int a : body.op(static_cast<int>(i)).args) {
      if (a < 0) continue;
      if (body.op(a).op == LoopOp::reduction) return std::nullopt;
      cone[static_cast<size_t>(a)] = true;
    }
  }
  const bool symbolic_row = is_symbolic(k.r0_numel_expr);
  auto shape = choose_split(k.xnumel, symbolic_row ? kSymbolicSplitRow : k.r0_numel, k.hint);
  if (!shape) return std::nullopt;
  const int64_t X = k.xnumel, S = shape->splits, C = shape->chunk;
  // The chunk length: C, or for a symbolic row ceil(row / S) (its value at the hints in
  // r0_numel, the expression in r0_numel_expr).
  const sym::Expr chunk =
      symbolic_row ? sym::floordiv(k.r0_numel_expr + sym::Expr(S - 1), sym::Expr(S)) : sym::Expr(C);
  const int64_t chunk_value = symbolic_row ? (k.r0_numel + S - 1) / S : C;
  const sym::Expr& xi = triton_xindex();
  const sym::Expr& ri = triton_rindex();

  // Partial buffers, one per reduction.
  std::vector<int> partials;
  int first_partial = 0;
  for (const TritonBuffer& b : buffers) first_partial += b.name.rfind("part", 0) == 0;
  for (size_t j = 0; j < reductions.size(); ++j) {
    TritonBuffer b;
    b.name = fmt::format("part{}", first_partial + static_cast<int>(j));
    b.dtype = body.op(reductions[j]).dtype;
    b.sizes = shape->outputs_contiguous ? std::vector<int64_t>{S, X} : std::vector<int64_t>{X, S};
    b.strides = {b.sizes[1], 1};
    partials.push_back(static_cast<int>(buffers.size()));
    buffers.push_back(std::move(b));
  }

  // Stage 1: lane x' of X*S covers output x, chunk s; partial element x' (either layout).
  TritonKernelPlan s1 = empty_like(k);
  s1.xnumel = X * S;  // the output count is constant (triton_plan.cpp)
  s1.r0_numel = chunk_value;
  s1.xnumel_expr = s1.xnumel;
  s1.r0_numel_expr = chunk;
  s1.hint = k.hint;
  s1.kind = !symbolic_row && use_persistent_reduction(C, k.hint) ? TritonKernelKind::Persistent
                                                                 : TritonKernelKind::Looped;
  sym::Expr x_of = shape->outputs_contiguous ? sym::mod(xi, X) : sym::floordiv(xi, S);
  sym::Expr s_of = shape->outputs_contiguous ? sym::floordiv(xi, X) : sym::mod(xi, S);
  sym::Analyzer a1;
  sym::bind_size_hints(a1, /*exact=*/false);  // a size symbol is >= 1, nothing more
  a1.bind(xi, 0, X * S - 1);
  if (symbolic_row)
    a1.bind(ri, 0, sym::Range::kPosInf);
  else
    a1.bind(ri, 0, C - 1);
  sym::Expr row_index = a1.simplify(shape->interleaved ? ri * S + s_of : s_of * chunk + ri);
  if (symbolic_row || S * C != k.r0_numel) {
    s1.row_index = row_index;
    s1.row_numel = k.r0_numel;
    s1.row_numel_expr = k.r0_numel_expr;
  }
  std::map<sym::Expr, sym::Expr> map1{{xi, x_of}, {ri, row_index}};
  std::vector<int> at =
      copy_ops(body, s1.body, k.reused, s1.reused, map1, a1, [&](size_t i) { return cone[i]; });
  for (size_t j = 0; j < reductions.size(); ++j) {
    s1.body.store(partials[j], xi, at[static_cast<size_t>(reductions[j])]);
    s1.reused.push_back(false);
  }
  s1.op_nest.assign(s1.body.ops().size(), 0);

  // Stage 2: reduce each output's S partials, then the original epilogue.
  TritonKernelPlan s2 = empty_like(k);
  s2.xnumel = X;
  s2.r0_numel = S;
  s2.xnumel_expr = s2.xnumel;
  s2.r0_numel_expr = s2.r0_numel;
  s2.hint = shape->outputs_contiguous ? ReductionHint::Outer : ReductionHint::Inner;
  s2.kind = use_persistent_reduction(S, s2.hint) ? TritonKernelKind::Persistent
                                                 : TritonKernelKind::Looped;
  sym::Expr partial_index = shape->outputs_contiguous ? ri * X + xi : xi * S + ri;
  std::vector<int> remap(body.ops().size(), -1);
  for (size_t i = 0; i < body.ops().size(); ++i) {
    BodyOp op = body.op(static_cast<int>(i));
    if (rdep[i]) continue;
    if (op.op == LoopOp::reduction) {
      size_t j =
          static_cast<size_t>(std::find(reductions.begin(), reductions.end(), static_cast<int>(i)) -
                              reductions.begin());
      int load = s2.body.load(partials[j], partial_index, op.dtype);
      s2.reused.resize(s2.body.ops().size(), false);
      remap[i] = s2.body.reduction(op.reduction, load, op.dtype);
      s2.reused.resize(s2.body.ops().size(), false);
      continue;
    }
    bool available = true;
    for (int& a : op.args) {
      if (a < 0) continue;
      available = available && remap[static_cast<size_t>(a)] >= 0;
      a = remap[static_cast<size_t>(a)];
    }
    if (!available) continue;  // only fed the reductions
    remap[i] = s2.body.append(op);
    s2.reused.resize(s2.body.ops().size(), k.reused[i]);
  }
  remove_dead_ops(s2);
  return std::make_pair(std::move(s1), std::move(s2));
}

}  // namespace coil
