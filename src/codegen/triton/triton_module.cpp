#include "codegen/triton/triton_module.h"

#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "codegen/code_writer.h"
#include "codegen/triton/triton_plan.h"
#include "codegen/triton/triton_printer.h"
#include "support/check.h"
#include "sym/size_hints.h"

namespace coil {
namespace {

/// A Python tuple literal: "(4, 8)", "(4,)", "()".
std::string py_tuple(const std::vector<int64_t>& v) {
  if (v.size() == 1) return fmt::format("({},)", v[0]);
  return fmt::format("({})", fmt::join(v, ", "));
}
std::string py_tuple(const std::vector<std::string>& v) {
  if (v.size() == 1) return fmt::format("({},)", v[0]);
  return fmt::format("({})", fmt::join(v, ", "));
}

/// Sizes as the wrapper prints them: expressions of ks0, ... where symbolic.
std::vector<std::string> size_texts(const std::vector<sym::Expr>& e,
                                    const std::vector<int64_t>& v) {
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(i < e.size() ? triton_size_text(e[i], v[i]) : std::to_string(v[i]));
  return out;
}

std::vector<int64_t> contiguous(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) s[i - 1] = s[i] * sizes[i];
  return s;
}

std::string base64(const void* data, size_t n) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = static_cast<uint32_t>(p[i]) << 16;
    if (i + 1 < n) v |= static_cast<uint32_t>(p[i + 1]) << 8;
    if (i + 2 < n) v |= p[i + 2];
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += i + 1 < n ? digits[(v >> 6) & 63] : '=';
    out += i + 2 < n ? digits[v & 63] : '=';
  }
  return out;
}

/// `text` with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// Kernels whose code is the same but for their name (a transformer's twelve layers print each
/// of their kernels twelve times) share the first one's definition, as Inductor's wrapper
/// shares a kernel whose source it has already defined: Triton compiles and autotunes it once,
/// and a new process loads it once. Per kernel, the index of the kernel whose definition it
/// launches (itself for the first of its kind); the others take that kernel's name, code,
/// decorator and hash, and keep their own arguments, numels and origins (what each launch
/// passes and computes). Only the kernels in `among` are considered; `extra[k]`, when given,
/// must match too (a matmul template's cuBLAS choices, attached to the kernel by name).
std::vector<size_t> share_identical_kernels(std::vector<TritonKernelSource>& kernels,
                                            const std::set<size_t>& among,
                                            const std::map<size_t, std::string>& extra = {}) {
  std::vector<size_t> first(kernels.size());
  std::map<std::string, size_t> by_text;  // the kernel's text without its name -> first kernel
  for (size_t k = 0; k < kernels.size(); ++k) {
    first[k] = k;
    TritonKernelSource& ks = kernels[k];
    if (!among.count(k)) continue;
    std::string text = replace_all(replace_all(ks.decorator, ks.hash, "HASH"), ks.name, "KERNEL") +
                       "\n" + replace_all(ks.code, ks.name, "KERNEL");
    if (auto e = extra.find(k); e != extra.end()) text += "\n" + e->second;
    auto [it, fresh] = by_text.emplace(std::move(text), k);
    if (fresh) continue;
    const TritonKernelSource& def = kernels[it->second];
    first[k] = it->second;
    ks.name = def.name;
    ks.code = def.code;
    ks.decorator = def.decorator;
    ks.hash = def.hash;
  }
  return first;
}

/// `text` with each identifier in `names` renamed v0, v1, ... in the order it first appears:
/// two wrapper functions that differ only in the buffers they name compare equal.
std::string rename_identifiers(const std::string& text, const std::set<std::string>& names) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::map<std::string, std::string> renamed;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (!ident(text[i]) || (i > 0 && ident(text[i - 1]))) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && ident(text[j])) ++j;
    std::string word = text.substr(i, j - i);
    if (names.count(word)) {
      auto [it, fresh] = renamed.emplace(word, "");
      if (fresh) it->second = fmt::format("v{}", renamed.size() - 1);
      word = it->second;
    }
    out += word;
    i = j;
  }
  return out;
}

class ModulePrinter {
 public:
  ModulePrinter(const IrProgram& p, const Schedule& s, const TritonModuleOptions& o)
      : p_(p), o_(o), plan_(plan_triton_program(p, s)) {
    plan_.fp32_precision = o.precision;
  }

