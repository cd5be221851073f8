// Errors of the graph text format: each names FILE:LINE:COL of the offending token, and no
// input, however malformed, gets anything but a coil::Error out of the parser.
#include <gtest/gtest.h>

#include <random>

#include "coil/error.h"
#include "graph/text_format.h"

namespace coil {
namespace {

struct ErrorCase {
  const char* name;
  const char* text;
  const char* message;  // the whole what() of the coil::Error
};

const ErrorCase kCases[] = {
    // Lexical errors.
    {"unexpected_character", "input x: f32[4] $\n", "m.coil:1:17: unexpected character '$'"},
    {"unexpected_byte", "input x: f32[4]\n\xff", "m.coil:2:1: unexpected character byte 0xff"},
    {"malformed_number_letters", "input x: f32[4x]", "m.coil:1:14: malformed number '4x'"},
    {"malformed_number_dots", "t = full() {shape=[2], value=1.2.3}",
     "m.coil:1:30: malformed number '1.2.3'"},
    {"malformed_number_exponent", "t = full() {shape=[2], value=1e+}",
     "m.coil:1:30: malformed number '1e+'"},
    {"integer_overflow", "input x: f32[99999999999999999999]",
     "m.coil:1:14: integer '99999999999999999999' does not fit in 64 bits"},
    {"negative_integer_overflow", "input x: f32[2]\nt = abs(x) {a=-9223372036854775809}",
     "m.coil:2:15: integer '-9223372036854775809' does not fit in 64 bits"},
    {"float_out_of_range", "t = full() {shape=[2], value=1e999}",
     "m.coil:1:30: number '1e999' is out of range for f64"},
    {"unterminated_string", "input x: f32[4]\nt = gelu(x) {approximate=\"tanh}\n",
     "m.coil:2:26: unterminated string"},
    {"unterminated_string_at_eof", "input x: f32[4]\nt = gelu(x) {approximate=\"tanh\\",
     "m.coil:2:26: unterminated string"},
    {"bad_escape", "input x: f32[4]\nt = abs(x) {s=\"a\\qb\"}",
     "m.coil:2:17: unknown escape '\\' followed by 'q' in string"},
    {"bad_hex_escape", "input x: f32[4]\nt = abs(x) {s=\"\\x4\"}",
     "m.coil:2:16: escape '\\x' needs two hex digits"},
    {"name_too_long",
     "input x: f32[4]\nt = abs(x)\noutput " /* 257 bytes */
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     " = t",
     "m.coil:3:8: name is too long (267 characters; at most 256)"},

    // Statements and names.
    {"not_a_statement", "4 = abs(x)",
     "m.coil:1:1: expected a statement (input, const, output or NAME = op(...)) but found '4'"},
    {"unknown_op", "input x: f32[4]\nt0 = fooo(x)\n", "m.coil:2:6: unknown op 'fooo'"},
    {"input_is_not_callable", "t0 = input()",
     "m.coil:1:6: inputs are declared as 'input NAME: TYPE'"},
    {"undefined_value", "input x: f32[4]\nt0 = add(x, y)", "m.coil:2:13: undefined value 'y'"},
    {"use_before_definition", "t0 = abs(t1)\nt1 = full() {shape=[1], value=0}",
     "m.coil:1:10: undefined value 't1'"},
    {"undefined_output", "input x: f32[4]\noutput y = z", "m.coil:2:12: undefined value 'z'"},
    {"duplicate_input", "input x: f32[4]\n\ninput x: f32[4]",
     "m.coil:3:7: 'x' is already defined at line 1"},
    {"duplicate_node", "input x: f32[4]\nt = abs(x)\nt = neg(x)",
     "m.coil:3:1: 't' is already defined at line 2"},
    {"duplicate_output", "input x: f32[4]\noutput y = x\noutput y = x",
     "m.coil:3:8: output 'y' is already defined at line 2"},
    {"duplicate_implicit_output", "input x: f32[4]\noutput x\noutput x",
     "m.coil:3:8: output 'x' is already defined at line 2"},
    {"trailing_tokens", "input x: f32[4]\noutput x x",
     "m.coil:2:10: expected end of line but found 'x'"},
    {"missing_equals", "t abs(x)", "m.coil:1:3: expected '=' but found 'abs'"},

    // Brackets.
    {"missing_close_paren", "input x: f32[4]\nt0 = mul(x, x\nt1 = abs(x)",
     "m.coil:2:14: expected ')' but found end of line"},
    {"missing_close_paren_at_eof", "input x: f32[4]\nt0 = mul(x,",
     "m.coil:2:12: expected a value name but found end of file"},
    {"missing_close_bracket", "input x: f32[4, 3",
     "m.coil:1:18: expected ']' but found end of file"},
    {"missing_close_brace", "input x: f32[4]\nt = sum(x) {keepdim=true\n",
     "m.coil:2:25: expected '}' but found end of line"},
    {"unbalanced_paren_in_annotation", "input x: f32[4]\nt = abs(x) : f32[4)]",
     "m.coil:2:19: unbalanced ')' in size"},
    {"unclosed_paren_in_annotation", "input x: f32[4]\nt = abs(x) : f32[(4]",
     "m.coil:2:20: expected ')' but found ']'"},

    // Types.
    {"bad_dtype", "input x: f33[4]", "m.coil:1:10: unknown dtype 'f33'"},
    {"bad_dtype_in_annotation", "input x: f32[4]\nt = abs(x) : float[4]",
     "m.coil:2:14: unknown dtype 'float'"},
    {"missing_shape", "input x: f32\n", "m.coil:1:13: expected '[' but found end of line"},
    {"negative_input_size", "input x: f32[-1]",
     "m.coil:1:14: expected a size (an integer or a symbol name) but found '-'"},
    {"float_input_size", "input x: f32[2.5]",
     "m.coil:1:14: expected a size (an integer or a symbol name) but found '2.5'"},
    {"huge_input", "input x: f32[s0, 4611686018427387904, 1]",
     "m.coil:1:13: input 'x': shape [s0, 4611686018427387904, 1] is too large (its sizes multiply "
     "to 2^62 or more)"},
    {"huge_input_product", "input x: f32[4294967296, 4294967296]",
     "m.coil:1:13: input 'x': shape [4294967296, 4294967296] is too large (its sizes multiply to "
     "2^62 or more)"},
    {"empty_constant_with_huge_sizes", "const w: f32[0, 65536, 65536] = []",
     "m.coil:1:13: constant 'w': shape [0, 65536, 65536] is too large (its sizes multiply to 2^31 "
     "or more)"},
    {"symbolic_constant_size", "const c: f32[n] = []",
     "m.coil:1:14: expected a size (constants have integer sizes) but found 'n'"},

    // Attributes.
    {"unknown_attribute_value", "input x: f32[4]\nt = gelu(x) {approximate=tanh}",
     "m.coil:2:26: unknown attribute value 'tanh' (not a dtype; strings need quotes)"},
    {"duplicate_attribute", "input x: f32[4]\nt = sum(x) {keepdim=true, keepdim=false}",
     "m.coil:2:27: attribute 'keepdim' is given twice"},
    {"float_in_int_list", "input x: f32[4]\nt = sum(x) {axes=[0, -1.5]}",
     "m.coil:2:22: attribute lists hold integers only, found '1.5'"},
    {"minus_before_word", "input x: f32[4]\nt = abs(x) {a=-true}",
     "m.coil:2:16: expected a number after '-' but found 'true'"},
    {"missing_attribute_value", "input x: f32[4]\nt = abs(x) {a=}",
     "m.coil:2:15: expected an attribute value but found '}'"},

    // Constant data.
    {"too_few_elements", "const w: f32[3] = [0.5, -1.0]",
     "m.coil:1:29: constant 'w': shape [3] needs 3 elements, got 2"},
    {"too_many_elements", "const w: f32[2, 1] = [1, 2,\n  3, 4]",
     "m.coil:2:3: constant 'w': shape [2, 1] needs 2 elements, got 4"},
    {"scalar_needs_one_element", "const w: f32[] = []",
     "m.coil:1:19: constant 'w': shape [] needs 1 elements, got 0"},
    {"too_many_constant_elements", "const w: f32[65536, 32768] = []",
     "m.coil:1:13: constant 'w': shape [65536, 32768] is too large (its sizes multiply to 2^31 or "
     "more)"},
    {"constant_size_overflow", "const w: f32[4294967296, 4294967296] = []",
     "m.coil:1:13: constant 'w': shape [4294967296, 4294967296] is too large (its sizes multiply "
     "to 2^31 or more)"},
    {"bool_data", "const b: bool[2] = [true, 1]",
     "m.coil:1:27: expected true or false in bool data but found '1'"},
    {"float_in_int_data", "const b: i32[2] = [1, 2.0]",
     "m.coil:1:23: expected an integer in i32 data but found '2.0'"},
    {"u8_out_of_range", "const b: u8[2] = [255, 256]",
     "m.coil:1:24: value 256 is out of range for u8"},
    {"i8_out_of_range", "const b: i8[1] = [-129]",
     "m.coil:1:19: value -129 is out of range for i8"},
    {"f16_out_of_range", "const h: f16[1] = [70000]",
     "m.coil:1:20: value 70000 is out of range for f16"},
    {"f32_out_of_range", "const h: f32[1] = [-1e39]",
     "m.coil:1:20: number '-1e39' is out of range for f32"},
    {"word_in_float_data", "const h: f32[1] = [false]",
     "m.coil:1:20: expected a number in f32 data but found 'false'"},
    {"missing_comma_in_data", "const h: f32[2] = [1 2]",
     "m.coil:1:22: expected ',' or ']' but found '2'"},
    {"unterminated_data", "const h: f32[2] = [1, 2\n",
     "m.coil:2:1: expected ',' or ']' but found end of file"},

    // Type annotations and type inference.
    {"annotation_mismatch", "input x: f32[4, 3]\nt2 = sum(x) {axes=[1], keepdim=true} : f32[4]",
     "m.coil:2:40: t2: annotated f32[4] but inferred f32[4, 1]"},
    {"annotation_dtype_mismatch", "input x: i32[4]\nt = sum(x) : i32[]",
     "m.coil:2:14: t: annotated i32[] but inferred i64[]"},
    {"annotation_symbolic_mismatch",
     "input x: f32[s0]\ninput y: f32[s1]\nt = concat(x, y) : f32[s0+s0]",
     "m.coil:3:20: t: annotated f32[s0+s0] but inferred f32[s0 + s1]"},
    {"shape_mismatch", "input x: f32[4]\ninput y: f32[3]\nt0 = add(x, y)",
     "m.coil:3:6: add: cannot broadcast shapes [4] and [3] (dim 0: 4 vs 3)"},
    {"bad_attribute", "input x: f32[4]\nt = gelu(x) {approximate=\"fast\"}",
     "m.coil:2:26: attribute 'approximate' of gelu (node t) must be \"none\" or \"tanh\", "
     "got \"fast\""},
    {"missing_attribute", "input x: f32[4]\nt = permute(x)",
     "m.coil:2:5: missing attribute 'dims' of permute (node t)"},
    {"wrong_arity", "input x: f32[4]\n  t = add(x)", "m.coil:2:7: add: expected 2 inputs, got 1"},
    {"mistyped_attribute", "input x: f32[4]\nt = sum(x) {keepdim=1}",
     "m.coil:2:21: attribute 'keepdim' of sum (node t) must be a bool, got 1"},
    // Found by the libFuzzer target tests/fuzz/parsers/onnx_parser_fuzzer (an ONNX Conv with
    // huge pads or dilations): the window arithmetic of the type rule overflowed int64.
    {"huge_conv_padding",
     "input x: f32[1, 1, 4, 4]\nconst w: f32[1, 1, 1, 1] = [1]\n"
     "t = conv2d(x, w) {padding=[4611686018427387904, 0]}",
     "m.coil:3:5: conv2d: the window is too large (kernel [1, 1], stride [1, 1], padding "
     "[4611686018427387904, 0], dilation [1, 1])"},
    {"huge_conv_dilation",
     "input x: f32[1, 1, 4, 4]\nconst w: f32[1, 1, 3, 3] = [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
     "t = conv2d(x, w) {dilation=[9223372036854775807, 2]}",
     "m.coil:3:5: conv2d: the window is too large (kernel [3, 3], stride [1, 1], padding [0, 0], "
     "dilation [9223372036854775807, 2])"},
    // Found by tests/fuzz/parsers/text_parser_fuzzer on the GPU host (2026-12-02): the known
    // sizes of a reshape with -1 multiplied past int64 into a negative divisor (an internal
    // check failure).
    {"huge_reshape_with_inferred_size",
     "input x: f32[2, 3]\nt = reshape(x) {shape=[-1, 7777777777777777772, 30, 66663]}",
     "m.coil:2:5: reshape: the sizes of shape [-1, 7777777777777777772, 30, 66663] multiply "
     "past int64"},
};

class TextFormatError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(TextFormatError, HasLocatedMessage) {
  const ErrorCase& c = GetParam();
  try {
    parse_graph(c.text, "m.coil");
    FAIL() << "no error for:\n" << c.text;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), c.message) << "for:\n" << c.text;
  }
}

