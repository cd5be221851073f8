// Internal to the CPU backend's vector printers (cpp_vec_kernel.cpp, cpp_vec_shapes.cpp): the
// printer of one vector body's ops and the vector spelling of each reduction.
#pragma once

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "codegen/cpp/cpp_nest.h"
#include "codegen/cpp/cpp_plan.h"
#include "codegen/cpp/cpp_printer.h"
#include "codegen/inject_bug.h"
#include "ir/ir.h"
#include "support/check.h"

namespace coil {

inline constexpr const char* kVec = "coil::Vec<float>";

/// The name of the lanes-in-use parameter of a vector step (print_vec_step).
inline constexpr const char* kStepCount = "count";

/// Prints the vector loop's step once, as the lambda `step(v, count[, extra])` that the loops
/// below it call: count is the number of lanes in use, the constant lane count for whole vectors
/// and fewer in a masked head or tail. The lambda is always inlined (COIL_INLINE), so a
/// whole-vector call compiles to the same unmasked code as a separately printed copy
/// (coil_vec_core.h: a count >= the lanes takes the plain load, store and blend). `body` prints
/// the ops with kStepCount as their count. The caller opens a scope for it (one `step` each).
/// The step captures the pointers it reads or writes by value (the kernel's pointer parameters
/// and const pointers to scratch rows) and the rest (accumulators, local rows, invariants) by
/// reference: a pointer read through a reference is reloaded after every call (a libmvec exp),
/// one held by value stays in a register, as in a separately printed loop.
inline void print_vec_step(NestPrinter& p, const Nest& n, const std::string& v,
                           const std::string& extra_params, const std::function<void()>& body,
                           const std::vector<std::string>& more_pointers = {}) {
  const CppKernelPlan& plan = p.plan();
  std::set<std::string> candidates(more_pointers.begin(), more_pointers.end());
  for (const BodyOp& op : n.body.ops()) {
    if ((op.op != LoopOp::load && op.op != LoopOp::store) || op.buffer < 0) continue;
    // Widened inputs are local arrays (by reference: a copy would copy the array).
    bool widened = false;
    for (const CppWidenedInput& wi : plan.widened) widened = widened || wi.buffer == op.buffer;
    if (plan.arg_name.count(op.buffer) && !plan.local_name.count(op.buffer) && !widened)
      candidates.insert(plan.arg_name.at(op.buffer));
  }
  CodeWriter& w = p.writer();
  w.linef("// one step of {0}, printed once: `{1}` lanes, {2} in whole vectors, fewer at the end",
          v, kStepCount, plan.lanes);
  const size_t head = w.size();
  constexpr const char* kCaptures = "[@captures@]";
  w.linef("auto step = {}(const int64_t {}, const int64_t {}{}) COIL_INLINE", kCaptures, v,
          kStepCount, extra_params);
  w.open();
  const size_t start = w.size();
  body();
  // Only the pointers the step names: "ptr[" or "&ptr[" in its text.
  const std::string_view text = std::string_view(w.str()).substr(start);
  std::string captures = "[&";
  for (const std::string& ptr : candidates)
    if (text.find(ptr + "[") != std::string_view::npos) captures += ", " + ptr;
  w.patch(head, kCaptures, captures + "]");
  w.close(";");
}

/// Prints the vector ops of a nest, for whole vectors (count empty) or `count` lanes (a masked
/// tail, head, or a step that print_vec_step shares between both).
class VecOpPrinter {
 public:
  VecOpPrinter(NestPrinter& p, const Nest& n, const sym::Analyzer& a, const CppVecPlan& v,
               std::string count, std::map<int, std::string> tiles = {})
      : p_(p),
        n_(n),
        a_(a),
        v_(v),
        var_(var_of(v.loop)),
        count_(std::move(count)),
        tiles_(std::move(tiles)) {}

