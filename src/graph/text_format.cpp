// The parser of the graph text format. Grammar (one statement per line; '#' starts a comment
// that runs to the end of the line; blank lines are ignored):
//
//   graph      := { statement? NEWLINE } statement?
//   statement  := 'input'  NAME ':' type                       # a graph input
//               | 'const'  NAME ':' type '=' data              # a constant tensor
//               | 'output' NAME [ '=' NAME ]                   # output [name =] value
//               | NAME '=' OP '(' [ NAME { ',' NAME } ] ')' [ attrs ] [ ':' type ]
//   type       := DTYPE '[' [ size { ',' size } ] ']'          # f32[4, s0]; f32[] is a scalar
//   size       := INT | NAME                                   # input: integer or symbol
//               | INT                                          # const: integers only
//               | expr                                         # node annotation: as printed
//   attrs      := '{' [ key '=' value { ',' key '=' value } ] '}'
//   key        := NAME | STRING
//   value      := ['-'] INT | ['-'] FLOAT | ['-'] 'inf' | 'nan' | 'true' | 'false'
//               | STRING | '[' [ ['-'] INT { ',' ['-'] INT } ] ']' | DTYPE
//   data       := '[' [ element { ',' element } ] ']'          # row-major; may span lines
//   element    := ['-'] INT | ['-'] FLOAT | ['-'] 'inf' | 'nan' | 'true' | 'false'
//
// Tokens: NAME is [A-Za-z_][A-Za-z0-9_]* (at most 256 bytes); INT is decimal digits; FLOAT has a
// '.' or an exponent (1.5, .5, 2e-3); STRING is "..." with \" \\ \n \t \r \xHH escapes.
// 'input', 'const' and 'output' are keywords only at the start of a statement when no '='
// follows them, so they remain usable as value names. Values are defined before use (SSA).
//
// A node's optional type annotation is checked against the inferred type; its sizes are
// compared as text with blanks removed, so symbolic sizes read as the printer writes them
// ("s0 + 4", "s0*s1", "(s0 // 2)"). Errors are coil::Error "FILE:LINE:COL: message" at the
// offending token; errors from type inference get the location of the node's op.
#include "graph/text_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "graph/attr_check.h"
#include "graph/op_registry.h"
#include "graph/text_lexer.h"

namespace coil {
namespace {

using text::describe;
using text::Literal;
using text::Token;
using text::TokKind;

constexpr int kMaxParenDepth = 64;
constexpr int64_t kMaxConstantElements = int64_t{1} << 31;  // exclusive
constexpr int64_t kMaxInputElements = int64_t{1} << 62;     // exclusive; symbols count as 1
constexpr size_t kMaxTextBytes = size_t{1} << 30;

// True when the sizes (all >= 0), zeros counted as ones, multiply to less than `limit`: then
// neither the element count nor the row-major strides overflow.
bool sizes_below(const std::vector<int64_t>& sizes, int64_t limit) {
  int64_t n = 1;
  for (int64_t s : sizes)
    if (__builtin_mul_overflow(n, std::max<int64_t>(s, 1), &n) || n >= limit) return false;
  return true;
}

std::string strip_blanks(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r') out += c;
  return out;
}

/// The dtype and sizes a node's annotation states, sizes kept as written.
struct Annotation {
  const Token* at = nullptr;
  DType dtype = DType::F32;
  std::vector<std::string> sizes;
};

class Parser {
 public:
  Parser(std::string_view src, std::string_view file)
      : src_(src), file_(file), toks_(text::tokenize(src, file)) {}

  Graph run() {
    while (true) {
      while (peek().kind == TokKind::Newline) next();
      if (peek().kind == TokKind::End) break;
      statement();
      const Token& t = peek();
      if (t.kind != TokKind::Newline && t.kind != TokKind::End)
        error(t, "expected end of line but found {}", describe(t));
    }
    return std::move(g_);
  }

  TensorType type_only(std::string_view input) {
    skip_newlines();
    TensorType t = input_type(input);
    skip_newlines();
    if (peek().kind != TokKind::End)
      error(peek(), "expected end of input but found {}", describe(peek()));
    return t;
  }

  Attrs attrs_only() {
    Attrs a = parse_attrs(nullptr, "");
    skip_newlines();
    if (peek().kind != TokKind::End)
      error(peek(), "expected end of input but found {}", describe(peek()));
    return a;
  }

