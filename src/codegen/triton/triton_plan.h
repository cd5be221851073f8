// The GPU backend's scheduling step (Inductor's TritonScheduling): turns the schedule's kernel
// groups into Triton kernels over a flat iteration space, before any text is printed.
//
// A Triton kernel iterates over xindex (the group's shared outer loops, flattened row-major)
// and, for reductions, r0_index (each nest's remaining loops: its inner pointwise loops or its
// reduction loops, flattened). Every index expression of every nest is rewritten in those
// symbols, so the nests' bodies merge into one LoopBody: identical loads are computed once, and
// a load of a value that an earlier nest stored at the same element is forwarded in registers
// (the softmax's exp, the layer norm's mean). A group that cannot be one Triton kernel (nests
// over different row lengths, a value read back at another element of its row, a reduction
// nest with inner pointwise loops) is split into one kernel per nest; the values passed between
// them are then materialized in memory.
//
// Kernel kinds (Inductor's names):
//   triton_poi  pointwise over xnumel (1-D), or over [ynumel, xnumel] tiles when a load and the
//               store are contiguous along different loops (x.t() + y);
//   triton_per  persistent reduction: a whole row of r0_numel <= 1024 lives in registers;
//   triton_red  looped reduction: each nest runs its own loop over the row in R0_BLOCK chunks;
//   split       a reduction with few outputs and long rows becomes a triton_red kernel reducing
//               chunks of each row into a partial buffer, then a kernel reducing the partials.
// Extern calls (matmul, conv2d) are library calls through torch in the wrapper. A matmul
// template with a pointwise epilogue becomes a triton_tem kernel (tl.dot K loop, the epilogue on
// the accumulator tile) plus that epilogue as its own kernel for the torch.mm choice. An
// attention Extern becomes a triton_tem flash-attention kernel (triton_attention.h; its backward
// ops attention_lse and attention_grad, triton_attention_backward.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/precision.h"
#include "sched/scheduler.h"
#include "sym/analyzer.h"