  void emit(const std::function<bool(int)>& pick) {
    CodeWriter& w = p_.writer();
    for (int i = 0; i < static_cast<int>(n_.body.ops().size()); ++i) {
      // The scalar ops (v_.scalar) are printed in scalar form before the vector loop.
      if (!pick(i) || v_.scalar.count(i)) continue;
      const BodyOp& op = n_.body.op(i);
      std::string t = p_.tmp(n_, i);
      auto arg = [&](int k) { return p_.tmp(n_, op.args[static_cast<size_t>(k)]); };
      if ((op.op == LoopOp::where || op.op == LoopOp::to_dtype) && !v_.scalar.count(op.args[0])) {
        emit_mask_op(i, op, t);  // a select on a vector mask, or a mask's conversion
        continue;
      }
      if (op.dtype == DType::Bool && op.op != LoopOp::store && op.op != LoopOp::reduction) {
        emit_mask_op(i, op, t);
        continue;
      }
      if (op.op == LoopOp::where || op.op == LoopOp::to_dtype) {
        // Scalar-only ops whose operand 0 is a scalar op (vector_scalar_ops): a select of whole
        // vectors, or the scalar's conversion (spelled as the scalar printer does) broadcast.
        if (op.op == LoopOp::where) {
          w.linef("auto {} = {}::select({}, {}, {});", t, kVec, arg(0), arg(1), arg(2));
        } else {
          w.linef("auto {} = {}({});", t, kVec,
                  cpp_scalar_op(op, {arg(0)}, {n_.body.dtype_of(op.args[0])}));
        }
        continue;
      }
      switch (op.op) {
        case LoopOp::reduction:
          break;
        case LoopOp::load:
          if (tiles_.count(i)) {
            // A row of a transposed tile (CppTile2DKernel), contiguous in L1.
            w.linef("auto {} = {}::loadu(&{}[a * {}]{});", t, kVec, tiles_.at(i), p_.plan().lanes,
                    count_arg());
          } else {
            emit_load(i, op, t);
          }
          break;
        case LoopOp::store: {
          if (p_.plan().dropped_stores.count(op.buffer)) break;
          COIL_ASSERT(stride_along(a_, op.index, var_) == 1, "vector store must be contiguous");
          // A count: store_stream(p, count) streams whole vectors, stores fewer lanes masked.
          bool stream = v_.streamed.count(i) > 0;
          w.linef("{}.{}(&{}{});", arg(0), stream ? "store_stream" : "store",
                  p_.access(n_, op.buffer, op.index, a_), count_arg());
          break;
        }
        case LoopOp::constant:
          w.linef("auto {} = {}({});", t, kVec, cpp_float(op.fvalue));
          break;
        case LoopOp::neg:
          w.linef("auto {} = -{};", t, arg(0));
          break;
        case LoopOp::add:
          w.linef("auto {} = {} + {};", t, arg(0), arg(1));
          break;
        case LoopOp::sub:
          w.linef("auto {} = {} - {};", t, arg(0), arg(1));
          break;
        case LoopOp::mul:
          w.linef("auto {} = {} * {};", t, arg(0), arg(1));
          break;
        case LoopOp::div:
          w.linef("auto {} = {} / {};", t, arg(0), arg(1));
          break;
        case LoopOp::pow:
        case LoopOp::maximum:
        case LoopOp::minimum:
        case LoopOp::fmod:
          w.linef("auto {} = {}.{}({});", t, arg(0), loop_op_name(op.op), arg(1));
          break;
          COIL_CPP_VEC_UNARY_METHOD_OP_CASES
          if (op.op == LoopOp::relu) {  // the one op COIL_TESTING_INJECT_BUG may break
            w.linef("auto {} = {};", t, relu_expression(arg(0), ReluSyntax::cpp_method));
            break;
          }
          w.linef("auto {} = {}.{}();", t, arg(0), loop_op_name(op.op));
          break;
          COIL_CPP_SCALAR_ONLY_OP_CASES
          COIL_UNREACHABLE("{} is not vectorizable", loop_op_name(op.op));
      }
    }
  }

 private:
  std::string count_arg() const { return count_.empty() ? "" : ", " + count_; }

  static std::string cpp_float(double v) {
    if (std::isnan(v)) return "std::numeric_limits<float>::quiet_NaN()";
    if (std::isinf(v))
      return v > 0 ? "std::numeric_limits<float>::infinity()"
                   : "-std::numeric_limits<float>::infinity()";
    std::string s = fmt::format("{}", static_cast<float>(v));
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s + "f";
  }

  void emit_load(int i, const BodyOp& op, const std::string& t) {
    CodeWriter& w = p_.writer();
    std::string lv = p_.access(n_, op.buffer, op.index, a_);
    int64_t s = stride_along(a_, op.index, var_);
    if (s == 0) {
      w.linef("auto {} = {}(static_cast<float>({}));", t, kVec, lv);
    } else if (s == 1) {
      w.linef("auto {} = {}::loadu(&{}{});", t, kVec, lv, count_arg());
      auto ahead = v_.prefetch.find(i);
      if (ahead != v_.prefetch.end()) w.linef("coil::prefetch_ahead(&{}, {});", lv, ahead->second);
    } else if (s == 2 && p_.plan().storage_dtype(p_.program(), op.buffer) == DType::F32) {
      // Every other element (a stride-2 window's taps): two loads and a deinterleave.
      w.linef("auto {} = {}::loadu_stride2(&{}{});", t, kVec, lv, count_arg());
    } else {
      // Gather: each lane reads at its own index (the loop variable shadowed per lane).
      std::string v = var_.symbol_name();
      w.linef("alignas(64) float {}_lanes[{}] = {{}};", t, p_.plan().lanes);
      w.open();
      w.linef("const int64_t {0}_vec = {0};", v);
      w.linef("for (int64_t lane = 0; lane < {}; lane++)",
              count_.empty() ? std::to_string(p_.plan().lanes) : count_);
      w.open();
      w.linef("const int64_t {0} = {0}_vec + lane;", v);
      w.linef("{}_lanes[lane] = static_cast<float>({});", t, lv);
      w.close();
      w.close();
      w.linef("auto {0} = {1}::loadu({0}_lanes);", t, kVec);
    }
  }

