// Corpus and dictionary helper for the parser fuzzers (build.sh runs it; not a fuzzer):
//
//   parser_fuzz_tool dict-text              libFuzzer dictionary of the text format: keywords,
//                                           dtypes, words, punctuation, every op of the op
//                                           registry with its attribute names and choices
//   parser_fuzz_tool dict-onnx              ONNX op types of the frontend's table and the
//                                           attribute names their schemas declare
//   parser_fuzz_tool onnx-to-text DIR FILE...   imports each .onnx model and writes the graphs
//                                           that import as DIR/onnx_<n>.coil (seeds of the text
//                                           target: the ops and attributes real models use)
#include <onnx/defs/schema.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <string_view>

#include "frontend/onnx/onnx_context.h"
#include "frontend/onnx/onnx_import.h"
#include "graph/attr_check.h"
#include "graph/op_registry.h"
#include "graph/text_format.h"

namespace {

using namespace coil;

// A dictionary entry: the bytes in double quotes, escaped as libFuzzer reads them.
void entry(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (u < 0x20 || u >= 0x7f)
      out += fmt::format("\\x{:02X}", u);
    else
      out += c;
  }
  std::cout << out << "\"\n";
}

int dict_text() {
  std::set<std::string> words;
  for (const char* w : {"input ",
                        "const ",
                        "output ",
                        " = ",
                        ": ",
                        "true",
                        "false",
                        "nan",
                        "inf",
                        "-inf",
                        "[]",
                        "()",
                        "{}",
                        "//",
                        "%",
                        "\"",
                        "\\x",
                        "\\n",
                        "#",
                        "\n",
                        "1e-05",
                        "-1",
                        "0.5",
                        "9223372036854775807",
                        "-9223372036854775808",
                        "s0",
                        "s1",
                        "s0 + 1",
                        "2*s0",
                        "(s0 // 2)"})
    words.insert(w);
  for (const char* d : {"f32", "f64", "f16", "bf16", "i32", "i64", "i8", "u8", "bool"}) {
    words.insert(d);
    words.insert(std::string(d) + "[");
  }
  for (const OpDef& op : all_ops()) {
    words.insert(std::string(op.name) + "(");
    for (const AttrSpec& a : op.attrs) {
      words.insert(std::string(a.name) + "=");
      for (std::string_view c : a.choices) words.insert("\"" + std::string(c) + "\"");
    }
  }
  for (const auto& w : words) entry(w);
  return 0;
}

int dict_onnx() {
  std::set<std::string> words;
  for (const auto& op : onnxfe::all_onnx_ops()) {
    words.insert(std::string(op.name));
    if (const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(std::string(op.name), 17))
      for (const auto& [name, attr] : s->attributes()) words.insert(name);
  }
  for (const auto& w : words) entry(w);
  return 0;
}

int onnx_to_text(const std::filesystem::path& dir, int argc, char** argv) {
  std::filesystem::create_directories(dir);
  int written = 0;
  for (int i = 0; i < argc; ++i) {
    try {
      Graph g = import_onnx(argv[i]);
      std::ofstream(dir / fmt::format("onnx_{:04}.coil", written++)) << to_text(g);
    } catch (const Error&) {
      // Unsupported or broken models give no seed.
    }
  }
  std::fprintf(stderr, "onnx-to-text: %d of %d models imported\n", written, argc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view cmd = argc > 1 ? argv[1] : "";
  if (cmd == "dict-text") return dict_text();
  if (cmd == "dict-onnx") return dict_onnx();
  if (cmd == "onnx-to-text" && argc > 2) return onnx_to_text(argv[2], argc - 3, argv + 3);
  std::fprintf(stderr, "usage: %s dict-text | dict-onnx | onnx-to-text DIR FILE...\n", argv[0]);
  return 2;
}
