#include "codegen/triton/triton_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "codegen/triton/triton_attention_backward.h"
#include "codegen/triton/triton_attention_decode.h"
#include "codegen/triton/triton_printer.h"
#include "codegen/triton/triton_split.h"
#include "ir/loop_extents.h"
#include "support/check.h"
#include "support/log.h"
#include "sym/size_hints.h"

namespace coil {

const sym::Expr& triton_xindex() {
  static const sym::Expr e = sym::make_symbol("xindex");
  return e;
}
const sym::Expr& triton_yindex() {
  static const sym::Expr e = sym::make_symbol("yindex");
  return e;
}
const sym::Expr& triton_rindex() {
  static const sym::Expr e = sym::make_symbol("r0_index");
  return e;
}

std::string_view reduction_hint_name(ReductionHint h) {
  switch (h) {
    case ReductionHint::Inner:
      return "INNER";
    case ReductionHint::Outer:
      return "OUTER";
    case ReductionHint::Default:
      return "DEFAULT";
  }
  COIL_UNREACHABLE("bad reduction hint");
}

int64_t next_power_of_2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

bool triton_needs_mask(const sym::Expr& numel, int64_t max_block) {
  // The runtime clamps each block to the size hint too (Inductor's triton_config), so a static
  // numel of 512 is covered exactly by any block it may pick.
  int64_t block = max_block;
  if (auto c = numel.as_const()) {
    if (*c == 0) return true;  // every lane is outside
    block = std::min(max_block, next_power_of_2(*c));
  }
  return !sym::Analyzer().statically_known_multiple_of(numel, block);
}

bool use_persistent_reduction(int64_t r0_numel, ReductionHint hint) {
  return r0_numel <= (hint == ReductionHint::Outer ? kPersistentMaxOuter : kPersistentMaxInner);
}

namespace {
bool has_min_max(const sym::Expr& e) {
  if (e.kind() == sym::ExprKind::Min || e.kind() == sym::ExprKind::Max) return true;
  for (const sym::Expr& o : e.operands())
    if (has_min_max(o)) return true;
  return false;
}
}  // namespace

std::string triton_size_text(const sym::Expr& e, int64_t value) {
  if (!is_symbolic(e)) return std::to_string(value);
  // The wrapper is host Python: triton_index spells min/max as tl.minimum/tl.maximum, which
  // only kernels can call.
  COIL_SUPPORTED_CHECK(!has_min_max(e),
                       "size-generic Triton module: the size {} clamps (min/max); bind the "
                       "sizes (CompileOptions::sizes)",
                       sym::to_string(e));
  sym::Analyzer a;
  sym::bind_size_hints(a, /*exact=*/false);
  return triton_index(e, a);
}

int64_t TritonBuffer::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string TritonKernelPlan::prefix() const {
  switch (kind) {
    case TritonKernelKind::Pointwise:
    case TritonKernelKind::Tiled:
      return "triton_poi";
    case TritonKernelKind::Persistent:
      return "triton_per";
    case TritonKernelKind::Looped:
      return "triton_red";
    case TritonKernelKind::Template:
      return "triton_tem";
  }
  COIL_UNREACHABLE("bad kernel kind");
}

namespace {

/// `a`'s ops, then `b`'s (loads of what `a` already loads are shared by the body's CSE): one
/// kernel's body naming what two computations load and store.
LoopBody merged_bodies(const LoopBody& a, const LoopBody& b) {
  LoopBody out = a;
  std::vector<int> remap;
  for (BodyOp op : b.ops()) {
    for (int& x : op.args)
      if (x >= 0) x = remap[static_cast<size_t>(x)];
    remap.push_back(out.append(std::move(op)));
  }
  return out;
}

/// Row-major decomposition of `flat` over `sizes` (their values at the hints: `values`): the
/// value of each loop variable. A symbolic size is never 0 or 1 in a size-generic module (the
/// wrapper's guard), so the tests of 0 and 1 read the values.
std::vector<sym::Expr> decompose(const sym::Expr& flat, const std::vector<sym::Expr>& sizes,
                                 const std::vector<int64_t>& values) {
  std::vector<sym::Expr> out(sizes.size(), sym::Expr(0));
  // An empty range: no index is ever in range (the masks are all false), and mod by 0 is
  // undefined (a prod over a dim of size 0: fuzz case seed 1 index 79 on CUDA).
  if (std::find(values.begin(), values.end(), 0) != values.end()) return out;
  sym::Expr stride = 1;
  size_t outermost = 0;
  while (outermost < values.size() && values[outermost] == 1) ++outermost;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (values[i] != 1) {
      sym::Expr q =
          stride.is_const() && stride.const_value() == 1 ? flat : sym::floordiv(flat, stride);
      out[i] = i == outermost ? q : sym::mod(q, sizes[i]);
    }
    stride = stride * sizes[i];
  }
  return out;
}

sym::Expr product_expr(const std::vector<sym::Expr>& v, size_t begin = 0, size_t end = SIZE_MAX) {
  sym::Expr p = 1;
  for (size_t i = begin; i < std::min(end, v.size()); ++i) p = p * v[i];
  return p;
}

bool any_symbolic(const std::vector<sym::Expr>& v) {
  return std::any_of(v.begin(), v.end(), [](const sym::Expr& e) { return is_symbolic(e); });
}

/// Binds an index symbol to [0, numel) in `a`: the number where the numel is constant, else
/// the expression (a size-generic kernel's bounds must hold at every size, not the hint's).
void bind_index(sym::Analyzer& a, const sym::Expr& index, const sym::Expr& numel, int64_t value) {
  if (is_symbolic(numel))
    a.bind_loop_var(index, numel);
  else
    a.bind(index, 0, std::max<int64_t>(value - 1, 0));
}

/// A load that misses some loop variable of extent > 1 reads each element several times.
bool reads_repeatedly(const sym::Expr& index, const std::vector<int64_t>& ranges,
                      const std::vector<int64_t>& red) {
  for (size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i] > 1 && !sym::depends_on(index, loop_var(static_cast<int>(i)))) return true;
  for (size_t i = 0; i < red.size(); ++i)
    if (red[i] > 1 && !sym::depends_on(index, reduction_var(static_cast<int>(i)))) return true;
  return false;
}

