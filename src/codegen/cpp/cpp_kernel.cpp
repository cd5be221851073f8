#include "codegen/cpp/cpp_kernel.h"

#include <algorithm>
#include <set>

#include "codegen/code_writer.h"
#include "codegen/cpp/cpp_printer.h"
#include "support/check.h"

namespace coil {

int decide_parallel_depth(const std::vector<int64_t>& ranges, int64_t total_work, int threads) {
  int64_t par = 1, seq = total_work;
  int depth = 0;
  for (int64_t r : ranges) {
    if (par >= 2 * threads || par == threads) break;
    if (seq / threads < kMinChunkSize) break;
    ++depth;
    par *= r;
    seq /= std::max<int64_t>(r, 1);
  }
  return depth;
}

namespace {

std::vector<int64_t> static_ranges(const std::vector<sym::Expr>& ranges) {
  std::vector<int64_t> out;
  for (const auto& r : ranges) {
    auto c = r.as_const();
    COIL_ASSERT(c.has_value(), "loop range {} is not static", sym::to_string(r));
    out.push_back(*c);
  }
  return out;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

/// "cpp_fused_add_mul_3" from the ops of the graph nodes a kernel came from.
std::string kernel_name(const IrProgram&, const ComputedBuffer& c, int index) {
  std::vector<std::string> ops;
  for (const auto& o : c.origin_names) {
    auto l = o.find('('), r = o.rfind(')');
    std::string op = l == std::string::npos ? o : o.substr(l + 1, r - l - 1);
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  }
  std::sort(ops.begin(), ops.end());
  if (ops.size() > 4) ops.resize(4);
  return fmt::format("cpp_fused_{}_{}", fmt::join(ops, "_"), index);
}

struct ReductionSpec {
  std::string init, combine, combine_partial, finalize, acc_type;
};

ReductionSpec reduction_spec(ReductionType t, DType value_dtype, DType result_dtype) {
  std::string vt = cpp_value_type(value_dtype), rt = cpp_value_type(result_dtype);
  switch (t) {
    case ReductionType::sum:
      return {"0", "{acc} = {acc} + {v};", "{acc} = {acc} + {p};", "{acc}", rt};
    case ReductionType::prod:
      return {"1", "{acc} = {acc} * {v};", "{acc} = {acc} * {p};", "{acc}", rt};
    case ReductionType::max:
      return {fmt::format("coil::lowest<{}>()", rt),
              fmt::format("{{acc}} = coil::maximum<{}>({{acc}}, {{v}});", rt),
              fmt::format("{{acc}} = coil::maximum<{}>({{acc}}, {{p}});", rt), "{acc}", rt};
    case ReductionType::min:
      return {fmt::format("coil::highest<{}>()", rt),
              fmt::format("{{acc}} = coil::minimum<{}>({{acc}}, {{v}});", rt),
              fmt::format("{{acc}} = coil::minimum<{}>({{acc}}, {{p}});", rt), "{acc}", rt};
    case ReductionType::argmax:
    case ReductionType::argmin: {
      std::string f = t == ReductionType::argmax ? "argmax_combine" : "argmin_combine";
      return {fmt::format("{{{}(0), -1}}", vt),
              fmt::format("coil::{}({{acc}}, {{v}}, {{ridx}});", f),
              fmt::format("coil::{}({{acc}}, {{p}});", f), "{acc}.index",
              fmt::format("coil::IndexValue<{}>", vt)};
    }
  }
  COIL_UNREACHABLE("bad reduction");
}

std::string subst(std::string s, const std::string& key, const std::string& value) {
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + value.size()))
    s.replace(p, key.size(), value);
  return s;
}

class KernelPrinter {
 public:
  KernelPrinter(const IrProgram& program, const ComputedBuffer& c) : program_(program), c_(c) {
    ranges_ = static_ranges(c.ranges);
    red_ranges_ = static_ranges(c.reduction_ranges);
    for (size_t i = 0; i < ranges_.size(); ++i)
      analyzer_.bind_loop_var(loop_var(static_cast<int>(i)), ranges_[i]);
    for (size_t i = 0; i < red_ranges_.size(); ++i)
      analyzer_.bind_loop_var(reduction_var(static_cast<int>(i)), red_ranges_[i]);
  }

