#include "driver/kernel_repro.h"

#include <fstream>

#include <fmt/format.h>

#include "codegen/code_writer.h"
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
