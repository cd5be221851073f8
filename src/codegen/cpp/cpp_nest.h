// Internal to the CPU backend: the pieces CppKernel (cpp_kernel.cpp) and CppVecKernel
// (cpp_vec_kernel.cpp) share: a loop nest with its merged body, reduction spellings, and the
// interface through which the vector emitter asks the kernel printer for names.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codegen/code_writer.h"
#include "ir/ir.h"
#include "ir/loop_body.h"
#include "sym/analyzer.h"

namespace coil {

/// A loop nest of a kernel: its loops and the merged body of its computations.
struct Nest {
  std::vector<int64_t> ranges, red_ranges;
  LoopBody body;
  std::vector<int> reductions;  // body positions of reduction ops
  std::vector<bool> after;      // per op: depends on a reduction (runs after the r loops)
  int tmp_base = 0;             // tmpN numbering offset
};

/// How one reduction type accumulates: {acc} is the accumulator, {v} the value, {p} a partial,
/// {ridx} the linear reduction index.
struct ReductionSpec {
  std::string acc_type, init, combine, combine_partial, finalize;
};
ReductionSpec reduction_spec(ReductionType t, DType value_dtype, DType result_dtype);

std::vector<int64_t> static_ranges(const std::vector<sym::Expr>& ranges);
int64_t product(const std::vector<int64_t>& v);
std::string subst(std::string s, const std::string& key, const std::string& value);
sym::Analyzer nest_analyzer(const Nest& n);

/// What the vector emitter needs from the kernel printer.
class NestPrinter {
 public:
  virtual ~NestPrinter() = default;
  virtual CodeWriter& writer() = 0;
  /// f32 lanes of the target vectors (>= 2 when a nest is vectorized).
  virtual int lanes() const = 0;
  /// The C++ lvalue of buffer `b` at `index` (a local row element or `ptr[index]`).
  virtual std::string access(const Nest& n, int b, const sym::Expr& index,
                             const sym::Analyzer& a) const = 0;
  /// The storage dtype of buffer `b`.
  virtual DType storage_dtype(int b) const = 0;
  /// The kernel parameter holding buffer `b` ("in_ptr0").
  virtual std::string pointer(int b) const = 0;
  /// The program's description of buffer `b`.
  virtual const Buffer& buffer_info(int b) const = 0;
  /// Whether a store to `b` is dropped (a local buffer whose every read was forwarded).
  virtual bool store_dropped(int b) const = 0;
  /// The name of op `i`'s value ("tmp12").
  virtual std::string tmp(const Nest& n, int i) const = 0;
  /// A fresh accumulator name ("tmp_acc3").
  virtual std::string new_acc() = 0;
  /// Elements ahead of a contiguous vector load of `b` at `index` in nest `n` to prefetch (a
  /// later row of the kernel's outer loop), or 0 for none.
  virtual int64_t prefetch_ahead(const Nest& /*n*/, int /*b*/, const sym::Expr& /*index*/,
                                 const sym::Analyzer& /*a*/) const {
    return 0;
  }
  /// Prints the scalar form of the ops of `n` for which `pick` holds (not reductions).
  virtual void emit_scalar_ops(const Nest& n, const sym::Analyzer& a,
                               const std::function<bool(int)>& pick) = 0;
};

/// A pseudo buffer id: the matmul template's accumulator tile. Its epilogue loads the product
/// from it (the NestPrinter maps it to the current tile row) instead of from memory.
constexpr int kAccumulatorBuffer = -2;

/// The loop a nest is vectorized along (CppVecKernel): the innermost reduction loop
/// (horizontal reduction) when every load is contiguous or invariant along it, else the
/// innermost pointwise loop (pointwise, vertical reduction) when every store is contiguous
/// along it (loads may broadcast or gather). nullopt when the nest has an op, dtype or access
/// without a vector form, or no candidate loop at or after `first_loop`.
struct VecLoop {
  bool reduction;  // r loop (horizontal) or x loop
  size_t index;
};
std::optional<VecLoop> choose_vec_loop(const Nest& n, size_t first_loop, int lanes);

/// Whether a nest's vector stores bypass the caches (a large f32 graph output: see
/// kStreamMinBytes in cpp_vec_kernel.cpp); its kernel then ends with coil::stream_fence().
bool nest_streams(const NestPrinter& p, const Nest& n);

/// Prints nest `n` with explicit SIMD along choose_vec_loop(n, first_loop), which must exist:
/// its x loops from `first_loop` on (the earlier ones are open already), the vector loop
/// stepping by coil::kFloatLanes, then a masked tail. `parallel`: the vector loop is the
/// kernel's parallel loop (a one-dimensional pointwise kernel).
void emit_vec_nest(NestPrinter& p, const Nest& n, size_t first_loop, bool parallel);

/// A column reduction (one pointwise loop x0 of at most kRowSplitMaxColumns outputs, one
/// reduction loop r0 over many rows), vectorized along x0 and split over rows: each of a fixed
/// number of row chunks reduces its rows into a partial row that stays in cache, streaming the
/// input in memory order; the partials are then combined in chunk order, so the result is the
/// same for any thread count. Inductor parallelizes only over column vectors here (64 for 1024
/// columns) and walks each column strip down all the rows. Returns false (printing nothing)
/// when the nest is not of that shape.
/// CppTile2DKernel: a two-dimensional pointwise nest whose store is contiguous along x1 while
/// some load is contiguous along x0 (a transpose: x.t() + y). The loops are tiled by
/// lanes x lanes; each transposed operand is read into an L1 tile with vector loads along x0,
/// transposed in the tile, and then read back as vectors along x1, so both the read and the
/// write are contiguous in memory. Returns false (printing nothing) when the nest is not of
/// that shape.
bool emit_tile2d_nest(NestPrinter& p, const Nest& n, bool parallel);

/// Prints a pointwise nest's innermost loop over [begin, end) (C++ expressions; the outer loop
/// variables are defined by the caller) with explicit SIMD: whole vectors, then one masked
/// tail. Returns false (printing nothing) when the loop has no vector form. The matmul
/// template prints its epilogue on each tile row this way.
bool emit_vec_segment(NestPrinter& p, const Nest& n, const std::string& begin,
                      const std::string& end);

/// Horizontal float sums longer than this accumulate in a coil::CascadeSum.
constexpr int64_t kCascadeMinElements = 16384;

constexpr int64_t kRowSplitMaxColumns = 16384;
constexpr int64_t kRowSplitMinRows = 1024;
bool emit_row_split_reduction(NestPrinter& p, const Nest& n);

}  // namespace coil
