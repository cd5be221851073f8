// Reshapes whose target has several symbolic sizes (onnx_ops_split_view.cpp). Each model is
// built twice, with the symbolic dims `S` and `B` and with the same sizes static; the static
// import (one plain `reshape` per Reshape) run by the interpreter is the reference for the
// symbolic one, run by the interpreter and by one size-generic compiled model at several sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <optional>
#include <random>

#include "conformance/onnx_model_builder.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/interpreter.h"
#include "runtime/compare.h"
#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

using namespace onnx_test;
using coil::testing::error_of;

// Dims: a name is symbolic (or, when `sizes` has it, that static size); a number is static.
struct Dim {
  std::string name;
  int64_t value = 0;
};

class Model {
 public:
  Model(std::vector<Dim> x, const std::map<std::string, int64_t>* sizes) : sizes_(sizes) {
    m_ = empty_model(17);
    auto* t = m_.mutable_graph()->add_input();
    t->set_name("x");
    auto* tt = t->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(TP::FLOAT);
    for (const Dim& d : x) {
      auto* s = tt->mutable_shape()->add_dim();
      if (d.name.empty())
        s->set_dim_value(d.value);
      else if (sizes_)
        s->set_dim_value(sizes_->at(d.name));
      else
        s->set_dim_param(d.name);
    }
  }
  // A 1-D int64 value of one element: dim `i` of value `v` (a Shape -> Gather subgraph, which
  // the importer computes on the size expression), times `k`.
  std::string dim(const std::string& v, int64_t i, int64_t k = 1) {
    std::string s = fresh(), g = fresh(), idx = fresh(), out = fresh();
    add_node(m_, "Shape", {v}, {s});
    add_i64_initializer(m_, idx, {i});
    add_int_attr(add_node(m_, "Gather", {s, idx}, {g}), "axis", 0);
    if (k == 1) return g;
    std::string kk = fresh();
    add_i64_initializer(m_, kk, {k});
    add_node(m_, "Mul", {g, kk}, {out});
    return out;
  }
  std::string ints(std::vector<int64_t> v) {
    std::string c = fresh();
    add_i64_initializer(m_, c, v);
    return c;
  }
  std::string node(const std::string& op, std::vector<std::string> in,
                   std::function<void(onnx::NodeProto*)> attrs = {}) {
    std::string out = fresh();
    onnx::NodeProto* n = add_node(m_, op, in, {out}, out);
    if (attrs) attrs(n);
    return out;
  }
  std::string reshape(const std::string& v, std::vector<std::string> target) {
    std::string t = fresh();
    add_int_attr(add_node(m_, "Concat", target, {t}), "axis", 0);
    return node("Reshape", {v, t});
  }
  std::string transpose(const std::string& v, std::vector<int64_t> perm) {
    return node("Transpose", {v}, [&](onnx::NodeProto* n) { add_ints_attr(n, "perm", perm); });
  }
  // Random in [-scale, scale]; a scalar of shape {} with seed 0 is `scale` itself.
  std::string weight(std::vector<int64_t> shape, uint64_t seed, double scale = 0.125) {
    Tensor w = random_tensor(DType::F32, shape, seed, -scale, scale);
    if (shape.empty() && seed == 0) w.data_as<float>()[0] = static_cast<float>(scale);
    std::string name = fresh();
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TP::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    for (int64_t i = 0; i < w.numel(); ++i) t->add_float_data(w.data_as<float>()[i]);
    return name;
  }
  Graph import(const std::string& y) {
    auto* o = m_.mutable_graph()->add_output();
    o->set_name(y);
    o->mutable_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT);
    return import_onnx_bytes(m_.SerializeAsString(), "m.onnx");
  }

 private:
  std::string fresh() { return fmt::format("v{}", next_++); }
  onnx::ModelProto m_;
  const std::map<std::string, int64_t>* sizes_;
  int next_ = 0;
};

using Build = std::function<std::string(Model&)>;

// The symbolic import against the static one at each of `at` ({S, B} pairs): the interpreter
// and one size-generic compiled model. Returns the symbolic graph's output shape.
std::string check(const std::vector<Dim>& x, const Build& build,
                  const std::vector<std::map<std::string, int64_t>>& at) {
  Model sm(x, nullptr);
  Graph g = sm.import(build(sm));
  CompiledModel m = compile(g);
  EXPECT_TRUE(m.size_generic());
  uint64_t seed = 1;
  for (const auto& sizes : at) {
    Model st(x, &sizes);
    Graph ref = st.import(build(st));
    std::vector<int64_t> shape;
    for (const Dim& d : x) shape.push_back(d.name.empty() ? d.value : sizes.at(d.name));
    Tensor in = random_tensor(DType::F32, shape, seed++, -2, 2);
    Tensor want = interpret(ref, {in})[0];
    std::string where = fmt::format("S={} B={}", sizes.at("S"), sizes.at("B"));
    Tensor got = interpret(g, {in})[0];
    EXPECT_EQ(got.shape(), want.shape()) << where;
    CompareResult c = compare_tensors(got, want, Tolerance{1e-5, 1e-6});
    EXPECT_TRUE(c.ok) << where << " (interpreter): " << c.message;
    c = compare_tensors(m.run({in})[0], want, Tolerance{1e-4, 1e-5});
    EXPECT_TRUE(c.ok) << where << " (compiled): " << c.message;
  }
  return shape_str(g.node(g.outputs()[0].node).type.shape);
}

