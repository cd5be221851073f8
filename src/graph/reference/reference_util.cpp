#include "graph/reference/reference_util.h"

#include <cmath>
#include <cstddef>
#include <limits>

#include "graph/op_registry.h"
#include "graph/type_rules.h"
#include "support/check.h"

namespace coil::ref {

int64_t load_int(DType t, const void* p) {
  switch (t) {
    case DType::Bool:
      return *static_cast<const bool*>(p) ? 1 : 0;
    case DType::U8:
      return *static_cast<const uint8_t*>(p);
    case DType::I8:
      return *static_cast<const int8_t*>(p);
    case DType::I32:
      return *static_cast<const int32_t*>(p);
    case DType::I64:
      return *static_cast<const int64_t*>(p);
    case DType::I16:
      return *static_cast<const int16_t*>(p);
    case DType::U16:
      return *static_cast<const uint16_t*>(p);
    case DType::U32:
      return *static_cast<const uint32_t*>(p);
    case DType::U64:  // the bits: values from 2^63 on read as negative int64 (see the header)
      return static_cast<int64_t>(*static_cast<const uint64_t*>(p));
    default:
      break;
  }
  COIL_UNREACHABLE("load_int: {} is not integral", dtype_name(t));
}

int64_t wrap_to(DType t, int64_t v) {
  switch (t) {
    case DType::Bool:
      return v != 0 ? 1 : 0;
    case DType::U8:
      return static_cast<uint8_t>(v);
    case DType::I8:
      return static_cast<int8_t>(v);
    case DType::I32:
      return static_cast<int32_t>(v);
    case DType::I64:
    case DType::U64:
      return v;
    case DType::I16:
      return static_cast<int16_t>(v);
    case DType::U16:
      return static_cast<uint16_t>(v);
    case DType::U32:
      return static_cast<uint32_t>(v);
    default:
      break;
  }
  COIL_UNREACHABLE("wrap_to: {} is not integral", dtype_name(t));
}

double round_to(DType t, double v) {
  switch (t) {
    case DType::F64:
      return v;
    case DType::F32:
      return static_cast<float>(v);
    case DType::F16:
    case DType::BF16: {
      alignas(8) std::byte storage[8];
      store_from_double(t, storage, v);
      return load_as_double(t, storage);
    }
    default:
      break;
  }
  COIL_UNREACHABLE("round_to: {} is not floating", dtype_name(t));
}

double uint64_to_float(DType t, uint64_t v) {
  if (t == DType::F64) return static_cast<double>(v);
  return round_to(t, static_cast<float>(v));
}

int64_t order_key(DType t, int64_t v) {
  return t == DType::U64 ? v ^ std::numeric_limits<int64_t>::min() : v;
}

double int_to_float(DType t, int64_t v) {
  // One rounding, as C++ (and torch) convert: int64 -> float directly, not through double.
  if (t == DType::F64) return static_cast<double>(v);
  return round_to(t, static_cast<float>(v));
}

void store_int(DType t, void* p, int64_t v) {
  switch (t) {
    case DType::Bool:
      *static_cast<bool*>(p) = v != 0;
      return;
    case DType::U8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v);
      return;
    case DType::I8:
      *static_cast<int8_t*>(p) = static_cast<int8_t>(v);
      return;
    case DType::I32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(v);
      return;
    case DType::I64:
      *static_cast<int64_t*>(p) = v;
      return;
    case DType::I16:
      *static_cast<int16_t*>(p) = static_cast<int16_t>(v);
      return;
    case DType::U16:
      *static_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
      return;
    case DType::U32:
      *static_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
      return;
    case DType::U64:
      *static_cast<uint64_t*>(p) = static_cast<uint64_t>(v);
      return;
    case DType::F16:
    case DType::BF16:
    case DType::F32:
    case DType::F64:
      store_from_double(t, p, int_to_float(t, v));
      return;
  }
  COIL_UNREACHABLE("bad dtype");
}

