// Compiler bugs that coil's flags or generated code work around (docs/numerics.md), each built
// as a shared object with exactly the flags of generated kernels and run: a change of the flag
// list or of the workaround that brings a bug back fails here.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/isa.h"
#include "runtime/loader.h"
#include "runtime/toolchain.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

struct CompilerBug {
  const char* file;        // under tests/toolchain/
  const char* workaround;  // what coil does about it
  std::vector<std::string> defines;
};

const CompilerBug kBugs[] = {
    // g++ 12 gives every masked load of a vectorized group the first vector's mask; coil passes
    // -fno-tree-sink so that generated code (which loads unconditionally) has no masked loads.
    {"gcc12_masked_load.cpp", "the kernel flag -fno-tree-sink", {}},
    // g++ 12's SLP vectorizer drops a double -> float -> double round trip; generated code
    // narrows through coil::f64_to_f32, whose asm barrier the repro copies.
    {"gcc12_f64_f32_round_trip.cpp", "coil::f64_to_f32", {"-DCOIL_REPRO_WORKAROUND"}},
    // g++ 13 makes the same wrong masked loads despite -fno-tree-sink; generated code prints
    // where() as coil::select (coil_kernel.h, which the repro includes), a blend with no branch.
    {"gcc13_masked_load.cpp",
     "coil::select",
     {"-DCOIL_REPRO_WORKAROUND", "-I" COIL_SOURCE_DIR "/src/kernels"}},
};

class ToolchainBugs : public ::testing::TestWithParam<CompilerBug> {};

TEST_P(ToolchainBugs, KernelFlagsAndWorkaroundGiveTheRightValues) {
  const CompilerBug& bug = GetParam();
  const fs::path src = fs::path(COIL_SOURCE_DIR) / "tests/toolchain" / bug.file;
  const fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cache" / fmt::format("tc-{}", ::getpid());
  fs::create_directories(dir);
  const fs::path so = dir / (std::string(bug.file) + ".so");
  CompileFlags flags = module_compile_flags(host_isa());
  flags.extra.push_back("-DCOIL_REPRO_NO_MAIN");
  for (const std::string& d : bug.defines) flags.extra.push_back(d);
  const std::vector<std::string> cmd = Toolchain::get().shared_object_command(src, so, dir, flags);
  ProcessResult r = run_process(cmd);
  ASSERT_EQ(r.status, 0) << r.output;
  std::shared_ptr<SharedLibrary> lib = SharedLibrary::open(so);  // open while it runs
  auto wrong = lib->symbol_as<int (*)()>("coil_repro_wrong_elements");
  EXPECT_EQ(wrong(), 0) << "elements wrong despite " << bug.workaround
                        << "; compiled with: " << command_string(cmd);
}

INSTANTIATE_TEST_SUITE_P(Gcc, ToolchainBugs, ::testing::ValuesIn(kBugs), [](const auto& info) {
  std::string n = info.param.file;
  n = n.substr(0, n.find('.'));
  return n;
});

}  // namespace
}  // namespace coil