const std::vector<std::map<std::string, int64_t>> kSizes = {
    {{"S", 1}, {"B", 1}}, {{"S", 3}, {"B", 2}}, {{"S", 2}, {"B", 7}}, {{"S", 17}, {"B", 3}}};

// [S, B, 64] -> [S, 4*B, 16]: 64 splits into [4, 16], then B and 4 merge.
TEST(OnnxSplitView, SplitsAConstantDimNextToTwoSymbols) {
  auto build = [](Model& m) {
    return m.reshape("x", {m.dim("x", 0), m.dim("x", 1, 4), m.ints({16})});
  };
  EXPECT_EQ(check({{"S"}, {"B"}, {"", 64}}, build, kSizes), "[S, 4*B, 16]");
}

// Size-1 dims and a -1 among symbolic sizes: [S, B, 6] -> [1, S, B, 3, -1] (a split of 6)
// -> [S, 1, 3*B, 2] (merges only: B and 3).
TEST(OnnxSplitView, OnesAndMinusOne) {
  auto build = [](Model& m) {
    std::string r = m.reshape("x", {m.ints({1}), m.dim("x", 0), m.dim("x", 1), m.ints({3, -1})});
    return m.reshape(r, {m.dim("x", 0), m.ints({1}), m.dim("x", 1, 3), m.ints({2})});
  };
  EXPECT_EQ(check({{"S"}, {"B"}, {"", 6}}, build, kSizes), "[S, 1, 3*B, 2]");
}

// torch's multi-head attention with a dynamic sequence and batch (nn.MultiheadAttention):
// q, k, v [S, B, 64] -> [S, 4*B, 16] -> heads first, scaled q @ k^T, softmax, @ v, back to
// [S, 4*B, 16] -> [S*B, 64] -> Gemm (out_proj) -> [S, B, 64], which splits S*B again.
TEST(OnnxSplitView, MultiHeadAttentionCore) {
  auto build = [](Model& m) {
    auto heads = [&](uint64_t seed) {
      std::string p = m.node("MatMul", {"x", m.weight({64, 64}, seed)});
      std::string r = m.reshape(p, {m.dim("x", 0), m.dim("x", 1, 4), m.ints({16})});
      return r;
    };
    std::string q = m.transpose(heads(1), {1, 0, 2});
    std::string k = m.transpose(heads(2), {1, 2, 0});
    std::string v = m.transpose(heads(3), {1, 0, 2});
    std::string qs = m.node("Div", {q, m.weight({}, 0, 4.0)});  // sqrt(16)
    std::string s = m.node("Softmax", {m.node("MatMul", {qs, k})},
                           [](onnx::NodeProto* n) { add_int_attr(n, "axis", -1); });
    std::string o = m.transpose(m.node("MatMul", {s, v}), {1, 0, 2});
    std::string sb = m.node("Mul", {m.dim("x", 0), m.dim("x", 1)});
    std::string flat = m.reshape(o, {sb, m.ints({64})});
    std::string y = m.node("Gemm", {flat, m.weight({64, 64}, 5), m.weight({64}, 6)},
                           [](onnx::NodeProto* n) { add_int_attr(n, "transB", 1); });
    return m.reshape(y, {m.dim("x", 0), m.dim("x", 1), m.ints({64})});
  };
  EXPECT_EQ(check({{"S"}, {"B"}, {"", 64}}, build, kSizes), "[S, B, 64]");
}

// No refinement: a symbolic dim would split (S*B from a Flatten, which keeps no unmerged form),
// or the dims mix across groups ([S, B, 6] -> [S, 3, 2*B]). The message names the node, the
// input shape and the target.
TEST(OnnxSplitView, UnsupportedReshapesNameTheShapes) {
  Model a({{"S"}, {"B"}, {"", 64}}, nullptr);
  std::string f = a.node("Flatten", {"x"}, [](onnx::NodeProto* n) { add_int_attr(n, "axis", 2); });
  std::string y = a.reshape(f, {a.dim("x", 0), a.dim("x", 1), a.ints({64})});
  std::string e = error_of([&] { a.import(y); });
  EXPECT_NE(e.find("Reshape"), std::string::npos) << e;
  EXPECT_NE(e.find("reshape of [B*S, 64] to the symbolic shape [S, B, 64]"), std::string::npos)
      << e;

  Model b({{"S"}, {"B"}, {"", 6}}, nullptr);
  y = b.reshape("x", {b.dim("x", 0), b.ints({3}), b.dim("x", 1, 2)});
  e = error_of([&] { b.import(y); });
  EXPECT_NE(e.find("reshape of [S, B, 6] to the symbolic shape [S, 3, 2*B]"), std::string::npos)
      << e;
}