 private:
  // ---- token access and diagnostics ----
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool accept(std::string_view punct) {
    if (!peek().is(punct)) return false;
    next();
    return true;
  }
  const Token& expect(std::string_view punct) {
    if (!peek().is(punct)) error(peek(), "expected '{}' but found {}", punct, describe(peek()));
    return next();
  }
  const Token& expect_name(std::string_view what) {
    if (peek().kind != TokKind::Ident)
      error(peek(), "expected {} but found {}", what, describe(peek()));
    return next();
  }
  void skip_newlines() {
    while (peek().kind == TokKind::Newline) next();
  }

  template <typename... Args>
  [[noreturn]] void error(const Token& t, fmt::format_string<Args...> f, Args&&... args) const {
    text::throw_at(file_, t.line, t.col, fmt::format(f, std::forward<Args>(args)...));
  }
  // Runs a Graph call, giving its coil::Error the location of `t`.
  template <typename F>
  auto at(const Token& t, F&& f) {
    try {
      return f();
    } catch (const Error& e) {
      error(t, "{}", e.what());
    }
  }

  // ---- statements ----
  void statement() {
    const Token& first = peek();
    if (first.kind != TokKind::Ident)
      error(first, "expected a statement (input, const, output or NAME = op(...)) but found {}",
            describe(first));
    bool keyword = !peek(1).is("=");
    if (keyword && first.text == "input") return input_decl();
    if (keyword && first.text == "const") return const_decl();
    if (keyword && first.text == "output") return output_decl();
    node_decl();
  }

  // The new value's name; an error when it is already taken.
  std::string define(const Token& t) {
    int id = g_.find(t.text);
    if (id >= 0)
      error(t, "'{}' is already defined at line {}", t.text, def_line_[static_cast<size_t>(id)]);
    return std::string(t.text);
  }
  void defined(int id, const Token& t) {
    def_line_.resize(static_cast<size_t>(id) + 1);
    def_line_[static_cast<size_t>(id)] = t.line;
  }
  int use(const Token& t) {
    int id = g_.find(t.text);
    if (id < 0) error(t, "undefined value '{}'", t.text);
    return id;
  }

  void input_decl() {
    next();
    const Token& name_tok = expect_name("an input name");
    std::string name = define(name_tok);
    expect(":");
    TensorType type = input_type(name);
    defined(at(name_tok, [&] { return g_.add_input(name, type.dtype, std::move(type.shape)); }),
            name_tok);
  }

  // An input's type: `DTYPE[size, ...]` with integer or symbol sizes (`input` names it in
  // errors).
  TensorType input_type(std::string_view input) {
    DType dtype = parse_dtype_token();
    Shape shape;
    std::vector<int64_t> sizes;  // the integer ones
    const Token& shape_tok = expect("[");
    if (!accept("]")) {
      while (true) {
        const Token& t = next();
        if (t.kind == TokKind::Int) {
          sizes.push_back(text::parse_int({nullptr, &t}, file_));
          shape.push_back(sym::make_const(sizes.back()));
        } else if (t.kind == TokKind::Ident) {
          shape.push_back(sym::make_symbol(t.text));
        } else {
          error(t, "expected a size (an integer or a symbol name) but found {}", describe(t));
        }
        if (accept(",")) continue;
        expect("]");
        break;
      }
    }
    // Index arithmetic on sizes is int64; keep products of them far from overflow.
    if (!sizes_below(sizes, kMaxInputElements))
      error(shape_tok, "input '{}': shape {} is too large (its sizes multiply to 2^62 or more)",
            input, shape_str(shape));
    return TensorType{dtype, std::move(shape)};
  }

  void const_decl() {
    next();
    const Token& name_tok = expect_name("a constant name");
    std::string name = define(name_tok);
    expect(":");
    DType dtype = parse_dtype_token();
    const Token& shape_tok = expect("[");
    std::vector<int64_t> sizes;
    if (!accept("]")) {
      while (true) {
        const Token& t = next();
        if (t.kind != TokKind::Int)
          error(t, "expected a size (constants have integer sizes) but found {}", describe(t));
        sizes.push_back(text::parse_int({nullptr, &t}, file_));
        if (accept(",")) continue;
        expect("]");
        break;
      }
    }
    if (!sizes_below(sizes, kMaxConstantElements))
      error(shape_tok,
            "constant '{}': shape [{}] is too large (its sizes multiply to 2^31 or more)", name,
            fmt::join(sizes, ", "));
    int64_t numel = shape_numel(sizes);

    expect("=");
    skip_newlines();
    expect("[");
    std::vector<Literal> elems;
    const Token* first_extra = nullptr;
    const Token* close = nullptr;
    skip_newlines();
    if (peek().is("]")) close = &next();
    while (!close) {
      skip_newlines();
      elems.push_back(data_element());
      if (static_cast<int64_t>(elems.size()) == numel + 1) first_extra = &elems.back().where();
      skip_newlines();
      if (accept(",")) continue;
      if (!peek().is("]")) error(peek(), "expected ',' or ']' but found {}", describe(peek()));
      close = &next();
    }
    auto count = static_cast<int64_t>(elems.size());
    if (count != numel)
      error(first_extra ? *first_extra : *close,
            "constant '{}': shape [{}] needs {} elements, got {}", name, fmt::join(sizes, ", "),
            numel, count);

    Tensor value = Tensor::empty(dtype, sizes);
    for (int64_t i = 0; i < numel; ++i)
      text::store_element(value, i, elems[static_cast<size_t>(i)], file_);
    defined(at(name_tok, [&] { return g_.add_constant(value, name); }), name_tok);
  }

