// A loop body: the per-element computation of a Pointwise or Reduction node, kept as data.
// It is a small DAG of BodyOps in topological order (operands come before users); building
// goes through LoopBody's methods, which deduplicate identical ops (CSE), so a body never
// computes the same value twice. Index expressions are in terms of the node's loop variables
// x0, x1, ... (pointwise) and r0, r1, ... (reduction).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "coil/dtype.h"
#include "coil/expr.h"
#include "ir/loop_ops.h"

namespace coil {

/// The symbol a load's index uses for the value of its indirect_index operand (args[0]).
sym::Expr indirect_var();
/// True when `op` is a load through an indirect_index (it may read anywhere in its buffer).
struct BodyOp;
bool is_indirect_load(const BodyOp& op);

struct BodyOp {
  LoopOp op = LoopOp::constant;
  DType dtype = DType::F32;                // compute dtype of the result (store: of the value)
  std::array<int, 3> args = {-1, -1, -1};  // operand positions in the body
  int buffer = -1;                         // load/store: buffer id in the IrProgram
                                           // (load: args[0] >= 0 is an indirect_index)
  sym::Expr index;                         // load/store/index_expr
  double fvalue = 0;                       // constant (floating dtypes)
  int64_t ivalue = 0;                      // constant (integer and bool dtypes)
  ReductionType reduction = ReductionType::sum;  // reduction
  int site = -1;  // indirect_index, integer fmod/pow: its IrProgram::run_checks entry, or -1
  /// indirect_index: the dim's size where it is a size symbol's (ks0; ivalue is then its value
  /// at the size hints), else undefined.
  sym::Expr extent;

  bool operator==(const BodyOp& o) const;
};

class LoopBody {
 public:
  int load(int buffer, sym::Expr index, DType compute_dtype);
  int constant(double value, DType dtype);
  int index_expr(sym::Expr index, DType dtype);
  /// An i64 index into a dim of `size` elements from the integer `value` (loop_ops.h);
  /// `site` is its IrProgram::run_checks entry.
  /// `size`: the dim's extent; `extent`: the same as an expression where it is a size
  /// symbol's (a size-generic gather checks and clamps against the call's size).
  int indirect_index(int value, int64_t size, int site, sym::Expr extent = sym::Expr());
  /// A load whose `index` may use indirect_var(), standing for the indirect_index `ind`.
  int load_indirect(int buffer, sym::Expr index, DType compute_dtype, int ind);
  /// `value` converted to `dtype`; to f16/bf16 it is rounded and stays f32 (loop_ops.h).
  int to_dtype(int value, DType dtype);
  /// What a load of a `storage` buffer returns after a store of `value` to it (the store
  /// converts, f16/bf16 round): the value that store-to-load forwarding must use.
  int stored_value(int value, DType storage);
  /// Unary/binary/ternary math op; `dtype` is the result dtype; `site`: the run check it makes
  /// (integer fmod and pow), an IrProgram::run_checks entry.
  int compute(LoopOp op, DType dtype, std::initializer_list<int> args, int site = -1);
  int reduction(ReductionType type, int value, DType result_dtype);
  int store(int buffer, sym::Expr index, int value);
  /// Appends a fully formed op (operands already positions in this body), with CSE.
  int append(BodyOp op) { return add(std::move(op)); }

  const std::vector<BodyOp>& ops() const { return ops_; }
  const BodyOp& op(int i) const { return ops_[static_cast<size_t>(i)]; }
  DType dtype_of(int i) const { return op(i).dtype; }
  /// Position of the reduction op, or -1.
  int reduction_op() const;
  /// Replaces every index expression by substitute(index, map) (loop re-indexing).
  LoopBody substituted(const std::map<sym::Expr, sym::Expr>& map) const;

 private:
  int add(BodyOp op);
  std::vector<BodyOp> ops_;
  std::unordered_map<size_t, std::vector<int>> cse_;  // hash -> candidate positions
};

/// "tmp3 = add(tmp1, tmp2) : f32" lines, one per op.
std::string to_string(const LoopBody& body);

}  // namespace coil
