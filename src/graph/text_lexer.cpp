#include "graph/text_lexer.h"

namespace coil::text {
namespace {

bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alnum(char c) {
  return is_alpha(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A printable form of one source byte for "unexpected character" messages.
std::string show_byte(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", u);
}

// True when `s` is digits [. digits] [e [+-] digits] with at least one digit before the
// exponent; sets `is_float` when it has a '.' or an exponent.
bool valid_number(std::string_view s, bool& is_float) {
  size_t i = 0, n = s.size();
  size_t mantissa_digits = 0;
  while (i < n && is_digit(s[i])) ++i, ++mantissa_digits;
  is_float = false;
  if (i < n && s[i] == '.') {
    is_float = true;
    ++i;
    while (i < n && is_digit(s[i])) ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    is_float = true;
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < n && is_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == n;
}

class Lexer {
 public:
  Lexer(std::string_view src, std::string_view filename) : src_(src), file_(filename) {}

  std::vector<Token> run() {
    // A UTF-8 byte order mark, as some editors write, is not part of the text.
    if (src_.substr(0, 3) == "\xEF\xBB\xBF") advance(3);
    std::vector<Token> out;
    while (true) {
      skip_blanks();
      Token t;
      t.offset = pos_;
      t.line = line_;
      t.col = col();
      if (pos_ >= src_.size()) {
        out.push_back(t);
        return out;
      }
      char c = src_[pos_];
      if (c == '\n') {
        t.kind = TokKind::Newline;
        t.text = src_.substr(pos_, 1);
        advance(1);
        ++line_;
        line_start_ = pos_;
      } else if (is_alpha(c)) {
        lex_identifier(t);
      } else if (is_digit(c) || (c == '.' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]))) {
        lex_number(t);
      } else if (c == '"') {
        lex_string(t);
      } else if (src_.substr(pos_, 2) == "//") {
        t.kind = TokKind::Punct;
        t.text = src_.substr(pos_, 2);
        advance(2);
      } else if (std::string_view("()[]{},=:+-*/%").find(c) != std::string_view::npos) {
        t.kind = TokKind::Punct;
        t.text = src_.substr(pos_, 1);
        advance(1);
      } else {
        throw_at(file_, line_, col(), fmt::format("unexpected character {}", show_byte(c)));
      }
      out.push_back(std::move(t));
    }
  }

 private:
  int col() const { return static_cast<int>(pos_ - line_start_) + 1; }
  void advance(size_t n) { pos_ += n; }

  void skip_blanks() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        advance(1);
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n') advance(1);
      } else {
        return;
      }
    }
  }

  void lex_identifier(Token& t) {
    size_t start = pos_;
    while (pos_ < src_.size() && is_alnum(src_[pos_])) advance(1);
    t.kind = TokKind::Ident;
    t.text = src_.substr(start, pos_ - start);
    if (t.text.size() > kMaxIdentifier)
      throw_at(file_, t.line, t.col,
               fmt::format("name is too long ({} characters; at most {})", t.text.size(),
                           kMaxIdentifier));
  }

  void lex_number(Token& t) {
    // Take the longest run that could belong to a number (letters included, so that "12abc"
    // is one malformed number rather than a number and a name), then validate it.
    size_t start = pos_;
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      char prev = pos_ > start ? src_[pos_ - 1] : '\0';
      bool sign_of_exponent = (c == '+' || c == '-') && (prev == 'e' || prev == 'E');
      if (!is_alnum(c) && c != '.' && !sign_of_exponent) break;
      advance(1);
    }
    t.text = src_.substr(start, pos_ - start);
    bool is_float = false;
    if (!valid_number(t.text, is_float)) {
      std::string_view shown = t.text.substr(0, 40);
      throw_at(
          file_, t.line, t.col,
          fmt::format("malformed number '{}{}'", shown, shown.size() < t.text.size() ? "..." : ""));
    }
    t.kind = is_float ? TokKind::Float : TokKind::Int;
  }

  void lex_string(Token& t) {
    size_t start = pos_;
    advance(1);  // opening quote
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n')
        throw_at(file_, t.line, t.col, "unterminated string");
      char c = src_[pos_];
      if (c == '"') break;
      if (c != '\\') {
        t.value += c;
        advance(1);
        continue;
      }
      int esc_col = col();
      char e = pos_ + 1 < src_.size() ? src_[pos_ + 1] : '\0';
      switch (e) {
        case '"':
          t.value += '"';
          break;
        case '\\':
          t.value += '\\';
          break;
        case 'n':
          t.value += '\n';
          break;
        case 't':
          t.value += '\t';
          break;
        case 'r':
          t.value += '\r';
          break;
        case 'x': {
          int hi = pos_ + 2 < src_.size() ? hex_value(src_[pos_ + 2]) : -1;
          int lo = pos_ + 3 < src_.size() ? hex_value(src_[pos_ + 3]) : -1;
          if (hi < 0 || lo < 0)
            throw_at(file_, line_, esc_col, "escape '\\x' needs two hex digits");
          t.value += static_cast<char>(hi * 16 + lo);
          advance(2);
          break;
        }
        default:
          if (pos_ + 1 >= src_.size() || e == '\n')
            throw_at(file_, t.line, t.col, "unterminated string");
          throw_at(file_, line_, esc_col,
                   fmt::format("unknown escape '\\' followed by {} in string", show_byte(e)));
      }
      advance(2);
    }
    advance(1);  // closing quote
    t.kind = TokKind::String;
    t.text = src_.substr(start, pos_ - start);
  }

  std::string_view src_;
  std::string_view file_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view src, std::string_view filename) {
  return Lexer(src, filename).run();
}

void throw_at(std::string_view filename, int line, int col, std::string_view message) {
  throw Error(fmt::format("{}:{}:{}: {}", filename, line, col, message));
}

std::string quote_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += fmt::format("\\x{:02x}", u);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokKind::Newline:
      return "end of line";
    case TokKind::End:
      return "end of file";
    default:
      break;
  }
  constexpr size_t kMaxShown = 40;
  if (t.text.size() <= kMaxShown) return fmt::format("'{}'", t.text);
  return fmt::format("'{}...'", t.text.substr(0, kMaxShown));
}

}  // namespace coil::text
