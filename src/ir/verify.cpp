#include "ir/verify.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "ir/loop_extents.h"
#include "sym/analyzer.h"
#include "sym/size_hints.h"

namespace coil {

namespace {

// A layout's sizes as the specs of templates and library calls hold them: numbers (a
// size-generic compile's symbols at their hints; -1 where neither).
std::vector<int64_t> hinted_sizes(const Shape& s) {
  std::vector<int64_t> out;
  for (const sym::Expr& d : s) out.push_back(sym::hint(d).value_or(-1));
  return out;
}

std::optional<int64_t> numel_of(const Buffer& b) {
  return sym::hint(b.layout.numel());
}

/// sym::evaluate and sym::free_symbols memoized per node: index expressions are DAGs whose
/// subexpressions are shared (a reshape reads its flat index twice), so a plain recursion over a
/// chain of views is exponential in its depth.
class ExprWalker {
 public:
  int64_t evaluate(const sym::Expr& e, const std::map<std::string, int64_t>& at) {
    values_.clear();
    return eval(e, at);
  }
  std::set<sym::Expr> symbols(const sym::Expr& e) {
    std::set<sym::Expr> out;
    std::set<const sym::ExprNode*> seen;
    collect(e, seen, out);
    return out;
  }

 private:
  int64_t eval(const sym::Expr& e, const std::map<std::string, int64_t>& at) {
    auto it = values_.find(e.get());
    if (it != values_.end()) return it->second;
    auto ops = e.operands();
    int64_t v = 0;
    switch (e.kind()) {
      case sym::ExprKind::Const:
        v = e.const_value();
        break;
      case sym::ExprKind::Symbol: {
        // Loop variables from `at`; a size-generic compile's size symbols at their hints.
        auto bound = at.find(e.symbol_name());
        auto hinted = bound == at.end() ? sym::hint(e) : std::nullopt;
        v = bound != at.end() ? bound->second : hinted.value();
        break;
      }
      case sym::ExprKind::Add:
        for (const auto& o : ops)
          v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(eval(o, at)));
        break;
      case sym::ExprKind::Mul:
        v = 1;
        for (const auto& o : ops)
          v = static_cast<int64_t>(static_cast<uint64_t>(v) * static_cast<uint64_t>(eval(o, at)));
        break;
      case sym::ExprKind::FloorDiv:
      case sym::ExprKind::Mod: {
        int64_t a = eval(ops[0], at), b = eval(ops[1], at);
        if (b == 0) break;  // b > 0 in valid expressions
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        v = e.kind() == sym::ExprKind::FloorDiv ? q : a - q * b;
        break;
      }
      case sym::ExprKind::Min:
        v = INT64_MAX;
        for (const auto& o : ops) v = std::min(v, eval(o, at));
        break;
      case sym::ExprKind::Max:
        v = INT64_MIN;
        for (const auto& o : ops) v = std::max(v, eval(o, at));
        break;
    }
    values_[e.get()] = v;
    return v;
  }
  void collect(const sym::Expr& e, std::set<const sym::ExprNode*>& seen, std::set<sym::Expr>& out) {
    if (!seen.insert(e.get()).second) return;
    if (e.is_symbol()) out.insert(e);
    for (const auto& o : e.operands()) collect(o, seen, out);
  }
  std::unordered_map<const sym::ExprNode*, int64_t> values_;
};

bool is_integer_dtype(DType t) {
  return !is_floating(t) && t != DType::Bool;
}

/// "tmp4 = load(buf7, 3*x0 + x1) : f32", the op as the IR dump prints it.
std::string describe_op(const IrProgram& p, const LoopBody& body, size_t i) {
  const BodyOp& op = body.op(static_cast<int>(i));
  std::string what;
  if (op.op == LoopOp::load || op.op == LoopOp::store) {
    std::string name = op.buffer >= 0 && op.buffer < static_cast<int>(p.buffers.size())
                           ? p.buffer(op.buffer).name
                           : fmt::format("#{}", op.buffer);
    what = fmt::format("{}, {}", name, op.index.defined() ? sym::to_string(op.index) : "?");
    if (op.args[0] >= 0) what += fmt::format(", ind=tmp{}", op.args[0]);
  } else if (op.op == LoopOp::index_expr) {
    what = op.index.defined() ? sym::to_string(op.index) : "?";
  } else {
    if (op.op == LoopOp::reduction) what = std::string(reduction_type_name(op.reduction));
    for (int a : op.args)
      if (a >= 0) what += fmt::format("{}tmp{}", what.empty() ? "" : ", ", a);
  }
  return fmt::format("tmp{} = {}({}) : {}", i, loop_op_name(op.op), what, dtype_name(op.dtype));
}

/// Checks one computation; `defined` holds the buffers readable before it.
class ComputationChecker {
 public:
  ComputationChecker(const IrProgram& p, const ComputedBuffer& c, std::vector<std::string>& errors)
      : p_(p), c_(c), errors_(errors), label_(describe_computation(p, c)) {}

  void run(const std::vector<bool>& defined) {
    if (!check_ranges()) return;
    if (!check_structure()) return;
    check_reads(defined);
    check_dtypes();
    check_indices();
    check_sites();
    if (c_.is_opaque()) check_spec();
    check_origins();
  }

