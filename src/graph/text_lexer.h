// Internal to the text format (graph/text_format.cpp, graph/text_printer.cpp): tokens of the
// graph text format, the conversion of literal tokens to values (graph/text_literals.cpp), and the
// helpers the parser and printer share. Include graph/text_format.h instead.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "coil/tensor.h"
#include "support/check.h"

namespace coil::text {

enum class TokKind {
  Ident,    // [A-Za-z_][A-Za-z0-9_]*: names, ops, dtypes, true/false/nan/inf, keywords
  Int,      // 123 (no sign: '-' is its own token)
  Float,    // 1.5, 2e-3, .5
  String,   // "..." with escapes decoded into Token::value
  Punct,    // ( ) [ ] { } , = : + - * / // %
  Newline,  // end of a line (statements end there)
  End,      // end of the text
};

struct Token {
  TokKind kind = TokKind::End;
  std::string_view text;  // the source text of the token (a string keeps its quotes)
  std::string value;      // decoded contents of a String
  size_t offset = 0;      // byte offset of the token in the source
  int line = 1;           // 1-based
  int col = 1;            // 1-based, in bytes

  bool is(std::string_view punct) const { return kind == TokKind::Punct && text == punct; }
  bool is_ident(std::string_view word) const { return kind == TokKind::Ident && text == word; }
};

/// The longest identifier accepted (Graph names are capped at the same length).
constexpr size_t kMaxIdentifier = 256;

/// Splits `src` into tokens ending with an End token; coil::Error "FILE:LINE:COL: ..." on a bad
/// character, malformed number, bad escape or unterminated string.
std::vector<Token> tokenize(std::string_view src, std::string_view filename);

/// "FILE:LINE:COL: message" as a coil::Error.
[[noreturn]] void throw_at(std::string_view filename, int line, int col, std::string_view message);

/// A string literal that tokenize() decodes back to `s`: quotes, \" \\ \n \t \r and \xHH for
/// other control bytes; other bytes (UTF-8 included) are written as they are.
std::string quote_string(std::string_view s);

/// Token text for error messages: 'abc', end of line, end of file (long text is cut short).
std::string describe(const Token& t);

/// A literal as written: an optional '-' token and an Int, Float or word (inf, nan, true, false)
/// token. Conversions throw coil::Error at the literal's location in `filename`.
struct Literal {
  const Token* sign = nullptr;
  const Token* tok = nullptr;
  const Token& where() const { return sign ? *sign : *tok; }
  std::string text() const;
};

/// The value of an Int literal; an error when it does not fit in int64.
int64_t parse_int(const Literal& lit, std::string_view filename);
/// The value of a Float or Int literal as a double; an error when too large.
double parse_f64(const Literal& lit, std::string_view filename);
/// Converts a literal to element `i` of `value` (contiguous) in its dtype: true/false for bool,
/// in-range integers for integer dtypes, numbers/nan/inf for floats (f32, f16 and bf16 are read
/// as float, then rounded).
void store_element(Tensor& value, int64_t i, const Literal& lit, std::string_view filename);

}  // namespace coil::text
