// The loop-IR verifier: the invariants every pass over an IrProgram (lowering, index
// simplification, store-rounding elision, matmul autotuning) must keep, because the scheduler
// and both code generators rely on them. It runs after each of those passes when IR
// verification is on (driver/pass_checks.h: debug builds and the test suites); each message
// names the buffer, the computation and the op, and the invariant broken.
//
// Buffers and the program's lists:
//   B1  buffer ids are positions, names unique; layouts have as many strides as sizes, all
//       constants, sizes >= 0;
//   B2  input_buffers / constant_buffers / output_buffers list exactly the Input / Constant /
//       Output buffers, each at its external_index; every constant has data of its buffer's
//       dtype and shape.
// Computations (in execution order):
//   C1  a computation writes an Intermediate or Output buffer that nothing wrote before; every
//       Output buffer is written (the outputs are produced), and every Intermediate (none is
//       left dangling);
//   C2  every buffer a body loads is a graph input or constant, or was written by an earlier
//       computation (defined before use; a computation never reads its own buffer);
//   C3  ranges are constants >= 0 and cover the buffer (their product is its numel);
//       Pointwise, Template and Extern have no reduction ranges (a Reduction may have none:
//       softmax of a 0-d tensor reduces over one element);
//   C4  body structure: operands come before their users and match the op's arity; exactly one
//       store, the last op, writing the computation's buffer; a Reduction has exactly one
//       reduction op, whose value only the store uses; other kinds have none (reduction ops
//       only inside reductions); a load's optional operand is an indirect_index;
//   C5  dtypes: no value is f16/bf16 (they compute in f32); a load has its buffer's compute
//       dtype; a store has its value's dtype, which is its buffer's compute dtype (Pointwise and
//       Reduction); operands of arithmetic, comparisons, where and same-dtype reductions agree
//       with each other and the result; comparisons, isnan and logical ops give bool; where's
//       condition is bool; rounding ops take and give f32; indirect_index takes an integer and
//       gives i64; argmax/argmin give i64; index_expr is an integer;
//   C6  index expressions use only the loop variables of the nest: x0..x{n-1} for n ranges,
//       r0..r{m-1} for m reduction ranges (none in a store, none outside a Reduction), and
//       `ind` only in an indirect load; no size symbol is left;
//   C7  stores are provably in bounds of their buffer (the analyzer, sym/analyzer.h, over the
//       loop ranges); a load that the analyzer cannot prove in bounds is out of bounds at no
//       corner of the iteration space (all variables at 0, at their maximum, each one alone at
//       its maximum), indirect loads with `ind` anywhere in its dim; empty nests are skipped;
//   C8  run checks: an op's site indexes IrProgram::run_checks and its kind fits the op
//       (indirect_index: index_in_range; integer fmod: nonzero_divisor; integer pow:
//       nonnegative_exponent); no other op has a site; indirect_index has a size > 0;
//   C9  Template and Extern: a Template has a MatmulSpec (impl template), an Extern a MatmulSpec
//       given to a library, a Conv2dSpec or an AttentionSpec (exactly one); the body loads
//       exactly the spec's operands; attention operands are of the spec's dtype, every element
//       their strides address inside the buffer, the output contiguous, the mask bool or f32;
//       matmul operands have the spec's dtype and every element the product addresses
//       (offset + strides * (extents - 1)) lies inside its buffer; batch * m * n is the output's
//       numel; conv2d operands are f32 of the spec's sizes;
//   C10 provenance: origins are non-empty, in graph order, at least one not inlined, and
//       origin_names is describe_origins(origins).
#pragma once

#include <string>
#include <vector>

#include "ir/ir.h"

namespace coil {

/// Every broken invariant, one message each ("Pointwise buf3 (t2 (add)): tmp4 = load(buf7):
/// ..."); empty when the program is valid.
std::vector<std::string> verify_program(const IrProgram& program);

/// "Pointwise buf3 (t2 (add))": how verifier messages name a computation.
std::string describe_computation(const IrProgram& program, const ComputedBuffer& c);

}  // namespace coil