/// The loop along which `index` is contiguous (stride 1), or -1.
int contiguous_loop(const sym::Expr& index, const std::vector<int64_t>& ranges,
                    const sym::Analyzer& a) {
  for (size_t i = ranges.size(); i-- > 0;) {
    if (ranges[i] == 1) continue;
    auto s = a.stride(index, loop_var(static_cast<int>(i)));
    if (s && s->as_const() == 1) return static_cast<int>(i);
  }
  return -1;
}

/// Inductor's 2-D tiling (simd.py candidate_tilings) for a pointwise nest: when the store is
/// contiguous along loop j and some load is contiguous along an earlier loop k while striding
/// along j (a transposed read), tile as y = loops [0, k], x = loops (k, n): both the read and the
/// write then walk memory contiguously inside a tile. Returns k + 1 (the number of y loops), or 0.
size_t choose_tiling(const std::vector<BodyOp>& accesses, const std::vector<int64_t>& ranges) {
  if (ranges.size() < 2) return 0;
  sym::Analyzer a = loop_analyzer(ranges, {});
  int store_loop = -1;
  for (const BodyOp& op : accesses) {
    if (op.op != LoopOp::store) continue;
    int j = contiguous_loop(op.index, ranges, a);
    if (j < 0 || (store_loop >= 0 && j != store_loop)) return 0;
    store_loop = j;
  }
  if (store_loop < 0) return 0;
  for (const BodyOp& op : accesses) {
    if (op.op != LoopOp::load) continue;
    int k = contiguous_loop(op.index, ranges, a);
    if (k < 0 || k >= store_loop) continue;
    auto along_store = a.stride(op.index, loop_var(store_loop));
    if (along_store && (along_store->as_const() == 0 || along_store->as_const() == 1)) continue;
    auto split = static_cast<size_t>(k) + 1;
    int64_t y = product(ranges, 0, split), x = product(ranges, split);
    if (y < kTileMinExtent || x < kTileMinExtent || y > kTileMaxY) continue;
    return static_cast<size_t>(k) + 1;
  }
  return 0;
}

/// The result of reducing no element, as a constant op: the identity of sum and prod; for
/// max/min (an error in torch) the identity too, as the CPU kernels produce; 0 for argmax/argmin.
BodyOp empty_reduction_value(ReductionType t, DType dtype) {
  BodyOp c;
  c.op = LoopOp::constant;
  c.dtype = dtype;
  const bool fp = is_floating(dtype);
  const bool wide = dtype == DType::I64;
  switch (t) {
    case ReductionType::sum:
    case ReductionType::argmax:
    case ReductionType::argmin:
      break;
    case ReductionType::prod:
      c.fvalue = 1;
      c.ivalue = 1;
      break;
    case ReductionType::max:
      c.fvalue = -std::numeric_limits<double>::infinity();
      c.ivalue = wide ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min();
      break;
    case ReductionType::min:
      c.fvalue = std::numeric_limits<double>::infinity();
      c.ivalue = wide ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max();
      break;
  }
  if (fp) c.ivalue = 0;
  if (!fp) c.fvalue = 0;
  return c;
}

/// Builds Triton kernels from kernel groups (see triton_plan.h).
class Planner {
 public:
  Planner(const IrProgram& p, const Schedule& s) : p_(p), s_(s) {}

  TritonProgramPlan run() {
    for (const Buffer& b : p_.buffers) {
      TritonBuffer tb;
      tb.dtype = b.layout.dtype;
      tb.sizes = static_extents(b.layout.sizes);
      tb.strides = static_extents(b.layout.strides);
      tb.size_exprs = b.layout.sizes;
      tb.stride_exprs = b.layout.strides;
      tb.kind = b.kind;
      tb.external_index = b.external_index;
      tb.name = b.kind == BufferKind::Input      ? fmt::format("arg{}_1", b.external_index)
                : b.kind == BufferKind::Constant ? fmt::format("const{}", b.external_index)
                                                 : b.name;
      out_.buffers.push_back(std::move(tb));
    }
    for (const KernelGroup& g : s_.kernels) plan_group(g);
    elide_output_copies();
    mark_in_memory();
    return std::move(out_);
  }

 private:
  const ComputedBuffer& comp(int c) const { return p_.computations[static_cast<size_t>(c)]; }

  void plan_group(const KernelGroup& g) {
    const ComputedBuffer& head = comp(g.nests[0].computations[0]);
    size_t first = 0;
    std::vector<const LoopNest*> nests;
    for (size_t i = head.is_opaque() ? 1 : 0; i < g.nests.size(); ++i) {
      // A nest over no element writes an empty buffer: nothing to launch.
      if (product(static_extents(comp(g.nests[i].computations.back()).ranges)) > 0)
        nests.push_back(&g.nests[i]);
    }
    if (head.is_opaque()) {
      if (head.attention) {
        // nests[1] of an attention group is the forward's logsumexp or the gradient of v of a
        // gradient of k: the same kernel stores it.
        plan_attention(g.nests[0].computations[0],
                       g.nests.size() == 2 ? g.nests[1].computations[0] : -1);
        return;
      } else if (plan_template(g, nests)) {
        return;
      } else {
        // A library call; its fused epilogue (nests[1]) follows as a kernel.
        out_.steps.push_back({-1, g.nests[0].computations[0]});
      }
      first = 1;
    }
    if (nests.empty()) return;
    std::string why;
    if (first == 0) {
      if (auto k = build(nests, g.outer_depth, &why)) return add_kernel(std::move(*k));
      COIL_LOG(fusion, "triton: kernel group of {} nests split into one kernel per nest: {}",
               nests.size(), why);
    }
    for (const LoopNest* n : nests) {
      int depth = static_cast<int>(comp(n->computations.back()).ranges.size());
      auto k = build({n}, depth, &why);
      COIL_ASSERT(k.has_value(), "a single loop nest must make a Triton kernel: {}", why);
      add_kernel(std::move(*k));
    }
  }

