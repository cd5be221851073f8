#include "codegen/inject_bug.h"

#include <fmt/format.h>

#include "support/check.h"
#include "support/env.h"

namespace coil {

InjectedBug injected_bug() {
  std::string v = env(EnvVar::testing_inject_bug);
  if (v.empty()) return InjectedBug::none;
  if (v == "relu") return InjectedBug::relu_wrong;
  if (v == "relu_compile_error") return InjectedBug::relu_compile_error;
  if (v == "relu_crash") return InjectedBug::relu_crash;
  user_error("COIL_TESTING_INJECT_BUG='{}': expected relu, relu_compile_error or relu_crash", v);
}

std::string relu_expression(const std::string& x, ReluSyntax syntax) {
  // `arg` is x as it is, or x with the bug put in; `name` the function or method's name.
  auto spell = [&](const std::string& arg, const std::string& name) {
    switch (syntax) {
      case ReluSyntax::cpp_call:
        return fmt::format("coil::{}({})", name, arg);
      case ReluSyntax::cpp_method:
        return fmt::format("({}).{}()", arg, name);
      case ReluSyntax::triton:
        // NaN < 0 is false, so NaN propagates (torch.relu).
        return name == "relu" ? fmt::format("tl.where({0} < 0, 0, {0})", arg)
                              : fmt::format("tl.{}({})", name, arg);
    }
    COIL_UNREACHABLE("relu syntax");
  };
  switch (injected_bug()) {
    case InjectedBug::none:
      break;
    case InjectedBug::relu_wrong:
      return spell("(-" + x + ")", "relu");
    case InjectedBug::relu_compile_error:
      return spell(x, "relu_injected_bug");
    case InjectedBug::relu_crash:
      COIL_USER_CHECK(syntax != ReluSyntax::triton,
                      "COIL_TESTING_INJECT_BUG=relu_crash: the CPU backend only");
      // The comma operator keeps the operand's type (a scalar or a vector).
      return spell("(__builtin_trap(), " + x + ")", "relu");
  }
  return syntax == ReluSyntax::cpp_method ? x + ".relu()" : spell(x, "relu");
}

}  // namespace coil
