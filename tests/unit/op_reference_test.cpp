// docs/ops.md is what the op registry says: a change of an op's row (its doc or attributes)
// needs `build/bin/coil ops --markdown > docs/ops.md`.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "graph/op_reference.h"

namespace coil {
namespace {

TEST(OpReference, DocIsCurrent) {
  std::ifstream f(std::string(COIL_SOURCE_DIR) + "/docs/ops.md");
  ASSERT_TRUE(f.good()) << "docs/ops.md is missing";
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str(), op_reference_markdown())
      << "docs/ops.md is out of date: run build/bin/coil ops --markdown > docs/ops.md";
}

}  // namespace
}  // namespace coil
