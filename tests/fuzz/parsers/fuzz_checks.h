// What the parser fuzzers check (tests/fuzz/README.md, "libFuzzer: the parsers"): a parser
// returns a graph or throws a coil::Error (UnsupportedError included); and a graph it returns
// passes the cheap checks that follow parsing:
//   - the graph is well formed: SSA order, inputs and outputs that name real nodes, unique
//     identifier names, the node types the op registry infers (Graph::add_node);
//   - the text format round-trips: to_text(g) parses back (as `coil compile` writes graph.coil,
//     ONNX models included) to a graph that prints identically (graph/text_format.h);
//   - decompose_and_bind, the first stage of compile (composites rebuilt from simpler ops,
//     every size symbol bound to 3), gives a graph or a coil::Error.
// Anything else (another exception type, InternalError included, a failed check, a sanitizer
// report, a crash, a hang) is a finding: the fuzzer prints it and aborts, so libFuzzer saves
// the input. Graphs are never compiled or run (too slow for a fuzzer).
#pragma once

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <typeinfo>

#include "coil/error.h"
#include "coil/expr.h"
#include "coil/graph.h"
#include "graph/decompositions.h"
#include "graph/text_format.h"

namespace coil::parser_fuzz {

inline std::string demangled(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> p(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && p ? p.get() : t.name();
}

/// Prints the finding (and `text`, a graph, when given) and aborts: libFuzzer saves the input.
[[noreturn]] inline void finding(std::string_view what, std::string_view detail,
                                 std::string_view text = {}) {
  std::fprintf(stderr, "\n==== coil parser fuzzer finding: %.*s\n%.*s\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(detail.size()),
               detail.data());
  if (!text.empty())
    std::fprintf(stderr, "---- graph ----\n%.*s---- end ----\n", static_cast<int>(text.size()),
                 text.data());
  std::abort();
}

/// Runs `f`; true when it returned, false when it threw a coil::Error; any other exception is a
/// finding of `stage`.
template <typename F>
bool clean(std::string_view stage, F&& f, std::string_view text = {}) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string(stage) + " threw " + demangled(typeid(e)) + " (not a coil::Error)",
            e.what(), text);
  } catch (...) {
    finding(std::string(stage) + " threw an exception of an unknown type", "", text);
  }
}

/// Runs `f`, which must not throw at all: a coil::Error is a finding too.
template <typename F>
void must(std::string_view stage, F&& f, std::string_view text = {}) {
  try {
    f();
  } catch (const Error& e) {
    finding(std::string(stage) + " threw a coil::Error on what the parser accepted", e.what(),
            text);
  } catch (const std::exception& e) {
    finding(std::string(stage) + " threw " + demangled(typeid(e)), e.what(), text);
  } catch (...) {
    finding(std::string(stage) + " threw an exception of an unknown type", "", text);
  }
}

inline void check_well_formed(const Graph& g, const std::string& text) {
  auto fail = [&](const std::string& m) { finding("malformed graph", m, text); };
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.id != id || !n.op) fail("node " + std::to_string(id) + " has a bad id or no op");
    if (!is_identifier(n.name) || g.find(n.name) != id) fail("bad or duplicate name " + n.name);
    for (int in : n.inputs)
      if (in < 0 || in >= id) fail(n.name + " reads node " + std::to_string(in) + " (not SSA)");
    if ((n.op_name() == "constant") != (n.data != nullptr))
      fail(n.name + ": data on a non-constant or a constant without data");
  }
  for (int id : g.inputs())
    if (id < 0 || id >= g.num_nodes() || g.node(id).op_name() != "input")
      fail("graph input " + std::to_string(id) + " is not an input node");
  for (const GraphOutput& o : g.outputs())
    if (o.node < 0 || o.node >= g.num_nodes() || !is_identifier(o.name))
      fail("bad graph output " + o.name);
  (void)live_nodes(g);
  (void)g.use_counts();
}

/// The checks after a successful parse (see the top of this file).
inline void check_parsed_graph(const Graph& g) {
  std::string printed;
  must("to_text", [&] { printed = to_text(g); });
  check_well_formed(g, printed);
  Graph again;
  try {
    again = parse_graph(printed, "printed.coil");
  } catch (const Error& e) {
    finding("the printed graph does not parse back", e.what(), printed);
  }
  std::string reprinted;
  must(
      "to_text", [&] { reprinted = to_text(again); }, printed);
  if (reprinted != printed)
    finding("the printed graph parses to a graph that prints differently", reprinted, printed);
  std::map<std::string, int64_t> sizes;
  must(
      "size_symbols",
      [&] {
        for (const sym::Expr& s : g.size_symbols()) sizes[s.symbol_name()] = 3;
      },
      printed);
  clean(
      "decompose_and_bind", [&] { (void)decompose_and_bind(g, sizes); }, printed);
}

}  // namespace coil::parser_fuzz