 private:
  template <typename... Args>
  void fail(fmt::format_string<Args...> f, Args&&... args) {
    errors_.push_back(label_ + ": " + fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void fail_op(size_t i, fmt::format_string<Args...> f, Args&&... args) {
    errors_.push_back(fmt::format("{}: {}: ", label_, describe_op(p_, c_.body, i)) +
                      fmt::format(f, std::forward<Args>(args)...));
  }
  const BodyOp& op(size_t i) const { return c_.body.op(static_cast<int>(i)); }
  bool valid_buffer(int b) const { return b >= 0 && b < static_cast<int>(p_.buffers.size()); }

  // C3
  bool check_ranges() {
    bool ok = true;
    auto check = [&](const std::vector<sym::Expr>& ranges, const char* what) {
      for (const sym::Expr& r : ranges) {
        auto v = sym::hint(r);
        if (!v || *v < 0) {
          fail("{} {} is not a constant >= 0", what, shape_str(ranges));
          ok = false;
          return;
        }
      }
    };
    check(c_.ranges, "ranges");
    check(c_.reduction_ranges, "reduction ranges");
    // (A Reduction with no reduction ranges is allowed: softmax of a 0-d tensor on the CUDA
    // path reduces over one element; coil_fuzz seed 1 graph 22.)
    if (!c_.is_reduction() && !c_.reduction_ranges.empty())
      fail("reduction ranges {} outside a Reduction", shape_str(c_.reduction_ranges));
    if (!ok) return false;
    auto n = numel_of(p_.buffer(c_.buffer));
    int64_t covered = product(static_extents(c_.ranges));
    if (n && *n != covered)
      fail("ranges {} cover {} elements, its buffer {} has {}", shape_str(c_.ranges), covered,
           p_.buffer(c_.buffer).name, *n);
    return true;
  }

  // C4
  bool check_structure() {
    const auto& ops = c_.body.ops();
    if (ops.empty()) {
      fail("empty body");
      return false;
    }
    bool ok = true;
    int stores = 0, reductions = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const BodyOp& o = ops[i];
      int arity = loop_op_arity(o.op);
      for (int k = 0; k < 3; ++k) {
        int a = o.args[static_cast<size_t>(k)];
        bool optional = o.op == LoopOp::load && k == 0;  // an indirect load's index
        if (k < arity || optional) {
          if (a >= static_cast<int>(i) || (a < 0 && !optional)) {
            fail_op(i, "operand {} is {} (not an earlier op: use before definition)", k,
                    a < 0 ? std::string("missing") : fmt::format("tmp{}", a));
            ok = false;
          }
        } else if (a != -1) {
          fail_op(i, "operand {} set on an op of {} operand(s)", k, arity);
          ok = false;
        }
      }
      if ((o.op == LoopOp::load || o.op == LoopOp::store) && !valid_buffer(o.buffer)) {
        fail_op(i, "no such buffer");
        ok = false;
      }
      if ((o.op == LoopOp::load || o.op == LoopOp::store || o.op == LoopOp::index_expr) &&
          !o.index.defined()) {
        fail_op(i, "no index expression");
        ok = false;
      }
      if (o.op == LoopOp::store) ++stores;
      if (o.op == LoopOp::reduction) ++reductions;
    }
    if (!ok) return false;
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].op == LoopOp::load && ops[i].args[0] >= 0 &&
          op(static_cast<size_t>(ops[i].args[0])).op != LoopOp::indirect_index)
        fail_op(i, "its index operand tmp{} is not an indirect_index", ops[i].args[0]);
    if (stores != 1 || ops.back().op != LoopOp::store) {
      fail("{} store(s); a body ends with exactly one store", stores);
      return false;
    }
    if (ops.back().buffer != c_.buffer)
      fail_op(ops.size() - 1, "stores to {}, but the computation writes {}",
              p_.buffer(ops.back().buffer).name, p_.buffer(c_.buffer).name);
    if (c_.is_reduction()) {
      if (reductions != 1) {
        fail("{} reduction ops; a Reduction has exactly one", reductions);
      } else {
        int r = c_.body.reduction_op();
        for (size_t i = 0; i < ops.size(); ++i) {
          bool uses = std::find(ops[i].args.begin(), ops[i].args.end(), r) != ops[i].args.end();
          if (uses && ops[i].op != LoopOp::store)
            fail_op(i, "uses the reduction's value tmp{}, which only the store may use", r);
        }
        if (ops.back().args[0] != r)
          fail_op(ops.size() - 1, "a Reduction stores tmp{}, not its reduction tmp{}",
                  ops.back().args[0], r);
      }
    } else if (reductions > 0) {
      fail_op(static_cast<size_t>(c_.body.reduction_op()), "a reduction op in a {}",
              loop_kind_name(c_.kind));
    }
    return true;
  }

  // C2
  void check_reads(const std::vector<bool>& defined) {
    for (size_t i = 0; i < c_.body.ops().size(); ++i) {
      const BodyOp& o = op(i);
      if (o.op != LoopOp::load) continue;
      if (o.buffer == c_.buffer)
        fail_op(i, "reads the buffer it writes");
      else if (!defined[static_cast<size_t>(o.buffer)])
        fail_op(i, "reads {} ({}) before any computation writes it", p_.buffer(o.buffer).name,
                buffer_kind_name(p_.buffer(o.buffer).kind));
    }
  }