  void output_decl() {
    next();
    const Token& first = expect_name("an output name");
    const Token* value_tok = &first;
    std::string name;
    if (accept("=")) {
      value_tok = &expect_name("a value name");
      name = std::string(first.text);
    }
    int id = use(*value_tok);
    std::string shown = name.empty() ? std::string(first.text) : name;
    auto [it, fresh] = output_line_.emplace(shown, first.line);
    if (!fresh) error(first, "output '{}' is already defined at line {}", shown, it->second);
    at(first, [&] { g_.add_output(id, name); });
  }

  void node_decl() {
    const Token& name_tok = expect_name("a value name");
    std::string name = define(name_tok);
    expect("=");
    const Token& op_tok = expect_name("an op name");
    const OpDef* op = find_op(op_tok.text);
    if (!op) error(op_tok, "unknown op '{}'", op_tok.text);
    if (op->name == "input") error(op_tok, "inputs are declared as 'input NAME: TYPE'");
    if (op->name == "constant")
      error(op_tok, "constants are declared as 'const NAME: TYPE = [...]'");
    expect("(");
    std::vector<int> inputs;
    if (!accept(")")) {
      while (true) {
        inputs.push_back(use(expect_name("a value name")));
        if (accept(",")) continue;
        expect(")");
        break;
      }
    }
    Attrs attrs;
    if (peek().is("{")) attrs = parse_attrs(op, name);
    std::optional<Annotation> annotation;
    if (accept(":")) annotation = parse_annotation();
    int id = at(op_tok,
                [&] { return g_.add_node(op->name, std::move(inputs), std::move(attrs), name); });
    g_.set_location(id, fmt::format("{}:{}:{}", file_, op_tok.line, op_tok.col));
    defined(id, name_tok);
    if (annotation) check_annotation(*annotation, g_.node(id));
  }

  // ---- types ----
  DType parse_dtype_token() {
    const Token& t = expect_name("a dtype");
    auto dtype = parse_dtype(t.text);
    if (!dtype) error(t, "unknown dtype '{}'", t.text);
    return *dtype;
  }

  Annotation parse_annotation() {
    Annotation a;
    a.at = &peek();
    a.dtype = parse_dtype_token();
    expect("[");
    if (accept("]")) return a;
    while (true) {
      a.sizes.push_back(size_text());
      if (accept(",")) continue;
      expect("]");
      return a;
    }
  }

  // The text of one size of an annotation: tokens of an index expression up to ',' or ']'.
  std::string size_text() {
    const Token& first = peek();
    size_t end = first.offset;
    int depth = 0;
    while (true) {
      const Token& t = peek();
      if (depth == 0 && (t.is(",") || t.is("]"))) break;
      bool op = t.is("+") || t.is("-") || t.is("*") || t.is("//") || t.is("%") || t.is(",");
      if (t.is("(")) {
        if (++depth > kMaxParenDepth)
          error(t, "size nests parentheses more than {} deep", kMaxParenDepth);
      } else if (t.is(")")) {
        if (depth == 0) error(t, "unbalanced ')' in size");
        --depth;
      } else if (t.kind != TokKind::Int && t.kind != TokKind::Ident && !op) {
        error(t, "expected {} but found {}", depth > 0 ? "')'" : "',' or ']'", describe(t));
      }
      end = t.offset + t.text.size();
      next();
    }
    if (end == first.offset) error(first, "expected a size but found {}", describe(first));
    return std::string(src_.substr(first.offset, end - first.offset));
  }

  void check_annotation(const Annotation& a, const Node& n) const {
    bool same = a.dtype == n.type.dtype && a.sizes.size() == n.type.shape.size();
    for (size_t i = 0; same && i < a.sizes.size(); ++i)
      same = strip_blanks(a.sizes[i]) == strip_blanks(sym::to_string(n.type.shape[i]));
    if (!same)
      error(*a.at, "{}: annotated {}[{}] but inferred {}", n.name, dtype_name(a.dtype),
            fmt::join(a.sizes, ", "), type_str(n.type));
  }