  /// A mask op (mask_vector_op): masks are Vec<float> whose true lanes have every bit set, as
  /// coil_vec_core.h's comparisons return them; a bool load becomes one (`!= 0`), a store of one
  /// writes 1 for its true lanes (Vec::store to bool*).
  void emit_mask_op(int i, const BodyOp& op, const std::string& t) {
    CodeWriter& w = p_.writer();
    auto arg = [&](int k) { return p_.tmp(n_, op.args[static_cast<size_t>(k)]); };
    COIL_ASSERT(mask_vector_op(n_, op), "{} has no vector mask form", loop_op_name(op.op));
    const std::string zero = fmt::format("{}(0.0f)", kVec);
    const bool of_masks = loop_op_arity(op.op) > 0 && n_.body.dtype_of(op.args[0]) == DType::Bool;
    switch (op.op) {
      case LoopOp::load:
        emit_load(i, op, t + "_01");  // lanes 0 or 1
        w.linef("auto {0} = {0}_01 != {1};", t, zero);
        return;
      case LoopOp::logical_not:
        w.linef("auto {} = ~{};", t, arg(0));
        return;
      case LoopOp::logical_and:
        w.linef("auto {} = {} & {};", t, arg(0), arg(1));
        return;
      case LoopOp::logical_or:
        w.linef("auto {} = {} | {};", t, arg(0), arg(1));
        return;
      case LoopOp::eq:
        if (of_masks) {
          w.linef("auto {} = ~({} ^ {});", t, arg(0), arg(1));
        } else {
          w.linef("auto {} = {} == {};", t, arg(0), arg(1));
        }
        return;
      case LoopOp::ne:
        w.linef("auto {} = {} {} {};", t, arg(0), of_masks ? "^" : "!=", arg(1));
        return;
      case LoopOp::lt:
      case LoopOp::le:
      case LoopOp::gt:
      case LoopOp::ge: {
        const char* cmp = op.op == LoopOp::lt   ? "<"
                          : op.op == LoopOp::le ? "<="
                          : op.op == LoopOp::gt ? ">"
                                                : ">=";
        w.linef("auto {} = {} {} {};", t, arg(0), cmp, arg(1));
        return;
      }
      case LoopOp::isnan:
        w.linef("auto {} = {}.isnan();", t, arg(0));
        return;
      case LoopOp::where:  // mask ? a : b
        w.linef("auto {} = {}::blendv({}, {}, {});", t, kVec, arg(2), arg(1), arg(0));
        return;
      case LoopOp::to_dtype:
        if (op.dtype == DType::Bool) {
          w.linef("auto {} = {} != {};", t, arg(0), zero);  // NaN is true, as in C++
        } else {
          w.linef("auto {} = {}::blendv({}, {}(1.0f), {});", t, kVec, zero, kVec, arg(0));
        }
        return;
      default:
        COIL_UNREACHABLE("{} has no vector mask form", loop_op_name(op.op));
    }
  }

  NestPrinter& p_;
  const Nest& n_;
  const sym::Analyzer& a_;
  const CppVecPlan& v_;
  sym::Expr var_;
  std::string count_;
  std::map<int, std::string> tiles_;  // op -> tile array holding its transposed values
};

struct VecReduction {
  std::string init, combine, finalize;  // {acc} {v}; finalize reduces lanes
};

inline VecReduction vec_reduction(ReductionType t) {
  switch (t) {
    case ReductionType::sum:
      return {"0.0f", "{acc} + {v}", "{acc}.reduce_add()"};
    case ReductionType::prod:
      return {"1.0f", "{acc} * {v}", "{acc}.reduce_mul()"};
    case ReductionType::max:
      return {"coil::lowest<float>()", "{acc}.maximum({v})", "{acc}.reduce_max()"};
    case ReductionType::min:
      return {"coil::highest<float>()", "{acc}.minimum({v})", "{acc}.reduce_min()"};
    case ReductionType::argmax:
    case ReductionType::argmin:
      break;
  }
  COIL_UNREACHABLE("{} has no vector form", reduction_type_name(t));
}

}  // namespace coil