  // C5
  void check_dtypes() {
    const auto& ops = c_.body.ops();
    auto arg_dtype = [&](const BodyOp& o, int k) {
      return ops[static_cast<size_t>(o.args[k])].dtype;
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      const BodyOp& o = ops[i];
      if (is_low_precision(o.dtype)) {
        fail_op(i, "a value of dtype {}: f16/bf16 values compute in f32", dtype_name(o.dtype));
        continue;
      }
      auto expect = [&](bool cond, const char* rule) {
        if (!cond) fail_op(i, "{}", rule);
      };
      auto operands_are = [&](DType t) {
        for (int k = 0; k < loop_op_arity(o.op); ++k)
          if (arg_dtype(o, k) != t) return false;
        return true;
      };
      switch (o.op) {
        case LoopOp::load: {
          DType want = compute_dtype(p_.buffer(o.buffer).layout.dtype);
          if (o.dtype != want)
            fail_op(i, "loads {} as {}, but its buffer's compute dtype is {} ({})",
                    p_.buffer(o.buffer).name, dtype_name(o.dtype), dtype_name(want),
                    dtype_name(p_.buffer(o.buffer).layout.dtype));
          if (o.args[0] >= 0 && !is_integer_dtype(arg_dtype(o, 0)))
            fail_op(i, "indirect index of dtype {}", dtype_name(arg_dtype(o, 0)));
          break;
        }
        case LoopOp::store: {
          if (o.dtype != arg_dtype(o, 0))
            fail_op(i, "a store of dtype {} stores a value of dtype {}", dtype_name(o.dtype),
                    dtype_name(arg_dtype(o, 0)));
          DType want = compute_dtype(p_.buffer(o.buffer).layout.dtype);
          if (!c_.is_opaque() && arg_dtype(o, 0) != want)
            fail_op(i, "stores a {} value into {} of dtype {} (compute dtype {})",
                    dtype_name(arg_dtype(o, 0)), p_.buffer(o.buffer).name,
                    dtype_name(p_.buffer(o.buffer).layout.dtype), dtype_name(want));
          break;
        }
        case LoopOp::constant:
          break;
        case LoopOp::index_expr:
          expect(is_integer_dtype(o.dtype), "an index_expr of a non-integer dtype");
          break;
        case LoopOp::indirect_index:
          expect(o.dtype == DType::I64, "an indirect_index gives i64");
          expect(is_integer_dtype(arg_dtype(o, 0)), "an indirect_index takes an integer");
          break;
        case LoopOp::to_dtype:
          break;
        case LoopOp::round_to_bf16:
        case LoopOp::round_to_f16:
          expect(o.dtype == DType::F32 && operands_are(DType::F32),
                 "rounding to f16/bf16 takes and gives f32");
          break;
        case LoopOp::abs:
        case LoopOp::neg:
        case LoopOp::exp:
        case LoopOp::log:
        case LoopOp::log1p:
        case LoopOp::expm1:
        case LoopOp::sqrt:
        case LoopOp::rsqrt:
        case LoopOp::reciprocal:
        case LoopOp::relu:
        case LoopOp::sigmoid:
        case LoopOp::tanh:
        case LoopOp::erf:
        case LoopOp::sin:
        case LoopOp::cos:
        case LoopOp::floor:
        case LoopOp::ceil:
        case LoopOp::round:
        case LoopOp::sign:
        case LoopOp::add:
        case LoopOp::sub:
        case LoopOp::mul:
        case LoopOp::div:
        case LoopOp::pow:
        case LoopOp::maximum:
        case LoopOp::minimum:
        case LoopOp::fmod:
          if (!operands_are(o.dtype)) {
            std::vector<std::string_view> names;
            for (int k = 0; k < loop_op_arity(o.op); ++k)
              names.push_back(dtype_name(arg_dtype(o, k)));
            fail_op(i, "operands {} for a result of dtype {} (they must agree)",
                    fmt::join(names, ", "), dtype_name(o.dtype));
          }
          break;
        case LoopOp::eq:
        case LoopOp::ne:
        case LoopOp::lt:
        case LoopOp::le:
        case LoopOp::gt:
        case LoopOp::ge:
          expect(o.dtype == DType::Bool, "a comparison gives bool");
          if (arg_dtype(o, 0) != arg_dtype(o, 1))
            fail_op(i, "compares {} with {} (operands must agree)", dtype_name(arg_dtype(o, 0)),
                    dtype_name(arg_dtype(o, 1)));
          break;
        case LoopOp::logical_not:
        case LoopOp::isnan:
        case LoopOp::logical_and:
        case LoopOp::logical_or:
          expect(o.dtype == DType::Bool, "a logical op or isnan gives bool");
          break;
        case LoopOp::where:
          expect(arg_dtype(o, 0) == DType::Bool, "where's condition is bool");
          if (arg_dtype(o, 1) != o.dtype || arg_dtype(o, 2) != o.dtype)
            fail_op(i, "where of {} and {} for a result of dtype {} (they must agree)",
                    dtype_name(arg_dtype(o, 1)), dtype_name(arg_dtype(o, 2)), dtype_name(o.dtype));
          break;
        case LoopOp::reduction:
          if (o.reduction == ReductionType::argmax || o.reduction == ReductionType::argmin) {
            expect(o.dtype == DType::I64, "argmax/argmin give i64");
          } else if (arg_dtype(o, 0) != o.dtype) {
            fail_op(i, "a {} of {} values gives {} (they must agree)",
                    reduction_type_name(o.reduction), dtype_name(arg_dtype(o, 0)),
                    dtype_name(o.dtype));
          }
          break;
      }
    }
  }

