// An indented line writer for generated source (C++ and Python/Triton).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace coil {

class CodeWriter {
 public:
  explicit CodeWriter(int indent_width = 4) : width_(indent_width) {}

  void line(std::string_view text = {}) {
    if (!text.empty()) out_.append(static_cast<size_t>(depth_ * width_), ' ');
    out_ += text;
    out_ += '\n';
  }
  template <typename... Args>
  void linef(fmt::format_string<Args...> f, Args&&... args) {
    line(fmt::format(f, std::forward<Args>(args)...));
  }
  /// Appends text verbatim (already formatted, e.g. another writer's output).
  void raw(std::string_view text) { out_ += text; }

  void indent() { ++depth_; }
  void dedent() { --depth_; }
  /// `{` on its own line, then indents; close() dedents and writes `}` + suffix.
  void open(std::string_view head = {}) {
    if (!head.empty()) line(head);
    line("{");
    indent();
  }
  void close(std::string_view suffix = {}) {
    dedent();
    line(fmt::format("}}{}", suffix));
  }

  const std::string& str() const { return out_; }
  /// The text written so far, for a later patch(): a line whose content depends on what is
  /// printed after it (a lambda's captures, cpp_vec_ops.h).
  size_t size() const { return out_.size(); }
  /// Replaces the first `placeholder` at or after `from` with `text`.
  void patch(size_t from, std::string_view placeholder, std::string_view text) {
    size_t at = out_.find(placeholder, from);
    if (at != std::string::npos) out_.replace(at, placeholder.size(), text);
  }

 private:
  std::string out_;
  int depth_ = 0;
  int width_;
};

}  // namespace coil
