// Compiled by tests/compile_fail/check_loop_op_switch.sh with coil's own compile options: a
// switch over LoopOp that misses an op must not compile (the guarantee loop_ops.h states for
// every printer). With COIL_ALL_OPS it names every op and must compile.
#include "ir/loop_ops.h"

int spelled(coil::LoopOp op) {
  switch (op) {
#define COIL_TEST_CASE(name, arity, doc) \
  case coil::LoopOp::name:               \
    return arity;
    COIL_LOOP_SOURCE_OPS(COIL_TEST_CASE)
    COIL_LOOP_MATH_OPS(COIL_TEST_CASE)
#ifdef COIL_ALL_OPS
    COIL_LOOP_EFFECT_OPS(COIL_TEST_CASE)
#endif
#undef COIL_TEST_CASE
  }
  return -1;
}
