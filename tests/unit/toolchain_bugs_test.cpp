// Compiler bugs that coil's flags or generated code work around (docs/numerics.md), each built
// as a shared object with exactly the flags of generated kernels and run: a change of the flag
// list that brings a bug back fails here.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/isa.h"
#include "runtime/loader.h"
#include "runtime/toolchain.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

// g++ 12 gives every masked load of a vectorized group the first vector's mask; coil passes
// -fno-tree-sink so that generated code (which loads unconditionally) has no masked loads.
TEST(ToolchainBugs, Gcc12MaskedLoadsAreAvoidedByKernelFlags) {
  const fs::path src = fs::path(COIL_SOURCE_DIR) / "tests/toolchain/gcc12_masked_load.cpp";
  const fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cache" / fmt::format("tc-{}", ::getpid());
  fs::create_directories(dir);
  const fs::path so = dir / "gcc12_masked_load.so";
  CompileFlags flags = module_compile_flags(host_isa());
  flags.extra.push_back("-DCOIL_REPRO_NO_MAIN");
  ProcessResult r = run_process(Toolchain::get().shared_object_command(src, so, dir, flags));
  ASSERT_EQ(r.status, 0) << r.output;
  std::shared_ptr<SharedLibrary> lib = SharedLibrary::open(so);  // open while it runs
  auto wrong = lib->symbol_as<int (*)()>("coil_repro_wrong_elements");
  EXPECT_EQ(wrong(), 0) << "elements wrong; "
                        << "compiled with: "
                        << command_string(
                               Toolchain::get().shared_object_command(src, so, dir, flags));
}

}  // namespace
}  // namespace coil