  // C6, C7
  void check_indices() {
    std::set<sym::Expr> vars;
    for (size_t k = 0; k < c_.ranges.size(); ++k) vars.insert(loop_var(static_cast<int>(k)));
    std::set<sym::Expr> rvars;
    for (size_t k = 0; k < c_.reduction_ranges.size(); ++k)
      rvars.insert(reduction_var(static_cast<int>(k)));
    std::vector<int64_t> xs = static_extents(c_.ranges), rs = static_extents(c_.reduction_ranges);
    bool empty = product(xs) == 0 || product(rs) == 0;
    sym::Analyzer a = loop_analyzer(c_.ranges, c_.reduction_ranges);
    sym::bind_size_hints(a, /*exact=*/true);  // proofs at the sizes being compiled
    for (size_t i = 0; i < c_.body.ops().size(); ++i) {
      const BodyOp& o = op(i);
      if (!o.index.defined()) continue;
      bool indirect = is_indirect_load(o);
      bool ok = true;
      for (const sym::Expr& s : walker_.symbols(o.index)) {
        if (vars.count(s)) continue;
        if (rvars.count(s) && o.op != LoopOp::store) continue;
        if (s == indirect_var() && indirect) continue;
        if (sym::hint(s)) continue;  // a size symbol of a size-generic compile
        ok = false;
        if (rvars.count(s))
          fail_op(i, "a store indexed by the reduction variable {}", sym::to_string(s));
        else if (s == indirect_var())
          fail_op(i, "uses {} without an indirect_index operand", sym::to_string(s));
        else
          fail_op(i, "index uses {}, not a loop variable of ranges {}{}", sym::to_string(s),
                  shape_str(c_.ranges),
                  c_.reduction_ranges.empty()
                      ? std::string()
                      : fmt::format(" x reduction ranges {}", shape_str(c_.reduction_ranges)));
      }
      if (!ok || empty || o.op == LoopOp::index_expr || c_.is_opaque()) continue;
      const Buffer& b = p_.buffer(o.buffer);
      auto n = numel_of(b);
      if (!n) continue;  // B1 reports it
      int64_t ind_size = indirect ? op(static_cast<size_t>(o.args[0])).ivalue : 0;
      std::optional<sym::Analyzer> ai;
      if (indirect) {
        ai = a;
        ai->bind(indirect_var(), 0, std::max<int64_t>(ind_size - 1, 0));
      }
      const sym::Analyzer& an = indirect ? *ai : a;
      bool proven = an.statically_known_nonnegative(o.index) && an.statically_known_lt(o.index, *n);
      if (proven) continue;
      if (o.op == LoopOp::store) {
        fail_op(i, "store not provably inside {} ({} elements)", b.name, *n);
        continue;
      }
      if (auto at = corner_out_of_bounds(o.index, xs, rs, ind_size, *n))
        fail_op(i, "reads {} out of bounds ({} elements) at {}", b.name, *n, *at);
    }
  }

  /// A corner of the iteration space at which `index` leaves [0, numel), printed.
  std::optional<std::string> corner_out_of_bounds(const sym::Expr& index,
                                                  const std::vector<int64_t>& xs,
                                                  const std::vector<int64_t>& rs, int64_t ind_size,
                                                  int64_t numel) {
    std::vector<std::pair<std::string, int64_t>> vars;  // name, max
    for (size_t k = 0; k < xs.size(); ++k) vars.emplace_back(fmt::format("x{}", k), xs[k] - 1);
    for (size_t k = 0; k < rs.size(); ++k) vars.emplace_back(fmt::format("r{}", k), rs[k] - 1);
    if (ind_size > 0) vars.emplace_back("ind", ind_size - 1);
    auto try_point = [&](const std::map<std::string, int64_t>& at) -> std::optional<std::string> {
      int64_t v = walker_.evaluate(index, at);
      if (v >= 0 && v < numel) return std::nullopt;
      std::vector<std::string> parts;
      for (const auto& [name, value] : at) parts.push_back(fmt::format("{}={}", name, value));
      return fmt::format("{} (index {})", fmt::join(parts, ", "), v);
    };
    std::map<std::string, int64_t> zeros, maxes;
    for (const auto& [name, max] : vars) {
      zeros[name] = 0;
      maxes[name] = max;
    }
    if (auto r = try_point(zeros)) return r;
    if (auto r = try_point(maxes)) return r;
    for (const auto& [name, max] : vars) {
      auto at = zeros;
      at[name] = max;
      if (auto r = try_point(at)) return r;
    }
    return std::nullopt;
  }