  /// An attention computation as a flash-attention triton_tem kernel: q, k, v (and the mask)
  /// read through the spec's strides, the result stored contiguously; attention_lse and
  /// attention_grad (a backward `kernel`) as the backward templates
  /// (triton_attention_backward.h), which also read out, grad_out and lse contiguously. Its body
  /// (loads of the operands, the store of the result) makes the planner keep those buffers in
  /// memory.
  void plan_attention(int computation, int second_computation) {
    const ComputedBuffer& c = comp(computation);
    const AttentionSpec& a = *c.attention;
    TritonKernelPlan k;
    k.kind = TritonKernelKind::Template;
    k.attention = c.attention;
    k.attention_out = c.buffer;
    k.body = c.body;
    k.origins = c.origin_names;
    k.provenance = c.origins;
    if (second_computation >= 0) {
      // The logsumexp's (or dV's) body (its loads and its store) joins, so that the planner
      // keeps its buffer in memory as the forward's (dK's).
      const ComputedBuffer& l = comp(second_computation);
      (a.kernel == AttentionKernel::grad_k ? k.attention_grad_v_out : k.attention_lse_out) =
          l.buffer;
      k.body = merged_bodies(c.body, l.body);
      k.origins.insert(k.origins.end(), l.origin_names.begin(), l.origin_names.end());
      k.provenance.insert(k.provenance.end(), l.origins.begin(), l.origins.end());
    }
    k.op_nest.assign(k.body.ops().size(), 0);
    k.reused.assign(k.body.ops().size(), false);
    int64_t biggest = 0;
    for (int b : {a.q, a.k, a.v, a.mask, a.out, a.grad_out, a.lse, c.buffer, k.attention_lse_out,
                  k.attention_grad_v_out})
      if (b >= 0) {
        biggest = std::max(biggest, index_extent(b));
        int32_guard(b);
      }
    k.int64_index = biggest > INT32_MAX;
    // Few query rows of grouped-query heads: a program per kv head, its group's heads packed
    // into the rows of one query tile (triton_attention_decode.h).
    k.attention_packed_heads = attention_packed_heads(k, out_.buffers);
    // A decoding shape (few query rows, long keys): the keys split over more programs, a
    // partial and a combine kernel (triton_attention_decode.h).
    if (auto split = split_attention_decode(k, out_.buffers)) {
      for (TritonKernelPlan* part : {&split->first, &split->second}) {
        out_.steps.push_back({static_cast<int>(out_.kernels.size()), computation});
        out_.kernels.push_back(std::move(*part));
      }
      return;
    }
    // A gradient of k: delta = rowsum(dO * out) computed once, by a kernel of its own before
    // it (triton_attention_backward.h).
    if (auto delta = attention_delta_kernels(k, out_.buffers)) {
      for (TritonKernelPlan* part : {&delta->first, &delta->second}) {
        out_.steps.push_back({static_cast<int>(out_.kernels.size()), computation});
        out_.kernels.push_back(std::move(*part));
      }
      return;
    }
    out_.steps.push_back({static_cast<int>(out_.kernels.size()), computation});
    out_.kernels.push_back(std::move(k));
  }

  /// A matmul template with a pointwise epilogue as a triton_tem kernel (plus the epilogue alone
  /// for the torch.mm choice). Needs: the product read only by the epilogue, at the element the
  /// epilogue computes (xindex = its flat [batch..., m, n] index), and a contiguous product.
  bool plan_template(const KernelGroup& g, const std::vector<const LoopNest*>& nests) {
    const int mm = g.nests[0].computations[0];
    const ComputedBuffer& head = comp(mm);
    if (head.kind != LoopKind::Template || !head.matmul || nests.empty()) return false;
    const MatmulSpec& ms = *head.matmul;
    if (ms.dtype != DType::F32 && ms.dtype != DType::BF16 && ms.dtype != DType::F16) return false;
    if (ms.m <= 0 || ms.n <= 0 || ms.k <= 0) return false;
    // Size-generic modules call the library for the product and run the epilogue as its own
    // kernel: the template's decorator and tiles print m, n and k as numbers.
    for (int b : {head.buffer, ms.a.buffer, ms.b.buffer})
      if (any_symbolic(out_.buffers[static_cast<size_t>(b)].size_exprs)) return false;
    const TritonBuffer& acc = out_.buffers[static_cast<size_t>(head.buffer)];
    std::vector<int64_t> sizes = ms.batch;
    sizes.insert(sizes.end(), {ms.m, ms.n});
    int64_t numel = product(sizes);
    if (acc.kind != BufferKind::Intermediate || acc.numel() != numel) return false;
    {
      // Contiguous: the flat output index addresses it.
      int64_t stride = 1;
      for (size_t i = acc.sizes.size(); i-- > 0;) {
        if (acc.sizes[i] != 1 && acc.strides[i] != stride) return false;
        stride *= acc.sizes[i];
      }
    }
    std::set<int> epilogue;
    for (const LoopNest* n : nests)
      for (int c : n->computations) epilogue.insert(c);
    for (size_t c = 0; c < p_.computations.size(); ++c) {
      if (static_cast<int>(c) == mm || epilogue.count(static_cast<int>(c))) continue;
      for (int b : p_.computations[c].reads())
        if (b == head.buffer) return false;
    }
    std::string why;
    auto k = build(nests, g.outer_depth, &why);
    if (!k || k->kind != TritonKernelKind::Pointwise || k->xnumel != numel) return false;
    bool reads_acc = false;
    for (const BodyOp& op : k->body.ops()) {
      if (op.op == LoopOp::store && op.buffer == head.buffer) return false;
      if (op.op != LoopOp::load || op.buffer != head.buffer) continue;
      if (!(op.index == triton_xindex())) return false;
      reads_acc = true;
    }
    if (!reads_acc) return false;
    TritonKernelPlan tem = *k;
    tem.kind = TritonKernelKind::Template;
    tem.matmul = head.matmul;
    tem.acc_buffer = head.buffer;
    for (const auto& o : head.origin_names) tem.origins.insert(tem.origins.begin(), o);
    tem.provenance.insert(tem.provenance.begin(), head.origins.begin(), head.origins.end());
    int64_t biggest = numel;
    for (int b : {ms.a.buffer, ms.b.buffer}) biggest = std::max(biggest, index_extent(b));
    tem.int64_index = k->int64_index || biggest > INT32_MAX;
    TritonStep st;
    st.kernel = static_cast<int>(out_.kernels.size());
    st.computation = mm;
    st.extern_out = copy_destination(*k, head.buffer);
    out_.kernels.push_back(std::move(tem));
    if (st.extern_out < 0) {
      st.fallback = st.kernel + 1;
      out_.kernels.push_back(std::move(*k));
    }
    out_.steps.push_back(st);
    return true;
  }