  CppKernelSource generate(int index) {
    CppKernelSource k;
    k.name = kernel_name(program_, c_, index);
    k.origins = c_.origin_names;
    int n_in = 0;
    for (int b : c_.reads()) {
      k.args.push_back({b, false, fmt::format("in_ptr{}", n_in++)});
      k.bytes_read += buffer_bytes(b);
    }
    k.args.push_back({c_.buffer, true, "out_ptr0"});
    k.bytes_written = buffer_bytes(c_.buffer);
    for (const auto& a : k.args) arg_name_[a.buffer] = a.name;

    std::vector<std::string> params;
    for (const auto& a : k.args) {
      const Buffer& b = program_.buffer(a.buffer);
      params.push_back(fmt::format("{}{}* __restrict__ {}", a.is_output ? "" : "const ",
                                   dtype_cpp_type(b.layout.dtype), a.name));
    }
    w_.linef("// {}: {} {}{}", k.name, c_.is_reduction() ? "Reduction" : "Pointwise",
             program_.buffer(c_.buffer).name, shape_str(program_.buffer(c_.buffer).layout.sizes));
    w_.linef("// graph nodes: {}", fmt::join(c_.origin_names, ", "));
    w_.linef("extern \"C\" void {}({})", k.name, fmt::join(params, ", "));
    w_.open();
    if (c_.is_reduction()) {
      emit_reduction();
    } else {
      int depth = decide_parallel_depth(ranges_, product(ranges_), kParallelThreadsHint);
      open_loops(loop_vars(), ranges_, depth);
      emit_ops(0, static_cast<int>(c_.body.ops().size()));
      close_loops(ranges_.size());
    }
    w_.close();
    k.code = w_.str();
    return k;
  }

 private:
  int64_t buffer_bytes(int b) const {
    const Layout& l = program_.buffer(b).layout;
    return product(static_ranges(l.sizes)) * dtype_size(l.dtype);
  }
  std::vector<std::string> loop_vars() const {
    std::vector<std::string> v;
    for (size_t i = 0; i < ranges_.size(); ++i) v.push_back(fmt::format("x{}", i));
    return v;
  }
  std::vector<std::string> red_vars() const {
    std::vector<std::string> v;
    for (size_t i = 0; i < red_ranges_.size(); ++i) v.push_back(fmt::format("r{}", i));
    return v;
  }

  void open_loops(const std::vector<std::string>& vars, const std::vector<int64_t>& ranges,
                  int parallel_depth, size_t first = 0) {
    for (size_t i = first; i < vars.size(); ++i) {
      if (i == first && parallel_depth > 0) {
        w_.line(parallel_depth > 1
                    ? fmt::format("#pragma omp parallel for collapse({})", parallel_depth)
                    : "#pragma omp parallel for");
      }
      w_.linef("for (int64_t {0} = 0; {0} < {1}; {0}++)", vars[i], cpp_index(ranges[i], analyzer_));
      w_.open();
    }
  }
  void close_loops(size_t n) {
    for (size_t i = 0; i < n; ++i) w_.close();
  }

  std::string tmp(int i) const { return fmt::format("tmp{}", i); }

  /// Prints body ops [begin, end) except the reduction op.
  void emit_ops(int begin, int end) {
    const auto& ops = c_.body.ops();
    for (int i = begin; i < end; ++i) {
      const BodyOp& op = ops[static_cast<size_t>(i)];
      std::string ty = cpp_value_type(op.dtype);
      switch (op.op) {
        case LoopOp::reduction:
          break;
        case LoopOp::load: {
          const Buffer& b = program_.buffer(op.buffer);
          std::string e =
              fmt::format("{}[{}]", arg_name_.at(op.buffer), cpp_index(op.index, analyzer_));
          if (b.layout.dtype != op.dtype) e = fmt::format("static_cast<{}>({})", ty, e);
          w_.linef("{} {} = {};", ty, tmp(i), e);
          break;
        }
        case LoopOp::store: {
          const Buffer& b = program_.buffer(op.buffer);
          std::string v = tmp(op.args[0]);
          if (b.layout.dtype != op.dtype)
            v = fmt::format("static_cast<{}>({})", dtype_cpp_type(b.layout.dtype), v);
          w_.linef("{}[{}] = {};", arg_name_.at(op.buffer), cpp_index(op.index, analyzer_), v);
          break;
        }
        case LoopOp::index_expr: {
          std::string e = cpp_index(op.index, analyzer_);
          w_.linef("{} {} = {};", ty, tmp(i),
                   op.dtype == DType::I64 ? e : fmt::format("static_cast<{}>({})", ty, e));
          break;
        }
        default: {
          std::vector<std::string> args;
          std::vector<DType> dts;
          for (int k = 0; k < loop_op_arity(op.op); ++k) {
            args.push_back(tmp(op.args[static_cast<size_t>(k)]));
            dts.push_back(c_.body.dtype_of(op.args[static_cast<size_t>(k)]));
          }
          w_.linef("{} {} = {};", ty, tmp(i), cpp_scalar_op(op, args, dts));
        }
      }
    }
  }

