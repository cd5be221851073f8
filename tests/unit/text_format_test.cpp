// The graph text format: parsing, printing and the print -> parse -> print round trip.
#include "graph/text_format.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <unistd.h>

#include "coil/error.h"
#include "graph/op_registry.h"

namespace coil {
namespace {

// Two graphs are the same when every node, attribute, constant element and output matches.
void expect_same_graph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (int i = 0; i < a.num_nodes(); ++i) {
    const Node& x = a.node(i);
    const Node& y = b.node(i);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op_name(), y.op_name());
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.type, y.type) << type_str(x.type) << " vs " << type_str(y.type);
    // Attrs::operator== compares doubles with ==, so NaN attributes compare through their text.
    ASSERT_EQ(x.attrs.items().size(), y.attrs.items().size());
    for (const auto& [key, value] : x.attrs.items()) {
      ASSERT_TRUE(y.attrs.has(key)) << key;
      const AttrValue& other = y.attrs.items().at(key);
      EXPECT_EQ(value.index(), other.index()) << key;
      EXPECT_EQ(attr_to_string(value), attr_to_string(other)) << key;
    }
    ASSERT_EQ(x.data == nullptr, y.data == nullptr);
    if (x.data) {
      ASSERT_EQ(x.data->dtype(), y.data->dtype());
      ASSERT_EQ(x.data->shape(), y.data->shape());
      for (int64_t k = 0; k < x.data->numel(); ++k) {
        double u = x.data->item_as_double(k), v = y.data->item_as_double(k);
        if (std::isnan(u)) {
          EXPECT_TRUE(std::isnan(v)) << x.name << "[" << k << "]";
        } else {
          EXPECT_EQ(std::memcmp(&u, &v, sizeof u), 0)
              << x.name << "[" << k << "]: " << u << " vs " << v;
        }
      }
      if (x.data->dtype() == DType::I64) {
        for (int64_t k = 0; k < x.data->numel(); ++k)
          EXPECT_EQ(x.data->data_as<int64_t>()[k], y.data->data_as<int64_t>()[k]);
      }
    }
  }
  ASSERT_EQ(a.outputs().size(), b.outputs().size());
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    EXPECT_EQ(a.outputs()[i].name, b.outputs()[i].name);
    EXPECT_EQ(a.outputs()[i].node, b.outputs()[i].node);
  }
}

// Prints `g`, parses the text, and checks the result equals `g` and prints identically.
std::string expect_round_trip(const Graph& g) {
  std::string text = to_text(g);
  Graph back = parse_graph(text);
  expect_same_graph(g, back);
  EXPECT_EQ(to_text(back), text);
  return text;
}

// Parses `src`, then checks the printed form round-trips.
Graph parse_and_round_trip(std::string_view src) {
  Graph g = parse_graph(src);
  expect_round_trip(g);
  return g;
}

TEST(TextFormat, ParsesTheDocumentedExample) {
  Graph g = parse_and_round_trip(R"(
# comments to end of line
input x: f32[4, 3]             # sizes: integers or symbol names
input mask: bool[4, s0]
const w: f32[3] = [0.5, -1.0, 2.0]
t0 = mul(x, w)
t1 = gelu(t0) {approximate="tanh"}
t2 = sum(t1) {axes=[1], keepdim=true} : f32[4, 1]
t3 = full() {shape=[2, 3], value=0.5, dtype=f32}
output y = t2
output t0
)");
  ASSERT_EQ(g.num_nodes(), 7);
  EXPECT_EQ(g.inputs(), (std::vector<int>{0, 1}));
  EXPECT_EQ(type_str(g.node(0).type), "f32[4, 3]");
  EXPECT_TRUE(g.node(1).type.shape[1].is_symbol());
  EXPECT_EQ(type_str(g.node(1).type), "bool[4, s0]");
  const Node& w = g.node(2);
  EXPECT_EQ(w.op_name(), "constant");
  ASSERT_TRUE(w.data);
  EXPECT_EQ(w.data->item_as_double(1), -1.0);
  EXPECT_EQ(w.data->item_as_double(2), 2.0);
  EXPECT_EQ(g.node(3).inputs, (std::vector<int>{0, 2}));
  EXPECT_EQ(g.node(4).attrs.get_string("gelu", "approximate"), "tanh");
  const Node& t2 = g.node(5);
  EXPECT_EQ(t2.attrs.get_ints("sum", "axes"), (std::vector<int64_t>{1}));
  EXPECT_TRUE(t2.attrs.get_bool("sum", "keepdim"));
  EXPECT_EQ(type_str(t2.type), "f32[4, 1]");
  const Node& t3 = g.node(6);
  EXPECT_EQ(t3.attrs.get_dtype("full", "dtype"), DType::F32);
  EXPECT_EQ(t3.attrs.get_float("full", "value"), 0.5);
  ASSERT_EQ(g.outputs().size(), 2u);
  EXPECT_EQ(g.outputs()[0].name, "y");
  EXPECT_EQ(g.outputs()[0].node, 5);
  EXPECT_EQ(g.outputs()[1].name, "t0");
  EXPECT_EQ(g.outputs()[1].node, 3);
}

