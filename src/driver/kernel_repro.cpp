#include "driver/kernel_repro.h"

#include <fstream>
#include <set>

#include <fmt/format.h>

#include "codegen/code_writer.h"
#include "codegen/triton/triton_printer.h"
#include "driver/debug_dir.h"
#include "driver/kernel_repro_main.h"
#include "runtime/embedded_headers.h"
#include "sched/memory_plan.h"
#include "support/check.h"

namespace coil {

namespace fs = std::filesystem;

namespace {

std::string describe_buffer(const Buffer& b) {
  switch (b.kind) {
    case BufferKind::Input:
      return fmt::format("graph input {}", b.external_index);
    case BufferKind::Output:
      return fmt::format("graph output {}", b.external_index);
    case BufferKind::Constant:
      return fmt::format("constant {}", b.external_index);
    case BufferKind::Intermediate:
      return fmt::format("intermediate {}", b.name);
  }
  COIL_UNREACHABLE("buffer kind");
}

std::string shell_quote(const std::string& s) {
  if (s.find_first_of(" '\"\\$`!*?;&|<>()") == std::string::npos) return s;
  std::string out(1, '\'');
  for (char c : s) {
    if (c == '\'') {
      out.append("'\\''");
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

std::string repro_main(const IrProgram& program, const Schedule& schedule, size_t k,
                       const CppKernelSource& ks) {
  CodeWriter w;
  KernelTraffic traffic = kernel_traffic(program, schedule, k);
  w.line("int main(int argc, char** argv)");
  w.open();
  w.line("const coil_repro::Options o = coil_repro::parse_options(argc, argv);");
  std::vector<std::string> params, outputs;
  uint64_t seed = 1;
  for (const KernelArg& a : ks.args) {
    const Buffer& b = program.buffer(a.buffer);
    int64_t count = buffer_nbytes(b) / dtype_size(b.layout.dtype);
    w.linef("coil_repro::Arg<{}> {}(\"{}\", {}, {}, o, {});  // {}, {} {}",
            dtype_cpp_type(b.layout.dtype), a.name, a.name, count, a.is_output ? "true" : "false",
            seed++, describe_buffer(b), dtype_name(b.layout.dtype), shape_str(b.layout.sizes));
    params.push_back(a.name + ".data()");
    if (a.is_output) outputs.push_back(a.name);
  }
  for (const PackedOperand& po : ks.packed) {
    // The packed copy's size is what the module's packing code computes.
    w.linef("int64_t {}_count = 0;", po.param);
    w.open();
    if (!po.setup.empty()) w.line(po.setup);
    w.linef("{}_count = {};", po.param, po.elements);
    w.close();
    w.linef("coil_repro::Arg<{}> {}(\"{}\", {}_count, false, o, {});  // constant {} packed",
            po.elem_type, po.param, po.param, po.param, seed++,
            program.buffer(po.buffer).external_index);
    params.push_back(po.param + ".data()");
  }
  if (ks.run_error) {
    w.line("coil::RunError coil_run_error;  // the kernel's run-time checks report here");
    params.push_back("coil_run_error");
  }
  w.linef("auto run = [&] {{ {}({}); }};", ks.name, fmt::join(params, ", "));
  w.line("run();");
  w.line("int checked = 0, failed = 0;");
  for (const std::string& o : outputs) w.linef("failed += coil_repro::check({}, o, checked);", o);
  w.line(
      "if (checked == 0) std::printf(\"no saved outputs in %s: inputs generated, nothing "
      "checked\\n\", o.data.c_str());");
  w.linef("coil_repro::time_kernel(run, {}.0, o);", traffic.bytes_read + traffic.bytes_written);
  w.line("return failed ? 1 : 0;");
  w.close();
  return w.str();
}

/// run.sh's compile command: coil's own (Toolchain::base_flags and the module's flags), for an
/// executable, with coil's runtime libraries (libcoil_vmath.so, libcoil_extern.so) found in the
/// folder's lib/, where `libraries` receives the ones to copy there.
std::string run_script(const CompileFlags& flags, std::vector<fs::path>& libraries) {
  std::vector<std::string> argv = {fs::path(Toolchain::get().cxx).filename().string(),
                                   "kernel.cpp"};
  for (const std::string& f : Toolchain::get().base_flags())
    if (f != "-shared") argv.push_back(f);
  for (const std::string& f : flags.extra) {
    if (f.rfind("-Wl,-L", 0) == 0) {
      fs::path lib_dir = f.substr(6);
      for (const char* name : {"libcoil_vmath.so", "libcoil_extern.so"})
        if (fs::exists(lib_dir / name)) libraries.push_back(lib_dir / name);
      argv.push_back("-Wl,-Llib");
    } else if (f.rfind("-Wl,-rpath,", 0) == 0) {
      argv.push_back("-Wl,-rpath,$ORIGIN/lib");
    } else {
      argv.push_back(f);
    }
  }
  argv.insert(argv.end(), {"-Iinclude", "-o", "kernel"});
  std::string cmd;
  for (const std::string& a : argv) {
    if (!cmd.empty()) cmd += ' ';
    cmd += shell_quote(a);
  }
  return fmt::format(
      "#!/bin/sh\n"
      "# Builds this kernel alone with g++ (the flags coil compiled it with) and runs it:\n"
      "#   ./run.sh [--data DIR] [--iters N]\n"
      "# Exit 0 when every saved output matches (or none is saved), 1 on a mismatch.\n"
      "set -e\n"
      "cd \"$(dirname \"$0\")\"\n"
      "{}\n"
      "exec ./kernel \"$@\"\n",
      cmd);
}

}  // namespace

void write_cpu_kernel_repros(const DebugDir& dir, const IrProgram& program,
                             const Schedule& schedule, const CppModule& module,
                             const CompileFlags& flags) {
  std::vector<fs::path> libraries;
  const std::string script = run_script(flags, libraries);
  for (size_t k = 0; k < module.kernels.size(); ++k) {
    const CppKernelSource& ks = module.kernels[k];
    fs::path folder = fs::path("kernels") / ks.name;
    std::string source = fmt::format(
        "// {}: a standalone repro written by coil's debug directory (docs/debugging.md).\n"
        "// ./run.sh builds and runs it; data/ holds the arguments of a real call when saved.\n"
        "// graph nodes: {}\n",
        ks.name, fmt::join(ks.origins, ", "));
    source += module.prelude;
    source += "#include \"coil_repro.h\"\n\n";
    source += ks.code;
    source.push_back('\n');
    source += repro_main(program, schedule, k, ks);
    dir.write(folder / "kernel.cpp", source);
    dir.write(folder / "coil_repro.h", kKernelReproHelpers);
    for (const EmbeddedFile& f : embedded_kernel_headers())
      dir.write(folder / "include" / f.name, f.text);
    dir.write(folder / "run.sh", script);
    for (const fs::path& lib : libraries) {
      fs::create_directories(dir.path() / folder / "lib");
      fs::copy_file(lib, dir.path() / folder / "lib" / lib.filename(),
                    fs::copy_options::overwrite_existing);
    }
    fs::permissions(dir.path() / folder / "run.sh", fs::perms::owner_exec | fs::perms::group_exec,
                    fs::perm_options::add);
  }
}

namespace {

void write_bytes(const fs::path& p, const void* data, int64_t bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(data), bytes);
  COIL_USER_CHECK(out.good(), "debug directory: cannot write {}", p.string());
}

}  // namespace

namespace {

std::string py_tuple(const std::vector<int64_t>& v) {
  if (v.size() == 1) return fmt::format("({},)", v[0]);
  return fmt::format("({})", fmt::join(v, ", "));
}

std::string triton_repro(const TritonKernelSource& k) {
  CodeWriter w;
  w.linef("# {}: a standalone repro written by coil's debug directory (docs/debugging.md).",
          k.name);
  w.line("# python kernel.py [--iters N]: runs and benchmarks the kernel on a CUDA GPU with torch");
  w.line("# and triton only; coil_runtime/ beside it is a copy of coil's launcher (its heuristics");
  w.line("# and autotuner), as the generated module uses it. Inputs are generated: floats normal,");
  w.line("# integers 0 (safe as indices), booleans random.");
  w.linef("# graph nodes: {}", fmt::join(k.origins, ", "));
  w.line("import argparse");
  w.line("import os");
  w.line("import sys");
  w.line();
  w.line("sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))");
  w.line("import torch  # noqa: E402");
  w.line("import triton  # noqa: E402");
  w.line("import triton.language as tl  # noqa: E402");
  w.line("from triton.language.extra import libdevice  # noqa: E402, F401");
  w.line("from coil_runtime import heuristics  # noqa: E402");
  for (const std::string& h : k.helpers) {
    w.line();
    w.line();
    w.raw(triton_helper_source(h));
  }
  w.line();
  w.line();
  w.line(k.decorator);
  w.raw(k.code);
  if (k.decorator.rfind("@heuristics.template", 0) == 0) {
    w.line();
    w.line();
    w.line("# The Triton configs only: the module's library choices (torch.mm + epilogue) are not");
    w.line("# part of this kernel.");
    w.linef("{}.attach_externs()", k.name);
  }
  w.line();
  w.line();
  w.line("def get_args():");
  w.line("    torch.manual_seed(0)");
  w.line("    args = []");
  for (size_t i = 0; i < k.args.size(); ++i) {
    const auto& l = k.arg_layouts[i];
    std::string make = fmt::format("torch.empty_strided({}, {}, dtype={}, device='cuda')",
                                   py_tuple(l.sizes), py_tuple(l.strides), torch_dtype(l.dtype));
    std::string fill;
    if (l.dtype == DType::Bool) {
      fill = ".random_(0, 2)";
    } else if (is_floating(l.dtype)) {
      fill = ".normal_()";
    } else {
      fill = ".zero_()";
    }
    w.linef("    args.append({}{})  # {}{}", make, fill, k.args[i].name,
            k.args[i].is_output ? " (written)" : "");
  }
  if (!k.index_sites.empty())  // the flag buffer of its gathers (coil_runtime.runtime)
    w.line(
        "    args.append(torch.tensor([1, -1, 0, 0], dtype=torch.int64, device='cuda'))  # "
        "index_check");
  w.line("    return args");
  w.line();
  w.line();
  w.line("def main():");
  w.line("    parser = argparse.ArgumentParser(description=__doc__)");
  w.line(
      "    parser.add_argument('--iters', type=int, default=0, help='timed runs (0: do_bench)')");
  w.line("    opts = parser.parse_args()");
  w.line("    args = get_args()");
  // A size-generic kernel's size arguments (ks0, ...) first, at the sizes the module was
  // generated at (those of the buffers above).
  std::vector<int64_t> numels = k.size_arg_values;
  numels.insert(numels.end(), k.numels.begin(), k.numels.end());
  w.linef("    numels = [{}]", fmt::join(numels, ", "));
  w.linef("    run = lambda: {}.run(*args, *numels)  # noqa: E731", k.name);
  w.line("    run()  # the first call autotunes and compiles");
  w.line("    torch.cuda.synchronize()");
  w.line("    if opts.iters > 0:");
  w.line(
      "        start, end = torch.cuda.Event(enable_timing=True), "
      "torch.cuda.Event(enable_timing=True)");
  w.line("        start.record()");
  w.line("        for _ in range(opts.iters):");
  w.line("            run()");
  w.line("        end.record()");
  w.line("        torch.cuda.synchronize()");
  w.line("        ms = start.elapsed_time(end) / opts.iters");
  w.line("    else:");
  w.line("        from triton.testing import do_bench");
  w.line("        ms = do_bench(run)");
  w.linef("    nbytes = {}", k.bytes_read + k.bytes_written);
  w.linef("    print(f'{}: {{ms * 1e3:.2f}} us, {{nbytes / ms / 1e6:.1f}} GB/s')", k.name);
  w.line();
  w.line();
  w.line("if __name__ == '__main__':");
  w.line("    main()");
  return w.str();
}

}  // namespace

void write_triton_kernel_repros(const DebugDir& dir, const TritonModule& module) {
  std::set<std::string> written;  // kernels of the same code share a name (and a repro)
  for (const TritonKernelSource& k : module.kernels) {
    if (!written.insert(k.name).second) continue;
    fs::path folder = fs::path("kernels") / k.name;
    dir.write(folder / "kernel.py", triton_repro(k));
    for (const EmbeddedFile& f : embedded_python_runtime())
      dir.write(folder / "coil_runtime" / f.name, f.text);
  }
}

void save_kernel_values(const KernelCaller& kernels, const fs::path& graph_dir) {
  for (size_t k = 0; k < kernels.size(); ++k) {
    const KernelCallPlan::Kernel& kernel = kernels.kernel(k);
    fs::path data = graph_dir / "kernels" / kernel.name / "data";
    fs::create_directories(data);
    for (size_t i = 0; i < kernel.args.size(); ++i)
      write_bytes(data / (kernel.args[i].param + ".bin"), kernels.arg(k, i),
                  kernels.arg_bytes(k, i));
    kernels.call(k);
    for (size_t i = 0; i < kernel.args.size(); ++i)
      if (kernel.args[i].is_output)
        write_bytes(data / (kernel.args[i].param + ".expected.bin"), kernels.arg(k, i),
                    kernels.arg_bytes(k, i));
  }
}

}  // namespace coil