  // ---- attributes ----
  // Each attribute is checked against the op's declaration as it is read, so that an error
  // points at the name of an unknown attribute or at the value of a bad one (no op: the syntax
  // alone, parse_attr_text).
  Attrs parse_attrs(const OpDef* op, const std::string& node) {
    expect("{");
    Attrs attrs;
    if (accept("}")) return attrs;
    while (true) {
      const Token& k = next();
      std::string key;
      if (k.kind == TokKind::Ident) {
        key = std::string(k.text);
      } else if (k.kind == TokKind::String) {
        key = k.value;
      } else {
        error(k, "expected an attribute name but found {}", describe(k));
      }
      if (attrs.has(key)) error(k, "attribute '{}' is given twice", key);
      expect("=");
      const Token& v = peek();
      AttrValue value = parse_attr_value();
      if (op) at(find_attr_spec(*op, key) ? v : k, [&] { check_attr(*op, key, value, node); });
      attrs.set(key, std::move(value));
      if (accept(",")) continue;
      expect("}");
      return attrs;
    }
  }

  AttrValue parse_attr_value() {
    const Token* sign = peek().is("-") ? &next() : nullptr;
    const Token& t = next();
    if (t.kind == TokKind::Int) return text::parse_int({sign, &t}, file_);
    if (t.kind == TokKind::Float) return text::parse_f64({sign, &t}, file_);
    if (t.is_ident("inf")) return (sign ? -1 : 1) * std::numeric_limits<double>::infinity();
    if (sign) error(t, "expected a number after '-' but found {}", describe(t));
    if (t.kind == TokKind::String) return t.value;
    if (t.is_ident("nan")) return std::numeric_limits<double>::quiet_NaN();
    if (t.is_ident("true") || t.is_ident("false")) return t.text == "true";
    if (t.kind == TokKind::Ident) {
      if (auto dtype = parse_dtype(t.text)) return *dtype;
      error(t, "unknown attribute value '{}' (not a dtype; strings need quotes)", t.text);
    }
    if (t.is("[")) {
      std::vector<int64_t> list;
      if (accept("]")) return list;
      while (true) {
        const Token* s = peek().is("-") ? &next() : nullptr;
        const Token& v = next();
        if (v.kind == TokKind::Float || v.is_ident("inf") || v.is_ident("nan"))
          error(s ? *s : v, "attribute lists hold integers only, found {}", describe(v));
        if (v.kind != TokKind::Int) error(v, "expected an integer but found {}", describe(v));
        list.push_back(text::parse_int({s, &v}, file_));
        if (accept(",")) continue;
        expect("]");
        return list;
      }
    }
    error(t, "expected an attribute value but found {}", describe(t));
  }

  Literal data_element() {
    Literal e;
    if (peek().is("-")) e.sign = &next();
    const Token& t = next();
    e.tok = &t;
    bool number = t.kind == TokKind::Int || t.kind == TokKind::Float || t.is_ident("inf");
    bool word = t.is_ident("nan") || t.is_ident("true") || t.is_ident("false");
    if (!number && !(word && !e.sign))
      error(t, "expected {} but found {}", e.sign ? "a number after '-'" : "a number", describe(t));
    return e;
  }

  std::string_view src_;
  std::string_view file_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  Graph g_;
  std::vector<int> def_line_;                         // by node id
  std::unordered_map<std::string, int> output_line_;  // by output name
};

}  // namespace

Graph parse_graph(std::string_view text, std::string_view filename) {
  if (text.size() > kMaxTextBytes)
    user_error("{}: text of {} bytes is too large (at most {})", filename, text.size(),
               kMaxTextBytes);
  return Parser(text, filename).run();
}

Attrs parse_attr_text(std::string_view text, std::string_view filename) {
  if (text.size() > kMaxTextBytes)
    user_error("{}: text of {} bytes is too large (at most {})", filename, text.size(),
               kMaxTextBytes);
  return Parser(text, filename).attrs_only();
}

TensorType parse_type_text(std::string_view text, std::string_view input,
                           std::string_view filename) {
  if (text.size() > kMaxTextBytes)
    user_error("{}: text of {} bytes is too large (at most {})", filename, text.size(),
               kMaxTextBytes);
  return Parser(text, filename).type_only(input);
}

Graph load_graph_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    user_error("cannot read '{}': it is a directory", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error("cannot read '{}': {}", path.string(), std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) user_error("cannot read '{}': read error", path.string());
  return parse_graph(text.str(), path.string());
}

}  // namespace coil