INSTANTIATE_TEST_SUITE_P(All, TextFormatError, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TextFormatErrors, DefaultFileName) {
  try {
    parse_graph("t = nope()");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "<string>:1:5: unknown op 'nope'");
  }
}

TEST(TextFormatErrors, DeepParenthesesAreRefused) {
  std::string text = "input x: f32[4]\nt = abs(x) : f32[" + std::string(100, '(') + "4" +
                     std::string(100, ')') + "]";
  try {
    parse_graph(text, "m.coil");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "m.coil:2:82: size nests parentheses more than 64 deep");
  }
}

TEST(TextFormatErrors, UnreadableFile) {
  try {
    load_graph_file("/nonexistent/dir/model.coil");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read '/nonexistent/dir/model.coil': No such file or directory");
  }
  try {
    load_graph_file("/");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read '/': it is a directory");
  }
}

// A file that touches every part of the grammar, for the mutation test below.
constexpr const char* kValid = R"(# a model
input x: f32[4, s0]
input mask: bool[4, 1]
input k: i64[4, 3]
const w: f32[3] = [0.5, -1.0, 2.0]
const b: bf16[2, 2] = [1, nan,
   -inf, 1e-3]
const flags: bool[2] = [true, false]
const idx: i64[2] = [-9223372036854775808, 9223372036854775807]
t0 = mul(k, w) : f32[4, 3]
t1 = gelu(t0) {approximate="t\x61nh"}
t2 = sum(t1) {axes=[1], keepdim=true} : f32[4, 1]
t3 = full() {shape=[2, 3], value=0.5, dtype=f32}
t4 = where(mask, x, t2) : f32[4, s0]
t5 = concat(x, x) {dim=1} : f32[4, 2*s0]
t6 = reshape(t3) {shape=[-1]}
t7 = slice(t6) {dim=0, start=1, end=-1, step=2}
t8 = clamp(t7) {min=-1.5e-3, "max"=inf}
t9 = layer_norm(x) {eps=1e-05}
output y = t2
output t0
output z = t9
)";