  // C8
  void check_sites() {
    for (size_t i = 0; i < c_.body.ops().size(); ++i) {
      const BodyOp& o = op(i);
      if (o.op == LoopOp::indirect_index && o.ivalue <= 0)
        fail_op(i, "an indirect_index into a dim of size {}", o.ivalue);
      std::optional<RunCheck::Kind> want;
      if (o.op == LoopOp::indirect_index) want = RunCheck::Kind::index_in_range;
      if (o.op == LoopOp::fmod && is_integer_dtype(o.dtype)) want = RunCheck::Kind::nonzero_divisor;
      if (o.op == LoopOp::pow && is_integer_dtype(o.dtype))
        want = RunCheck::Kind::nonnegative_exponent;
      if (o.site < 0) {
        if (o.op == LoopOp::indirect_index) fail_op(i, "an indirect_index without a run check");
        continue;
      }
      if (o.site >= static_cast<int>(p_.run_checks.size())) {
        fail_op(i, "run check {} of {}", o.site, p_.run_checks.size());
      } else if (!want) {
        fail_op(i, "a run check on an op that makes none");
      } else if (p_.run_checks[static_cast<size_t>(o.site)].kind != *want) {
        fail_op(i, "run check {} ({}) is of the wrong kind for this op", o.site,
                p_.run_checks[static_cast<size_t>(o.site)].op);
      }
    }
  }

  // C9
  void check_spec() {
    std::vector<int> loads, expected;
    for (const BodyOp& o : c_.body.ops())
      if (o.op == LoopOp::load) loads.push_back(o.buffer);
    const Buffer& out = p_.buffer(c_.buffer);
    if (c_.kind == LoopKind::Template && (!c_.matmul || c_.conv || c_.attention || c_.index_add)) {
      fail("a Template computes one matmul (and no conv2d, attention or index_add)");
      return;
    }
    if (c_.kind == LoopKind::Extern && int(c_.matmul != nullptr) + int(c_.conv != nullptr) +
                                               int(c_.attention != nullptr) +
                                               int(c_.index_add != nullptr) !=
                                           1) {
      fail(
          "an Extern calls exactly one library function (a matmul, a conv2d, attention or "
          "index_add)");
      return;
    }
    if (c_.attention) {
      check_attention(out, expected);
    } else if (c_.index_add) {
      check_index_add(out, expected);
    } else if (c_.matmul) {
      const MatmulSpec& m = *c_.matmul;
      if (c_.kind == LoopKind::Template && m.impl != MatmulImpl::Template)
        fail("a Template whose matmul is given to {}", matmul_impl_name(m.impl));
      if (c_.kind == LoopKind::Extern && m.impl == MatmulImpl::Template)
        fail("an Extern matmul whose impl is the template");
      expected = {m.a.buffer, m.b.buffer};
      int64_t batch = product(m.batch);
      auto n = numel_of(out);
      if (n && batch * m.m * m.n != *n)
        fail("matmul batch [{}] x {} x {} does not fill {} ({} elements)", fmt::join(m.batch, ", "),
             m.m, m.n, out.name, *n);
      auto operand = [&](const StridedOperand& s, const char* what, int64_t rows, int64_t cols) {
        if (!valid_buffer(s.buffer)) {
          fail("matmul operand {} is no buffer", what);
          return;
        }
        const Buffer& b = p_.buffer(s.buffer);
        if (b.layout.dtype != m.dtype)
          fail("matmul operand {} ({}) is {}, the spec's dtype is {}", what, b.name,
               dtype_name(b.layout.dtype), dtype_name(m.dtype));
        if (s.batch_strides.size() != m.batch.size()) {
          fail("matmul operand {} has {} batch strides for {} batch dims", what,
               s.batch_strides.size(), m.batch.size());
          return;
        }
        if (batch == 0 || rows == 0 || cols == 0) return;
        int64_t lo = s.offset, hi = s.offset;
        auto span = [&](int64_t stride, int64_t extent) {
          (stride < 0 ? lo : hi) += stride * (extent - 1);
        };
        for (size_t d = 0; d < m.batch.size(); ++d) span(s.batch_strides[d], m.batch[d]);
        span(s.row_stride, rows);
        span(s.col_stride, cols);
        auto bn = numel_of(b);
        if (bn && (lo < 0 || hi >= *bn))
          fail("matmul operand {} addresses elements {}..{} of {} ({} elements)", what, lo, hi,
               b.name, *bn);
      };
      operand(m.a, "a", m.m, m.k);
      operand(m.b, "b", m.k, m.n);
    } else {
      const Conv2dSpec& cv = *c_.conv;
      expected = {cv.x, cv.w};
      if (cv.bias >= 0) expected.push_back(cv.bias);
      if (cv.expand) {
        expected.push_back(cv.expand->w);
        if (cv.expand->bias >= 0) expected.push_back(cv.expand->bias);
      }
      auto operand = [&](int id, const char* what, const std::vector<int64_t>& sizes) {
        if (!valid_buffer(id)) {
          fail("conv2d operand {} is no buffer", what);
          return;
        }
        const Buffer& b = p_.buffer(id);
        if (b.layout.dtype != DType::F32)
          fail("conv2d operand {} ({}) is {}, not f32", what, b.name, dtype_name(b.layout.dtype));
        if (hinted_sizes(b.layout.sizes) != sizes)
          fail("conv2d operand {} ({}) has sizes {}, the spec says {}", what, b.name,
               shape_str(b.layout.sizes), shape_str(make_shape(sizes)));
      };
      if (cv.expand) {
        if (!runs_on_coil_depthwise(cv)) fail("conv2d: only a depthwise conv takes an expand conv");
        operand(cv.x, "x", {cv.n, cv.expand->c, cv.h, cv.wd});
        operand(cv.expand->w, "expand w", {cv.c, cv.expand->c, 1, 1});
        if (cv.expand->bias >= 0) operand(cv.expand->bias, "expand bias", {cv.c});
      } else {
        operand(cv.x, "x", {cv.n, cv.c, cv.h, cv.wd});
      }
      operand(cv.w, "w", {cv.oc, cv.groups > 0 ? cv.c / cv.groups : 0, cv.kh, cv.kw});
      if (cv.bias >= 0) operand(cv.bias, "bias", {cv.oc});
      const std::vector<int64_t> out_sizes = hinted_sizes(out.layout.sizes);
      if (out_sizes.size() != 4 || out_sizes[0] != cv.n || out_sizes[1] != cv.oc)
        fail("conv2d output {} has sizes {}, expected [{}, {}, h, w]", out.name,
             shape_str(out.layout.sizes), cv.n, cv.oc);
    }
    // One load per distinct operand (x @ x loads x once: the body CSEs identical loads).
    std::vector<int> distinct;
    for (int b : expected)
      if (std::find(distinct.begin(), distinct.end(), b) == distinct.end()) distinct.push_back(b);
    expected = distinct;
    if (loads != expected)
      fail("the body loads [{}], the spec's operands are [{}]", fmt::join(loads, ", "),
           fmt::join(expected, ", "));
  }

