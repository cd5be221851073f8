// attention's bad inputs: each is a coil::Error naming the op and the mismatched value.
#include <gtest/gtest.h>

#include "support/error_of.h"

#include "coil/coil.h"

namespace coil {
namespace {

using coil::testing::error_of;

std::string attention_error(std::vector<std::pair<DType, std::vector<int64_t>>> inputs,
                            Attrs attrs = {}) {
  Graph g;
  std::vector<int> ids;
  for (size_t i = 0; i < inputs.size(); ++i)
    ids.push_back(
        g.add_input("in" + std::to_string(i), inputs[i].first, make_shape(inputs[i].second)));
  return error_of([&] { g.add_node("attention", ids, attrs, "y"); });
}

TEST(AttentionErrors, ShapesDtypesAndAttributes) {
  const DType f = DType::F32;
  EXPECT_EQ(attention_error({{f, {2, 8, 4}}, {f, {2, 8, 4}}, {f, {2, 8, 4}}}),
            "attention: q, k and v must be 4-D [B, H, T, D], got f32[2, 8, 4], f32[2, 8, 4], "
            "f32[2, 8, 4]");
  EXPECT_EQ(
      attention_error(
          {{DType::I32, {1, 2, 3, 4}}, {DType::I32, {1, 2, 3, 4}}, {DType::I32, {1, 2, 3, 4}}}),
      "attention: q, k and v must have one floating dtype (f32, f64, f16, bf16), got "
      "i32[1, 2, 3, 4], i32[1, 2, 3, 4], i32[1, 2, 3, 4]");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}}, {DType::BF16, {1, 2, 3, 4}}, {f, {1, 2, 3, 4}}}),
            "attention: q, k and v must have one floating dtype (f32, f64, f16, bf16), got "
            "f32[1, 2, 3, 4], bf16[1, 2, 3, 4], f32[1, 2, 3, 4]");
  EXPECT_EQ(attention_error({{f, {2, 2, 3, 4}}, {f, {1, 2, 3, 4}}, {f, {1, 2, 3, 4}}}),
            "attention: batch sizes differ: q [2, 2, 3, 4], k [1, 2, 3, 4], v [1, 2, 3, 4]");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}}, {f, {1, 2, 3, 8}}, {f, {1, 2, 3, 4}}}),
            "attention: k's head dim 8 differs from q's 4 (q [1, 2, 3, 4], k [1, 2, 3, 8])");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}}, {f, {1, 2, 5, 4}}, {f, {1, 2, 6, 4}}}),
            "attention: v [1, 2, 6, 4] must have k's heads and length [2, 5] (k [1, 2, 5, 4])");
  EXPECT_EQ(attention_error({{f, {1, 6, 3, 4}}, {f, {1, 4, 5, 4}}, {f, {1, 4, 5, 4}}}),
            "attention: k and v have 4 heads, which does not divide q's 6 (grouped-query "
            "attention needs H % Hkv == 0)");
  EXPECT_EQ(attention_error(
                {{f, {1, 2, 3, 4}}, {f, {1, 2, 5, 4}}, {f, {1, 2, 5, 4}}, {DType::I64, {3, 5}}}),
            "attention: the mask must be bool (true: attend) or floating (added to the scores), "
            "got i64[3, 5]");
  EXPECT_EQ(attention_error(
                {{f, {1, 2, 3, 4}}, {f, {1, 2, 5, 4}}, {f, {1, 2, 5, 4}}, {DType::Bool, {3, 4}}}),
            "attention: the mask [3, 4] does not broadcast to the scores [B, H, Tq, Tk] = "
            "[1, 2, 3, 5]");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}},
                             {f, {1, 2, 5, 4}},
                             {f, {1, 2, 5, 4}},
                             {DType::Bool, {1, 1, 1, 3, 5}}}),
            "attention: the mask bool[1, 1, 1, 3, 5] has more than 4 dims");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}}, {f, {1, 2, 5, 4}}}),
            "attention: expected 3 to 4 inputs, got 2");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}}, {f, {1, 2, 5, 4}}, {f, {1, 2, 5, 4}}},
                            Attrs{{"casual", true}}),
            "unknown attribute 'casual' of attention (node y); did you mean 'causal'?");
  EXPECT_EQ(attention_error({{f, {1, 2, 3, 4}}, {f, {1, 2, 5, 4}}, {f, {1, 2, 5, 4}}},
                            Attrs{{"causal", int64_t{2}}}),
            "attribute 'causal' of attention (node y) must be a bool, got 2");
}

}  // namespace
}  // namespace coil
