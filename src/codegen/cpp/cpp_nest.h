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
#include "ir/loop_extents.h"
#include "sym/analyzer.h"

namespace coil {

/// A loop nest of a kernel: its loops and the merged body of its computations.
struct Nest {
  std::vector<int64_t> ranges, red_ranges;
  /// The same extents as the C++ the loops print: the number, or in a size-generic module
  /// the expression of its size symbols (ks0, ...) that has that value here (extent_text).
  std::vector<std::string> range_text, red_range_text;
  /// The same extents as expressions (constants, or of ks0, ...): what a decision that follows
  /// the size records its guard on (sym::decide_at_least).
  std::vector<sym::Expr> range_expr, red_range_expr;
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

std::string subst(std::string s, const std::string& key, const std::string& value);
/// How a kernel prints extent `e`, whose value at this compile's sizes is `value`: the
/// expression of size symbols (ks0*ks1) when it is symbolic, else the number. (Planning reads
/// `value`; the printed expression keeps the text the same for every size whose plan is.)
std::string extent_text(const sym::Expr& e, int64_t value);
std::vector<std::string> extent_texts(const std::vector<sym::Expr>& e,
                                      const std::vector<int64_t>& values);
/// loop_analyzer of the nest's loops.
sym::Analyzer nest_analyzer(const Nest& n);

struct CppKernelPlan;

/// What the vector and template printers need from the kernel printer (everything else they
/// read from the plan).
class NestPrinter {
 public:
  virtual ~NestPrinter() = default;
  virtual CodeWriter& writer() = 0;
  /// The program the kernel belongs to (buffers and their layouts).
  virtual const IrProgram& program() const = 0;
  /// The kernel's plan (cpp_plan.h): lanes, pointers, dropped stores, nest plans.
  virtual const CppKernelPlan& plan() const = 0;
  /// The C++ lvalue of buffer `b` at `index` (a local row element or `ptr[index]`).
  virtual std::string access(const Nest& n, int b, const sym::Expr& index,
                             const sym::Analyzer& a) const = 0;
  /// The name of op `i`'s value ("tmp12").
  virtual std::string tmp(const Nest& n, int i) const = 0;
  /// A fresh accumulator name ("tmp_acc3").
  virtual std::string new_acc() = 0;
  /// Prints the scalar form of the ops of `n` for which `pick` holds (not reductions).
  virtual void emit_scalar_ops(const Nest& n, const sym::Analyzer& a,
                               const std::function<bool(int)>& pick) = 0;
};

/// A pseudo buffer id: the matmul template's accumulator tile. Its epilogue loads the product
/// from it (the NestPrinter maps it to the current tile row) instead of from memory.
constexpr int kAccumulatorBuffer = -2;

/// The loop a nest is vectorized along (cpp_plan.h: choose_vec_loop).
struct VecLoop {
  bool reduction;  // r loop (horizontal) or x loop
  size_t index;
};
/// The loop variable of `v` (r<index> or x<index>).
sym::Expr var_of(const VecLoop& v);
/// Stride of `index` along `var`: 0, 1, or anything else (-1 = not constant).
int64_t stride_along(const sym::Analyzer& a, const sym::Expr& index, const sym::Expr& var);

struct CppNestPlan;

/// Prints vector nest `n` as its plan says (np.vec): its x loops from np.first_loop on (the
/// earlier ones are open already), the vector loop stepping by coil::kFloatLanes, then a
/// masked tail; np.parallel: the vector loop is the kernel's parallel loop.
void emit_vec_nest(NestPrinter& p, const Nest& n, const CppNestPlan& np);

/// CppTile2DKernel (np.tile): the loops are tiled by lanes x lanes; each transposed operand is
/// read into an L1 tile with vector loads along x0, transposed in the tile, and then read back
/// as vectors along x1, so both the read and the write are contiguous in memory.
void emit_tile2d_nest(NestPrinter& p, const Nest& n, const CppNestPlan& np);

/// A column reduction (np.row_split), vectorized along x0 and split over rows: each of a fixed
/// number of row chunks reduces its rows into a partial row that stays in cache, streaming the
/// input in memory order; the partials are then combined in chunk order, so the result is the
/// same for any thread count. Inductor parallelizes only over column vectors here (64 for 1024
/// columns) and walks each column strip down all the rows.
void emit_row_split_reduction(NestPrinter& p, const Nest& n, const CppNestPlan& np);

/// Prints a pointwise vector nest's innermost loop over [begin, end) (C++ expressions; the
/// outer loop variables are defined by the caller): whole vectors, then one masked tail. The
/// matmul template prints its epilogue on each tile row this way.
void emit_vec_segment(NestPrinter& p, const Nest& n, const CppNestPlan& np,
                      const std::string& begin, const std::string& end);

/// Horizontal float sums longer than this accumulate in a coil::CascadeSum.
constexpr int64_t kCascadeMinElements = 16384;
/// Independent vector accumulators of a horizontal reduction without a cascade.
constexpr int kAccumulators = 4;
/// Full-vector stores to a graph output of at least this many bytes bypass the caches
/// (cpp_plan.cpp: streamed_store).
constexpr int64_t kStreamMinBytes = int64_t{16} << 20;

constexpr int64_t kRowSplitMaxColumns = 16384;
constexpr int64_t kRowSplitMinRows = 1024;

}  // namespace coil
