// TfIdfVectorizer (onnx_ops_tfidf.cpp), the training optimizers (onnx_ops_training.cpp) and
// RoiAlign (onnx_ops_roialign.cpp), DFT and STFT (onnx_ops_dft.cpp) at import: every message for a
// malformed or refused use, and the model of other domains only that imports. The numbers are
// checked by the conformance cases (onnx_op_cases_static.py, families tfidf, training, roialign and
// dft) and ONNX's node tests.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <string>

#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_import.h"
#include "support/error_of.h"

namespace coil {
namespace {

using namespace onnx_test;
using coil::testing::error_of;

void add_string_attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

void add_float_attr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

struct TfIdf {
  int32_t dtype = TP::INT64;
  std::vector<int64_t> dims{2, 6};
  std::string mode = "TF";
  int64_t min_n = 1, max_n = 2, skip = 1;
  std::vector<int64_t> pool{2, 3, 5, 6, 7, 8};  // 2 unigrams, 2 bigrams
  std::vector<int64_t> counts{0, 2};
  std::vector<int64_t> indexes{0, 1, 2, 3};
  std::string extra;  // an extra INT attribute's name (set to 1)
};

onnx::ModelProto tfidf(const TfIdf& t) {
  onnx::ModelProto m = empty_model(9);
  set_type(m.mutable_graph()->add_input(), "x", t.dtype, t.dims);
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  auto* n = add_node(m, "TfIdfVectorizer", {"x"}, {"y"}, "n");
  add_string_attr(n, "mode", t.mode);
  add_int_attr(n, "min_gram_length", t.min_n);
  add_int_attr(n, "max_gram_length", t.max_n);
  add_int_attr(n, "max_skip_count", t.skip);
  add_ints_attr(n, "pool_int64s", t.pool);
  add_ints_attr(n, "ngram_counts", t.counts);
  add_ints_attr(n, "ngram_indexes", t.indexes);
  if (!t.extra.empty()) add_int_attr(n, t.extra, 1);
  return m;
}

TEST(OnnxStaticOpsErrors, TfIdfVectorizer) {
  Graph ok = import(tfidf({}));
  EXPECT_EQ(ok.node(ok.outputs()[0].node).type.shape, (Shape{2, 4}));
  const std::string at = "m.onnx: node 'n' (TfIdfVectorizer): ";
  TfIdf t;
  t.mode = "BM25";
  EXPECT_EQ(import_error(tfidf(t)), at + "mode 'BM25' is not TF, IDF or TFIDF");
  t = {};
  t.min_n = 3;
  EXPECT_EQ(import_error(tfidf(t)),
            at + "min_gram_length 3 and max_gram_length 2 must satisfy 1 <= min <= max");
  t = {};
  t.max_n = 3;
  t.min_n = 3;
  EXPECT_EQ(import_error(tfidf(t)),
            at + "max_gram_length 3 exceeds the 2 n-gram lengths of ngram_counts");
  t = {};
  t.counts = {0, 3};
  EXPECT_EQ(import_error(tfidf(t)),
            at + "the 2-grams of the pool (3 tokens from ngram_counts[1] = 3) are not a multiple "
                 "of 2");
  t = {};
  t.counts = {0, 7};
  EXPECT_EQ(import_error(tfidf(t)),
            at + "ngram_counts [0, 7] does not split pool_int64s (6 tokens) into ascending ranges");
  t = {};
  t.indexes = {0, 1, 2};
  EXPECT_EQ(import_error(tfidf(t)), at + "ngram_indexes has 3 entries for the pool's 4 n-grams");
  t = {};
  t.indexes = {0, -1, 2, 3};
  EXPECT_EQ(import_error(tfidf(t)), at + "ngram_indexes holds the negative index -1");
  t = {};
  t.skip = -2;
  EXPECT_EQ(import_error(tfidf(t)), at + "max_skip_count -2 is negative (or missing)");
  t = {};
  t.dims = {2, 2, 3};
  EXPECT_EQ(import_error(tfidf(t)), at + "the input must be 1-D [C] or 2-D [N, C], got rank 3");
  t = {};
  t.extra = "ngram_weights";
  EXPECT_EQ(import_error(tfidf(t)),
            at + "attribute 'ngram_weights' is not an attribute of TfIdfVectorizer in opset 9");
  t = {};
  t.dtype = TP::FLOAT;
  EXPECT_EQ(import_error(tfidf(t)),
            "m.onnx: unsupported ops: TfIdfVectorizer (node 'n', opset 9: input dtype f32 (coil "
            "has no string tensors; int32 and int64 tokens only))");
}

/// An optimizer of ai.onnx.preview.training over x [3] (and x2 [4] when `two`): the model imports
/// only that domain, as ONNX's node tests do.
onnx::ModelProto optimizer(const std::string& op, bool two, int32_t t_type = TP::INT64) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("ai.onnx.preview.training");
  o->set_version(1);
  m.mutable_graph()->set_name("g");
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "r", TP::FLOAT, {});
  set_type(g->add_input(), "t", t_type, {});
  int groups = op == "Adam" ? 4 : 3, outs = op == "Adam" ? 3 : 2;
  std::vector<std::string> in{"r", "t"}, out;
  for (int k = 0; k < groups; ++k) {
    set_type(g->add_input(), fmt::format("a{}", k), TP::FLOAT, {3});
    in.push_back(fmt::format("a{}", k));
    if (two) {
      set_type(g->add_input(), fmt::format("b{}", k), TP::FLOAT, {4});
      in.push_back(fmt::format("b{}", k));
    }
  }
  // inputs grouped per kind: X1 X2 G1 G2 ...
  if (two) {
    std::vector<std::string> sorted{"r", "t"};
    for (int k = 0; k < groups; ++k)
      sorted.push_back(fmt::format("a{}", k)), sorted.push_back(fmt::format("b{}", k));
    in = sorted;
  }
  for (int k = 0; k < outs * (two ? 2 : 1); ++k) {
    out.push_back(fmt::format("o{}", k));
    set_type(g->add_output(), out.back(), TP::FLOAT, {});
  }
  auto* n = add_node(m, op, in, out, "n");
  n->set_domain("ai.onnx.preview.training");
  if (op == "Momentum") {
    add_float_attr(n, "alpha", 0.9f);
    add_float_attr(n, "beta", 0.5f);
    add_float_attr(n, "norm_coefficient", 0.0f);
    add_string_attr(n, "mode", "standard");
  }
  return m;
}

