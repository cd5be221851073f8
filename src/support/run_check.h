// The errors that generated code raises while it runs (a gather's index out of range, an
// integer division by zero, an integer to a negative power), as lowering records them and as a
// loaded module reports them: lowering (src/lower) adds a RunCheck per site to the program,
// generated kernels record the first failing site of a call in the call's coil::RunError
// (src/kernels/coil_kernel.h), and whoever runs the module (runtime/model_runner.h) raises the
// message. Here, below both, because an exported model (runtime/artifact.h) carries its checks
// in its manifest and the runtime library has no loop IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coil {

/// A condition that torch and the reference interpreter raise an error for and that generated
/// code checks while it runs: the first one that fails in a run is recorded (coil_kernel.h's
/// RunError) and the run raises it with run_check_message.
struct RunCheck {
  enum class Kind {
    index_in_range,        // gather: value is the index, limit the dim's size
    nonzero_divisor,       // integer fmod: value is the dividend
    nonnegative_exponent,  // integer pow: value is the exponent, limit the base
  };
  Kind kind = Kind::index_in_range;
  std::string op;  // what failed: "gather (node y), dim 0", "fmod (node z)"
};

/// "gather (node y), dim 0: index 7 is out of range for a dim of size 5 (valid: -5 to 4)"
std::string run_check_message(const RunCheck& check, int64_t value, int64_t limit);

/// "index_in_range", as manifests and cache entries spell a kind.
const char* run_check_kind_name(RunCheck::Kind kind);
/// The kind named `name`, or nullopt.
std::optional<RunCheck::Kind> parse_run_check_kind(std::string_view name);

}  // namespace coil
