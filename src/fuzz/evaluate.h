// One differential run of a fuzz case: the reference interpreter against the compiled model
// with fusion on, then off (autotune off: fast, and the generated code depends on nothing
// measured), every output compared at the per-dtype default tolerance (of the least precise
// inexact computation it depends on: an f32 exp cast to f64 is compared as f32), a failure
// classified.
#pragma once

#include <string>
#include <string_view>

#include "fuzz/fuzz_case.h"
#include "runtime/compare.h"

namespace coil::fuzz {

/// What a run gave. Classes: "" (passed), "unsupported" (a documented limit such as conv2d on
/// f64: not a failure), "rounding" (an output differs, and the local check (local_check.h)
/// found every node right on the compiled values of its operands: not a failure), "rejected"
/// (the interpreter and compile both refuse the graph for its bound sizes, each with an error:
/// not a failure), and the failures: "internal" (coil::InternalError or another exception
/// from the compiler), "compile-error" (coil::Error from compile on a graph the interpreter
/// ran, including the C++ compiler rejecting generated code), "run-error" (coil::Error from
/// running the compiled model), "wrong" (an output differs), "interp-error" (the interpreter
/// refused a graph the builder accepted), "crash" and "timeout" (the child process running the
/// case died or hung; forked_runner.h).
struct Outcome {
  std::string cls;
  std::string message;
  int config = -1;  // the compile that failed: 0 fusion on, 1 fusion off; -1 none or both
  bool failed() const {
    return !cls.empty() && cls != "unsupported" && cls != "rounding" && cls != "rejected";
  }
};

inline constexpr const char* kFailureClasses[] = {
    "internal", "compile-error", "run-error", "wrong", "interp-error", "crash", "timeout"};

struct EvalOptions {
  int only_config = -1;        // run only this compile (the shrinker keeps the failing one)
  bool delete_modules = true;  // remove the cache entries compiled for the case afterwards
};

/// Runs the case in this process (a crashing kernel takes the process with it: call it in a
/// forked child, forked_runner.h). Never throws.
Outcome evaluate_case(const FuzzCase& c, const EvalOptions& options = {});

/// `g` with its f16/bf16 intermediates computed in f32 (inputs, sources and casts to f16/bf16
/// still round, and f16/bf16 outputs round at the end). Fused code rounds a low-precision value
/// only where it stores it (docs/numerics.md), the reference after every node: an output is
/// accepted when it lies within tolerance of either reference, or between them.
/// With `rounded`, those nodes (of `g`'s ids) round to their f16/bf16 dtype as well: one of the
/// placements of roundings that fused code may choose (evaluate.cpp: rounding_placement).
Graph widen_low_precision(const Graph& g, const std::vector<int>& rounded = {});

/// For output `output` of `g` that matches neither reference: interprets `g` with each subset of
/// the f16/bf16 intermediates it depends on rounded (at most 8; outputs always round) and
/// returns a message naming the first placement whose output matches `got` (a rounding that
/// fused code may choose), or "" when none does. The CPU mode calls it on "gone when stored",
/// the Triton mode through `coil_fuzz --check-placement` (check_values.h).
std::string rounding_placement(const Graph& g, const std::vector<Tensor>& inputs, size_t output,
                               const Tensor& got, Tolerance tol);

/// Each output's tolerance: its dtype's default, widened to that of the least precise inexact
/// computation it depends on. The CPU and the Triton modes compare with it.
std::vector<Tolerance> output_tolerances(const Graph& g);

/// Ops whose result both sides compute exactly alike from the same inputs: views, copies,
/// max/min, comparisons, casts, floor/ceil/round/sign (the others may differ in the last bits).
bool is_exact_op(std::string_view op);

/// compare_tensors' rule for one element: NaN matches NaN, an infinity the same infinity, else
/// |a - e| <= atol + rtol * |e|.
bool element_matches(double a, double e, Tolerance tol);

/// The stable part of a failure, for deduplication and for the shrinker's "still the same
/// failure": the class and the first line of the message (for a C++ compiler failure, its
/// first error line; for a mismatch, the op and dtype of the output) with numbers masked.
std::string failure_key(const Outcome& o);

}  // namespace coil::fuzz