  std::string linear_reduction_index() const {
    sym::Expr lin = 0;
    for (size_t i = 0; i < red_ranges_.size(); ++i)
      lin = lin * red_ranges_[i] + reduction_var(static_cast<int>(i));
    return cpp_index(analyzer_.simplify(lin), analyzer_);
  }

  void emit_reduction() {
    int red = c_.body.reduction_op();
    COIL_ASSERT(red >= 0, "reduction computation without a reduction op");
    const BodyOp& rop = c_.body.op(red);
    DType value_t = c_.body.dtype_of(rop.args[0]);
    ReductionSpec spec = reduction_spec(rop.reduction, value_t, rop.dtype);
    std::string acc = "tmp_acc0";
    auto fill = [&](const std::string& pattern, const std::string& a) {
      std::string s = subst(pattern, "{acc}", a);
      s = subst(s, "{v}", tmp(rop.args[0]));
      s = subst(s, "{p}", acc + "_part[c]");
      return subst(s, "{ridx}", red_ranges_.empty() ? "0" : linear_reduction_index());
    };
    int64_t outer = product(ranges_), inner = product(red_ranges_);
    bool split =
        outer < kParallelThreadsHint && inner >= kSplitReductionMinElements && !red_ranges_.empty();
    int depth = split ? 0
                      : decide_parallel_depth(ranges_, outer * std::max<int64_t>(inner, 1),
                                              kParallelThreadsHint);
    open_loops(loop_vars(), ranges_, depth);
    w_.linef("{} {} = {};", spec.acc_type, acc, spec.init);
    if (!split) {
      open_loops(red_vars(), red_ranges_, 0);
      emit_ops(0, red);
      w_.line(fill(spec.combine, acc));
      close_loops(red_ranges_.size());
    } else {
      // Fixed chunks of the outermost reduction loop: the partials and their combine order
      // depend only on the sizes, so the result is the same for any thread count.
      int64_t r0 = red_ranges_[0], per_r0 = inner / std::max<int64_t>(r0, 1);
      int64_t chunk =
          std::max<int64_t>(1, kSplitReductionChunkElements / std::max<int64_t>(per_r0, 1));
      int64_t chunks = (r0 + chunk - 1) / chunk;
      if (chunks > 1024) {
        chunk = (r0 + 1023) / 1024;
        chunks = (r0 + chunk - 1) / chunk;
      }
      w_.linef("{} {}_part[{}];", spec.acc_type, acc, chunks);
      w_.line("#pragma omp parallel for");
      w_.linef("for (int64_t c = 0; c < {}; c++)", chunks);
      w_.open();
      w_.linef("{} {}_local = {};", spec.acc_type, acc, spec.init);
      w_.linef("for (int64_t r0 = c * {0}; r0 < std::min<int64_t>(c * {0} + {0}, {1}); r0++)",
               chunk, r0);
      w_.open();
      open_loops(red_vars(), red_ranges_, 0, 1);
      emit_ops(0, red);
      w_.line(fill(spec.combine, acc + "_local"));
      close_loops(red_ranges_.size() - 1);
      w_.close();
      w_.linef("{}_part[c] = {}_local;", acc, acc);
      w_.close();
      w_.linef("for (int64_t c = 0; c < {}; c++)", chunks);
      w_.open();
      w_.line(fill(spec.combine_partial, acc));
      w_.close();
    }
    w_.linef("{} {} = {};", cpp_value_type(rop.dtype), tmp(red),
             subst(spec.finalize, "{acc}", acc));
    emit_ops(red + 1, static_cast<int>(c_.body.ops().size()));
    close_loops(ranges_.size());
  }

  const IrProgram& program_;
  const ComputedBuffer& c_;
  std::vector<int64_t> ranges_, red_ranges_;
  sym::Analyzer analyzer_;
  std::map<int, std::string> arg_name_;
  CodeWriter w_;
};

}  // namespace

CppKernelSource generate_cpp_kernel(const IrProgram& program, const ComputedBuffer& computation,
                                    int index) {
  return KernelPrinter(program, computation).generate(index);
}

}  // namespace coil