TEST(OnnxStaticOpsErrors, TrainingOptimizers) {
  for (const char* op : {"Adagrad", "Adam", "Momentum"}) {
    SCOPED_TRACE(op);
    EXPECT_NO_THROW(import(optimizer(op, false)));
    Graph g = import(optimizer(op, true));
    EXPECT_EQ(g.node(g.outputs()[1].node).type.shape, (Shape{4}));
  }
  const std::string at = "m.onnx: node 'n' (Momentum): ";
  onnx::ModelProto m = optimizer("Momentum", false);
  m.mutable_graph()->mutable_node(0)->mutable_attribute(3)->set_s("heavy_ball");
  EXPECT_EQ(import_error(m), at + "mode 'heavy_ball' is not 'standard' or 'nesterov'");
  m = optimizer("Momentum", false);
  m.mutable_graph()->mutable_node(0)->mutable_attribute()->RemoveLast();
  EXPECT_EQ(import_error(m), at + "attribute 'mode' is required");
  EXPECT_EQ(import_error(optimizer("Adam", false, TP::INT32)),
            "m.onnx: node 'n' (Adam): T must be an int64 scalar, got i32 of rank 0");
  m = optimizer("Adagrad", false);
  m.mutable_graph()->mutable_node(0)->add_input("extra");
  set_type(m.mutable_graph()->add_input(), "extra", TP::FLOAT, {3});
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'n' (Adagrad): 6 inputs: expected R, T and 3 groups of equally many "
            "tensors (2 + 3 n)");
  m = optimizer("Adagrad", true);
  m.mutable_graph()->mutable_node(0)->set_input(3, "a1");  // X2 -> G1's tensor of shape [3]
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'n' (Adagrad): input 5 (f32 [4]) does not match X2 (f32 [3])");
  // The domain's key spelled as a default-domain op_type is an unknown op.
  m = relu_model();
  add_node(m, "ai.onnx.preview.training.Adam", {"y"}, {"z"}, "a");
  EXPECT_EQ(import_error(m),
            "m.onnx: unsupported ops: ai.onnx.preview.training.Adam (node 'a', opset 13)");
  m = optimizer("Adagrad", false);
  add_float_attr(m.mutable_graph()->mutable_node(0), "learning_rate", 0.1f);
  EXPECT_EQ(import_error(m),
            "m.onnx: node 'n' (Adagrad): attribute 'learning_rate' is not an attribute of "
            "Adagrad in ai.onnx.preview.training version 1");
}