  // C9 for index_add: contiguous operands of the spec's sizes; the index an integer, x and src
  // of the result's dtype; a run check of the right kind.
  void check_index_add(const Buffer& out, std::vector<int>& expected) {
    const IndexAddSpec& a = *c_.index_add;
    if (a.x >= 0) expected.push_back(a.x);
    expected.push_back(a.index);
    expected.push_back(a.src);
    auto operand = [&](int id, const char* what, int64_t numel, bool integer) {
      if (!valid_buffer(id)) {
        fail("index_add operand {} is no buffer", what);
        return;
      }
      const Buffer& b = p_.buffer(id);
      const DType t = b.layout.dtype;
      if (integer ? t != DType::I32 && t != DType::I64 : t != a.dtype)
        fail("index_add operand {} ({}) is {}", what, b.name, dtype_name(t));
      if (b.layout.strides != contiguous_layout(t, b.layout.sizes).strides)
        fail("index_add operand {} ({}) is not contiguous", what, b.name);
      auto bn = numel_of(b);
      if (bn && *bn != numel)
        fail("index_add operand {} ({}) has {} elements, the spec says {}", what, b.name, *bn,
             numel);
    };
    if (a.x >= 0) operand(a.x, "x", a.outer * a.n * a.inner, false);
    operand(a.index, "index", a.k, true);
    operand(a.src, "src", a.outer * a.k * a.inner, false);
    operand(c_.buffer, "result", a.outer * a.n * a.inner, false);
    if (a.site < 0 || a.site >= static_cast<int>(p_.run_checks.size()) ||
        p_.run_checks[static_cast<size_t>(a.site)].kind != RunCheck::Kind::index_in_range)
      fail("index_add: run check {} is no index check", a.site);
    (void)out;
  }

