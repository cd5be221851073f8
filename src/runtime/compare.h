// Comparing results with a reference: what `coil check` and the correctness tests use.
// An element matches when |actual - expected| <= atol + rtol * |expected|; NaN matches NaN and
// an infinity matches the same infinity. Integers and bools must be equal.
#pragma once

#include <string>

#include "coil/tensor.h"

namespace coil {

struct Tolerance {
  double rtol = 1e-4;
  double atol = 1e-5;
};

/// Default tolerance per dtype against the float64 reference (docs/numerics.md explains them).
Tolerance default_tolerance(DType t);

struct CompareResult {
  bool ok = true;
  int64_t mismatches = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  int64_t worst_index = -1;  // linear index of the worst element (-1 when none)
  double worst_actual = 0, worst_expected = 0;
  std::string message;  // empty when ok, else a one-line explanation
};

/// Compares elementwise (shapes and dtypes must match; a mismatch there is reported, not thrown).
CompareResult compare_tensors(const Tensor& actual, const Tensor& expected, Tolerance tol);

/// Tensors of `shape` filled with deterministic pseudo-random values suitable for testing each
/// dtype (floats uniform in [lo, hi), integers in a small range, bools half true).
Tensor random_tensor(DType dtype, const std::vector<int64_t>& shape, uint64_t seed,
                     double lo = -2.0, double hi = 2.0);

}  // namespace coil