namespace coil {

/// The symbols of a Triton kernel's iteration space.
const sym::Expr& triton_xindex();
const sym::Expr& triton_yindex();
const sym::Expr& triton_rindex();

// The largest blocks the runtime's configs may pick (powers of two). Masks are dropped only
// where a numel is a multiple of these, so the runtime must never exceed them.
constexpr int64_t kTritonMaxXBlock = 1024;
constexpr int64_t kTritonMaxYBlock = 1024;
constexpr int64_t kTritonMaxLoopedR0Block = 2048;
// Persistent reductions (Inductor's thresholds): rows up to 1024 elements when they are read
// contiguously, up to 64 otherwise.
constexpr int64_t kPersistentMaxInner = 1024;
constexpr int64_t kPersistentMaxOuter = 64;
// 2-D tiles: the y extent goes to grid dimension 1, limited to 65535 programs.
constexpr int64_t kTileMinExtent = 16;
constexpr int64_t kTileMaxY = 65535;

enum class TritonKernelKind { Pointwise, Tiled, Persistent, Looped, Template };
enum class ReductionHint { Inner, Outer, Default };
std::string_view reduction_hint_name(ReductionHint h);  // "INNER", "OUTER", "DEFAULT"

int64_t next_power_of_2(int64_t n);
/// Size hint of a numel: the next power of two (Inductor's size_hints).
inline int64_t triton_size_hint(int64_t numel) {
  return next_power_of_2(numel);
}
/// Whether accesses need the `index < numel` mask. Every block the runtime may pick is a power
/// of two no larger than `max_block` nor than the size hint, so it tiles `numel` exactly when
/// numel is a multiple of min(max_block, size hint): a multiple of max_block, or a power of two
/// below it.
bool triton_needs_mask(const sym::Expr& numel, int64_t max_block);
/// Persistent (whole row in registers) or looped reduction, by row length and access pattern.
bool use_persistent_reduction(int64_t r0_numel, ReductionHint hint);

/// A buffer the generated module names: a program buffer, or a partial buffer of a split
/// reduction (ids after the program's).
struct TritonBuffer {
  std::string name;  // the wrapper's name: arg0_1 (input i), const0, buf3, out0, part0
  DType dtype = DType::F32;
  std::vector<int64_t> sizes, strides;
  /// The same as expressions of the size symbols (ks0, ...): what a size-generic module
  /// prints (equal to `sizes`/`strides` as constants otherwise).
  std::vector<sym::Expr> size_exprs, stride_exprs;
  BufferKind kind = BufferKind::Intermediate;
  int external_index = -1;
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
};

/// The split decoding path of a forward attention (triton_attention_decode.h): the keys cut
/// into `splits` chunks, a partial kernel storing each chunk's unnormalized output and running
/// max and sum, and a combine kernel (`combine`) that merges them into the result.
struct AttentionSplitPlan {
  int64_t splits = 0;  // 0: not split
  bool combine = false;
  int acc = -1, max = -1, sum = -1;  // partial buffers: [S, B*H, Tq, Dv], [S, B*H, Tq] f32
};

/// One Triton kernel, its body in the symbols of triton_xindex/yindex/rindex.
struct TritonKernelPlan {
  TritonKernelKind kind = TritonKernelKind::Pointwise;
  int64_t xnumel = 1, ynumel = 1, r0_numel = 1;
  /// The same as expressions of the size symbols: a size-generic kernel takes them as
  /// arguments (its numels) instead of constants; `xnumel` etc. are their values at the hints.
  sym::Expr xnumel_expr = sym::Expr(1), ynumel_expr = sym::Expr(1), r0_numel_expr = sym::Expr(1);
  LoopBody body;
  /// Per op: the nest it came from. A looped kernel runs one r loop per nest holding
  /// reductions or element stores, in nest order.
  std::vector<int> op_nest;
  /// Per op: a load that reads the same element for several iterations (a broadcast operand),
  /// which gets eviction_policy='evict_last'.
  std::vector<bool> reused;
  int num_nests = 1;
  /// Split reductions, first stage: the lane's position in the original row; lanes where it is
  /// >= row_numel lie past the row's end (the last chunk may be partial). Undefined when every
  /// lane is inside.
  sym::Expr row_index;
  int64_t row_numel = 0;
  sym::Expr row_numel_expr;  // the same as an expression of the size symbols (ks0) or constant
  ReductionHint hint = ReductionHint::Default;
  bool int64_index = false;          // some index may exceed int32
  std::vector<std::string> origins;  // graph nodes, "t3 (add)", for the comment
  std::vector<Origin> provenance;    // the computations' origins, for the name
  /// Template kernels (triton_tem): the matmul whose [BLOCK_M, BLOCK_N] accumulator tile the
  /// epilogue body reads in place of `acc_buffer` (xindex = the flat output index).
  std::shared_ptr<const MatmulSpec> matmul;
  int acc_buffer = -1;
  /// Flash-attention template kernels (kind Template, no matmul): the attention they compute
  /// (triton_attention.h prints the forward, triton_attention_backward.h the backward kernels;
  /// `body` only names the operands and the result).
  std::shared_ptr<const AttentionSpec> attention;
  int attention_out = -1;  // the result buffer
  /// A forward's logsumexp [B, H, Tq] f32 stored by the same kernel (its attention_lse
  /// computation shares the kernel group: sched/fusion.h), or -1.
  int attention_lse_out = -1;
  /// A gradient of k's kernel that also stores the gradient of v (its grad_v computation shares
  /// the kernel group, sched/fusion.h: one key-block loop, kernel 'grad_kv'), or -1.
  int attention_grad_v_out = -1;
  /// A gradient of k's kernel (grad_k, grad_kv): delta = rowsum(dO * out) of every query row,
  /// [B, H, Tq] f32, computed once by a `delta` kernel before it (attention_delta_kernel set
  /// there) instead of in every (key block, query block) step; -1: none.
  int attention_delta = -1;
  bool attention_delta_kernel = false;
  /// A forward split along the keys for decoding shapes (triton_attention_decode.h): splits > 0
  /// in both of its kernels.
  AttentionSplitPlan attention_split;
  /// A forward (or split partial) kernel whose query tile packs the G = H / Hkv query heads of
  /// a grouped-query group (triton_attention_decode.h attention_packed_heads): G, or 0.
  int64_t attention_packed_heads = 0;
  std::string prefix() const;  // triton_poi / triton_per / triton_red / triton_tem
  bool is_reduction() const {
    return kind == TritonKernelKind::Persistent || kind == TritonKernelKind::Looped;
  }
};

/// One step of the wrapper: a Triton kernel launch or a library call.
struct TritonStep {
  int kernel = -1;       // into TritonProgramPlan::kernels
  int computation = -1;  // an Extern/Template computation of the program
  /// A matmul template with its epilogue (kernel: the triton_tem kernel, computation: the
  /// matmul): the pointwise epilogue kernel of the other choice (torch.mm + this kernel), which
  /// the runtime's autotuner times against the template.
  int fallback = -1;
  /// Instead of `fallback`, where the epilogue only copies the product into an output of the
  /// same dtype and element order (a reshape, a transpose undone): that output, which the
  /// other choice's torch.mm writes itself (no epilogue kernel, no product buffer).
  int extern_out = -1;
};

struct TritonProgramPlan {
  std::vector<TritonBuffer> buffers;  // by id: the program's, then partials
  std::vector<TritonKernelPlan> kernels;
  std::vector<TritonStep> steps;
  /// Per buffer: some kernel reads it from memory, a library call reads or writes it, or it is
  /// a graph output. Stores to intermediates that are not are dropped (their values are only
  /// ever forwarded in registers), and the wrapper allocates only these.
  std::vector<bool> in_memory;
  /// Intermediates whose memory is a graph output's (elide_output_copies: the kernel that only
  /// copied one into the other is gone); the wrapper makes each a view of its output.
  std::map<int, int> storage_of;
  /// The f32 dots of matmul templates: IEEE or TF32 (codegen/precision.h).
  Fp32Precision fp32_precision = Fp32Precision::highest;
  /// Size-generic modules: expressions of the size symbols that must stay <= INT32_MAX for the
  /// kernels' int32 indexing (chosen at the hints; the wrapper checks them per call).
  std::vector<sym::Expr> int32_guards;
};

/// Whether `e` holds a size symbol (a size-generic module's ks0, ...).
inline bool is_symbolic(const sym::Expr& e) {
  return e.defined() && !e.is_const();
}

/// What a size-generic module prints where a number stands for a symbolic size (decorators'
/// size hints, the attention template's config shape): `e` with every size symbol at
/// sym::kNominalSize (sym::nominal_value), so that the text does not depend on the sizes it was
/// generated at. The runtime still picks and caches configs per power-of-two bucket of the
/// call's numels.

/// The Python text of size expression `e` (ks0*ks1, ks0 // 2), `value` where it is constant.
std::string triton_size_text(const sym::Expr& e, int64_t value);

TritonProgramPlan plan_triton_program(const IrProgram& program, const Schedule& schedule);

}  // namespace coil