/// RoiAlign (node "n", opset 16) of x [2, 3, 8, 8] with `rois` rois of shape [rois, rw] and
/// batch indices [bn], sampling_ratio 2 unless `ratio` is given.
onnx::ModelProto roi_align(int64_t rois, int64_t rw, int64_t bn, const std::string& attr = "",
                           const std::string& value = "") {
  onnx::ModelProto m = empty_model(16);
  auto* g = m.mutable_graph();
  set_type(g->add_input(), "x", TP::FLOAT, {2, 3, 8, 8});
  set_type(g->add_input(), "rois", TP::FLOAT, {rois, rw});
  set_type(g->add_input(), "b", TP::INT64, {bn});
  set_type(g->add_output(), "y", TP::FLOAT, {});
  auto* n = add_node(m, "RoiAlign", {"x", "rois", "b"}, {"y"}, "n");
  add_int_attr(n, "output_height", 3);
  add_int_attr(n, "output_width", 5);
  if (attr != "sampling_ratio") add_int_attr(n, "sampling_ratio", 2);
  if (attr == "sampling_ratio") add_int_attr(n, attr, std::stoll(value));
  if (attr == "mode" || attr == "coordinate_transformation_mode") add_string_attr(n, attr, value);
  return m;
}

TEST(OnnxStaticOpsErrors, RoiAlign) {
  Graph g = import(roi_align(4, 4, 4));
  EXPECT_EQ(g.node(g.outputs()[0].node).type.shape, (Shape{4, 3, 3, 5}));
  const std::string at = "m.onnx: node 'n' (RoiAlign): ";
  EXPECT_EQ(import_error(roi_align(4, 5, 4)), at + "rois must be [num_rois, 4], got [4, 5]");
  EXPECT_EQ(import_error(roi_align(4, 4, 3)),
            at + "batch_indices must be [4] (one per roi), got [3]");
  EXPECT_EQ(import_error(roi_align(4, 4, 4, "mode", "median")),
            at + "mode 'median' is not avg or max");
  EXPECT_EQ(import_error(roi_align(4, 4, 4, "coordinate_transformation_mode", "asymmetric")),
            at + "coordinate_transformation_mode 'asymmetric' is not half_pixel or "
                 "output_half_pixel");
  EXPECT_EQ(import_error(roi_align(4, 4, 4, "sampling_ratio", "-1")),
            at + "sampling_ratio -1 is negative");
  EXPECT_EQ(import_error(roi_align(4, 4, 4, "sampling_ratio", "0")),
            "m.onnx: unsupported ops: RoiAlign (node 'n', opset 16: sampling_ratio 0 (an adaptive "
            "grid of ceil(roi size / output size) samples: a shape that depends on the rois' "
            "values))");
}