// ConstantOfShape of a symbolic shape (a broadcast value): elementwise ops read it as if
// expanded. x [S, B, 6] * c + c with c = ConstantOfShape(Shape(x), 2); and d of [S, 1, 6] (a
// shape made of sizes) times 3, added to x: d stays a broadcast value until the Add.
TEST(OnnxSplitView, ConstantOfShapeOfSymbolicSizes) {
  auto filled = [](Model& m, std::string shape, float v) {
    return m.node("ConstantOfShape", {shape}, [v](onnx::NodeProto* n) {
      auto* a = n->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(TP::FLOAT);
      a->mutable_t()->add_dims(1);
      a->mutable_t()->add_float_data(v);
    });
  };
  auto build = [&](Model& m) {
    std::string c = filled(m, m.node("Shape", {"x"}), 2.0f);
    std::string y = m.node("Add", {m.node("Mul", {"x", c}), c});
    std::string shape = m.node("Concat", {m.dim("x", 0), m.ints({1, 6})},
                               [](onnx::NodeProto* n) { add_int_attr(n, "axis", 0); });
    std::string d = m.node("Mul", {filled(m, shape, 0.5f), m.weight({}, 0, 3.0)});
    return m.node("Add", {y, d});
  };
  EXPECT_EQ(check({{"S"}, {"B"}, {"", 6}}, build, kSizes), "[S, B, 6]");

  // Other uses: refused, naming the shape.
  Model a({{"S"}, {"B"}, {"", 6}}, nullptr);
  std::string c = filled(a, a.node("Shape", {"x"}), 1.0f);
  std::string e = error_of([&] { a.import(a.node("Softmax", {c})); });
  EXPECT_NE(e.find("a ConstantOfShape of the symbolic shape [S, B, 6], which only elementwise"),
            std::string::npos)
      << e;
  Model b({{"S"}, {"B"}, {"", 6}}, nullptr);
  c = filled(b, b.node("Shape", {"x"}), 1.0f);
  e = error_of([&] { b.import(c); });
  EXPECT_NE(e.find("is a ConstantOfShape of the symbolic shape [S, B, 6]"), std::string::npos) << e;
}

// Random reshape chains. x has the dims S, B and small constants in random order; a first
// Reshape (or a Flatten, which keeps no unmerged form) merges runs of them, a second regroups
// them into other runs, splitting constants (6 into 2 x 3, ...), with 1s and a -1. Whatever
// imports must keep the elements in order (a reshape moves no data): the interpreter's output
// is x's data in the target shape. After a Reshape every chain imports; after a Flatten, those
// whose target cuts a run holding a symbol, with two or more symbolic sizes, are refused.
struct Piece {  // coef * S^s * B^b
  int64_t coef = 1;
  bool s = false, b = false;
  Piece operator*(const Piece& o) const { return {coef * o.coef, s || o.s, b || o.b}; }
  // For products of prefixes of one sequence of dims, divisibility is their order.
  bool operator<(const Piece& o) const {
    return o.coef % coef == 0 && (!s || o.s) && (!b || o.b) &&
           (coef != o.coef || s != o.s || b != o.b);
  }
};

