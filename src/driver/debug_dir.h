// The debug directory: what one compile did, stage by stage, as files (the seed's
// TORCH_COMPILE_DEBUG=1). Asked for by CompileOptions::debug_dir, else COIL_DEBUG_DIR; the CLI's
// --debug-dir sets the option. Writing it changes nothing else: the same code is generated,
// compiled and cached. One folder per compiled graph, named by a hash of the graph and the
// options that change the generated code, so compiling the same graph again rewrites it:
//
//   DIR/graph-<hash12>/
//     00-input.coil                 the graph as given (text format)
//     01-decompose_and_bind.coil    decomposed, sizes bound
//     02-lower.ir ...               the loop IR after lowering and after each later IR pass
//     06-fuse.schedule, 07-plan_memory.schedule   kernels, then the arena
//     fusion.txt                    every fusion made and refused, with why (COIL_LOGS=fusion)
//     plan.txt, autotune.txt        the CPU backend's nest plans, the matmul timings
//     module.cpp | module.py        the generated code
//     compile_command.txt           the C++ compile command (rerunnable; CPU)
//     report.json                   kernels, bytes, arena, stage times, cache key
//     kernels/<kernel>/             a standalone repro per kernel (driver/kernel_repro.h)
//
// The pass files are numbered in the order the passes ran (pipeline_passes(); the GPU target
// skips autotune_matmuls, so its numbers are one fewer after lower's passes).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "coil/coil.h"
#include "support/log.h"

namespace coil {

class DebugDir {
 public:
  /// The debug directory `options` ask for (options.debug_dir, else $COIL_DEBUG_DIR) opened for
  /// `graph`, or null when none is asked for. While it is alive it is this thread's current().
  /// `variant` (a size-generic model's variant: "n=7 (size-generic)") joins the folder's hash,
  /// so that each variant of one graph gets its own folder; it is written to variant.txt.
  static std::unique_ptr<DebugDir> open(const Graph& graph, const CompileOptions& options,
                                        std::string_view variant = {});
  /// The directory of the compile running on this thread, else null.
  static DebugDir* current();
  ~DebugDir();
  DebugDir(const DebugDir&) = delete;
  DebugDir& operator=(const DebugDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// Writes `text` to path()/file (creating folders); a failure is a coil::Error naming the file.
  void write(const std::filesystem::path& file, std::string_view text) const;
  /// Records the representation after `pass` as the next numbered file (`extension`: "coil",
  /// "ir" or "schedule").
  void after_pass(std::string_view pass, std::string_view extension, std::string_view text);
  /// Writes what the log capture recorded (fusion.txt, plan.txt, autotune.txt).
  void write_logs() const;

 private:
  explicit DebugDir(std::filesystem::path path);
  std::filesystem::path path_;
  LogCapture capture_;
  int next_pass_ = 0;
  DebugDir* outer_ = nullptr;
};

/// The debug directory's root that `options` ask for (options.debug_dir, else $COIL_DEBUG_DIR),
/// empty when none.
std::filesystem::path debug_dir_root(const CompileOptions& options);

}  // namespace coil
