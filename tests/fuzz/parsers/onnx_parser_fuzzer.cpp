// libFuzzer target: the ONNX frontend (frontend/onnx/onnx_import.h). The input is the bytes of an
// .onnx file (a serialized ModelProto), imported with import_onnx_bytes; what is checked on a
// graph it returns: fuzz_checks.h.
//
// Byte-level mutations of a protobuf mostly break its framing, so the custom mutator below
// parses the input as a ModelProto and, half of the time, edits the model instead: an op type
// from the frontend's table, an attribute the op's ONNX schema declares (or any attribute, of
// any type) set to an extreme value, rewired or dropped inputs, added, removed and duplicated
// nodes, dims, dtypes, initializers, opsets and outputs; the other half (and for inputs that do
// not parse) it leaves to libFuzzer's own mutations.
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_import.h"
#include "fuzz_checks.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using namespace coil;
using namespace coil::parser_fuzz;
using AP = onnx::AttributeProto;
using TP = onnx::TensorProto;

using Rng = std::minstd_rand;

size_t below(Rng& rng, size_t n) {
  return n == 0 ? 0 : static_cast<size_t>(rng()) % n;
}

int64_t extreme(Rng& rng) {
  static const int64_t values[] = {0,
                                   1,
                                   -1,
                                   2,
                                   3,
                                   -2,
                                   7,
                                   -7,
                                   64,
                                   1000,
                                   65536,
                                   int64_t{1} << 31,
                                   (int64_t{1} << 31) - 1,
                                   int64_t{1} << 32,
                                   int64_t{1} << 62,
                                   std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min()};
  return values[below(rng, std::size(values))];
}

float extreme_float(Rng& rng) {
  static const float values[] = {0.f,
                                 -0.f,
                                 1.f,
                                 -1.f,
                                 0.5f,
                                 1e-5f,
                                 3.f,
                                 1e30f,
                                 -1e30f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::denorm_min()};
  return values[below(rng, std::size(values))];
}

// Attribute names of ONNX ops, for attributes no schema gives (or of a wrong type).
const char* const kAttrNames[] = {"axis",
                                  "axes",
                                  "keepdims",
                                  "perm",
                                  "shape",
                                  "pads",
                                  "strides",
                                  "kernel_shape",
                                  "dilations",
                                  "group",
                                  "to",
                                  "epsilon",
                                  "alpha",
                                  "beta",
                                  "transA",
                                  "transB",
                                  "mode",
                                  "value",
                                  "starts",
                                  "ends",
                                  "split",
                                  "auto_pad",
                                  "ceil_mode",
                                  "count_include_pad",
                                  "num_outputs",
                                  "upper",
                                  "approximate",
                                  "exclusive",
                                  "reverse",
                                  "select_last_index",
                                  "noop_with_empty_axes",
                                  "broadcast",
                                  "consumed_inputs",
                                  "is_test",
                                  "momentum",
                                  "spatial",
                                  "min",
                                  "max",
                                  "direction",
                                  "blocksize"};

// All value names of the model (node outputs, graph inputs, initializers), plus "" (absent).
std::vector<std::string> value_names(const onnx::GraphProto& g) {
  std::vector<std::string> names{""};
  for (const auto& v : g.input()) names.push_back(v.name());
  for (const auto& t : g.initializer()) names.push_back(t.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) names.push_back(o);
  return names;
}

void random_attr_value(AP* a, AP::AttributeType t, Rng& rng) {
  a->set_type(t);
  switch (t) {
    case AP::INT:
      a->set_i(extreme(rng));
      break;
    case AP::FLOAT:
      a->set_f(extreme_float(rng));
      break;
    case AP::INTS:
      a->clear_ints();
      for (size_t i = below(rng, 7); i > 0; --i) a->add_ints(extreme(rng));
      break;
    case AP::FLOATS:
      a->clear_floats();
      for (size_t i = below(rng, 5); i > 0; --i) a->add_floats(extreme_float(rng));
      break;
    case AP::STRING: {
      static const char* const strings[] = {"",         "NOTSET",  "SAME_UPPER", "VALID",
                                            "constant", "reflect", "edge",       "tanh",
                                            "none",     "DCR",     "CRD",        "float"};
      a->set_s(strings[below(rng, std::size(strings))]);
      break;
    }
    case AP::TENSOR: {
      TP* t = a->mutable_t();
      t->Clear();
      t->set_data_type(static_cast<int32_t>(1 + below(rng, 16)));
      if (below(rng, 2)) t->add_dims(static_cast<int64_t>(below(rng, 4)));
      for (size_t i = below(rng, 4); i > 0; --i) t->add_int64_data(extreme(rng));
      break;
    }
    default:
      break;
  }
}

