// The lowering table (lower/op_lowering.cpp) and the op registry (graph/op_registry.cpp) name
// the same ops: every op that is not decomposed has exactly one lowering (input and constant
// none: lower_graph makes them buffers), every lowering names a registered op, and exactly the
// elementwise ones carry a loop op.
#include <gtest/gtest.h>

#include "graph/op_registry.h"
#include "lower/op_lowering.h"

namespace coil {
namespace {

TEST(OpLowering, EveryOpNotDecomposedHasOne) {
  for (const OpDef& op : all_ops()) {
    const OpLowering* lowering = find_lowering(op.name);
    if (op.kind == OpKind::Composite || op.name == "input" || op.name == "constant") {
      EXPECT_EQ(lowering, nullptr) << op.name;
      continue;
    }
    ASSERT_NE(lowering, nullptr) << op.name << " has no row in lower/op_lowering.cpp";
    EXPECT_NE(lowering->lower, nullptr) << op.name;
  }
}

TEST(OpLowering, EachNamesARegisteredOpOnce) {
  for (const OpLowering& lowering : all_lowerings()) {
    const OpDef* op = find_op(lowering.op);
    ASSERT_NE(op, nullptr) << lowering.op << " is not in graph/op_registry.cpp";
    EXPECT_EQ(find_lowering(lowering.op), &lowering) << lowering.op << " has two rows";
    EXPECT_EQ(op->kind == OpKind::Elementwise, lowering.loop_op != LoopOp::constant)
        << lowering.op << ": elementwise ops, and only they, name their loop op";
  }
}

}  // namespace
}  // namespace coil
