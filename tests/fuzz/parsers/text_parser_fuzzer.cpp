// libFuzzer target: the graph text format (graph/text_format.h). The input is the text of a
// .coil file; one that starts with '{' (never a valid graph) is an attribute list for
// parse_attr_text instead. What is checked: fuzz_checks.h.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "coil/attrs.h"
#include "fuzz_checks.h"

namespace {

using namespace coil;
using namespace coil::parser_fuzz;

void attrs_round_trip(std::string_view text) {
  Attrs attrs;
  if (!clean("parse_attr_text", [&] { attrs = parse_attr_text(text, "fuzz.coil"); })) return;
  std::string printed;
  must("attrs_to_text", [&] { printed = attrs_to_text(attrs); });
  Attrs again;
  try {
    again = parse_attr_text(printed, "printed.coil");
  } catch (const Error& e) {
    finding("printed attributes do not parse back", e.what(), printed + "\n");
  }
  std::string reprinted;
  must(
      "attrs_to_text", [&] { reprinted = attrs_to_text(again); }, printed + "\n");
  if (reprinted != printed)
    finding("printed attributes parse to attributes that print differently", reprinted,
            printed + "\n");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '{') {
    attrs_round_trip(text);
    return 0;
  }
  Graph g;
  if (!clean("parse_graph", [&] { g = parse_graph(text, "fuzz.coil"); })) return 0;
  check_parsed_graph(g);
  return 0;
}
