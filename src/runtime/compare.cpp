#include "runtime/compare.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

namespace coil {

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::F64:
      return {1e-9, 1e-12};
    case DType::F32:
      return {1e-4, 1e-5};
    case DType::F16:
      return {1e-2, 1e-3};
    case DType::BF16:
      return {2e-2, 1e-2};
    default:
      return {0, 0};
  }
}

CompareResult compare_tensors(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  CompareResult r;
  if (actual.shape() != expected.shape() || actual.dtype() != expected.dtype()) {
    r.ok = false;
    r.message = fmt::format("got {}{}, expected {}{}", dtype_name(actual.dtype()),
                            shape_str(actual.shape()), dtype_name(expected.dtype()),
                            shape_str(expected.shape()));
    return r;
  }
  double worst_excess = 0;
  // i64 and u64 values beyond 2^53 differ in bits that doubles drop: those compare exactly, on
  // contiguous copies (integers match only when equal anyway).
  const bool wide_int = !is_floating(actual.dtype()) && dtype_size(actual.dtype()) == 8;
  Tensor ca = wide_int ? actual.clone() : Tensor(), ce = wide_int ? expected.clone() : Tensor();
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.item_as_double(i), e = expected.item_as_double(i);
    bool match;
    double err = 0;
    if (wide_int && ca.data_as<int64_t>()[i] != ce.data_as<int64_t>()[i]) {
      match = false;
      err = a == e ? 1 : std::fabs(a - e);  // at least one unit apart
    } else if (std::isnan(e) || std::isnan(a)) {
      match = std::isnan(e) && std::isnan(a);
      err = match ? 0 : INFINITY;
    } else if (std::isinf(e) || std::isinf(a)) {
      match = a == e;
      err = match ? 0 : INFINITY;
    } else {
      err = std::fabs(a - e);
      match = err <= tol.atol + tol.rtol * std::fabs(e);
    }
    if (err > r.max_abs_error || (r.worst_index < 0 && !match)) {
      r.max_abs_error = std::max(r.max_abs_error, err);
    }
    double rel = e != 0 && std::isfinite(err) ? err / std::fabs(e) : (err > 0 ? INFINITY : 0);
    r.max_rel_error = std::max(r.max_rel_error, rel);
    double excess =
        match ? 0 : (std::isfinite(err) ? err - (tol.atol + tol.rtol * std::fabs(e)) : INFINITY);
    if (!match) {
      ++r.mismatches;
      if (r.worst_index < 0 || excess > worst_excess) {
        worst_excess = excess;
        r.worst_index = i;
        r.worst_actual = a;
        r.worst_expected = e;
      }
    }
  }
  r.ok = r.mismatches == 0;
  if (!r.ok) {
    r.message = fmt::format(
        "{} of {} elements differ; worst at linear index {}: got {}, expected {} (rtol {}, atol "
        "{})",
        r.mismatches, actual.numel(), r.worst_index, r.worst_actual, r.worst_expected, tol.rtol,
        tol.atol);
  }
  return r;
}

Tensor random_tensor(DType dtype, const std::vector<int64_t>& shape, uint64_t seed, double lo,
                     double hi) {
  Tensor t = Tensor::empty(dtype, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v;
    switch (dtype) {
      case DType::Bool:
        v = static_cast<double>(rng() & 1u);
        break;
      case DType::U8:
      case DType::U16:
      case DType::U32:
      case DType::U64:
        v = static_cast<double>(rng() % 10);
        break;
      case DType::I16:
      case DType::I8:
      case DType::I32:
      case DType::I64:
        v = static_cast<double>(static_cast<int64_t>(rng() % 11) - 5);
        break;
      default:
        v = real(rng);
    }
    t.set_from_double(i, v);
  }
  return t;
}

}  // namespace coil