TEST(TextFormat, PrintsTheCanonicalForm) {
  Graph g;
  int x = g.add_input("x", DType::F32, {sym::make_const(4), sym::make_symbol("s0")});
  int w = g.add_constant(
      [] {
        Tensor t = Tensor::empty(DType::F32, {2});
        t.set_from_double(0, 0.5);
        t.set_from_double(1, -1.0);
        return t;
      }(),
      "w");
  int a = g.add_node("abs", {x});
  int s = g.add_node("sum", {a}, {{"axes", std::vector<int64_t>{1}}, {"keepdim", true}}, "s");
  g.add_output(s, "y");
  g.add_output(a);
  (void)w;
  EXPECT_EQ(to_text(g),
            "input x: f32[4, s0]\n"
            "const w: f32[2] = [0.5, -1.0]\n"
            "t0 = abs(x) : f32[4, s0]\n"
            "s = sum(t0) {axes=[1], keepdim=true} : f32[4, 1]\n"
            "output y = s\n"
            "output t0\n");
  expect_round_trip(g);
}

TEST(TextFormat, EmptyAndCommentOnlyTexts) {
  EXPECT_EQ(parse_graph("").num_nodes(), 0);
  EXPECT_EQ(parse_graph("\n\n  \t\n").num_nodes(), 0);
  EXPECT_EQ(parse_graph("# nothing here\n   # or here").num_nodes(), 0);
  EXPECT_EQ(to_text(Graph()), "");
}

TEST(TextFormat, WhitespaceCommentsAndLineEndings) {
  // Tabs, CRLF line endings, a byte order mark, comments everywhere, no final newline.
  Graph g = parse_graph(
      "\xEF\xBB\xBFinput\tx :f32[ 2 ,3 ]\r\n"
      "\r\n"
      "   # an indented comment\r\n"
      "const c : i32[ 3 ] = [ 1 ,\n"
      "   2, # data may span lines\n"
      "\n"
      "   3 ]\n"
      "t0=add( x ,c ){ }:f32[2,3]# trailing comment\n"
      "output   t0");
  ASSERT_EQ(g.num_nodes(), 3);
  EXPECT_EQ(type_str(g.node(0).type), "f32[2, 3]");
  EXPECT_EQ(g.node(1).data->item_as_double(2), 3.0);
  EXPECT_TRUE(g.node(2).attrs.items().empty());
  EXPECT_EQ(to_text(g),
            "input x: f32[2, 3]\n"
            "const c: i32[3] = [1, 2, 3]\n"
            "t0 = add(x, c) : f32[2, 3]\n"
            "output t0\n");
}

TEST(TextFormat, KeywordsAreUsableAsValueNames) {
  Graph g = parse_and_round_trip(R"(
input input: f32[2]
const const: f32[2] = [1, 2]
output = add(input, const)
y = sub(output, input)
output output
output const
output input = output
)");
  EXPECT_EQ(g.node(1).name, "const");
  EXPECT_EQ(g.node(2).name, "output");
  ASSERT_EQ(g.outputs().size(), 3u);
  EXPECT_EQ(g.outputs()[1].node, 1);
  EXPECT_EQ(g.outputs()[2].name, "input");
  EXPECT_EQ(g.outputs()[2].node, 2);
}

