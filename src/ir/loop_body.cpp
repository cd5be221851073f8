#include "ir/loop_body.h"

#include <cstring>

#include <fmt/format.h>

#include "coil/attrs.h"
#include "coil/tensor.h"
#include "support/check.h"

namespace coil {

std::string_view loop_op_name(LoopOp op) {
  switch (op) {
#define COIL_CASE(name, arity, doc) \
  case LoopOp::name:                \
    return #name;
    COIL_LOOP_OPS(COIL_CASE)
#undef COIL_CASE
  }
  COIL_UNREACHABLE("bad loop op");
}

int loop_op_arity(LoopOp op) {
  switch (op) {
#define COIL_CASE(name, arity, doc) \
  case LoopOp::name:                \
    return arity;
    COIL_LOOP_OPS(COIL_CASE)
#undef COIL_CASE
  }
  COIL_UNREACHABLE("bad loop op");
}

bool is_transcendental(LoopOp op) {
  switch (op) {
    case LoopOp::exp:
    case LoopOp::expm1:
    case LoopOp::log:
    case LoopOp::log1p:
    case LoopOp::tanh:
    case LoopOp::erf:
    case LoopOp::sigmoid:
    case LoopOp::sin:
    case LoopOp::cos:
    case LoopOp::pow:
      return true;
      COIL_LOOP_SOURCE_OPS(COIL_LOOP_OP_CASE)
      COIL_LOOP_EFFECT_OPS(COIL_LOOP_OP_CASE)
    case LoopOp::to_dtype:
    case LoopOp::round_to_bf16:
    case LoopOp::round_to_f16:
    case LoopOp::abs:
    case LoopOp::neg:
    case LoopOp::sqrt:
    case LoopOp::rsqrt:
    case LoopOp::reciprocal:
    case LoopOp::relu:
    case LoopOp::floor:
    case LoopOp::ceil:
    case LoopOp::round:
    case LoopOp::sign:
    case LoopOp::logical_not:
    case LoopOp::isnan:
    case LoopOp::add:
    case LoopOp::sub:
    case LoopOp::mul:
    case LoopOp::div:
    case LoopOp::maximum:
    case LoopOp::minimum:
    case LoopOp::fmod:
    case LoopOp::eq:
    case LoopOp::ne:
    case LoopOp::lt:
    case LoopOp::le:
    case LoopOp::gt:
    case LoopOp::ge:
    case LoopOp::logical_and:
    case LoopOp::logical_or:
    case LoopOp::where:
      return false;
  }
  COIL_UNREACHABLE("bad loop op");
}

std::string_view reduction_type_name(ReductionType t) {
  switch (t) {
#define COIL_CASE(name, doc) \
  case ReductionType::name:  \
    return #name;
    COIL_REDUCTION_TYPES(COIL_CASE)
#undef COIL_CASE
  }
  COIL_UNREACHABLE("bad reduction type");
}

bool BodyOp::operator==(const BodyOp& o) const {
  // NaN constants compare by bits so that CSE still merges them.
  return op == o.op && dtype == o.dtype && args == o.args && buffer == o.buffer &&
         index == o.index && std::memcmp(&fvalue, &o.fvalue, sizeof fvalue) == 0 &&
         ivalue == o.ivalue && reduction == o.reduction && site == o.site && extent == o.extent;
}

static size_t hash_op(const BodyOp& b) {
  size_t h = static_cast<size_t>(b.op) * 1000003u ^ static_cast<size_t>(b.dtype) * 7919u;
  for (int a : b.args) h = h * 31u + static_cast<size_t>(a + 1);
  h = h * 31u + static_cast<size_t>(b.buffer + 1);
  if (b.index.defined()) h = h * 31u + b.index.hash();
  if (b.extent.defined()) h = h * 31u + b.extent.hash();
  uint64_t bits;
  std::memcpy(&bits, &b.fvalue, sizeof bits);
  h = h * 31u + std::hash<uint64_t>()(bits) + std::hash<int64_t>()(b.ivalue);
  return (h * 31u + static_cast<size_t>(b.reduction)) * 31u + static_cast<size_t>(b.site + 1);
}

int LoopBody::add(BodyOp op) {
  for (int a : op.args)
    COIL_ASSERT(a < static_cast<int>(ops_.size()), "operand {} not yet defined", a);
  // Stores and reductions are never merged: each is a distinct effect.
  bool pure = op.op != LoopOp::store && op.op != LoopOp::reduction;
  size_t h = hash_op(op);
  if (pure) {
    auto it = cse_.find(h);
    if (it != cse_.end()) {
      for (int cand : it->second)
        if (ops_[static_cast<size_t>(cand)] == op) return cand;
    }
  }
  ops_.push_back(std::move(op));
  int id = static_cast<int>(ops_.size()) - 1;
  if (pure) cse_[h].push_back(id);
  return id;
}

int LoopBody::load(int buffer, sym::Expr index, DType compute_dtype) {
  BodyOp b;
  b.op = LoopOp::load;
  b.dtype = compute_dtype;
  b.buffer = buffer;
  b.index = index;
  return add(std::move(b));
}

sym::Expr indirect_var() {
  return sym::make_symbol("ind");
}

bool is_indirect_load(const BodyOp& op) {
  return op.op == LoopOp::load && op.args[0] >= 0;
}

int LoopBody::load_indirect(int buffer, sym::Expr index, DType compute_dtype, int ind) {
  COIL_ASSERT(op(ind).op == LoopOp::indirect_index, "load_indirect: tmp{} is not an index", ind);
  BodyOp b;
  b.op = LoopOp::load;
  b.dtype = compute_dtype;
  b.buffer = buffer;
  b.index = index;
  b.args[0] = ind;
  return add(std::move(b));
}

int LoopBody::indirect_index(int value, int64_t size, int site, sym::Expr extent) {
  COIL_ASSERT(size > 0, "indirect_index into an empty dim");
  BodyOp b;
  b.op = LoopOp::indirect_index;
  b.dtype = DType::I64;
  b.args[0] = value;
  b.ivalue = size;
  b.site = site;
  if (extent.defined() && !extent.is_const()) b.extent = extent;
  return add(std::move(b));
}

int LoopBody::constant(double value, DType dtype) {
  BodyOp b;
  b.op = LoopOp::constant;
  b.dtype = compute_dtype(dtype);
  if (is_low_precision(dtype)) {
    // An f16/bf16 literal is computed in f32 but has the narrow type's value: round it here
    // exactly as a tensor of that dtype stores it (the reference's full()).
    Tensor t = Tensor::empty(dtype, {1});
    t.set_from_double(0, value);
    b.fvalue = t.item_as_double(0);
  } else if (is_floating(dtype)) {
    b.fvalue = value;
  } else {
    b.ivalue = dtype == DType::Bool ? (value != 0) : static_cast<int64_t>(value);
  }
  return add(std::move(b));
}

int LoopBody::index_expr(sym::Expr index, DType dtype) {
  BodyOp b;
  b.op = LoopOp::index_expr;
  b.dtype = dtype;
  b.index = index;
  return add(std::move(b));
}

int LoopBody::to_dtype(int value, DType dtype) {
  if (is_low_precision(dtype)) {
    LoopOp round = dtype == DType::BF16 ? LoopOp::round_to_bf16 : LoopOp::round_to_f16;
    if (op(value).op == round) return value;
    return compute(round, DType::F32, {to_dtype(value, DType::F32)});
  }
  dtype = compute_dtype(dtype);
  if (dtype_of(value) == dtype) return value;
  return compute(LoopOp::to_dtype, dtype, {value});
}

int LoopBody::stored_value(int value, DType storage) {
  return to_dtype(to_dtype(value, storage), compute_dtype(storage));
}

int LoopBody::compute(LoopOp op, DType dtype, std::initializer_list<int> args, int site) {
  COIL_ASSERT(static_cast<int>(args.size()) == loop_op_arity(op), "{} takes {} operands, got {}",
              loop_op_name(op), loop_op_arity(op), args.size());
  BodyOp b;
  b.op = op;
  b.dtype = compute_dtype(dtype);
  b.site = site;
  size_t i = 0;
  for (int a : args) b.args[i++] = a;
  return add(std::move(b));
}

int LoopBody::reduction(ReductionType type, int value, DType result_dtype) {
  BodyOp b;
  b.op = LoopOp::reduction;
  b.dtype = compute_dtype(result_dtype);
  b.args[0] = value;
  b.reduction = type;
  return add(std::move(b));
}

int LoopBody::store(int buffer, sym::Expr index, int value) {
  BodyOp b;
  b.op = LoopOp::store;
  b.dtype = dtype_of(value);
  b.args[0] = value;
  b.buffer = buffer;
  b.index = index;
  return add(std::move(b));
}

int LoopBody::reduction_op() const {
  for (size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].op == LoopOp::reduction) return static_cast<int>(i);
  return -1;
}

