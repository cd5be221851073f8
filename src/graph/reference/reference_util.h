// Helpers shared by the reference kernels (internal to graph/reference): exact integer element
// access, strided reads in row-major order, broadcasting and index iteration.
//
// Values travel as double, except integral values (bool included), which travel as int64 so
// that i64 elements beyond 2^53 and integer wrap-around stay exact. A u64 travels as the int64
// of the same bits: wrapping add, sub and mul are the same; what depends on the sign (order,
// division, conversion to float) goes through order_key and uint64_to_float.
#pragma once

#include <cstdint>
#include <vector>

#include "coil/graph.h"

namespace coil::ref {

/// Reads one element of an integral dtype (bool included) exactly.
int64_t load_int(DType t, const void* p);
/// Stores an integer: two's complement wrap for integer dtypes, nonzero for bool, one
/// rounding for floating dtypes (as a C++ conversion, like torch's casts).
void store_int(DType t, void* p, int64_t v);
/// `v` rounded to the precision of floating dtype `t`.
double round_to(DType t, double v);
/// `v` wrapped to integral dtype `t` (bool: 0 or 1).
int64_t wrap_to(DType t, int64_t v);
/// Integer `v` converted to floating dtype `t` with a single rounding.
double int_to_float(DType t, int64_t v);
/// A u64 value (carried as the int64 of the same bits) converted to floating `t`, one rounding.
double uint64_to_float(DType t, uint64_t v);
/// A key whose signed order is the order of the values of integral `t`: u64's bits with the top
/// bit flipped (its own inverse), the value itself for every other type.
int64_t order_key(DType t, int64_t v);

/// Element offsets of `t` (any strides) in row-major order, in elements from data().
std::vector<int64_t> element_offsets(const Tensor& t);
/// Every element of `t` in row-major order, as double.
std::vector<double> read_doubles(const Tensor& t);
/// Every element of integral `t` in row-major order, exactly.
std::vector<int64_t> read_ints(const Tensor& t);
/// Every element of `t` converted to `compute` (which is floating), as double: integers are
/// converted with one rounding, floats rounded to `compute`'s precision.
std::vector<double> read_doubles_as(const Tensor& t, DType compute);
/// Every element of integral `t` converted (wrapped) to integral `compute`.
std::vector<int64_t> read_ints_as(const Tensor& t, DType compute);

/// Writes `v` into element `i` of contiguous `out`.
void set_double(Tensor& out, int64_t i, double v);
void set_int(Tensor& out, int64_t i, int64_t v);

/// Numpy broadcast of concrete shapes; coil::Error naming `op` on a mismatch.
std::vector<int64_t> broadcast_sizes(std::string_view op, const std::vector<int64_t>& a,
                                     const std::vector<int64_t>& b);
/// Strides into a row-major array of shape `in` that read it broadcast to `out` (0 on
/// broadcast dims); `in` is right-aligned against `out`.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                       const std::vector<int64_t>& out);

/// The value of a numeric attribute, exact when it is an integer.
struct Number {
  bool is_int = false;
  int64_t i = 0;
  double d = 0;
};
Number number_attr(const Node& node, const std::string& name);

/// Runs the op's shape rule on the actual inputs, which validates them (weight shapes, dims,
/// sizes that were symbolic in the graph).
void check_inputs(const Node& node, const std::vector<Tensor>& in);

/// Calls f(index) for every multi-index of `shape` in row-major order.
template <typename F>
void for_each_index(const std::vector<int64_t>& shape, F&& f) {
  int64_t n = shape_numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(static_cast<const std::vector<int64_t>&>(idx));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace coil::ref