void mutate_attribute(onnx::NodeProto* node, int opset, Rng& rng) {
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(node->op_type(), opset);
  if (schema && !schema->attributes().empty() && below(rng, 3) != 0) {
    // One the schema declares, with a value of its type.
    auto it = schema->attributes().begin();
    std::advance(it, static_cast<long>(below(rng, schema->attributes().size())));
    AP* a = nullptr;
    for (auto& existing : *node->mutable_attribute())
      if (existing.name() == it->first) a = &existing;
    if (!a) a = node->add_attribute(), a->set_name(it->first);
    random_attr_value(a, it->second.type, rng);
    return;
  }
  if (node->attribute_size() > 0 && below(rng, 2)) {
    AP* a = node->mutable_attribute(static_cast<int>(below(rng, node->attribute_size())));
    if (below(rng, 4) == 0)
      a->set_type(static_cast<AP::AttributeType>(below(rng, 15)));  // also a wrong one
    else
      random_attr_value(a, a->type(), rng);
    return;
  }
  AP* a = node->add_attribute();
  a->set_name(kAttrNames[below(rng, std::size(kAttrNames))]);
  random_attr_value(a, static_cast<AP::AttributeType>(1 + below(rng, 8)), rng);
}

onnx::TensorShapeProto* some_shape(onnx::GraphProto* g, Rng& rng) {
  if (g->input_size() == 0) return nullptr;
  return g->mutable_input(static_cast<int>(below(rng, g->input_size())))
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape();
}