std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(t.numel()));
  const auto& strides = t.strides();
  for_each_index(t.shape(), [&](const std::vector<int64_t>& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    offs.push_back(off);
  });
  return offs;
}

static const std::byte* element_ptr(const Tensor& t, int64_t offset) {
  return static_cast<const std::byte*>(t.data()) + offset * dtype_size(t.dtype());
}

std::vector<double> read_doubles(const Tensor& t) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.numel()));
  for (int64_t off : element_offsets(t))
    out.push_back(load_as_double(t.dtype(), element_ptr(t, off)));
  return out;
}

std::vector<int64_t> read_ints(const Tensor& t) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(t.numel()));
  for (int64_t off : element_offsets(t)) out.push_back(load_int(t.dtype(), element_ptr(t, off)));
  return out;
}

std::vector<double> read_doubles_as(const Tensor& t, DType compute) {
  COIL_ASSERT(is_floating(compute), "compute dtype {}", dtype_name(compute));
  if (!is_floating(t.dtype())) {
    std::vector<double> out;
    bool u64 = t.dtype() == DType::U64;
    for (int64_t v : read_ints(t))
      out.push_back(u64 ? uint64_to_float(compute, static_cast<uint64_t>(v))
                        : int_to_float(compute, v));
    return out;
  }
  std::vector<double> out = read_doubles(t);
  if (t.dtype() != compute)
    for (double& v : out) v = round_to(compute, v);
  return out;
}

std::vector<int64_t> read_ints_as(const Tensor& t, DType compute) {
  std::vector<int64_t> out = read_ints(t);
  if (t.dtype() != compute)
    for (int64_t& v : out) v = wrap_to(compute, v);
  return out;
}

void set_double(Tensor& out, int64_t i, double v) {
  store_from_double(out.dtype(), static_cast<std::byte*>(out.data()) + i * dtype_size(out.dtype()),
                    v);
}

void set_int(Tensor& out, int64_t i, int64_t v) {
  store_int(out.dtype(), static_cast<std::byte*>(out.data()) + i * dtype_size(out.dtype()), v);
}

std::vector<int64_t> broadcast_sizes(std::string_view op, const std::vector<int64_t>& a,
                                     const std::vector<int64_t>& b) {
  auto s = static_sizes(broadcast_shapes(op, make_shape(a), make_shape(b)));
  COIL_ASSERT(s.has_value(), "broadcast of constant shapes is constant");
  return *s;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                       const std::vector<int64_t>& out) {
  COIL_ASSERT(in.size() <= out.size(), "rank {} broadcast to rank {}", in.size(), out.size());
  std::vector<int64_t> dense = contiguous_strides(in);
  std::vector<int64_t> strides(out.size(), 0);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) strides[lead + i] = in[i] == 1 ? 0 : dense[i];
  return strides;
}

Number number_attr(const Node& node, const std::string& name) {
  Number n;
  auto it = node.attrs.items().find(name);
  if (it != node.attrs.items().end()) {
    if (const auto* i = std::get_if<int64_t>(&it->second)) {
      n.is_int = true;
      n.i = *i;
      n.d = static_cast<double>(*i);
      return n;
    }
  }
  n.d = node.attrs.get_float(node.op_name(), name);
  // Truncation toward zero, saturating, NaN to 0 (as store_from_double does for integers).
  if (std::isnan(n.d))
    n.i = 0;
  else if (n.d >= 9.2233720368547758e18)
    n.i = INT64_MAX;
  else if (n.d <= -9.2233720368547758e18)
    n.i = INT64_MIN;
  else
    n.i = static_cast<int64_t>(n.d);
  return n;
}

void check_inputs(const Node& node, const std::vector<Tensor>& in) {
  std::vector<TensorType> types;
  for (const Tensor& t : in) types.push_back(TensorType{t.dtype(), make_shape(t.shape())});
  std::vector<const TensorType*> ptrs;
  for (const TensorType& t : types) ptrs.push_back(&t);
  node.op->infer(node, ptrs);
}

}  // namespace coil::ref