  // C9 for attention: operands are buffers of the spec's dtype and sizes.
  void check_attention(const Buffer& out, std::vector<int>& expected) {
    const AttentionSpec& a = *c_.attention;
    const bool lse_only = a.kernel == AttentionKernel::logsumexp;
    const bool grad = !lse_only && a.kernel != AttentionKernel::forward;
    for (int b : {a.q, a.k, a.v, a.out, a.grad_out, a.lse, a.mask})
      if (b >= 0) expected.push_back(b);
    // Every element an operand's strides address lies inside its buffer.
    auto operand = [&](int id, const char* what, int64_t offset,
                       const std::array<int64_t, 3>& strides, const std::vector<int64_t>& sizes) {
      if (!valid_buffer(id)) {
        fail("attention operand {} is no buffer", what);
        return;
      }
      const Buffer& b = p_.buffer(id);
      if (b.layout.dtype != a.dtype)
        fail("attention operand {} ({}) is {}, the spec's dtype is {}", what, b.name,
             dtype_name(b.layout.dtype), dtype_name(a.dtype));
      int64_t lo = offset, hi = offset;
      for (size_t d = 0; d < 4; ++d) {
        if (sizes[d] == 0) return;
        const int64_t stride = d < 3 ? strides[d] : 1;
        (stride < 0 ? lo : hi) += stride * (sizes[d] - 1);
      }
      auto bn = numel_of(b);
      if (bn && (lo < 0 || hi >= *bn))
        fail("attention operand {} addresses elements {}..{} of {} ({} elements)", what, lo, hi,
             b.name, *bn);
    };
    operand(a.q, "q", a.q_offset, a.q_strides, {a.batch, a.heads, a.q_len, a.head_dim});
    operand(a.k, "k", a.k_offset, a.k_strides, {a.batch, a.kv_heads, a.kv_len, a.head_dim});
    if (!lse_only)
      operand(a.v, "v", a.v_offset, a.v_strides, {a.batch, a.kv_heads, a.kv_len, a.value_dim});
    if (lse_only != (a.v < 0))
      fail("attention's {} kernel {} v", lse_only ? "logsumexp" : "other",
           lse_only ? "reads" : "lacks");
    if (grad != (a.out >= 0 && a.grad_out >= 0 && a.lse >= 0))
      fail("attention_grad, and only it, reads out, grad_out and lse");
    // The backward's out, grad_out and lse are contiguous buffers of their sizes.
    auto contiguous = [&](int id, const char* what, DType t, const std::vector<int64_t>& sizes) {
      if (!valid_buffer(id)) {
        fail("attention operand {} is no buffer", what);
        return;
      }
      const Buffer& b = p_.buffer(id);
      if (hinted_sizes(b.layout.sizes) != sizes || b.layout.dtype != t ||
          b.layout.strides != contiguous_layout(t, b.layout.sizes).strides)
        fail("attention operand {} ({}) is {}{} strides {}, expected contiguous {}{}", what, b.name,
             dtype_name(b.layout.dtype), shape_str(b.layout.sizes), shape_str(b.layout.strides),
             dtype_name(t), shape_str(sizes));
    };
    if (grad) {
      const std::vector<int64_t> y{a.batch, a.heads, a.q_len, a.value_dim};
      contiguous(a.out, "out", a.dtype, y);
      contiguous(a.grad_out, "grad_out", a.dtype, y);
      contiguous(a.lse, "lse", DType::F32, {a.batch, a.heads, a.q_len});
    }
    if (a.kv_heads > 0 && a.heads % a.kv_heads != 0)
      fail("attention: {} kv heads do not divide {} heads", a.kv_heads, a.heads);
    if (a.mask >= 0 && valid_buffer(a.mask)) {
      DType t = p_.buffer(a.mask).layout.dtype;
      if (t != (a.bool_mask ? DType::Bool : DType::F32))
        fail("attention mask {} is {}, the spec says {}", p_.buffer(a.mask).name, dtype_name(t),
             a.bool_mask ? "bool" : "f32");
    }
    // The result: y [B, H, Tq, Dv], the logsumexp [B, H, Tq] f32, or a gradient in its input's
    // shape.
    std::vector<int64_t> sizes{a.batch, a.heads, a.q_len, a.value_dim};
    DType dtype = a.dtype;
    switch (a.kernel) {
      case AttentionKernel::forward:
        break;
      case AttentionKernel::logsumexp:
        sizes = {a.batch, a.heads, a.q_len};
        dtype = DType::F32;
        break;
      case AttentionKernel::grad_q:
        sizes = {a.batch, a.heads, a.q_len, a.head_dim};
        break;
      case AttentionKernel::grad_k:
        sizes = {a.batch, a.kv_heads, a.kv_len, a.head_dim};
        break;
      case AttentionKernel::grad_v:
        sizes = {a.batch, a.kv_heads, a.kv_len, a.value_dim};
        break;
    }
    if (hinted_sizes(out.layout.sizes) != sizes || out.layout.dtype != dtype ||
        out.layout.strides != contiguous_layout(dtype, out.layout.sizes).strides)
      fail("attention output {} is {}{} strides {}, expected contiguous {}{}", out.name,
           dtype_name(out.layout.dtype), shape_str(out.layout.sizes), shape_str(out.layout.strides),
           dtype_name(dtype), shape_str(sizes));
  }

  // C10
  void check_origins() {
    if (c_.origins.empty()) {
      fail("no origins (provenance)");
      return;
    }
    bool computed = false;
    for (size_t k = 0; k < c_.origins.size(); ++k) {
      if (!c_.origins[k].inlined) computed = true;
      if (k > 0 && c_.origins[k].node < c_.origins[k - 1].node)
        fail("origins are not in graph order ({} after {})", c_.origins[k].name,
             c_.origins[k - 1].name);
    }
    if (!computed) fail("every origin is inlined: none is the node it computes");
    if (c_.origin_names != describe_origins(c_.origins))
      fail("origin_names [{}] are not those of its origins [{}]", fmt::join(c_.origin_names, ", "),
           fmt::join(describe_origins(c_.origins), ", "));
  }

  const IrProgram& p_;
  const ComputedBuffer& c_;
  std::vector<std::string>& errors_;
  std::string label_;
  ExprWalker walker_;
};

}  // namespace

std::string describe_computation(const IrProgram& p, const ComputedBuffer& c) {
  std::string name = c.buffer >= 0 && c.buffer < static_cast<int>(p.buffers.size())
                         ? p.buffer(c.buffer).name
                         : fmt::format("#{}", c.buffer);
  if (c.origin_names.empty()) return fmt::format("{} {}", loop_kind_name(c.kind), name);
  return fmt::format("{} {} ({})", loop_kind_name(c.kind), name, fmt::join(c.origin_names, ", "));
}

