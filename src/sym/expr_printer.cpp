// The readable form of an expression: "x0 + 1024*x1", "(x0 // 4) % 3", "min(s0, 16)".
// Python precedence, with extra parentheses around a FloorDiv/Mod operand that is not an atom so
// the reader never has to remember that // and * bind equally. Constants of a sum (and of a
// min/max) are printed last, negative coefficients as subtraction.
#include <sstream>

#include "coil/expr.h"
#include "sym/canonical.h"

namespace coil::sym {
namespace {

bool is_atom(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::Symbol:
    case ExprKind::Min:
    case ExprKind::Max:
      return true;
    case ExprKind::Const:
      return e.const_value() >= 0;
    default:
      return false;
  }
}

void print(std::ostream& os, const Expr& e);

void print_wrapped(std::ostream& os, const Expr& e) {
  if (is_atom(e)) return print(os, e);
  os << '(';
  print(os, e);
  os << ')';
}

// coef*body with coef > 0 handled by the caller's sign; prints "body", "3*body", "-body".
void print_term(std::ostream& os, int64_t coef, const Expr& body) {
  if (body.is_const()) {
    os << detail::wrap_mul(coef, body.const_value());
    return;
  }
  if (coef == -1) {
    os << '-';
  } else if (coef != 1) {
    os << coef << '*';
  }
  auto factors = detail::factors_of(body);
  const bool alone = coef == 1 && factors.size() == 1;
  bool first = true;
  for (const Expr& f : factors) {
    if (!first) os << '*';
    first = false;
    // In a product a quotient or remainder is wrapped ("4*(x0 // 4)"), alone it is not
    // ("x0 + x1 // 4").
    bool quotient = f.kind() == ExprKind::FloorDiv || f.kind() == ExprKind::Mod;
    if (f.kind() == ExprKind::Add || (quotient && !alone)) {
      print_wrapped(os, f);
    } else {
      print(os, f);
    }
  }
}

void print_sum(std::ostream& os, const Expr& e) {
  std::optional<int64_t> constant;
  bool first = true;
  auto emit = [&](int64_t coef, const Expr& body) {
    if (first) {
      print_term(os, coef, body);
    } else if (coef < 0) {
      os << " - ";
      print_term(os, static_cast<int64_t>(0 - static_cast<uint64_t>(coef)), body);
    } else {
      os << " + ";
      print_term(os, coef, body);
    }
    first = false;
  };
  for (const Expr& t : e.operands()) {
    if (t.is_const()) {
      constant = t.const_value();
      continue;
    }
    detail::Term term = detail::split_term(t);
    emit(term.coef, term.body);
  }
  if (constant) emit(*constant, make_const(1));
}

void print(std::ostream& os, const Expr& e) {
  if (!e.defined()) {
    os << "<null>";
    return;
  }
  switch (e.kind()) {
    case ExprKind::Const:
      os << e.const_value();
      return;
    case ExprKind::Symbol:
      os << e.symbol_name();
      return;
    case ExprKind::Add:
      return print_sum(os, e);
    case ExprKind::Mul: {
      detail::Term term = detail::split_term(e);
      return print_term(os, term.coef, term.body);
    }
    case ExprKind::FloorDiv:
    case ExprKind::Mod:
      print_wrapped(os, e.operands()[0]);
      os << (e.kind() == ExprKind::FloorDiv ? " // " : " % ");
      print_wrapped(os, e.operands()[1]);
      return;
    case ExprKind::Min:
    case ExprKind::Max: {
      os << (e.kind() == ExprKind::Min ? "min(" : "max(");
      const char* sep = "";
      for (const Expr& op : e.operands()) {
        if (op.is_const()) continue;
        os << sep;
        print(os, op);
        sep = ", ";
      }
      if (e.operands()[0].is_const()) os << sep << e.operands()[0].const_value();
      os << ')';
      return;
    }
  }
}

}  // namespace

std::string to_string(const Expr& e) {
  std::ostringstream os;
  print(os, e);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Expr& e) {
  print(os, e);
  return os;
}

}  // namespace coil::sym