  TritonModule generate() {
    TritonModule m;
    for (const TritonBuffer& b : plan_.buffers)
      for (const auto* v : {&b.size_exprs, &b.stride_exprs})
        for (const sym::Expr& e : *v) generic_ = generic_ || is_symbolic(e);
    COIL_ASSERT(!generic_ || !o_.size_symbols.empty(),
                "a Triton module with symbolic sizes needs TritonModuleOptions::size_symbols");
    if (generic_) collect_size_names();
    for (size_t k = 0; k < plan_.kernels.size(); ++k)
      m.kernels.push_back(generate_triton_kernel(plan_, k, static_cast<int>(k)));
    share_kernels(m);
    std::string what = o_.description.empty() ? "a graph" : o_.description;
    w_.linef("# Generated by coil: Triton kernels for {}, then call().", what);
    w_.linef("# fp32 precision: {}", o_.precision == Fp32Precision::highest
                                         ? "highest (IEEE: no TF32 in tl.dot, cuBLAS or cuDNN)"
                                         : "high (TF32 in tl.dot, cuBLAS and cuDNN)");
    if (!p_.constants.empty()) w_.line("import base64");
    w_.line("import torch");
    w_.line("import triton");
    w_.line("import triton.language as tl");
    w_.line("from triton.language.extra import libdevice");
    w_.line("from coil_runtime import heuristics, runtime");
    if (generic_) {
      // Size-generic: the drivers bind the sizes through these (coil_runtime.dynamic).
      std::vector<std::string> names;
      for (size_t i = 0; i < o_.size_symbols.size(); ++i)
        names.push_back(fmt::format("'ks{}': '{}'", i, o_.size_symbols[i]));
      w_.line();
      w_.linef("SIZE_SYMBOLS = {{{}}}  # kernel argument -> the graph's size symbol",
               fmt::join(names, ", "));
    }
    if (o_.autotune_mode != "default") {
      // Read by coil_runtime.heuristics when each kernel below is decorated (its globals).
      w_.line();
      w_.linef("COIL_AUTOTUNE_MODE = '{}'  # CompileOptions::mode", o_.autotune_mode);
    }
    emit_helpers(m);
    emit_constants();
    for (size_t i = 0; i < m.kernels.size(); ++i) {
      if (first_[i] != i) continue;
      const TritonKernelSource& k = m.kernels[i];
      w_.line();
      w_.line();
      w_.linef("# graph nodes: {}", fmt::join(k.origins, ", "));
      std::vector<std::string> also;  // the first graph node of each launch that shares it
      for (size_t j = i + 1; j < m.kernels.size(); ++j)
        if (first_[j] == i)
          also.push_back(m.kernels[j].origins.empty() ? "?" : m.kernels[j].origins[0]);
      if (!also.empty())
        w_.linef("# launched {} more times, the same code for: {}", also.size(),
                 fmt::join(also, "; "));
      w_.line(k.decorator);
      w_.raw(k.code);
    }
    emit_template_choices(m);
    emit_call(m);
    emit_benchmark();
    m.source = w_.str();
    return m;
  }

 private:
  const TritonBuffer& buf(int b) const { return plan_.buffers[static_cast<size_t>(b)]; }
  const std::string& name(int b) const { return buf(b).name; }
  std::string sizes(int b) const { return py_tuple(size_texts(buf(b).size_exprs, buf(b).sizes)); }
  std::string strides(int b) const {
    return py_tuple(size_texts(buf(b).stride_exprs, buf(b).strides));
  }

  /// Size-generic modules: the expressions a number of a library call (a matmul operand's view)
  /// may stand for: every buffer's sizes, strides and their products. names() picks the first
  /// whose value at the hints is the number (cpp_template.cpp's SizeNames); generate_gpu_module
  /// checks that the module prints the same at other sizes, so a coincidence is refused.
  void collect_size_names() {
    auto add = [&](const sym::Expr& e) {
      if (is_symbolic(e))
        size_names_.push_back(e);
      else if (e.defined())
        size_constants_.insert(e.const_value());
    };
    for (const TritonBuffer& b : plan_.buffers) {
      sym::Expr inner = 1, outer = 1;
      for (size_t d = b.size_exprs.size(); d-- > 0;) {
        add(b.size_exprs[d]);
        add(b.stride_exprs[d]);
        add(inner = inner * b.size_exprs[d]);
      }
      for (const sym::Expr& d : b.size_exprs) add(outer = outer * d);
    }
  }
  std::string names(int64_t v) const {
    // A constant dim or stride of that value first (cpp_template.cpp's rule).
    if (!generic_ || size_constants_.count(v)) return std::to_string(v);
    for (const sym::Expr& e : size_names_)
      if (sym::hint(e) == v) return triton_size_text(e, v);
    return std::to_string(v);
  }
  std::string names_tuple(const std::vector<int64_t>& v) const {
    std::vector<std::string> out;
    for (int64_t x : v) out.push_back(names(x));
    return py_tuple(out);
  }

  void emit_helpers(const TritonModule& m) {
    std::set<std::string> helpers;
    for (const auto& k : m.kernels) helpers.insert(k.helpers.begin(), k.helpers.end());
    for (const auto& h : helpers) {
      w_.line();
      w_.line();
      w_.raw(triton_helper_source(h));
    }
  }

  void emit_constants() {
    if (p_.constants.empty()) return;
    w_.line();
    w_.line();
    w_.line("def _constant(data, dtype, sizes):");
    w_.line("    # a graph constant (weights): its bytes, base64-encoded, moved to the GPU once");
    w_.line("    if not data:");
    w_.line("        return torch.empty(sizes, dtype=dtype, device='cuda')");
    w_.line(
        "    return torch.frombuffer(bytearray(base64.b64decode(data)), "
        "dtype=dtype).reshape(sizes).to('cuda')");
    w_.line();
    w_.line();
    for (int b : p_.constant_buffers) {
      const Tensor& t = *p_.constants[static_cast<size_t>(buf(b).external_index)];
      w_.linef("{} = _constant('{}', {}, {})", name(b),
               base64(t.data(), static_cast<size_t>(t.numel() * dtype_size(t.dtype()))),
               torch_dtype(buf(b).dtype), py_tuple(buf(b).sizes));
    }
  }