TEST(TextFormat, OutputsKeepNamesAndOrder) {
  Graph g = parse_and_round_trip(R"(
input x: f32[3]
a = neg(x)
output first = a
output a
output second = x
)");
  ASSERT_EQ(g.outputs().size(), 3u);
  EXPECT_EQ(g.outputs()[0].name, "first");
  EXPECT_EQ(g.outputs()[1].name, "a");
  EXPECT_EQ(g.outputs()[1].node, 1);
  EXPECT_EQ(g.outputs()[2].node, 0);
}

TEST(TextFormat, EveryAttributeKindRoundTrips) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // No op takes every kind of value (attributes are checked against the op's declaration), so
  // the attribute syntax is round-tripped on its own: the printer's form of a node's attributes.
  Attrs attrs{
      {"i_zero", int64_t{0}},
      {"i_neg", int64_t{-7}},
      {"i_max", std::numeric_limits<int64_t>::max()},
      {"i_min", std::numeric_limits<int64_t>::min()},
      {"f_half", 0.5},
      {"f_tenth", 0.1},
      {"f_whole", 3.0},
      {"f_neg_zero", -0.0},
      {"f_tiny", 5e-324},
      {"f_small", 1e-300},
      {"f_huge", DBL_MAX},
      {"f_big", 1e20},
      {"f_nan", nan},
      {"f_inf", inf},
      {"f_ninf", -inf},
      {"b_true", true},
      {"b_false", false},
      {"s_plain", std::string("tanh")},
      {"s_empty", std::string("")},
      {"s_escapes", std::string("a \"quoted\" \\ back\nline\ttab\r\x01\x7f")},
      {"s_utf8", std::string("caf\xC3\xA9 # not a comment")},
      {"l_empty", std::vector<int64_t>{}},
      {"l_ints", std::vector<int64_t>{1, -2, 3}},
      {"l_extreme", std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                         std::numeric_limits<int64_t>::max()}},
      {"needs quotes", int64_t{1}},
      {"", int64_t{2}},
  };
  for (DType t : {DType::Bool, DType::U8, DType::I8, DType::I32, DType::I64, DType::F16,
                  DType::BF16, DType::F32, DType::F64})
    attrs.set(fmt::format("d_{}", dtype_name(t)), t);
  std::string text = attrs_to_text(attrs);
  EXPECT_NE(text.find("\"needs quotes\"=1"), std::string::npos) << text;
  EXPECT_NE(text.find("s_escapes=\"a \\\"quoted\\\" \\\\ back\\nline\\ttab\\r\\x01\\x7f\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("f_ninf=-inf"), std::string::npos) << text;
  EXPECT_NE(text.find("f_neg_zero=-0.0"), std::string::npos) << text;

  Attrs b = parse_attr_text(text);
  EXPECT_EQ(attrs_to_text(b), text);  // (NaN makes b == attrs false)
  EXPECT_EQ(b.get_int("abs", "i_min"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(b.get_float("abs", "f_tenth"), 0.1);
  EXPECT_EQ(b.get_float("abs", "f_tiny"), 5e-324);
  EXPECT_TRUE(std::signbit(b.get_float("abs", "f_neg_zero")));
  EXPECT_TRUE(std::isnan(b.get_float("abs", "f_nan")));
  EXPECT_EQ(b.get_float("abs", "f_ninf"), -inf);
  EXPECT_EQ(b.get_string("abs", "s_escapes"), "a \"quoted\" \\ back\nline\ttab\r\x01\x7f");
  EXPECT_EQ(b.get_dtype("abs", "d_bf16"), DType::BF16);
  // A whole number written with '.0' stays a float; without it, an integer.
  EXPECT_TRUE(std::holds_alternative<double>(b.items().at("f_whole")));
  EXPECT_TRUE(std::holds_alternative<int64_t>(b.items().at("i_zero")));
}

TEST(TextFormat, AttributeSpellings) {
  Attrs a = parse_attr_text(
      R"({a=1e3, b=.5, c=-2.5E-2, d=-3, e=[ -1 , 2 ], f="\x41\\", g=-inf, h=nan, "k k"=i8})");
  EXPECT_EQ(a.get_float("abs", "a"), 1000.0);
  EXPECT_TRUE(std::holds_alternative<double>(a.items().at("a")));
  EXPECT_EQ(a.get_float("abs", "b"), 0.5);
  EXPECT_EQ(a.get_float("abs", "c"), -0.025);
  EXPECT_EQ(a.get_int("abs", "d"), -3);
  EXPECT_EQ(a.get_ints("abs", "e"), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(a.get_string("abs", "f"), "A\\");
  EXPECT_EQ(a.get_float("abs", "g"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(a.get_float("abs", "h")));
  EXPECT_EQ(a.get_dtype("abs", "k k"), DType::I8);
  EXPECT_EQ(attrs_to_text(parse_attr_text(attrs_to_text(a))), attrs_to_text(a));
  // In a graph the same syntax is checked against the op: a quoted key names a declared one.
  Graph g = parse_and_round_trip("input x: f32[2]\nt = clamp(x) {\"min\"=-inf, max=1e3}\n");
  EXPECT_EQ(g.node(1).attrs.get_float("clamp", "max"), 1000.0);
}

// Builds a constant of `dtype` and `shape` from doubles.
Tensor make_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) t.set_from_double(static_cast<int64_t>(i), values[i]);
  return t;
}

TEST(TextFormat, ConstantsOfEveryDTypeRoundTrip) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Graph g;
  g.add_constant(make_tensor(DType::Bool, {2, 2}, {1, 0, 0, 1}), "c_bool");
  g.add_constant(make_tensor(DType::U8, {3}, {0, 128, 255}), "c_u8");
  g.add_constant(make_tensor(DType::I8, {3}, {-128, 0, 127}), "c_i8");
  g.add_constant(make_tensor(DType::I32, {3}, {INT32_MIN, -1, INT32_MAX}), "c_i32");
  Tensor i64 = Tensor::empty(DType::I64, {4});
  int64_t i64_values[] = {std::numeric_limits<int64_t>::min(), -1, (int64_t{1} << 53) + 1,
                          std::numeric_limits<int64_t>::max()};
  std::memcpy(i64.data(), i64_values, sizeof i64_values);
  g.add_constant(i64, "c_i64");
  g.add_constant(
      make_tensor(DType::F16, {8}, {0.1, -2.5, 65504, 5.960464477539063e-08, -0.0, nan, inf, -inf}),
      "c_f16");
  g.add_constant(make_tensor(DType::BF16, {6}, {0.1, 3.0e38, 1e-40, -0.0, nan, -inf}), "c_bf16");
  g.add_constant(make_tensor(DType::F32, {2, 4},
                             {0.1, 1.0 / 3.0, FLT_MAX, FLT_MIN, 1e-45, 16777217.0, nan, -inf}),
                 "c_f32");
  g.add_constant(make_tensor(DType::F64, {2, 3}, {0.1, 1.0 / 3.0, DBL_MAX, 5e-324, -0.0, inf}),
                 "c_f64");
  g.add_constant(make_tensor(DType::F32, {}, {2.5}), "c_scalar");
  g.add_constant(make_tensor(DType::F32, {0}, {}), "c_empty");
  g.add_constant(make_tensor(DType::I64, {2, 0, 3}, {}), "c_empty3");
  std::string text = expect_round_trip(g);
  EXPECT_NE(text.find("const c_bool: bool[2, 2] = [true, false, false, true]\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("const c_i64: i64[4] = [-9223372036854775808, -1, 9007199254740993, "
                      "9223372036854775807]\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("const c_f32: f32[2, 4] = [0.1, 0.33333334, "), std::string::npos) << text;
  EXPECT_NE(text.find("const c_scalar: f32[] = [2.5]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("const c_empty: f32[0] = []\n"), std::string::npos) << text;
}

TEST(TextFormat, ConstantDataSpellings) {
  Graph g = parse_graph(R"(
const a: f32[4] = [1, -2, 1e-3, .25]
const b: f64[3] = [nan, inf, -inf]
const c: bf16[2] = [0.1, -1]
const d: u8[2] = [255, 0]
)");
  EXPECT_EQ(g.node(0).data->item_as_double(0), 1.0);
  EXPECT_EQ(g.node(0).data->item_as_double(1), -2.0);
  EXPECT_EQ(g.node(0).data->item_as_double(2), static_cast<double>(1e-3f));
  EXPECT_EQ(g.node(0).data->item_as_double(3), 0.25);
  EXPECT_TRUE(std::isnan(g.node(1).data->item_as_double(0)));
  EXPECT_EQ(g.node(1).data->item_as_double(2), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(g.node(2).data->item_as_double(1), -1.0);
  EXPECT_EQ(g.node(3).data->item_as_double(0), 255.0);
  expect_round_trip(g);
}

TEST(TextFormat, LongConstantsWrapAndRoundTrip) {
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(std::sin(i) * 1000.0);
  Graph g;
  g.add_constant(make_tensor(DType::F32, {10, 100}, values), "w");
  g.add_constant(make_tensor(DType::F64, {1000}, values), "w64");
  std::string text = expect_round_trip(g);
  size_t longest = 0, start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    longest = std::max(longest, nl - start);
  EXPECT_LE(longest, 100u);
}

TEST(TextFormat, SymbolicShapesRoundTrip) {
  Graph g = parse_and_round_trip(R"(
input x: f32[s0, 4]
input y: f32[batch, 4]
input z: f32[s0, s1, 2]
a = concat(x, y) {dim=0}
b = flatten(z)
c = reshape(z) {shape=[-1]}
d = expand(x) {shape=[3, -1, 4]}
e = sum(z) {axes=[0, 2]}
output a
output b
output c
)");
  EXPECT_EQ(g.size_symbols().size(), 3u);
  std::string text = to_text(g);
  EXPECT_NE(text.find("input y: f32[batch, 4]"), std::string::npos) << text;
  // The annotation of a symbolic size is compared as printed, blanks aside.
  std::string concat = sym::to_string(g.node(3).type.shape[0]);
  std::string squeezed;
  for (char c : concat)
    if (c != ' ') squeezed += c;
  Graph h = parse_graph(fmt::format(
      "input x: f32[s0, 4]\ninput y: f32[batch, 4]\na = concat(x, y) : f32[ {} ,4]\n", squeezed));
  EXPECT_EQ(h.node(2).type, g.node(3).type);
}

TEST(TextFormat, AnnotationsAreCheckedButOptional) {
  Graph g = parse_graph(R"(
input x: i32[2, 3]
a = sum(x) {axes=[1]} : i64[2]
b = sum(x) {axes=[1]}
c = cast(x) {dtype=f16} : f16[2, 3]
d = eq(x, x) : bool[2, 3]
)");
  EXPECT_EQ(g.node(1).type, g.node(2).type);
  EXPECT_EQ(type_str(g.node(3).type), "f16[2, 3]");
}

// One line per op of the registry (sources aside): the round trip covers every op's attributes.
TEST(TextFormat, EveryOpRoundTrips) {
  const std::map<std::string, std::string> lines = {
      {"full", "full() {shape=[2, 3], value=1.5, dtype=f64}"},
      {"iota", "iota() {size=5, start=2, step=3, dtype=i32}"},
      {"abs", "abs(x)"},
      {"neg", "neg(x)"},
      {"exp", "exp(x)"},
      {"log", "log(x)"},
      {"log1p", "log1p(x)"},
      {"expm1", "expm1(x)"},
      {"sqrt", "sqrt(x)"},
      {"rsqrt", "rsqrt(x)"},
      {"reciprocal", "reciprocal(x)"},
      {"relu", "relu(x)"},
      {"sigmoid", "sigmoid(x)"},
      {"tanh", "tanh(x)"},
      {"erf", "erf(x)"},
      {"gelu", "gelu(x) {approximate=\"tanh\"}"},
      {"silu", "silu(x)"},
      {"sin", "sin(x)"},
      {"cos", "cos(x)"},
      {"floor", "floor(x)"},
      {"ceil", "ceil(x)"},
      {"round", "round(x)"},
      {"sign", "sign(x)"},
      {"logical_not", "logical_not(m)"},
      {"isnan", "isnan(x)"},
      {"cast", "cast(x) {dtype=bf16}"},
      {"clamp", "clamp(x) {min=-1.0, max=1}"},
      {"add", "add(x, w)"},
      {"sub", "sub(x, w)"},
      {"mul", "mul(x, k)"},
      {"div", "div(k, k)"},
      {"pow", "pow(x, w)"},
      {"maximum", "maximum(x, w)"},
      {"minimum", "minimum(x, w)"},
      {"fmod", "fmod(x, w)"},
      {"eq", "eq(x, w)"},
      {"ne", "ne(x, w)"},
      {"lt", "lt(x, w)"},
      {"le", "le(x, w)"},
      {"gt", "gt(x, w)"},
      {"ge", "ge(x, w)"},
      {"logical_and", "logical_and(m, m)"},
      {"logical_or", "logical_or(m, m)"},
      {"where", "where(m, x, w)"},
      {"reshape", "reshape(x) {shape=[3, -1]}"},
      {"permute", "permute(x) {dims=[1, 0]}"},
      {"transpose", "transpose(x) {dim0=-1, dim1=0}"},
      {"expand", "expand(m) {shape=[5, 4, 2, 3]}"},
      {"slice", "slice(x) {dim=1, start=1, end=-1, step=2}"},
      {"squeeze", "squeeze(m) {dims=[1]}"},
      {"unsqueeze", "unsqueeze(x) {dim=-1}"},
      {"flatten", "flatten(x) {start_dim=0, end_dim=1}"},
      {"concat", "concat(x, x, x) {dim=1}"},
      {"gather", "gather(x, k) {axis=1}"},
      {"index_add", "index_add(x, ix, x) {axis=0}"},
      {"sum", "sum(x) {axes=[0], keepdim=true}"},
      {"prod", "prod(k)"},
      {"max", "max(x) {axis=1}"},
      {"min", "min(x) {axes=[-1, 0]}"},
      {"mean", "mean(x) {axes=[1]}"},
      {"var", "var(x) {axes=[1], correction=0}"},
      {"argmax", "argmax(x) {axis=1, keepdim=true}"},
      {"argmin", "argmin(x)"},
      {"softmax", "softmax(x) {axis=0}"},
      {"log_softmax", "log_softmax(x)"},
      {"layer_norm", "layer_norm(x, w, w) {dims=1, eps=1e-05}"},
      {"rms_norm", "rms_norm(x, w) {eps=1e-06}"},
      {"matmul", "matmul(x, w)"},
      {"bmm", "bmm(b, b)"},
      {"linear", "linear(x, x)"},
      {"addmm", "addmm(w, x, q) {alpha=0.5, beta=2}"},
      {"conv2d", "conv2d(c, cw, cb) {stride=[2, 1], padding=1, dilation=[1, 1], groups=1}"},
      {"max_pool2d",
       "max_pool2d(c) {kernel=[3, 2], stride=[2, 2], padding=[1, 1], dilation=[1, 2], "
       "ceil_mode=true}"},
      {"avg_pool2d", "avg_pool2d(c) {kernel=3, padding=1, count_include_pad=false}"},
      {"global_avg_pool2d", "global_avg_pool2d(c)"},
      {"attention", "attention(cw, cw, cw) {causal=true, scale=0.5}"},
      {"attention_lse", "attention_lse(cw, cw) {causal=true, scale=0.5}"},
      {"attention_grad", "attention_grad(cw, cw, cw, cw, cw, ls) {wrt=\"v\", scale=0.5}"},
  };
  std::set<std::string> covered;
  for (const OpDef& op : all_ops()) {
    std::string name(op.name);
    if (name == "input" || name == "constant") continue;
    auto it = lines.find(name);
    if (it == lines.end()) {
      ADD_FAILURE() << "op '" << name << "' has no line in EveryOpRoundTrips";
      continue;
    }
    covered.insert(name);
    std::string src =
        "input x: f32[4, 3]\ninput m: bool[4, 1, 3]\ninput k: i32[4, 3]\n"
        "input b: f32[2, 3, 3]\ninput q: f32[3, 3]\ninput c: f32[1, 3, 5, 5]\n"
        "input cw: f32[4, 3, 3, 3]\ninput cb: f32[4]\ninput ix: i64[4]\ninput ls: f32[4, 3, 3]\n"
        "const w: f32[3] = [0.5, -1.0, 2.0]\nr = " +
        it->second + "\noutput r\n";
    SCOPED_TRACE(src);
    Graph g = parse_and_round_trip(src);
    EXPECT_EQ(g.node(g.find("r")).op_name(), name);
  }
  EXPECT_EQ(covered.size(), lines.size());
}

TEST(TextFormat, ChainOfManyNodesRoundTrips) {
  std::string src = "input x: f32[8, s0]\n";
  const char* ops[] = {"abs", "exp", "neg", "sigmoid", "tanh", "relu"};
  std::string prev = "x";
  for (int i = 0; i < 200; ++i) {
    std::string name = fmt::format("v{}", i);
    src += fmt::format("{} = {}({})\n", name, ops[i % 6], prev);
    if (i % 7 == 3) {
      src += fmt::format("{}_s = sum({}) {{axes=[1], keepdim=true}}\n", name, name);
      src += fmt::format("{}_b = add({}, {}_s)\n", name, name, name);
      name += "_b";
    }
    prev = name;
  }
  src += fmt::format("output out = {}\n", prev);
  Graph g = parse_and_round_trip(src);
  EXPECT_GT(g.num_nodes(), 250);
}

TEST(TextFormat, LoadsAFile) {
  auto path = std::filesystem::temp_directory_path() /
              fmt::format("coil_text_format_test_{}.coil", ::getpid());
  {
    std::ofstream f(path, std::ios::binary);
    f << "input x: f32[2]\nt = exp(x)\noutput t\n";
  }
  Graph g = load_graph_file(path);
  std::filesystem::remove(path);
  EXPECT_EQ(g.num_nodes(), 2);
  EXPECT_EQ(to_text(g), "input x: f32[2]\nt = exp(x) : f32[2]\noutput t\n");
}

// Without weights (coil compile --graph-without-weights): each constant becomes an input of the
// same name and type, so the text is small and parses back to the same computation; the
// fingerprint (the whole-graph cache's key) hashes the data instead, so that other weights give
// another one.
TEST(TextFormat, WithoutWeightsConstantsBecomeInputsAndFingerprintsHashTheData) {
  Graph g = parse_graph(
      "input x: f32[2, 3]\nconst w: f32[3] = [0.5, -1.0, 2.0]\ny = mul(x, w)\noutput y\n");
  std::string text = to_text_without_weights(g);
  EXPECT_EQ(text,
            "input x: f32[2, 3]\n"
            "input w: f32[3]  # a constant of the model, its data left out\n"
            "y = mul(x, w) : f32[2, 3]\noutput y\n");
  Graph back = parse_graph(text);
  EXPECT_EQ(back.inputs().size(), 2u);
  EXPECT_EQ(to_text(back),
            "input x: f32[2, 3]\ninput w: f32[3]\ny = mul(x, w) : f32[2, 3]\noutput y\n");
  Graph other = parse_graph(
      "input x: f32[2, 3]\nconst w: f32[3] = [0.5, -1.0, 2.5]\ny = mul(x, w)\noutput y\n");
  EXPECT_NE(graph_fingerprint(g).find("const w: f32[3] = xxh3:"), std::string::npos);
  EXPECT_NE(graph_fingerprint(g), graph_fingerprint(other));
  EXPECT_EQ(graph_fingerprint(g), graph_fingerprint(parse_graph(to_text(g))));
}

}  // namespace
}  // namespace coil