LoopBody LoopBody::substituted(const std::map<sym::Expr, sym::Expr>& map) const {
  LoopBody out;
  for (BodyOp op : ops_) {
    if (op.index.defined()) op.index = sym::substitute(op.index, map);
    out.add(std::move(op));
  }
  return out;
}

std::string to_string(const LoopBody& body) {
  std::string out;
  for (size_t i = 0; i < body.ops().size(); ++i) {
    const BodyOp& op = body.ops()[i];
    std::string args;
    auto arg = [&](int a) { return fmt::format("tmp{}", a); };
    switch (op.op) {
      case LoopOp::load:
        args = fmt::format("buf{}, {}", op.buffer, sym::to_string(op.index));
        if (op.args[0] >= 0) args += fmt::format(", ind={}", arg(op.args[0]));
        break;
      case LoopOp::indirect_index:
        args = fmt::format("{}, size={}", arg(op.args[0]), op.ivalue);
        break;
      case LoopOp::store:
        args = fmt::format("buf{}, {}, {}", op.buffer, sym::to_string(op.index), arg(op.args[0]));
        break;
      case LoopOp::constant:
        args = is_floating(op.dtype) ? attr_to_string(op.fvalue) : std::to_string(op.ivalue);
        break;
      case LoopOp::index_expr:
        args = sym::to_string(op.index);
        break;
      case LoopOp::reduction:
        args = fmt::format("{}, {}", reduction_type_name(op.reduction), arg(op.args[0]));
        break;
        COIL_LOOP_MATH_OPS(COIL_LOOP_OP_CASE)
        for (int k = 0; k < loop_op_arity(op.op); ++k)
          args += (k ? ", " : "") + arg(op.args[static_cast<size_t>(k)]);
        break;
    }
    out +=
        fmt::format("  tmp{} = {}({}) : {}\n", i, loop_op_name(op.op), args, dtype_name(op.dtype));
  }
  return out;
}

}  // namespace coil