  std::string input_name(int i) const {
    if (static_cast<size_t>(i) < o_.input_names.size())
      return o_.input_names[static_cast<size_t>(i)];
    return fmt::format("input{}", i);
  }

  /// A library call through torch (cuBLAS, cuDNN), under the module's fp32 precision: the
  /// runtime sets torch's TF32 flags for the call and restores the caller's after it, so that
  /// neither torch's defaults (cuDNN allows TF32) nor the caller's settings change the result.
  void library_call(const std::string& statement) {
    w_.linef("with runtime.fp32_precision('{}'):", precision_name(o_.precision));
    w_.indent();
    w_.line(statement);
    w_.dedent();
  }

  // ---- call() --------------------------------------------------------------------------

  /// Buffers a step reads and writes.
  void step_buffers(const TritonStep& st, const TritonModule& m, std::vector<int>* reads,
                    std::vector<int>* writes) const {
    if (st.kernel >= 0) {
      for (const auto& a : m.kernels[static_cast<size_t>(st.kernel)].args)
        (a.is_output ? writes : reads)->push_back(a.buffer);
      return;
    }
    const ComputedBuffer& c = p_.computations[static_cast<size_t>(st.computation)];
    for (int b : c.reads()) reads->push_back(b);
    writes->push_back(c.buffer);
  }

