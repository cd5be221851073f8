#include "frontend/onnx/onnx_context.h"

#include <algorithm>

#include "frontend/onnx/onnx_import.h"
#include "frontend/onnx/onnx_tensor.h"
#include "graph/interpreter.h"
#include "graph/type_rules.h"

namespace coil {

std::string sanitize_onnx_name(std::string_view name) {
  // Letters, digits and single underscores (a double underscore is what coil's decompositions
  // use for their temporaries); at most 48 characters; never starting with a digit.
  std::string out;
  for (char c : name.substr(0, 48)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    char ch = ok ? c : '_';
    if (ch == '_' && !out.empty() && out.back() == '_') continue;
    out.push_back(ch);
  }
  if (out.empty() || out == "_") return "v";
  if (out[0] >= '0' && out[0] <= '9') out = "v" + out;
  return out;
}

namespace onnxfe {

std::string Namer::fresh(std::string_view hint) {
  std::string base = sanitize_onnx_name(hint);
  if (base.size() > 1 && base.back() == '_') base.pop_back();  // "x_" + "_2" would make "x__2"
  std::string name = base;
  for (int k = 2; !used_.insert(name).second; ++k) name = fmt::format("{}_{}", base, k);
  return name;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (out.size() >= 80) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (c == '\'' || c == '\\')
      out += fmt::format("\\{}", c);
    else if (u < 0x20 || u >= 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out.push_back(c);
  }
  return out;
}

OnnxNode::OnnxNode(Graph& g, Namer& namer, SymbolicInts& symbolic, SplitViews& split_views,
                   const onnx::NodeProto& proto, int opset, std::vector<int> inputs)
    : g_(g),
      namer_(namer),
      symbolic_(symbolic),
      split_views_(split_views),
      proto_(proto),
      opset_(opset),
      inputs_(std::move(inputs)) {
  outputs_.assign(static_cast<size_t>(proto.output_size()), -1);
  attr_read_.assign(static_cast<size_t>(proto.attribute_size()), false);
  hint_ = proto.output_size() > 0 && !proto.output(0).empty() ? proto.output(0) : proto.op_type();
}

int OnnxNode::in(int i) const {
  if (!has_input(i)) error("input {} is required", i);
  return inputs_[static_cast<size_t>(i)];
}

const Tensor* OnnxNode::constant(int id) const {
  const Node& n = g_.node(id);
  return n.op_name() == "constant" ? n.data.get() : nullptr;
}

std::vector<int64_t> OnnxNode::const_ints(int i, std::string_view what) const {
  const Tensor* t = constant(in(i));
  if (!t) unsupported("{} is not a constant", what);
  if (!is_integral(t->dtype()) || t->dtype() == DType::Bool)
    error("{} must be an integer tensor, got {}", what, dtype_name(t->dtype()));
  if (t->numel() > kFoldLimit) error("{} has {} elements; too many", what, t->numel());
  std::vector<int64_t> v;
  for (int64_t k = 0; k < t->numel(); ++k)
    v.push_back(t->dtype() == DType::I64 ? t->data_as<int64_t>()[k]
                                         : static_cast<int64_t>(t->item_as_double(k)));
  return v;
}

double OnnxNode::const_scalar(int i, std::string_view what) const {
  const Tensor* t = constant(in(i));
  if (!t) unsupported("{} is not a constant", what);
  if (t->numel() != 1) error("{} must have one element, got shape {}", what, shape_str(t->shape()));
  return t->item_as_double(0);
}

int64_t OnnxNode::const_int_scalar(int i, std::string_view what) const {
  double v = const_scalar(i, what);
  const Tensor* t = constant(in(i));
  if (t->dtype() == DType::I64) return t->data_as<int64_t>()[0];
  // Converting NaN or a double outside int64 is undefined: Trilu's k of 7e36 was (found by
  // tests/fuzz/parsers/onnx_parser_fuzzer).
  if (!(v >= -0x1p63 && v < 0x1p63)) error("{} is {}, outside the int64 range", what, v);
  return static_cast<int64_t>(v);
}

const std::vector<sym::Expr>* OnnxNode::symbolic(int id) const {
  auto it = symbolic_.find(id);
  return it == symbolic_.end() ? nullptr : &it->second;
}

const SplitView* OnnxNode::split_view(int id) const {
  auto it = split_views_.views.find(id);
  return it == split_views_.views.end() ? nullptr : &it->second;
}

const Shape* OnnxNode::broadcast_shape(int id) const {
  auto it = split_views_.broadcast.find(id);
  return it == split_views_.broadcast.end() ? nullptr : &it->second;
}

int OnnxNode::add_split_view(int base, std::vector<int> groups) {
  // Flatten from the last group, so that the earlier groups' dims keep their indices.
  int64_t end = rank(base);
  int y = base;
  for (size_t i = groups.size(); i-- > 0;) {
    int64_t start = end - groups[i];
    if (groups[i] > 1) y = add("flatten", {y}, Attrs{{"start_dim", start}, {"end_dim", end - 1}});
    end = start;
  }
  COIL_ASSERT(end == 0, "split view groups do not cover the base's rank");
  if (y != base) split_views_.views[y] = SplitView{base, std::move(groups)};
  return y;
}

std::vector<sym::Expr> OnnxNode::sym_ints(int i, std::string_view what) const {
  if (const auto* s = symbolic(in(i))) return *s;
  std::vector<sym::Expr> v;
  for (int64_t k : const_ints(i, what)) v.emplace_back(k);
  return v;
}

int OnnxNode::add_ints(const std::vector<sym::Expr>& v, bool scalar, DType t) {
  if (scalar && v.size() != 1) error("a scalar needs one value, got {}", v.size());
  std::vector<int64_t> shape;
  if (!scalar) shape.push_back(static_cast<int64_t>(v.size()));
  bool constant = std::all_of(v.begin(), v.end(), [](const sym::Expr& e) { return e.is_const(); });
  if (constant) {
    Tensor c = Tensor::empty(t, shape);
    for (size_t k = 0; k < v.size(); ++k)
      c.set_from_double(static_cast<int64_t>(k), static_cast<double>(*v[k].as_const()));
    return add_constant(c);
  }
  int id = g_.add_node("full", {}, Attrs{{"shape", shape}, {"value", 0.0}, {"dtype", t}},
                       namer_.fresh(hint_));
  symbolic_[id] = v;
  return id;
}

std::vector<int64_t> OnnxNode::static_shape(int id, std::string_view what) const {
  auto s = static_sizes(type(id).shape);
  if (!s) unsupported("{} has the symbolic shape {}", what, shape_str(type(id).shape));
  return *s;
}

const onnx::AttributeProto* OnnxNode::find_attr(std::string_view name) const {
  for (int i = 0; i < proto_.attribute_size(); ++i) {
    if (proto_.attribute(i).name() != name) continue;
    attr_read_[static_cast<size_t>(i)] = true;
    return &proto_.attribute(i);
  }
  return nullptr;
}

namespace {

using AP = onnx::AttributeProto;

// Checks the attribute's declared type; old models leave `type` unset.
void expect_type(const OnnxNode& n, const AP& a, AP::AttributeType t, bool present) {
  bool ok = a.type() == t || (a.type() == AP::UNDEFINED && present);
  if (!ok)
    n.error("attribute '{}' must be {}, got {}", printable(a.name()), AP::AttributeType_Name(t),
            AP::AttributeType_IsValid(a.type()) ? AP::AttributeType_Name(a.type())
                                                : std::to_string(a.type()));
}

}  // namespace

int64_t OnnxNode::attr_int(std::string_view name, int64_t dflt) const {
  const AP* a = find_attr(name);
  if (!a) return dflt;
  expect_type(*this, *a, AP::INT, a->has_i());
  return a->i();
}

double OnnxNode::attr_float(std::string_view name, double dflt) const {
  const AP* a = find_attr(name);
  if (!a) return dflt;
  expect_type(*this, *a, AP::FLOAT, a->has_f());
  return a->f();
}

std::string OnnxNode::attr_string(std::string_view name, std::string dflt) const {
  const AP* a = find_attr(name);
  if (!a) return dflt;
  expect_type(*this, *a, AP::STRING, a->has_s());
  return a->s();
}

std::optional<std::vector<int64_t>> OnnxNode::attr_ints(std::string_view name) const {
  const AP* a = find_attr(name);
  if (!a) return std::nullopt;
  expect_type(*this, *a, AP::INTS, true);
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<double>> OnnxNode::attr_floats(std::string_view name) const {
  const AP* a = find_attr(name);
  if (!a) return std::nullopt;
  expect_type(*this, *a, AP::FLOATS, true);
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

std::optional<std::vector<std::string>> OnnxNode::attr_strings(std::string_view name) const {
  const AP* a = find_attr(name);
  if (!a) return std::nullopt;
  expect_type(*this, *a, AP::STRINGS, true);
  return std::vector<std::string>(a->strings().begin(), a->strings().end());
}

const onnx::TensorProto* OnnxNode::attr_tensor(std::string_view name) const {
  const AP* a = find_attr(name);
  if (!a) return nullptr;
  expect_type(*this, *a, AP::TENSOR, a->has_t());
  return &a->t();
}

int OnnxNode::add(std::string_view op, std::vector<int> inputs, Attrs attrs) {
  int id = g_.add_node(op, std::move(inputs), std::move(attrs), namer_.fresh(hint_));
  // An empty result is a constant whatever computes it (and views of empty tensors trip
  // coil's index algebra, which divides by the sizes).
  auto sizes = static_sizes(type(id).shape);
  if (sizes && shape_numel(*sizes) == 0 && op != "full")
    id = g_.add_node("full", {}, Attrs{{"shape", *sizes}, {"value", 0.0}, {"dtype", dtype(id)}},
                     namer_.fresh(hint_));
  return fold(id);
}

// A node whose inputs are all constants is computed now by the reference interpreter (on a
// graph of just that node), so shape computations and constant weights' transformations
// disappear before compilation. The dead original is dropped when the importer prunes.
int OnnxNode::fold(int id) {
  const Node& n = g_.node(id);
  for (int in : n.inputs)
    if (!constant(in)) return id;
  auto sizes = static_sizes(n.type.shape);
  if (!sizes || shape_numel(*sizes) > kFoldLimit) return id;
  Graph t;
  std::vector<int> ins;
  for (int in : n.inputs) ins.push_back(t.add_constant(*g_.node(in).data));
  t.add_output(t.add_node(n.op_name(), ins, n.attrs, "r"));
  return add_constant(interpret(t, {})[0]);
}

int OnnxNode::add_constant(const Tensor& t) {
  // An empty result of an input's huge dims (Expand of x [3, 2, 2^31 - 1, 4, 1] to a 0 dim)
  // became a constant whose graph did not parse back (found by
  // tests/fuzz/parsers/onnx_parser_fuzzer): constants must fit the text format.
  if (!fits_constant(t.shape()))
    error(
        "the {} result {} is too large for a constant (its sizes, zeros counted as ones, "
        "multiply to 2^31 or more)",
        dtype_name(t.dtype()), shape_str(t.shape()));
  return g_.add_constant(t, namer_.fresh(hint_));
}

int OnnxNode::scalar(double v, DType t) {
  Tensor s = Tensor::empty(t, {});
  s.set_from_double(0, v);
  return add_constant(s);
}

int OnnxNode::cast(int x, DType t) {
  return dtype(x) == t ? x : add("cast", {x}, Attrs{{"dtype", t}});
}

int64_t OnnxNode::axis(int64_t a, int64_t rank) const {
  if (a < -rank || a >= std::max<int64_t>(rank, 1))
    error("axis {} is out of range for rank {}", a, rank);
  return a < 0 ? a + rank : a;
}

void OnnxNode::set_output(int i, int id) {
  if (i >= num_outputs()) return;  // an output the model does not ask for
  outputs_[static_cast<size_t>(i)] = id;
}

}  // namespace onnxfe
}  // namespace coil