// Parses `text`: a coil::Error is fine; any other exception fails. A text that parses must
// round-trip through the printer.
void expect_parses_or_fails_cleanly(const std::string& text) {
  try {
    Graph g = parse_graph(text, "fuzz.coil");
    std::string printed = to_text(g);
    EXPECT_EQ(to_text(parse_graph(printed)), printed) << "for:\n" << text;
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-coil exception " << e.what() << " for:\n" << text;
  } catch (...) {
    ADD_FAILURE() << "unknown exception for:\n" << text;
  }
}

TEST(TextFormatErrors, ValidFileParses) {
  Graph g = parse_graph(kValid, "valid.coil");
  EXPECT_EQ(g.num_nodes(), 17);
  std::string printed = to_text(g);
  EXPECT_EQ(to_text(parse_graph(printed)), printed);
}

TEST(TextFormatErrors, EveryTruncationFailsCleanly) {
  std::string valid = kValid;
  for (size_t n = 0; n <= valid.size(); ++n) expect_parses_or_fails_cleanly(valid.substr(0, n));
}

TEST(TextFormatErrors, RandomMutationsFailCleanly) {
  std::mt19937 rng(20240611);
  const std::string valid = kValid;
  const std::vector<std::string> pieces = {"(",
                                           ")",
                                           "[",
                                           "]",
                                           "{",
                                           "}",
                                           ",",
                                           "=",
                                           ":",
                                           "-",
                                           "+",
                                           "*",
                                           "//",
                                           "%",
                                           "\"",
                                           "\\",
                                           "#",
                                           "\n",
                                           " ",
                                           "0",
                                           "-1",
                                           "1e999",
                                           "9999999999999999999999",
                                           "1.5",
                                           ".",
                                           "e",
                                           "nan",
                                           "inf",
                                           "true",
                                           "x",
                                           "t0",
                                           "input",
                                           "const",
                                           "output",
                                           "f32",
                                           "bool",
                                           "i8",
                                           "u8",
                                           "f16",
                                           "sum",
                                           "reshape",
                                           "full",
                                           "iota",
                                           "concat",
                                           "expand",
                                           "squeeze",
                                           "slice",
                                           "permute",
                                           "argmax",
                                           "softmax",
                                           "where",
                                           "cast",
                                           "{axes=[5]}",
                                           "{dim=-9223372036854775808}",
                                           "{shape=[-1, -1]}",
                                           "{shape=[9223372036854775807, 2]}",
                                           "\xff",
                                           std::string("\0", 1),
                                           "\t",
                                           "\r"};
  auto rand_below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  for (int iter = 0; iter < 4000; ++iter) {
    std::string text = valid;
    int edits = 1 + static_cast<int>(rand_below(4));
    for (int e = 0; e < edits; ++e) {
      size_t at = rand_below(text.size() + 1);
      switch (rand_below(6)) {
        case 0:  // replace a byte by any byte
          if (at < text.size()) text[at] = static_cast<char>(rand_below(256));
          break;
        case 1:  // delete a span
          text.erase(at, rand_below(12));
          break;
        case 2:  // insert a piece
          text.insert(at, pieces[rand_below(pieces.size())]);
          break;
        case 3: {  // duplicate a span elsewhere
          size_t from = rand_below(text.size() + 1);
          std::string span = text.substr(from, rand_below(40));
          text.insert(at, span);
          break;
        }
        case 4:  // truncate
          text.resize(at);
          break;
        default:  // replace a piece
          text.replace(at, rand_below(6), pieces[rand_below(pieces.size())]);
          break;
      }
    }
    expect_parses_or_fails_cleanly(text);
    if (HasFailure()) return;
  }
}

TEST(TextFormatErrors, RandomGarbageFailsCleanly) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text(std::uniform_int_distribution<size_t>(0, 200)(rng), '\0');
    bool printable = iter % 2 == 0;
    for (char& c : text)
      c = static_cast<char>(printable ? std::uniform_int_distribution<int>(32, 126)(rng)
                                      : std::uniform_int_distribution<int>(0, 255)(rng));
    expect_parses_or_fails_cleanly(text);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace coil
