// The ONNX conformance runner: runs one test of ONNX's backend test data (a directory with
// model.onnx and test_data_set_0/{input,output}_<i>.pb) through coil and compares the outputs.
// Used by conformance_test.cpp (the allowlist) and conformance_report_test.cpp (all tests).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "runtime/compare.h"

namespace coil::conformance {

/// rtol 1e-3 as ONNX's backend tests, atol 1e-5 as onnxruntime's runner (docs/onnx.md says why).
/// $COIL_CONFORMANCE_ATOL overrides atol (to measure how many tests a stricter one fails).
inline constexpr Tolerance kTolerance{1e-3, 1e-5};

enum class Outcome {
  Pass,
  Mismatch,     // ran, an output differs (or has another dtype or shape)
  Unsupported,  // the importer reported unsupported ops, or the opset is out of range
  ImportError,  // any other coil::Error while importing
  CompileError,
  RunError,
  BadTestData,  // a .pb file coil cannot read (sequences, strings, ...)
};
const char* outcome_name(Outcome o);

struct CaseResult {
  Outcome outcome = Outcome::Pass;
  std::string detail;        // the error message or the mismatch
  bool specialized = false;  // integer inputs were bound as constants (see run_case)
};

/// The root of the test data: $COIL_ONNX_TESTDATA, else Debian's /usr/share/libonnx-testdata/data.
std::filesystem::path testdata_root();

/// A test imported, with its data, ready to compile.
struct PreparedCase {
  Graph graph;
  std::vector<Tensor> inputs, expected;
  CompileOptions options;  // the size symbols bound from the inputs
  bool specialized = false;
  /// The model has ops whose output size depends on values (NonZero, Unique, ...): `graph` is
  /// empty and run_case runs it through coil::OnnxModel, in stages (onnx_staged.h).
  bool staged = false;
  std::filesystem::path model;
};

/// Reads the test data and imports the model (see run_case); an outcome other than Pass says
/// why the test cannot run.
CaseResult prepare_case(const std::filesystem::path& dir, PreparedCase* out);

/// Imports, compiles, runs and compares one test. A model whose import fails because a shape
/// argument (Reshape's shape, Slice's starts, Gather's indices, ...) is a graph input is
/// imported again with its integer and one-element inputs bound to the test's values
/// (`specialized`).
CaseResult run_case(const std::filesystem::path& dir);

/// The op types of a model's graph (default domain ones plain, others "domain.op").
std::vector<std::string> model_ops(const std::filesystem::path& model);
/// Whether the frontend supports op `op` (from model_ops).
bool op_supported(const std::string& op);

/// The allowlist: test paths relative to the root ("node/test_abs"), comments and blanks
/// skipped; a trailing " slow" marks tests that run only with COIL_SLOW_TESTS=1.
struct AllowedTest {
  std::string path;
  bool slow = false;
};
std::vector<AllowedTest> read_allowlist(const std::filesystem::path& file);

}  // namespace coil::conformance