  /// The output a template's epilogue only copies the product into (`out[i] = product[i]` at
  /// the flat index: one store, nothing computed, the same dtype, both contiguous with as many
  /// elements), or -1. The torch.mm choice then writes that output itself.
  int copy_destination(const TritonKernelPlan& epi, int product) const {
    const LoopBody& b = epi.body;
    int store = -1;
    for (size_t i = 0; i < b.ops().size(); ++i) {
      const BodyOp& o = b.op(static_cast<int>(i));
      if (o.op == LoopOp::store) {
        if (store >= 0) return -1;  // one output only
        store = static_cast<int>(i);
      } else if (o.op != LoopOp::load || o.buffer != product) {
        return -1;  // anything but the product's load computes something
      }
    }
    if (store < 0) return -1;
    const BodyOp& st = b.op(store);
    const BodyOp& v = b.op(st.args[0]);
    const TritonBuffer& out = out_.buffers[static_cast<size_t>(st.buffer)];
    const TritonBuffer& prod = out_.buffers[static_cast<size_t>(product)];
    bool copy = v.op == LoopOp::load && v.args[0] < 0 && v.index == triton_xindex() &&
                st.index == triton_xindex() && out.dtype == prod.dtype &&
                out.numel() == prod.numel() && contiguous(out) && contiguous(prod) &&
                !any_symbolic(out.size_exprs);
    return copy ? st.buffer : -1;
  }

  /// What decides a kernel's index width for buffer `b`: its element count, or where that is
  /// symbolic its nominal one (each size 1024, triton_plan.h), so that the choice, which the
  /// text shows, does not depend on the sizes it was generated at: a symbolic buffer that may
  /// be large is indexed in int64, the others in int32 under a guard (int32_guard).
  int64_t index_extent(int b) const {
    const TritonBuffer& tb = out_.buffers[static_cast<size_t>(b)];
    sym::Expr n = product_expr(tb.size_exprs);
    return is_symbolic(n) ? sym::nominal_value(n) : tb.numel();
  }
  static int64_t index_extent(const sym::Expr& n, int64_t value) {
    return is_symbolic(n) ? sym::nominal_value(n) : value;
  }

  /// A size-generic module's int32 indexing must hold for buffer `b` at every size it runs.
  void int32_guard(int b) {
    const TritonBuffer& tb = out_.buffers[static_cast<size_t>(b)];
    int32_guard(product_expr(tb.size_exprs), tb.numel());
  }
  void int32_guard(const sym::Expr& n, int64_t value) {
    if (!is_symbolic(n) || index_extent(n, value) > INT32_MAX) return;
    for (const sym::Expr& g : out_.int32_guards)
      if (g == n) return;
    out_.int32_guards.push_back(n);
  }

  void add_kernel(TritonKernelPlan k) {
    // A split's chunk count is chosen from the output count, which must be constant; a
    // symbolic row is split as a long one (triton_split.h).
    if (auto split = is_symbolic(k.xnumel_expr) ? std::nullopt : split_reduction(k, out_.buffers)) {
      out_.steps.push_back({static_cast<int>(out_.kernels.size()), -1});
      out_.kernels.push_back(std::move(split->first));
      out_.steps.push_back({static_cast<int>(out_.kernels.size()), -1});
      out_.kernels.push_back(std::move(split->second));
      return;
    }
    out_.steps.push_back({static_cast<int>(out_.kernels.size()), -1});
    out_.kernels.push_back(std::move(k));
  }