// One edit of the model; `fresh` numbers new value names.
void mutate_once(onnx::ModelProto& m, Rng& rng, int& fresh) {
  onnx::GraphProto* g = m.mutable_graph();
  const int nn = g->node_size();
  onnx::NodeProto* node = nn > 0 ? g->mutable_node(static_cast<int>(below(rng, nn))) : nullptr;
  std::vector<std::string> values = value_names(*g);
  int opset = 13;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = static_cast<int>(o.version());
  auto ops = onnxfe::all_onnx_ops();
  switch (below(rng, 14)) {
    case 0:  // another op type
      if (node) node->set_op_type(std::string(ops[below(rng, ops.size())].name));
      break;
    case 1:  // an attribute
      if (node) mutate_attribute(node, opset, rng);
      break;
    case 2:  // rewire an input to any value (a later one makes a cycle), or blank it
      if (node && node->input_size() > 0)
        node->set_input(static_cast<int>(below(rng, node->input_size())),
                        values[below(rng, values.size())]);
      break;
    case 3:  // one input more or fewer
      if (node && (node->input_size() == 0 || below(rng, 2)))
        node->add_input(values[below(rng, values.size())]);
      else if (node)
        node->mutable_input()->RemoveLast();
      break;
    case 4: {  // a new node reading existing values
      onnx::NodeProto* n = g->add_node();
      n->set_op_type(std::string(ops[below(rng, ops.size())].name));
      for (size_t i = 1 + below(rng, 3); i > 0; --i)
        n->add_input(values[below(rng, values.size())]);
      n->add_output("f" + std::to_string(fresh++));
      if (below(rng, 2)) mutate_attribute(n, opset, rng);
      if (below(rng, 2) && g->output_size() > 0)
        g->mutable_output(static_cast<int>(below(rng, g->output_size())))->set_name(n->output(0));
      break;
    }
    case 5:  // remove or duplicate a node, or swap two
      if (nn > 0) {
        int k = static_cast<int>(below(rng, 3));
        if (k == 0) {
          g->mutable_node()->SwapElements(static_cast<int>(below(rng, nn)), nn - 1);
          g->mutable_node()->RemoveLast();
        } else if (k == 1) {
          *g->add_node() = *node;
        } else {
          g->mutable_node()->SwapElements(static_cast<int>(below(rng, nn)),
                                          static_cast<int>(below(rng, nn)));
        }
      }
      break;
    case 6:  // a graph input's dim: a value, a parameter, one more or fewer
      if (auto* shape = some_shape(g, rng)) {
        size_t k = below(rng, 4);
        if (shape->dim_size() == 0 || k == 0) {
          shape->add_dim()->set_dim_value(static_cast<int64_t>(1 + below(rng, 4)));
        } else if (k == 1) {
          shape->mutable_dim()->RemoveLast();
        } else {
          auto* d = shape->mutable_dim(static_cast<int>(below(rng, shape->dim_size())));
          if (k == 2)
            d->set_dim_param(below(rng, 2) ? "N" : "batch");
          else
            d->set_dim_value(extreme(rng));
        }
      }
      break;
    case 7: {  // a dtype of an input, output or initializer
      auto dt = static_cast<int32_t>(below(rng, 18));
      size_t k = below(rng, 3);
      if (k == 0 && g->input_size() > 0)
        g->mutable_input(static_cast<int>(below(rng, g->input_size())))
            ->mutable_type()
            ->mutable_tensor_type()
            ->set_elem_type(dt);
      else if (k == 1 && g->output_size() > 0)
        g->mutable_output(static_cast<int>(below(rng, g->output_size())))
            ->mutable_type()
            ->mutable_tensor_type()
            ->set_elem_type(dt);
      else if (g->initializer_size() > 0)
        g->mutable_initializer(static_cast<int>(below(rng, g->initializer_size())))
            ->set_data_type(dt);
      break;
    }
    case 8:  // an initializer's dims
      if (g->initializer_size() > 0) {
        TP* t = g->mutable_initializer(static_cast<int>(below(rng, g->initializer_size())));
        if (t->dims_size() > 0 && below(rng, 2))
          t->set_dims(static_cast<int>(below(rng, t->dims_size())), extreme(rng));
        else if (t->dims_size() > 0 && below(rng, 2))
          t->mutable_dims()->RemoveLast();
        else
          t->add_dims(static_cast<int64_t>(below(rng, 3)));
      }
      break;
    case 9: {  // a small int64 initializer (shapes, axes, starts, indices)
      TP* t = g->add_initializer();
      t->set_name("c" + std::to_string(fresh++));
      t->set_data_type(TP::INT64);
      size_t n = below(rng, 5);
      if (n > 0 || below(rng, 2)) t->add_dims(static_cast<int64_t>(n));
      for (size_t i = 0; i < (t->dims_size() ? n : 1); ++i)
        t->add_int64_data(below(rng, 2) ? extreme(rng) : static_cast<int64_t>(below(rng, 5)));
      if (node && node->input_size() > 0)
        node->set_input(static_cast<int>(below(rng, node->input_size())), t->name());
      break;
    }
    case 10:  // another opset
      if (m.opset_import_size() > 0)
        m.mutable_opset_import(0)->set_version(static_cast<int64_t>(below(rng, 20)));
      break;
    case 11:  // an output names another value, or one output more
      if (below(rng, 3) == 0 || g->output_size() == 0)
        g->add_output()->set_name(values[below(rng, values.size())]);
      else
        g->mutable_output(static_cast<int>(below(rng, g->output_size())))
            ->set_name(values[below(rng, values.size())]);
      break;
    case 12: {  // the bytes of a name or of an initializer's raw data, by libFuzzer
      std::string* s = nullptr;
      if (g->initializer_size() > 0 && below(rng, 2))
        s = g->mutable_initializer(static_cast<int>(below(rng, g->initializer_size())))
                ->mutable_raw_data();
      else if (node && node->input_size() > 0)
        s = node->mutable_input(static_cast<int>(below(rng, node->input_size())));
      if (!s) break;
      size_t old = s->size();
      s->resize(old + 16);
      s->resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(s->data()), old, s->size()));
      break;
    }
    default:  // a node's domain
      if (node) node->set_domain(below(rng, 2) ? "" : "com.microsoft");
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Graph g;
  if (!clean("import_onnx_bytes", [&] { g = import_onnx_bytes(bytes, "fuzz.onnx"); })) return 0;
  check_parsed_graph(g);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto m;
  if (below(rng, 2) == 0 || !m.ParseFromArray(data, static_cast<int>(size)) || !m.has_graph())
    return LLVMFuzzerMutate(data, size, max_size);
  int fresh = static_cast<int>(below(rng, 1000));
  for (size_t k = 1 + below(rng, 3); k > 0; --k) mutate_once(m, rng, fresh);
  std::string out = m.SerializeAsString();
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
