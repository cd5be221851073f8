// The ONNX mappings of MatMul, Gemm, Conv, MaxPool and AveragePool (and the integer products
// built on them: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) on ONNX's own node tests,
// checked through the reference interpreter: import, interpret, compare with the expected
// outputs (the conformance tolerance). This checks the importer (pads, auto_pad, strides,
// dilations, groups, Gemm's transposes and factors) and the reference kernels before the
// matmul and convolution lowerings exist; the pooling tests that also pass compiled are in
// allowlist.txt.
#include <gtest/gtest.h>

#include "conformance/onnx_conformance.h"
#include "graph/interpreter.h"

namespace coil::conformance {
namespace {

const char* const kNodeTests[] = {
    "test_matmul_2d",
    "test_matmul_3d",
    "test_matmul_4d",
    "test_gemm_all_attributes",
    "test_gemm_alpha",
    "test_gemm_beta",
    "test_gemm_default_matrix_bias",
    "test_gemm_default_no_bias",
    "test_gemm_default_scalar_bias",
    "test_gemm_default_single_elem_vector_bias",
    "test_gemm_default_vector_bias",
    "test_gemm_default_zero_bias",
    "test_gemm_transposeA",
    "test_gemm_transposeB",
    "test_basic_conv_with_padding",
    "test_basic_conv_without_padding",
    "test_conv_with_autopad_same",
    "test_conv_with_strides_and_asymmetric_padding",
    "test_conv_with_strides_no_padding",
    "test_conv_with_strides_padding",
    "test_maxpool_1d_default",  // 1-D windows: 2-D ones of width 1
    "test_averagepool_1d_default",
    "test_maxpool_2d_ceil",
    "test_maxpool_2d_default",
    "test_maxpool_2d_dilations",
    "test_maxpool_2d_pads",
    "test_maxpool_2d_precomputed_pads",
    "test_maxpool_2d_precomputed_same_upper",
    "test_maxpool_2d_precomputed_strides",
    "test_maxpool_2d_same_lower",
    "test_maxpool_2d_same_upper",
    "test_maxpool_2d_strides",
    "test_maxpool_2d_uint8",
    "test_averagepool_2d_ceil",
    "test_averagepool_2d_default",
    "test_averagepool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad",
    "test_averagepool_2d_precomputed_pads",
    "test_averagepool_2d_precomputed_pads_count_include_pad",
    "test_averagepool_2d_precomputed_same_upper",
    "test_averagepool_2d_precomputed_strides",
    "test_averagepool_2d_same_lower",
    "test_averagepool_2d_same_upper",
    "test_averagepool_2d_strides",
    "test_convtranspose_3d",    // 3-D: a sum of 2-D convolutions over the depth taps
    "test_maxpool_3d_default",  // 3-D windows: two 2-D pools
    "test_averagepool_3d_default",
    "test_matmulinteger",  // integer products: exact f32 products of the shifted operands
    "test_basic_convinteger",
    "test_convinteger_with_padding",
    "test_convinteger_without_padding",
    "test_qlinearmatmul_2D",
    "test_qlinearmatmul_3D",
    "test_qlinearconv",
};

class OnnxLinalgReference : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxLinalgReference, InterpreterMatchesExpected) {
  std::filesystem::path dir = testdata_root() / "node" / GetParam();
  if (!std::filesystem::exists(dir / "model.onnx")) GTEST_SKIP() << dir << " is missing";
  PreparedCase c;
  CaseResult r = prepare_case(dir, &c);
  ASSERT_EQ(r.outcome, Outcome::Pass) << outcome_name(r.outcome) << ": " << r.detail;
  std::vector<Tensor> got = interpret(c.graph, c.inputs);
  ASSERT_EQ(got.size(), c.expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dtype(), c.expected[i].dtype()) << "output " << i;
    ASSERT_EQ(got[i].shape(), c.expected[i].shape()) << "output " << i;
    CompareResult cmp = compare_tensors(got[i], c.expected[i], kTolerance);
    EXPECT_TRUE(cmp.ok) << "output " << i << ": " << cmp.message;
  }
}

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  return std::string(info.param).substr(5);  // without "test_"
}

INSTANTIATE_TEST_SUITE_P(NodeTests, OnnxLinalgReference, ::testing::ValuesIn(kNodeTests),
                         test_name);

}  // namespace
}  // namespace coil::conformance