  /// One Triton kernel for `nests` sharing their first `outer_depth` loops, or nullopt (with
  /// the reason) when they cannot share one.
  std::optional<TritonKernelPlan> build(const std::vector<const LoopNest*>& nests, int outer_depth,
                                        std::string* why) {
    struct NestLoops {
      std::vector<int64_t> ranges, red;
      std::vector<sym::Expr> eranges, ered;  // the same as expressions of the size symbols
    };
    std::vector<NestLoops> loops;
    for (const LoopNest* n : nests) {
      // The nest's loops are its last computation's (a reduction's, when a pointwise prologue
      // was merged into it, renamed to its variables).
      const ComputedBuffer& head = comp(n->computations.back());
      loops.push_back({static_extents(head.ranges), static_extents(head.reduction_ranges),
                       head.ranges, head.reduction_ranges});
    }
    // Pointwise nests of one element count are one flat pointwise kernel, each nest's loops
    // decomposed from xindex. The group's outer depth is the CPU schedule's (its parallel
    // loops); on the GPU the loops inside it would become a looped "reduction" over r0 with
    // one program per outer index (the q/k/v split after a QKV product, [96 x 16384], ran as
    // 96 programs on 132 SMs).
    bool flat = true;
    for (size_t i = 0; i < nests.size(); ++i)
      flat = flat && loops[i].red.empty() && !comp(nests[i]->computations.back()).is_reduction() &&
             product(loops[i].ranges) == product(loops[0].ranges) &&
             product_expr(loops[i].eranges) == product_expr(loops[0].eranges);
    // Several nests only when none reads what another writes: a flat index gives each element
    // its own program, so a value another nest stores elsewhere may not be written yet.
    for (size_t i = 0; i < nests.size() && flat && nests.size() > 1; ++i)
      for (size_t j = 0; j < nests.size() && flat; ++j)
        if (i != j)
          for (int ci : nests[i]->computations)
            for (int cj : nests[j]->computations)
              for (int b : comp(cj).reads()) flat = flat && b != comp(ci).buffer;
    const auto d = static_cast<size_t>(outer_depth);
    std::vector<int64_t> outer(loops[0].ranges.begin(), loops[0].ranges.begin() + outer_depth);
    std::vector<sym::Expr> eouter(loops[0].eranges.begin(), loops[0].eranges.begin() + outer_depth);
    TritonKernelPlan k;
    k.xnumel = product(outer);
    k.xnumel_expr = product_expr(eouter);
    k.num_nests = static_cast<int>(nests.size());
    std::vector<int64_t> row(nests.size());
    std::vector<sym::Expr> erow(nests.size(), sym::Expr(0));
    k.r0_numel = 0;  // a reduction over no element leaves its identity
    k.r0_numel_expr = 0;
    bool any_reduction = false;
    for (size_t i = 0; i < nests.size() && !flat; ++i) {
      const NestLoops& l = loops[i];
      bool reduces = comp(nests[i]->computations.back()).is_reduction();
      if (!std::equal(outer.begin(), outer.end(), l.ranges.begin()) ||
          !std::equal(eouter.begin(), eouter.end(), l.eranges.begin())) {
        *why = "nests differ in their outer loops";
        return std::nullopt;
      }
      if (reduces && l.ranges.size() != d) {
        *why = "a reduction nest has pointwise loops inside the shared ones";
        return std::nullopt;
      }
      // A reduction over no element is its identity, computed once per row (see below).
      const bool empty = reduces && product(l.red) == 0;
      row[i] = empty ? 1 : product(l.ranges, d) * product(l.red);
      erow[i] = empty ? sym::Expr(1) : product_expr(l.eranges, d) * product_expr(l.ered);
      if (row[i] > k.r0_numel) {
        k.r0_numel = row[i];
        k.r0_numel_expr = erow[i];
      }
      any_reduction = any_reduction || reduces;
    }
    if (k.r0_numel == 0 && !any_reduction) {
      k.r0_numel = 1;
      k.r0_numel_expr = 1;
    }
    if (flat) {
      k.xnumel = product(loops[0].ranges);
      k.xnumel_expr = product_expr(loops[0].eranges);
      k.r0_numel = 1;
      k.r0_numel_expr = 1;
    }
    for (size_t i = 0; i < nests.size() && !flat; ++i) {
      bool reduces = comp(nests[i]->computations.back()).is_reduction();
      // Rows of one length at the hints but of different expressions (a coincidence of the
      // hinted sizes) are different rows.
      if ((row[i] != 1 || reduces) && (row[i] != k.r0_numel || !(erow[i] == k.r0_numel_expr))) {
        *why = fmt::format("rows of {} and {} elements", row[i], k.r0_numel);
        return std::nullopt;
      }
    }
    // The flat index of each loop variable, per nest.
    size_t tile_y = 0;
    // 2-D tiles are chosen by the extents' values; a symbolic extent counts as its nominal
    // size (triton_plan.h), so that the choice, which the text shows, is the same at every
    // size (a transposed read of a symbolic batch of rows is tiled at all of them).
    if (k.r0_numel == 1 && nests.size() == 1 && nests[0]->reindex.empty()) {
      std::vector<BodyOp> accesses;
      for (int c : nests[0]->computations)
        for (const BodyOp& op : comp(c).body.ops())
          if (op.op == LoopOp::load || op.op == LoopOp::store) accesses.push_back(op);
      std::vector<int64_t> deciding = loops[0].ranges;
      for (size_t i = 0; i < deciding.size(); ++i)
        deciding[i] = index_extent(loops[0].eranges[i], deciding[i]);
      tile_y = choose_tiling(accesses, deciding);
    }
    sym::Analyzer ka;
    std::vector<std::map<sym::Expr, sym::Expr>> var_map(nests.size());
    if (tile_y > 0) {
      k.kind = TritonKernelKind::Tiled;
      const auto& r = loops[0].ranges;
      const auto& er = loops[0].eranges;
      const auto split = static_cast<long>(tile_y);
      std::vector<int64_t> ys(r.begin(), r.begin() + split), xs(r.begin() + split, r.end());
      std::vector<sym::Expr> eys(er.begin(), er.begin() + split), exs(er.begin() + split, er.end());
      k.ynumel = product(ys);
      k.xnumel = product(xs);
      k.ynumel_expr = product_expr(eys);
      k.xnumel_expr = product_expr(exs);
      auto yv = decompose(triton_yindex(), eys, ys);
      auto xv = decompose(triton_xindex(), exs, xs);
      for (size_t i = 0; i < r.size(); ++i)
        var_map[0][loop_var(static_cast<int>(i))] = i < tile_y ? yv[i] : xv[i - tile_y];
    } else if (flat) {
      for (size_t n = 0; n < nests.size(); ++n) {
        auto xv = decompose(triton_xindex(), loops[n].eranges, loops[n].ranges);
        for (size_t i = 0; i < xv.size(); ++i) var_map[n][loop_var(static_cast<int>(i))] = xv[i];
      }
      k.kind = TritonKernelKind::Pointwise;
    } else {
      auto xv = decompose(triton_xindex(), eouter, outer);
      for (size_t n = 0; n < nests.size(); ++n) {
        for (size_t i = 0; i < d; ++i) var_map[n][loop_var(static_cast<int>(i))] = xv[i];
        std::vector<int64_t> inner(loops[n].ranges.begin() + outer_depth, loops[n].ranges.end());
        inner.insert(inner.end(), loops[n].red.begin(), loops[n].red.end());
        std::vector<sym::Expr> einner(loops[n].eranges.begin() + outer_depth,
                                      loops[n].eranges.end());
        einner.insert(einner.end(), loops[n].ered.begin(), loops[n].ered.end());
        auto rv = decompose(triton_rindex(), einner, inner);
        size_t j = 0;
        for (size_t i = d; i < loops[n].ranges.size(); ++i)
          var_map[n][loop_var(static_cast<int>(i))] = rv[j++];
        for (size_t i = 0; i < loops[n].red.size(); ++i)
          var_map[n][reduction_var(static_cast<int>(i))] = rv[j++];
      }
      k.kind = k.r0_numel == 1 ? TritonKernelKind::Pointwise : TritonKernelKind::Looped;
    }
    sym::bind_size_hints(ka, /*exact=*/false);  // size symbols are >= 1, nothing more
    bind_index(ka, triton_xindex(), k.xnumel_expr, k.xnumel);
    bind_index(ka, triton_yindex(), k.ynumel_expr, k.ynumel);
    bind_index(ka, triton_rindex(), k.r0_numel_expr, k.r0_numel);

    // Merge the bodies in the flat index space, forwarding stored values.
    std::set<int> written;
    for (const LoopNest* n : nests)
      for (int c : n->computations) written.insert(comp(c).buffer);
    std::map<std::pair<int, const void*>, int> stored;
    std::set<int> done;  // computations merged so far
    // A computation over no element (a pointwise prologue of a reduction over an empty dim)
    // writes nothing: its store would go through an empty buffer's null pointer.
    auto writes_nothing = [&](int c) { return product(static_extents(comp(c).ranges)) == 0; };
    for (size_t n = 0; n < nests.size(); ++n) {
      for (int c : nests[n]->computations) {
        if (writes_nothing(c)) continue;
        auto re = nests[n]->reindex.find(c);
        std::vector<int> remap;
        for (BodyOp op : comp(c).body.ops()) {
          for (int& a : op.args)
            if (a >= 0) a = remap[static_cast<size_t>(a)];
          bool reused = false;
          sym::Expr raw_index;  // in the nest's own loop variables
          if (op.index.defined()) {
            sym::Expr idx = op.index;
            if (re != nests[n]->reindex.end()) idx = sym::substitute(idx, re->second);
            raw_index = idx;
            reused = op.op == LoopOp::load && reads_repeatedly(idx, loops[n].ranges, loops[n].red);
            op.index = ka.simplify(sym::substitute(idx, var_map[n]));
          }
          if (op.op == LoopOp::reduction && product(loops[n].red) == 0) {
            // Its loads are then dead, so no empty tensor is ever read.
            op = empty_reduction_value(op.reduction, op.dtype);
          }
          if (op.op == LoopOp::load && out_.buffers[static_cast<size_t>(op.buffer)].numel() == 0) {
            // What a reduction over no element reads (an empty prologue, left out above): dead,
            // but it must not look like a read of a buffer this kernel writes.
            op = empty_reduction_value(ReductionType::sum, op.dtype);
          }
          if (op.op == LoopOp::load) {
            auto it = stored.find({op.buffer, op.index.get()});
            if (it != stored.end()) {
              // What the load would read back: the value converted to the buffer's dtype.
              size_t known = k.body.ops().size();
              remap.push_back(k.body.stored_value(it->second, p_.buffer(op.buffer).layout.dtype));
              tag_new_ops(k, known, n);
              continue;
            }
            if (written.count(op.buffer)) {
              if (auto v =
                      recompute_stored(op.buffer, raw_index, done, nests, d, var_map, k, ka, n)) {
                remap.push_back(*v);
                continue;
              }
              *why = fmt::format("{} is read at another element than the one stored",
                                 p_.buffer(op.buffer).name);
              return std::nullopt;
            }
          }
          size_t before = k.body.ops().size();
          int id = k.body.append(op);
          if (k.body.ops().size() > before) {
            k.op_nest.push_back(static_cast<int>(n));
            k.reused.push_back(reused);
          } else if (reused) {
            k.reused[static_cast<size_t>(id)] = true;
          }
          if (op.op == LoopOp::store) stored[{op.buffer, op.index.get()}] = op.args[0];
          remap.push_back(id);
        }
      }
      for (int c : nests[n]->computations) {
        done.insert(c);
        if (writes_nothing(c)) continue;
        for (const auto& o : comp(c).origin_names) k.origins.push_back(o);
        k.provenance.insert(k.provenance.end(), comp(c).origins.begin(), comp(c).origins.end());
      }
    }
    finish(k, ka);
    return k;
  }