/// DFT (node "n", opset 17) of x with the given shape and int attributes.
onnx::ModelProto dft(const std::vector<int64_t>& dims,
                     const std::vector<std::pair<std::string, int64_t>>& attrs) {
  onnx::ModelProto m = empty_model(17);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, dims);
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  auto* n = add_node(m, "DFT", {"x"}, {"y"}, "n");
  for (const auto& [k, v] : attrs) add_int_attr(n, k, v);
  return m;
}

/// STFT (node "n", opset 17) of a signal [2, 40, c] with frame_step `step` and frame_length
/// `length` (initializers) and, when window > 0, a window input of that length.
onnx::ModelProto stft(int64_t c, int64_t step, int64_t length, int64_t window, int64_t onesided) {
  onnx::ModelProto m = empty_model(17);
  set_type(m.mutable_graph()->add_input(), "x", TP::FLOAT, {2, 40, c});
  set_type(m.mutable_graph()->add_output(), "y", TP::FLOAT, {});
  add_i64_initializer(m, "step", {step}, true);
  add_i64_initializer(m, "len", {length}, true);
  std::vector<std::string> in{"x", "step", "", "len"};
  if (window > 0) {
    set_type(m.mutable_graph()->add_input(), "w", TP::FLOAT, {window});
    in[2] = "w";
  }
  add_int_attr(add_node(m, "STFT", in, {"y"}, "n"), "onesided", onesided);
  return m;
}

TEST(OnnxStaticOpsErrors, DftAndStft) {
  Graph g = import(dft({2, 9, 3, 1}, {{"axis", 1}, {"onesided", 1}}));
  EXPECT_EQ(g.node(g.outputs()[0].node).type.shape, (Shape{2, 5, 3, 2}));
  const std::string at = "m.onnx: node 'n' (DFT): ";
  EXPECT_EQ(import_error(dft({2, 9, 3}, {})),
            at + "the last dim must be 1 (real) or 2 (complex), got 3 (shape [2, 9, 3])");
  EXPECT_EQ(import_error(dft({2, 9, 1}, {{"axis", 2}})),
            at + "axis 2 is outside [-3, -2] and [0, 1] (the last dim holds real/imaginary parts)");
  EXPECT_EQ(
      import_error(dft({2, 9, 1}, {{"axis", -1}})),
      at + "axis -1 is outside [-3, -2] and [0, 1] (the last dim holds real/imaginary parts)");
  EXPECT_EQ(import_error(dft({2, 9, 1}, {{"inverse", 1}, {"onesided", 1}})),
            "m.onnx: unsupported ops: DFT (node 'n', opset 17: onesided with inverse (a "
            "one-sided spectrum's inverse is not defined by opset 17))");
  EXPECT_EQ(import_error(dft({2, 20000, 1}, {})),
            "m.onnx: unsupported ops: DFT (node 'n', opset 17: dft_length 20000 (a direct DFT: at "
            "most 2^14 points per transformed dim))");
  Graph s = import(stft(1, 8, 16, 16, 1));
  EXPECT_EQ(s.node(s.outputs()[0].node).type.shape, (Shape{2, 4, 9, 2}));
  const std::string st = "m.onnx: node 'n' (STFT): ";
  EXPECT_EQ(import_error(stft(1, 8, 16, 12, 1)),
            st + "frame_length 16 differs from the window's length 12");
  EXPECT_EQ(import_error(stft(1, 0, 16, 0, 1)), st + "frame_step 0 is not positive");
  EXPECT_EQ(import_error(stft(1, 8, 41, 0, 1)),
            st + "frame_length 41 exceeds the signal's 40 samples");
  EXPECT_EQ(import_error(stft(2, 8, 16, 0, 1)),
            st + "onesided needs a real signal (its last dim is 2: complex)");
}

}  // namespace
}  // namespace coil