  void emit_call(TritonModule& m) {
    w_.line();
    w_.line();
    w_.line("def call(args):");
    w_.indent();
    std::vector<std::string> inputs;
    for (int b : p_.input_buffers) inputs.push_back(name(b));
    if (!inputs.empty())
      w_.linef("{}{} = args", fmt::join(inputs, ", "), inputs.size() == 1 ? "," : "");
    w_.line("args.clear()");
    if (generic_) bind_sizes();
    for (size_t i = 0; i < p_.input_buffers.size(); ++i) {
      const int b = p_.input_buffers[i];
      w_.linef("runtime.check_input({}, '{}', {}, {}, {})", name(b),
               input_name(static_cast<int>(i)), sizes(b), strides(b), torch_dtype(buf(b).dtype));
    }
    if (generic_) emit_guards();
    // Gathers at run-time indices: one flag buffer on the inputs' device, which a kernel
    // that finds an index out of range writes (TritonKernelSource::index_sites).
    std::map<int, int64_t> index_sites;
    for (const TritonKernelSource& k : m.kernels)
      for (const auto& [site, size] : k.index_sites) index_sites[site] = size;
    if (!index_sites.empty())
      w_.linef("index_check = runtime.index_check({})", inputs.empty() ? "None" : inputs[0]);
    // Last reader of each intermediate, to free it right after (Inductor's `del buf`).
    std::map<int, size_t> last_read;
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      std::vector<int> reads, writes;
      step_buffers(plan_.steps[s], m, &reads, &writes);
      for (int b : reads) last_read[b] = s;
    }
    std::set<int> allocated;
    // Outputs no step writes (empty tensors) still have to exist.
    std::set<int> written;
    for (const TritonStep& st : plan_.steps) {
      std::vector<int> reads, writes;
      step_buffers(st, m, &reads, &writes);
      written.insert(writes.begin(), writes.end());
    }
    for (int b : p_.output_buffers) {
      if (written.count(b) || allocated.count(b)) continue;
      allocated.insert(b);
      w_.linef("{} = runtime.empty_strided({}, {}, {})", name(b), sizes(b), strides(b),
               torch_dtype(buf(b).dtype));
    }
    int extern_count = 0;
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const TritonStep& st = plan_.steps[s];
      std::vector<int> reads, writes;
      step_buffers(st, m, &reads, &writes);
      bool returns_new = st.computation >= 0 &&
                         p_.computations[static_cast<size_t>(st.computation)].conv != nullptr;
      // A size-generic module's product whose only reader is a bias (+ ReLU) epilogue: one
      // cuBLASLt call with the epilogue fused, into the epilogue's output (the two steps as
      // one; the specialized module's template times this choice against the others).
      std::optional<LtEpilogue> lt = generic_ ? fused_lt_epilogue(s, m, last_read) : std::nullopt;
      if (lt) {
        const TritonStep& next = plan_.steps[s + 1];
        std::vector<int> next_reads, next_writes;
        step_buffers(next, m, &next_reads, &next_writes);
        const int product = p_.computations[static_cast<size_t>(st.computation)].buffer;
        if (!allocated.count(lt->out)) {
          allocated.insert(lt->out);
          w_.linef("{} = runtime.empty_strided({}, {}, {})", name(lt->out), sizes(lt->out),
                   strides(lt->out), torch_dtype(buf(lt->out).dtype));
        }
        m.externs.push_back(emit_lt_extern(st.computation, *lt, extern_count++));
        std::vector<std::string> freed;
        for (size_t t : {s, s + 1})
          for (int b : t == s ? reads : next_reads) {
            if (b == product || buf(b).kind != BufferKind::Intermediate || last_read.at(b) != t)
              continue;
            if (std::find(freed.begin(), freed.end(), name(b)) == freed.end())
              freed.push_back(name(b));
          }
        if (!freed.empty()) w_.linef("del {}", fmt::join(freed, ", "));
        ++s;  // the epilogue kernel's step is done
        continue;
      }
      for (int b : writes) {
        if (returns_new || allocated.count(b)) continue;
        allocated.insert(b);
        auto alias = plan_.storage_of.find(b);
        if (alias != plan_.storage_of.end()) {  // written in place of a copy into an output
          w_.linef("{} = {}", name(b), view(alias->second, buf(b).sizes));
          continue;
        }
        w_.linef("{} = runtime.empty_strided({}, {}, {})", name(b), sizes(b), strides(b),
                 torch_dtype(buf(b).dtype));
      }
      if (st.kernel >= 0) {
        const TritonKernelSource& k = m.kernels[static_cast<size_t>(st.kernel)];
        std::vector<std::string> args;
        for (const auto& a : k.args) args.push_back(name(a.buffer));
        if (!k.index_sites.empty()) args.push_back("index_check");
        for (const std::string& s : k.size_args) args.push_back(s);
        for (size_t i = 0; i < k.numels.size(); ++i)
          args.push_back(i < k.numel_exprs.size() ? triton_size_text(k.numel_exprs[i], k.numels[i])
                                                  : std::to_string(k.numels[i]));
        w_.linef("{}.run({})", k.name, fmt::join(args, ", "));
      } else {
        m.externs.push_back(emit_extern(st.computation, extern_count++));
      }
      std::vector<std::string> freed;
      for (int b : reads) {
        if (buf(b).kind != BufferKind::Intermediate || last_read.at(b) != s) continue;
        if (std::find(freed.begin(), freed.end(), name(b)) == freed.end()) freed.push_back(name(b));
      }
      if (!freed.empty()) w_.linef("del {}", fmt::join(freed, ", "));
    }
    if (!index_sites.empty()) {
      // {site: (what, dim size)}: the message of an index out of range (run_check_message).
      std::vector<std::string> entries;
      for (const auto& [site, size] : index_sites) {
        std::string what;  // the op, escaped for a Python string literal in quotes
        for (char c : p_.run_checks.at(static_cast<size_t>(site)).op) {
          if (c == '\\' || c == '\'') what += '\\';
          what += c;
        }
        entries.push_back(fmt::format("{}: ('{}', {})", site, what, size));
      }
      w_.linef("runtime.check_indices(index_check, {{{}}})", fmt::join(entries, ", "));
    }
    std::vector<std::string> outs;
    for (int b : p_.output_buffers) outs.push_back(name(b));
    w_.linef("return ({}{})", fmt::join(outs, ", "), outs.empty() ? "" : ", ");
    w_.dedent();
  }

  /// Size-generic: each size symbol from the first input dim that is that symbol alone
  /// (`ks0 = runtime.input_dim(arg0_1, 'x', 0, 2)`); check_input then checks every dim.
  void bind_sizes() {
    for (size_t s = 0; s < o_.size_symbols.size(); ++s) {
      const sym::Expr ks = sym::make_symbol(fmt::format("ks{}", s));
      bool bound = false;
      for (size_t i = 0; i < p_.input_buffers.size() && !bound; ++i) {
        const TritonBuffer& b = buf(p_.input_buffers[i]);
        for (size_t d = 0; d < b.size_exprs.size() && !bound; ++d) {
          if (!(b.size_exprs[d] == ks)) continue;
          w_.linef("ks{} = runtime.input_dim({}, '{}', {}, {})", s, b.name,
                   input_name(static_cast<int>(i)), d, b.size_exprs.size());
          bound = true;
        }
      }
      COIL_SUPPORTED_CHECK(bound,
                           "size-generic Triton module: size '{}' is no input's dim alone (the "
                           "module binds each size from one); bind it (CompileOptions::sizes)",
                           o_.size_symbols[s]);
    }
  }

  /// Size-generic: what the module assumes of the sizes, checked per call; a call that fails
  /// one raises runtime.SizeGuardError, and the driver compiles that size specialized
  /// (coil_runtime.dynamic). Inductor's 0/1 rule (a size of 0 or 1 is bound: broadcasting and
  /// empty tensors), and int32 indexing where the kernels were printed with it.
  void emit_guards() {
    std::vector<std::string> sizes, guards;
    for (size_t s = 0; s < o_.size_symbols.size(); ++s) {
      sizes.push_back(fmt::format("'{}': ks{}", o_.size_symbols[s], s));
      guards.push_back(fmt::format("(ks{} >= 2, 'ks{} >= 2')", s, s));
    }
    for (const sym::Expr& e : plan_.int32_guards) {
      std::string t = triton_size_text(e, 0);
      guards.push_back(fmt::format("({} <= 2147483647, '{} <= 2147483647')", t, t));
    }
    w_.linef("runtime.guard_sizes({{{}}}, (", fmt::join(sizes, ", "));
    for (const std::string& g : guards) w_.linef("    {},", g);
    w_.line("))");
  }

  /// A matmul operand as torch sees it: the buffer itself, or a strided view of it.
  std::string operand(const StridedOperand& o, const std::vector<int64_t>& batch, int64_t rows,
                      int64_t cols, DType compute) const {
    std::vector<int64_t> sizes = batch, strides = o.batch_strides;
    sizes.insert(sizes.end(), {rows, cols});
    strides.insert(strides.end(), {o.row_stride, o.col_stride});
    const TritonBuffer& b = buf(o.buffer);
    std::string s = b.name;
    if (sizes != b.sizes || strides != b.strides || o.offset != 0)
      s = fmt::format("torch.as_strided({}, {}, {}, {})", b.name, names_tuple(sizes),
                      names_tuple(strides), names(o.offset));
    if (b.dtype != compute) s += fmt::format(".to({})", torch_dtype(compute));
    return s;
  }

  std::string view(int buffer, const std::vector<int64_t>& sizes) const {
    const TritonBuffer& b = buf(buffer);
    return sizes == b.sizes ? b.name : fmt::format("{}.view({})", b.name, names_tuple(sizes));
  }

  /// index_add's fill as a Python number (an integer for integer dtypes).
  static std::string fill_text(const IndexAddSpec& a) {
    return is_floating(a.dtype) ? python_float_literal(a.fill, a.dtype)
                                : std::to_string(static_cast<int64_t>(a.fill));
  }

  TritonExternCall emit_extern(int computation, int index) {
    const ComputedBuffer& c = p_.computations[static_cast<size_t>(computation)];
    TritonExternCall call;
    call.origins = c.origin_names;
    for (int b : c.reads()) call.bytes_read += buf(b).nbytes();
    call.bytes_written = buf(c.buffer).nbytes();
    w_.linef("# graph nodes: {}", fmt::join(c.origin_names, ", "));
    if (c.matmul) {
      // Templates too: the GPU path calls cuBLAS through torch (the epilogue is a kernel).
      const MatmulSpec& ms = *c.matmul;
      DType out = buf(c.buffer).dtype;
      std::vector<int64_t> out_sizes = ms.batch;
      out_sizes.insert(out_sizes.end(), {ms.m, ms.n});
      std::string a = operand(ms.a, ms.batch, ms.m, ms.k, out);
      std::string b = operand(ms.b, ms.batch, ms.k, ms.n, out);
      library_call(fmt::format("torch.{}({}, {}, out={})", ms.batch.empty() ? "mm" : "matmul", a, b,
                               view(c.buffer, out_sizes)));
      call.name = fmt::format("extern_mm_{}", index);
      return call;
    }
    if (c.index_add) {
      // torch's index_add (atomic adds: the order of the sums may differ between runs) on the
      // operands seen as [outer, n, inner]. A negative index counts from the end, as in coil's
      // reference, so runtime.wrap_rows wraps it first; one still out of range is an IndexError
      // naming the op where the wrapper may read back (COIL_SYNC_INDEX_CHECKS=1), else torch's
      // device-side assert.
      const IndexAddSpec& a = *c.index_add;
      const std::string rows = names(a.n);
      const std::string out = view(c.buffer, {a.outer, a.n, a.inner});
      const std::string at = fmt::format("index{}", index);
      w_.linef("{} = runtime.wrap_rows({}, {}, '{}')", at, view(a.index, {a.k}), rows,
               p_.run_checks[static_cast<size_t>(a.site)].op);
      const std::string src = view(a.src, {a.outer, a.k, a.inner});
      if (a.x >= 0)
        w_.linef("torch.index_add({}, 1, {}, {}, out={})", view(a.x, {a.outer, a.n, a.inner}), at,
                 src, out);
      else
        w_.linef("{}.fill_({}).index_add_(1, {}, {})", out, fill_text(a), at, src);
      w_.linef("del {}", at);
      call.name = fmt::format("extern_index_add_{}", index);
      return call;
    }
    COIL_ASSERT(c.conv != nullptr, "extern computation {} is neither a matmul nor a conv2d",
                name(c.buffer));
    COIL_SUPPORTED_CHECK(!generic_,
                         "size-generic Triton module: conv2d {} has symbolic sizes (the "
                         "wrapper's conv2d call prints them as numbers); bind them",
                         name(c.buffer));
    const Conv2dSpec& cs = *c.conv;
    COIL_ASSERT(cs.activation == Conv2dSpec::Activation::none,
                "conv2d with a folded activation on the GPU (fold_conv_activations is CPU-only)");
    std::string x = view(cs.x, {cs.n, cs.c, cs.h, cs.wd});
    std::string wt = view(cs.w, {cs.oc, cs.c / cs.groups, cs.kh, cs.kw});
    std::string bias = cs.bias >= 0 ? view(cs.bias, {cs.oc}) : "None";
    const auto& pad = cs.padding;  // top, left, bottom, right
    std::string padding = fmt::format("({}, {})", pad[0], pad[1]);
    if (pad[0] != pad[2] || pad[1] != pad[3]) {
      // torch's conv2d pads symmetrically; pad the input first (F.pad: left, right, top, bottom).
      x = fmt::format("torch.nn.functional.pad({}, ({}, {}, {}, {}))", x, pad[1], pad[3], pad[0],
                      pad[2]);
      padding = "(0, 0)";
    }
    library_call(
        fmt::format("{} = torch.nn.functional.conv2d({}, {}, {}, stride=({}, {}), padding={}, "
                    "dilation=({}, {}), groups={})",
                    name(c.buffer), x, wt, bias, cs.stride[0], cs.stride[1], padding,
                    cs.dilation[0], cs.dilation[1], cs.groups));
    call.name = fmt::format("extern_conv2d_{}", index);
    return call;
  }

  // ---- matmul templates: the extern choices --------------------------------------------

  /// An epilogue cuBLASLt can compute inside the GEMM: `out = [relu](mm + bias[n])`, the bias a
  /// 1-D [N] buffer of the product's dtype, the output the product's shape and dtype.
  struct LtEpilogue {
    int bias = -1, out = -1;
    bool relu = false;
  };

  std::optional<LtEpilogue> match_lt_epilogue(const TritonKernelPlan& epi, const MatmulSpec& ms,
                                              int product) const {
    const LoopBody& b = epi.body;
    const sym::Expr& xi = triton_xindex();
    DType dt = buf(product).dtype;
    if (!ms.batch.empty() || epi.kind != TritonKernelKind::Pointwise) return std::nullopt;
    int store = -1;
    for (size_t i = 0; i < b.ops().size(); ++i) {
      if (b.op(static_cast<int>(i)).op != LoopOp::store) continue;
      if (store >= 0) return std::nullopt;  // one output only
      store = static_cast<int>(i);
    }
    if (store < 0) return std::nullopt;
    const BodyOp& st = b.op(store);
    LtEpilogue lt;
    lt.out = st.buffer;
    if (st.index != xi || buf(lt.out).dtype != dt ||
        buf(lt.out).sizes != std::vector<int64_t>{ms.m, ms.n} ||
        buf(lt.out).strides != contiguous({ms.m, ms.n}))
      return std::nullopt;
    const BodyOp* v = &b.op(st.args[0]);
    if (v->op == LoopOp::relu) {
      lt.relu = true;
      v = &b.op(v->args[0]);
    }
    if (v->op != LoopOp::add) return std::nullopt;
    const BodyOp &p = b.op(v->args[0]), &q = b.op(v->args[1]);
    auto is_product = [&](const BodyOp& o) {
      return o.op == LoopOp::load && o.args[0] < 0 && o.buffer == product && o.index == xi;
    };
    auto is_bias = [&](const BodyOp& o) {
      if (o.op != LoopOp::load || o.args[0] >= 0 || o.buffer == product) return false;
      const TritonBuffer& t = buf(o.buffer);
      return t.dtype == dt && t.sizes == std::vector<int64_t>{ms.n} && t.strides[0] == 1 &&
             o.index == sym::mod(xi, sym::Expr(ms.n));
    };
    if (is_product(p) && is_bias(q)) {
      lt.bias = q.buffer;
    } else if (is_product(q) && is_bias(p)) {
      lt.bias = p.buffer;
    } else {
      return std::nullopt;
    }
    return lt;
  }

  /// For step `s` of a size-generic module: its cuBLASLt epilogue when it is a 2-D matmul
  /// whose product only the next step reads, that step a bias (+ ReLU) epilogue kernel
  /// (match_lt_epilogue) writing a buffer the wrapper allocates itself.
  std::optional<LtEpilogue> fused_lt_epilogue(size_t s, const TritonModule& m,
                                              const std::map<int, size_t>& last_read) const {
    const TritonStep& st = plan_.steps[s];
    if (st.kernel >= 0 || st.computation < 0 || s + 1 >= plan_.steps.size()) return std::nullopt;
    const ComputedBuffer& c = p_.computations[static_cast<size_t>(st.computation)];
    const TritonStep& next = plan_.steps[s + 1];
    if (!c.matmul || next.kernel < 0 || buf(c.buffer).kind != BufferKind::Intermediate)
      return std::nullopt;
    auto read = last_read.find(c.buffer);
    if (read == last_read.end() || read->second != s + 1) return std::nullopt;
    for (size_t t = s + 2; t < plan_.steps.size(); ++t) {
      std::vector<int> reads, writes;
      step_buffers(plan_.steps[t], m, &reads, &writes);
      if (std::count(reads.begin(), reads.end(), c.buffer)) return std::nullopt;
    }
    auto lt =
        match_lt_epilogue(plan_.kernels[static_cast<size_t>(next.kernel)], *c.matmul, c.buffer);
    if (!lt || plan_.storage_of.count(lt->out)) return std::nullopt;
    return lt;
  }

  /// The cuBLASLt call of fused_lt_epilogue: torch.addmm / torch._addmm_activation.
  TritonExternCall emit_lt_extern(int computation, const LtEpilogue& lt, int index) {
    const ComputedBuffer& c = p_.computations[static_cast<size_t>(computation)];
    const MatmulSpec& ms = *c.matmul;
    TritonExternCall call;
    call.origins = c.origin_names;
    for (int b : c.reads()) call.bytes_read += buf(b).nbytes();
    call.bytes_read += buf(lt.bias).nbytes();
    call.bytes_written = buf(lt.out).nbytes();
    w_.linef("# graph nodes: {}, with its bias{} epilogue fused (cuBLASLt)",
             fmt::join(c.origin_names, ", "), lt.relu ? " and ReLU" : "");
    DType out = buf(c.buffer).dtype;
    library_call(fmt::format("torch.{}({}, {}, {}, out={})",
                             lt.relu ? "_addmm_activation" : "addmm", name(lt.bias),
                             operand(ms.a, ms.batch, ms.m, ms.k, out),
                             operand(ms.b, ms.batch, ms.k, ms.n, out), name(lt.out)));
    call.name = fmt::format("extern_mm_{}", index);
    return call;
  }

  /// For each triton_tem kernel, its extern choices: `extern_<n>(*args)`, the same outputs from
  /// the same arguments through torch.mm (cuBLAS) and the epilogue kernel, and where the
  /// epilogue is a bias add (and ReLU), `extern_<n>_lt`: one cuBLASLt call with that epilogue
  /// fused (torch.addmm / torch._addmm_activation). The template's autotuner times them against
  /// the Triton configs and keeps the fastest.
  void emit_template_choices(const TritonModule& m) {
    int index = 0;
    for (const TritonStep& st : plan_.steps) {
      if (st.fallback < 0 && st.extern_out < 0) continue;
      if (first_[static_cast<size_t>(st.kernel)] != static_cast<size_t>(st.kernel)) continue;
      w_.raw(template_choices(st, m, index++));
    }
  }

  /// share_identical_kernels in two rounds: every kernel but the matmul templates that have
  /// cuBLAS choices, then those templates, whose choices (printed with the first round's
  /// names, buffers renamed v0, v1, ...) must match as well: the template's autotuner holds
  /// one set of choices, which then runs for every launch with that launch's arguments.
  void share_kernels(TritonModule& m) {
    std::set<size_t> templates, others;
    for (const TritonStep& st : plan_.steps)
      if (st.kernel >= 0 && (st.fallback >= 0 || st.extern_out >= 0))
        templates.insert(static_cast<size_t>(st.kernel));
    for (size_t k = 0; k < m.kernels.size(); ++k)
      if (!templates.count(k)) others.insert(k);
    first_ = share_identical_kernels(m.kernels, others);
    std::map<size_t, std::string> choices;
    for (const TritonStep& st : plan_.steps) {
      const size_t k = static_cast<size_t>(st.kernel);
      if (st.kernel < 0 || !templates.count(k)) continue;
      // Renamed: the arguments (unpacked in order) and the product the function allocates;
      // a buffer the function would read from the module (none today) keeps its name, so
      // choices reading different ones never compare equal.
      std::set<std::string> local;
      for (const auto& a : m.kernels[k].args) local.insert(name(a.buffer));
      local.insert(name(p_.computations[static_cast<size_t>(st.computation)].buffer));
      std::string text = replace_all(template_choices(st, m, 0), m.kernels[k].name, "KERNEL");
      choices[k] = rename_identifiers(text, local);
    }
    const std::vector<size_t> second = share_identical_kernels(m.kernels, templates, choices);
    for (size_t k : templates) first_[k] = second[k];
  }

  /// The cuBLAS choices of template step `st` (extern_<index> and extern_<index>_lt, then
  /// attach_externs), as text.
  std::string template_choices(const TritonStep& st, const TritonModule& m, int index) {
    CodeWriter saved = std::move(w_);
    w_ = CodeWriter();
    const TritonKernelSource& tem = m.kernels[static_cast<size_t>(st.kernel)];
    const ComputedBuffer& c = p_.computations[static_cast<size_t>(st.computation)];
    const MatmulSpec& ms = *c.matmul;
    std::vector<std::string> params;
    for (const auto& a : tem.args) params.push_back(name(a.buffer));
    std::string fn = fmt::format("extern_{}", index);
    w_.line();
    w_.line();
    w_.linef("def {}(*args):", fn);
    w_.indent();
    if (st.extern_out >= 0)
      w_.linef("# {}'s other choice: cuBLAS through torch, into {} itself", tem.name,
               name(st.extern_out));
    else
      w_.linef("# {}'s other choice: cuBLAS through torch, then {}", tem.name,
               m.kernels[static_cast<size_t>(st.fallback)].name);
    w_.linef("{}{} = args", fmt::join(params, ", "), params.size() == 1 ? "," : "");
    DType out = buf(c.buffer).dtype;
    std::vector<int64_t> out_sizes = ms.batch;
    out_sizes.insert(out_sizes.end(), {ms.m, ms.n});
    std::string a = operand(ms.a, ms.batch, ms.m, ms.k, out);
    std::string b = operand(ms.b, ms.batch, ms.k, ms.n, out);
    if (st.extern_out >= 0) {
      library_call(fmt::format("torch.{}({}, {}, out={})", ms.batch.empty() ? "mm" : "matmul", a, b,
                               view(st.extern_out, out_sizes)));
    } else {
      const TritonKernelSource& epi = m.kernels[static_cast<size_t>(st.fallback)];
      w_.linef("{} = runtime.empty_strided({}, {}, {})", name(c.buffer),
               py_tuple(buf(c.buffer).sizes), py_tuple(buf(c.buffer).strides), torch_dtype(out));
      library_call(fmt::format("torch.{}({}, {}, out={})", ms.batch.empty() ? "mm" : "matmul", a, b,
                               view(c.buffer, out_sizes)));
      std::vector<std::string> args;
      for (const auto& a2 : epi.args) args.push_back(name(a2.buffer));
      for (int64_t n : epi.numels) args.push_back(std::to_string(n));
      w_.linef("{}.run({})", epi.name, fmt::join(args, ", "));
    }
    w_.dedent();
    std::vector<std::string> choices{fn};
    std::optional<LtEpilogue> lt;
    if (st.fallback >= 0)
      lt = match_lt_epilogue(plan_.kernels[static_cast<size_t>(st.fallback)], ms, c.buffer);
    if (lt) {
      choices.push_back(fn + "_lt");
      w_.line();
      w_.line();
      w_.linef("def {}(*args):", choices.back());
      w_.indent();
      w_.linef("# {}'s other extern choice: cuBLASLt, the bias{} fused", tem.name,
               lt->relu ? " and ReLU" : "");
      w_.linef("{}{} = args", fmt::join(params, ", "), params.size() == 1 ? "," : "");
      library_call(fmt::format("torch.{}({}, {}, {}, out={})",
                               lt->relu ? "_addmm_activation" : "addmm", name(lt->bias), a, b,
                               name(lt->out)));
      w_.dedent();
    }
    w_.line();
    w_.line();
    w_.linef("{}.attach_externs({})", tem.name, fmt::join(choices, ", "));
    std::string text = w_.str();
    w_ = std::move(saved);
    return text;
  }

  // ---- benchmark harness ---------------------------------------------------------------

  void emit_benchmark() {
    w_.line();
    w_.line();
    if (generic_) {
      // The only line that depends on the sizes the module was generated at (generate_gpu_module
      // compares the rest at two sets of sizes).
      std::vector<std::string> hints;
      for (size_t s = 0; s < o_.size_symbols.size(); ++s) {
        auto h = sym::hint(sym::make_symbol(fmt::format("ks{}", s)));
        hints.push_back(fmt::format("'ks{}': {}", s, h ? *h : sym::kNominalSize));
      }
      w_.linef("SIZE_HINTS = {{{}}}  # the sizes get_args() makes inputs of",
               fmt::join(hints, ", "));
      w_.line();
      w_.line();
    }
    w_.line("def get_args():");
    w_.line("    # random inputs with the graph's shapes and dtypes, on the GPU");
    w_.line("    torch.manual_seed(0)");
    if (generic_) {
      for (size_t s = 0; s < o_.size_symbols.size(); ++s)
        w_.linef("    ks{} = SIZE_HINTS['ks{}']", s, s);
    }
    std::vector<std::string> names;
    for (int b : p_.input_buffers) {
      const TritonBuffer& t = buf(b);
      std::string shape = sizes(b), dt = torch_dtype(t.dtype);
      std::string make;
      if (is_floating(t.dtype)) {
        make = fmt::format("torch.randn({}, dtype={}, device='cuda')", shape, dt);
      } else if (t.dtype == DType::Bool) {
        make = fmt::format("torch.rand({}, device='cuda') < 0.5", shape);
      } else {
        make = fmt::format("torch.randint(0, 16, {}, dtype={}, device='cuda')", shape, dt);
      }
      if (t.strides != contiguous(t.sizes))
        make = fmt::format("torch.empty_strided({}, {}, dtype={}, device='cuda').copy_({})", shape,
                           strides(b), dt, make);
      w_.linef("    {} = {}", t.name, make);
      names.push_back(t.name);
    }
    w_.linef("    return [{}]", fmt::join(names, ", "));
    w_.line();
    w_.line();
    w_.line("def benchmark_compiled_module(times=10, repeat=10):");
    w_.line("    from triton.testing import do_bench");
    w_.line("    args = get_args()");
    w_.line("    return do_bench(lambda: call(list(args)))");
    w_.line();
    w_.line();
    w_.line("if __name__ == \"__main__\":");
    w_.line("    print(benchmark_compiled_module())");
  }

  const IrProgram& p_;
  const TritonModuleOptions& o_;
  TritonProgramPlan plan_;
  CodeWriter w_;
  std::vector<size_t> first_;          // per kernel, the kernel whose definition it launches
  bool generic_ = false;               // some size is symbolic
  std::vector<sym::Expr> size_names_;  // what names() may print (collect_size_names)
  std::set<int64_t> size_constants_;   // the constant sizes and strides among them
};

}  // namespace

TritonModule generate_triton_module(const IrProgram& program, const Schedule& schedule,
                                    const TritonModuleOptions& options) {
  return ModulePrinter(program, schedule, options).generate();
}

}  // namespace coil