std::vector<std::string> verify_program(const IrProgram& p) {
  std::vector<std::string> errors;
  auto fail = [&](std::string m) { errors.push_back(std::move(m)); };
  // B1
  std::set<std::string> names;
  bool layouts_ok = true;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    if (b.id != static_cast<int>(i))
      fail(fmt::format("buffer {}: id {} at position {}", b.name, b.id, i));
    if (b.name.empty() || !names.insert(b.name).second)
      fail(fmt::format("buffer {} (position {}): name empty or used twice", b.name, i));
    if (b.layout.sizes.size() != b.layout.strides.size()) {
      fail(fmt::format("buffer {}: {} sizes but {} strides", b.name, b.layout.sizes.size(),
                       b.layout.strides.size()));
      layouts_ok = false;
      continue;
    }
    for (size_t d = 0; d < b.layout.sizes.size(); ++d) {
      auto s = sym::hint(b.layout.sizes[d]);
      if (!s || *s < 0 || !sym::hint(b.layout.strides[d])) {
        fail(fmt::format("buffer {}: layout {} strides {} is not constant sizes >= 0", b.name,
                         shape_str(b.layout.sizes), shape_str(b.layout.strides)));
        layouts_ok = false;
        break;
      }
    }
  }
  // B2
  auto check_list = [&](const std::vector<int>& list, BufferKind kind, const char* what) {
    std::vector<int> listed(p.buffers.size(), 0);
    for (size_t k = 0; k < list.size(); ++k) {
      int id = list[k];
      if (id < 0 || id >= static_cast<int>(p.buffers.size())) {
        fail(fmt::format("{}[{}] = {} is no buffer", what, k, id));
        continue;
      }
      ++listed[static_cast<size_t>(id)];
      const Buffer& b = p.buffer(id);
      if (b.kind != kind || b.external_index != static_cast<int>(k))
        fail(fmt::format("{}[{}] is buffer {} ({}, external index {})", what, k, b.name,
                         buffer_kind_name(b.kind), b.external_index));
    }
    for (const Buffer& b : p.buffers)
      if (b.kind == kind && listed[static_cast<size_t>(b.id)] != 1)
        fail(fmt::format("buffer {} ({}) is listed {} times in {}", b.name, buffer_kind_name(kind),
                         listed[static_cast<size_t>(b.id)], what));
  };
  check_list(p.input_buffers, BufferKind::Input, "input_buffers");
  check_list(p.constant_buffers, BufferKind::Constant, "constant_buffers");
  check_list(p.output_buffers, BufferKind::Output, "output_buffers");
  if (p.constants.size() != p.constant_buffers.size()) {
    fail(fmt::format("{} constants for {} constant buffers", p.constants.size(),
                     p.constant_buffers.size()));
  } else {
    for (size_t k = 0; k < p.constants.size(); ++k) {
      int id = p.constant_buffers[k];
      if (id < 0 || id >= static_cast<int>(p.buffers.size())) continue;
      const Buffer& b = p.buffer(id);
      const auto& t = p.constants[k];
      if (!t)
        fail(fmt::format("constant buffer {} has no data", b.name));
      else if (t->dtype() != b.layout.dtype || make_shape(t->shape()) != b.layout.sizes)
        fail(fmt::format("constant buffer {} is {}{} but its data is {}{}", b.name,
                         dtype_name(b.layout.dtype), shape_str(b.layout.sizes),
                         dtype_name(t->dtype()), shape_str(make_shape(t->shape()))));
    }
  }
  if (!layouts_ok) return errors;
  // C1, then each computation
  std::vector<bool> defined(p.buffers.size(), false);
  for (const Buffer& b : p.buffers)
    if (b.kind == BufferKind::Input || b.kind == BufferKind::Constant)
      defined[static_cast<size_t>(b.id)] = true;
  std::vector<int> writer(p.buffers.size(), -1);
  for (size_t ci = 0; ci < p.computations.size(); ++ci) {
    const ComputedBuffer& c = p.computations[ci];
    if (c.buffer < 0 || c.buffer >= static_cast<int>(p.buffers.size())) {
      fail(fmt::format("computation {} writes no buffer ({})", ci, c.buffer));
      continue;
    }
    const Buffer& out = p.buffer(c.buffer);
    if (out.kind == BufferKind::Input || out.kind == BufferKind::Constant)
      fail(fmt::format("{}: writes {} buffer {}", describe_computation(p, c),
                       buffer_kind_name(out.kind), out.name));
    if (writer[static_cast<size_t>(c.buffer)] >= 0)
      fail(fmt::format("{}: writes {}, which computation {} wrote already",
                       describe_computation(p, c), out.name,
                       writer[static_cast<size_t>(c.buffer)]));
    writer[static_cast<size_t>(c.buffer)] = static_cast<int>(ci);
    ComputationChecker(p, c, errors).run(defined);
    defined[static_cast<size_t>(c.buffer)] = true;
  }
  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::Output && writer[static_cast<size_t>(b.id)] < 0)
      fail(fmt::format("output buffer {} is never written (output not produced)", b.name));
    if (b.kind == BufferKind::Intermediate && writer[static_cast<size_t>(b.id)] < 0)
      fail(fmt::format("intermediate buffer {} is never written (a dangling buffer)", b.name));
  }
  return errors;
}

}  // namespace coil