  /// The ops appended to `k`'s body since it had `before`: they belong to nest `nest` and are
  /// no broadcast loads.
  static void tag_new_ops(TritonKernelPlan& k, size_t before, size_t nest) {
    for (size_t j = before; j < k.body.ops().size(); ++j) {
      k.op_nest.push_back(static_cast<int>(nest));
      k.reused.push_back(false);
    }
  }

  /// A load, in nest `reader`, of buffer `b` at an element this kernel's program does not hold
  /// in registers (another lane's: the first element of the row a layer norm's shifted sums
  /// read), where a pointwise computation merged before stores `b` from loads of buffers this
  /// kernel does not write: that computation's body again at the element (its inner loop
  /// variables at the constants that address it), appended to `k`. The value the load would
  /// read back, or nullopt. (A load of another lane's store is a race in a Triton program;
  /// recomputing keeps the group one kernel, where splitting it cost a launch per nest: a
  /// training layer norm took 8.)
  std::optional<int> recompute_stored(int b, const sym::Expr& index, const std::set<int>& done,
                                      const std::vector<const LoopNest*>& nests, size_t outer_depth,
                                      const std::vector<std::map<sym::Expr, sym::Expr>>& var_map,
                                      TritonKernelPlan& k, const sym::Analyzer& ka, size_t reader) {
    if (!index.defined()) return std::nullopt;
    int producer = -1;
    for (int c : done)
      if (comp(c).buffer == b) producer = c;
    if (producer < 0) return std::nullopt;
    const ComputedBuffer& c = comp(producer);
    if (c.kind != LoopKind::Pointwise || c.body.ops().empty()) return std::nullopt;
    const BodyOp& store = c.body.ops().back();
    if (store.op != LoopOp::store || store.buffer != b) return std::nullopt;
    for (const BodyOp& op : c.body.ops()) {
      if (op.op == LoopOp::store && &op != &store) return std::nullopt;
      if (op.op == LoopOp::load)
        for (int w : done)
          if (comp(w).buffer == op.buffer) return std::nullopt;
    }
    // The producer's indices in its nest's variables (a prologue of a reduction is renamed to
    // the reduction's), and the extents of those variables.
    const LoopNest* home = nullptr;
    for (const LoopNest* nest : nests)
      for (int x : nest->computations)
        if (x == producer) home = nest;
    if (home == nullptr) return std::nullopt;
    std::map<sym::Expr, sym::Expr> rename;
    if (auto re = home->reindex.find(producer); re != home->reindex.end()) rename = re->second;
    auto own = [&](const sym::Expr& e) { return rename.empty() ? e : sym::substitute(e, rename); };
    const ComputedBuffer& head = comp(home->computations.back());
    std::vector<std::pair<sym::Expr, int64_t>> inner;  // the variables past the shared loops
    const std::vector<int64_t> ranges = static_extents(head.ranges),
                               red = static_extents(head.reduction_ranges);
    if (ranges.size() < outer_depth) return std::nullopt;
    sym::Analyzer sa;
    for (size_t i = 0; i < ranges.size(); ++i) {
      sa.bind_loop_var(loop_var(static_cast<int>(i)), ranges[i]);
      if (i >= outer_depth) inner.push_back({loop_var(static_cast<int>(i)), ranges[i]});
    }
    for (size_t i = 0; i < red.size(); ++i) {
      sa.bind_loop_var(reduction_var(static_cast<int>(i)), red[i]);
      inner.push_back({reduction_var(static_cast<int>(i)), red[i]});
    }
    // Those variables at constants: the offset of the element read from the row's first,
    // decomposed by their strides (largest first).
    const sym::Expr stored_at = own(store.index);
    std::map<sym::Expr, sym::Expr> sigma;
    std::vector<std::tuple<int64_t, sym::Expr, int64_t>> strides;  // (stride, variable, extent)
    for (const auto& [v, extent] : inner) {
      sigma[v] = 0;
      auto st = sa.linear_stride(stored_at, v);
      if (!st || !st->is_const() || st->const_value() < 0) return std::nullopt;
      if (st->const_value() > 0) strides.push_back({st->const_value(), v, extent});
    }
    auto offset = sa.simplify(index - sym::substitute(stored_at, sigma)).as_const();
    if (!offset || *offset < 0) return std::nullopt;
    std::sort(strides.begin(), strides.end(),
              [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
    int64_t rest = *offset;
    for (const auto& [st, v, extent] : strides) {
      const int64_t at = rest / st;
      if (at >= extent) return std::nullopt;
      sigma[v] = at;
      rest -= at * st;
    }
    if (rest != 0 || !sa.statically_known_equal(sa.simplify(sym::substitute(stored_at, sigma)),
                                                sa.simplify(index)))
      return std::nullopt;
    // The body at that element; the outer variables are the reader's (the same flat index).
    std::vector<int> remap;
    auto append = [&](BodyOp op) {
      const size_t before = k.body.ops().size();
      const int id = k.body.append(std::move(op));
      tag_new_ops(k, before, reader);
      return id;
    };
    for (BodyOp op : c.body.ops()) {
      if (op.op == LoopOp::store) break;
      for (int& a : op.args)
        if (a >= 0) a = remap[static_cast<size_t>(a)];
      if (op.index.defined())
        op.index =
            ka.simplify(sym::substitute(sym::substitute(own(op.index), sigma), var_map[reader]));
      remap.push_back(append(std::move(op)));
    }
    COIL_LOG(fusion, "triton: {} read at another element is recomputed from its loads",
             p_.buffer(b).name);
    const int value = remap[static_cast<size_t>(store.args[0])];
    const size_t before = k.body.ops().size();
    const int read = k.body.stored_value(value, p_.buffer(b).layout.dtype);
    tag_new_ops(k, before, reader);
    return read;
  }

  /// Reduction hint, persistent or looped, index width.
  void finish(TritonKernelPlan& k, const sym::Analyzer& ka) {
    const sym::Expr numels = k.xnumel_expr * k.ynumel_expr * k.r0_numel_expr;
    int64_t biggest = index_extent(numels, k.xnumel * k.ynumel * k.r0_numel);
    int32_guard(numels, k.xnumel * k.ynumel * k.r0_numel);
    int contiguous = 0, strided = 0;
    for (const BodyOp& op : k.body.ops()) {
      if (op.op != LoopOp::load && op.op != LoopOp::store) continue;
      biggest = std::max(biggest, index_extent(op.buffer));
      int32_guard(op.buffer);
      if (op.op != LoopOp::load || !sym::depends_on(op.index, triton_rindex())) continue;
      auto s = ka.stride(op.index, triton_rindex());
      (s && s->as_const() == 1 ? contiguous : strided) += 1;
    }
    k.int64_index = biggest > INT32_MAX;
    if (k.kind != TritonKernelKind::Looped) return;
    k.hint = strided == 0      ? ReductionHint::Inner
             : contiguous == 0 ? ReductionHint::Outer
                               : ReductionHint::Default;
    // A symbolic row stays looped: persistent is chosen by the row's length, and a looped
    // reduction is right at every length.
    if (!is_symbolic(k.r0_numel_expr) && use_persistent_reduction(k.r0_numel, k.hint))
      k.kind = TritonKernelKind::Persistent;
  }

  /// A pointwise kernel that only copies an intermediate into a graph output (`out[i] = x[i]`:
  /// a reshape or a squeeze of a reduction's or a product's result, which the scheduler keeps
  /// apart because their loops differ in shape) is dropped: the intermediate's producer writes
  /// the output's memory instead (TritonProgramPlan::storage_of), as Inductor's views do.
  /// Needs: the same dtype and element count, both contiguous and of static sizes, the output
  /// written by nothing else, the intermediate written by a kernel or torch.mm (a conv2d's call
  /// returns a tensor of its own).
  void elide_output_copies() {
    std::vector<int> writers(out_.buffers.size(), 0);
    std::map<int, int> producer;  // buffer -> the step that writes it
    for (size_t s = 0; s < out_.steps.size(); ++s)
      for (int b : step_writes(out_.steps[s])) {
        ++writers[static_cast<size_t>(b)];
        producer[b] = static_cast<int>(s);
      }
    std::vector<bool> drop(out_.steps.size(), false);
    for (size_t s = 0; s < out_.steps.size(); ++s) {
      const TritonStep& st = out_.steps[s];
      if (st.kernel < 0 || st.computation >= 0) continue;
      const TritonKernelPlan& k = out_.kernels[static_cast<size_t>(st.kernel)];
      if (k.kind != TritonKernelKind::Pointwise) continue;
      auto [from, to] = copy_of(k.body);
      if (from < 0) continue;
      const TritonBuffer &x = out_.buffers[static_cast<size_t>(from)],
                         &o = out_.buffers[static_cast<size_t>(to)];
      if (x.kind != BufferKind::Intermediate || o.kind != BufferKind::Output ||
          writers[static_cast<size_t>(to)] != 1 || writers[static_cast<size_t>(from)] != 1 ||
          out_.storage_of.count(from) || x.dtype != o.dtype || x.numel() != o.numel() ||
          !contiguous(x) || !contiguous(o) || any_symbolic(x.size_exprs) ||
          any_symbolic(o.size_exprs))
        continue;
      const TritonStep& made = out_.steps[static_cast<size_t>(producer.at(from))];
      if (made.kernel < 0 && !(made.computation >= 0 && comp(made.computation).matmul)) continue;
      out_.storage_of[from] = to;
      drop[s] = true;
    }
    std::vector<TritonStep> steps;
    std::vector<TritonKernelPlan> kernels;
    std::vector<int> renumber(out_.kernels.size(), -1);
    for (size_t s = 0; s < out_.steps.size(); ++s) {
      if (drop[s]) continue;
      TritonStep st = out_.steps[s];
      for (int* k : {&st.kernel, &st.fallback}) {
        if (*k < 0) continue;
        renumber[static_cast<size_t>(*k)] = static_cast<int>(kernels.size());
        kernels.push_back(std::move(out_.kernels[static_cast<size_t>(*k)]));
        *k = renumber[static_cast<size_t>(*k)];
      }
      steps.push_back(st);
    }
    out_.steps = std::move(steps);
    out_.kernels = std::move(kernels);
  }

  /// (x, out) where `body` is `out[xindex] = x[xindex]` and nothing else, else (-1, -1).
  static std::pair<int, int> copy_of(const LoopBody& body) {
    int load = -1, store = -1;
    for (size_t i = 0; i < body.ops().size(); ++i) {
      const BodyOp& o = body.op(static_cast<int>(i));
      int* slot = o.op == LoopOp::load ? &load : o.op == LoopOp::store ? &store : nullptr;
      if (slot == nullptr || *slot >= 0) return {-1, -1};
      *slot = static_cast<int>(i);
    }
    if (load < 0 || store < 0) return {-1, -1};
    const BodyOp &l = body.op(load), &st = body.op(store);
    if (st.args[0] != load || l.args[0] >= 0 || !(l.index == triton_xindex()) ||
        !(st.index == triton_xindex()))
      return {-1, -1};
    return {l.buffer, st.buffer};
  }

  static bool contiguous(const TritonBuffer& t) {
    int64_t stride = 1;
    for (size_t i = t.sizes.size(); i-- > 0;) {
      if (t.sizes[i] != 1 && t.strides[i] != stride) return false;
      stride *= t.sizes[i];
    }
    return true;
  }

  std::vector<int> step_writes(const TritonStep& st) const {
    std::vector<int> w;
    if (st.kernel >= 0) {
      for (const BodyOp& op : out_.kernels[static_cast<size_t>(st.kernel)].body.ops())
        if (op.op == LoopOp::store) w.push_back(op.buffer);
    } else if (st.computation >= 0) {
      w.push_back(comp(st.computation).buffer);
    }
    return w;
  }

  void mark_in_memory() {
    out_.in_memory.assign(out_.buffers.size(), false);
    for (size_t b = 0; b < out_.buffers.size(); ++b)
      out_.in_memory[b] = out_.buffers[b].kind != BufferKind::Intermediate;
    for (const TritonKernelPlan& k : out_.kernels)
      for (const BodyOp& op : k.body.ops())
        if (op.op == LoopOp::load) out_.in_memory[static_cast<size_t>(op.buffer)] = true;
    for (const TritonStep& st : out_.steps) {
      if (st.computation < 0) continue;
      const ComputedBuffer& c = comp(st.computation);
      out_.in_memory[static_cast<size_t>(c.buffer)] = true;
      for (int b : c.reads()) out_.in_memory[static_cast<size_t>(b)] = true;
    }
    for (const auto& [x, output] : out_.storage_of) out_.in_memory[static_cast<size_t>(x)] = true;
  }

  const IrProgram& p_;
  const Schedule& s_;
  TritonProgramPlan out_;
};

}  // namespace

TritonProgramPlan plan_triton_program(const IrProgram& program, const Schedule& schedule) {
  return Planner(program, schedule).run();
}

}  // namespace coil