TEST(OnnxSplitView, RandomReshapeChains) {
  std::mt19937 rng(20261205);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::map<std::string, int64_t> at{{"S", 3}, {"B", 5}};
  int imported = 0, refused = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<Piece> atoms{{1, true, false}, {1, false, true}};
    for (int k = pick(3) + 1; k-- > 0;)
      atoms.push_back({std::vector<int64_t>{2, 3, 4, 6}[static_cast<size_t>(pick(4))]});
    std::shuffle(atoms.begin(), atoms.end(), rng);
    // Runs of the atoms (constants split first when asked), as their products.
    auto runs = [&](bool split_constants) {
      std::vector<Piece> fine;
      for (const Piece& p : atoms) {
        if (split_constants && !p.s && !p.b && p.coef % 2 == 0 && p.coef > 2 && pick(2)) {
          bool outer2 = pick(2);
          fine.push_back({outer2 ? 2 : p.coef / 2});
          fine.push_back({outer2 ? p.coef / 2 : 2});
        } else {
          fine.push_back(p);
        }
      }
      std::vector<Piece> out;
      for (size_t i = 0; i < fine.size(); ++i) {
        if (i == 0 || pick(2)) out.push_back({});
        out.back() = out.back() * fine[i];
      }
      return out;
    };
    bool flatten = pick(4) == 0;
    std::vector<Piece> mid = runs(false), target = runs(true);
    int64_t axis = 1 + pick(static_cast<int>(atoms.size()) - 1);
    if (flatten) {
      mid.assign(2, Piece{});
      for (size_t i = 0; i < atoms.size(); ++i)
        mid[static_cast<int64_t>(i) < axis ? 0 : 1] =
            mid[static_cast<int64_t>(i) < axis ? 0 : 1] * atoms[i];
    }
    // Target dims: 1s inserted; a constant run may be -1.
    std::vector<std::optional<Piece>> tdims;
    for (const Piece& p : target) {
      if (pick(4) == 0) tdims.push_back(std::nullopt);
      tdims.push_back(p);
    }
    size_t minus_one = tdims.size();
    for (size_t i = 0; i < tdims.size(); ++i)
      if (tdims[i] && !tdims[i]->s && !tdims[i]->b && pick(3) == 0) minus_one = i;

    std::vector<Dim> xd;
    size_t si = 0, bi = 0;
    for (size_t i = 0; i < atoms.size(); ++i) {
      const Piece& p = atoms[i];
      xd.push_back(p.s ? Dim{"S"} : p.b ? Dim{"B"} : Dim{"", p.coef});
      if (p.s) si = i;
      if (p.b) bi = i;
    }
    Model m(xd, nullptr);
    auto value = [&](const Piece& p) {
      std::string v = m.ints({p.coef});
      if (p.s) v = m.node("Mul", {v, m.dim("x", static_cast<int64_t>(si))});
      if (p.b) v = m.node("Mul", {v, m.dim("x", static_cast<int64_t>(bi))});
      return v;
    };
    std::string a;
    if (flatten) {
      a = m.node("Flatten", {"x"}, [&](onnx::NodeProto* n) { add_int_attr(n, "axis", axis); });
    } else {
      std::vector<std::string> mt;
      for (const Piece& p : mid) mt.push_back(value(p));
      a = m.reshape("x", mt);
    }
    std::vector<std::string> tt;
    std::vector<int64_t> want_shape;
    int symbolic_targets = 0;
    for (size_t i = 0; i < tdims.size(); ++i) {
      const auto& p = tdims[i];
      tt.push_back(!p ? m.ints({1}) : i == minus_one ? m.ints({-1}) : value(*p));
      want_shape.push_back(!p ? 1 : p->coef * (p->s ? at.at("S") : 1) * (p->b ? at.at("B") : 1));
      symbolic_targets += p && (p->s || p->b);
    }
    std::string y = m.reshape(a, tt);

    // Does a target cut fall strictly inside a run of `mid` that holds a symbol?
    bool cuts_symbol = false;
    Piece start, cut;
    for (const Piece& r : mid) {
      Piece end = start * r;
      cut = Piece{};
      for (const Piece& t : target) {
        cut = cut * t;
        cuts_symbol |= (r.s || r.b) && start < cut && cut < end;
      }
      start = end;
    }
    enum { Imports, Refused, Either } want = Imports;
    if (flatten && cuts_symbol)
      want = symbolic_targets >= 2 ? Refused : minus_one < tdims.size() ? Either : Imports;
    std::string desc = fmt::format("trial {} ({}):", trial, flatten ? "Flatten" : "Reshape");
    for (const Dim& d : xd) desc += " " + (d.name.empty() ? std::to_string(d.value) : d.name);
    desc += " ->";
    for (const auto& p : tdims)
      desc += fmt::format(" {}{}{}", p ? p->coef : 1, p && p->s ? "S" : "", p && p->b ? "B" : "");

    Graph g;
    std::string e = error_of([&] { g = m.import(y); });
    if (!e.empty()) {
      EXPECT_NE(want, Imports) << desc << ": " << e;
      EXPECT_NE(e.find("no grouping of the dims"), std::string::npos) << desc << ": " << e;
      ++refused;
      continue;
    }
    EXPECT_NE(want, Refused) << desc;
    ++imported;
    std::vector<int64_t> xs;
    for (const Dim& d : xd) xs.push_back(d.name.empty() ? d.value : at.at(d.name));
    Tensor x = random_tensor(DType::F32, xs, static_cast<uint64_t>(trial), -1, 1);
    Tensor got = interpret(g, {x})[0];
    ASSERT_EQ(got.shape(), want_shape) << desc;
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(got.data_as<float>()[i], x.data_as<float>()[i]) << desc << " at " << i;
  }
  std::cout << fmt::format("{} chains imported, {} refused\n", imported, refused);
  EXPECT_GT(refused, 0);
  EXPECT_GT(imported, 100);
}

}  // namespace
}  // namespace coil
