// The attribute declarations of the op registry are exactly what the code reads: every sample
// of every op (op_samples.h) runs through its type rule, its reference kernel, and its
// decomposition and lowering while an AttrReadLog records the attributes asked for; each read
// must be declared (with the same default), and each declared attribute must be read.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "error/op_samples.h"
#include "graph/attr_check.h"
#include "graph/decompositions.h"
#include "graph/interpreter.h"
#include "graph/text_format.h"
#include "lower/lowering.h"
#include "support/check_graph.h"
#include "support/error_of.h"

namespace coil {
namespace {

// Whether the default a reader assumed is the declared one (numbers compare by value: an
// integer default read as a float is the same default).
bool same_default(const AttrValue& read, const AttrValue& declared) {
  auto number = [](const AttrValue& v) -> std::optional<double> {
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  };
  if (number(read) && number(declared)) return *number(read) == *number(declared);
  return read == declared;
}

TEST(AttrDecl, CodeReadsExactlyTheDeclaredAttributes) {
  std::map<std::string, std::set<std::string>> read_by_op;
  std::set<std::string> problems;  // each once, however many reads show it
  for (const OpDef& op : all_ops()) {
    for (const std::string& sample : testing::op_samples(op)) {
      AttrReadLog log;
      try {
        Graph g = parse_graph(testing::sample_graph(sample), "<sample>");
        interpret(g, testing::random_inputs(g));
        lower_graph(decompose_and_bind(g, {}));
      } catch (const Error& e) {
        problems.insert(fmt::format("sample {}: {}", sample, e.what()));
        continue;
      }
      for (const AttrRead& r : log.reads()) {
        read_by_op[r.op].insert(r.name);
        const OpDef* reader = find_op(r.op);
        const AttrSpec* spec = reader ? find_attr_spec(*reader, r.name) : nullptr;
        if (!spec) {
          problems.insert(
              fmt::format("{} reads attribute '{}', which it does not declare", r.op, r.name));
          continue;
        }
        if (!r.dflt) continue;
        // An optional attribute's reader may use a sentinel for "absent" (slice's end).
        if (spec->use == AttrUse::Required)
          problems.insert(
              fmt::format("{} reads required attribute '{}' with a default", r.op, r.name));
        if (spec->use == AttrUse::Default && !same_default(*r.dflt, attr_default(*spec)))
          problems.insert(fmt::format("{} reads '{}' with default {}, but declares {}", r.op,
                                      r.name, attr_to_string(*r.dflt), spec->dflt));
      }
    }
  }
  for (const OpDef& op : all_ops()) {
    if (op.name == "input" || op.name == "constant") continue;
    if (testing::op_samples(op).empty())
      problems.insert(fmt::format("{} has no sample in op_samples.h", op.name));
    for (const AttrSpec& s : op.attrs)
      if (!read_by_op[std::string(op.name)].count(std::string(s.name)))
        problems.insert(
            fmt::format("{} declares attribute '{}', but no sample reads it", op.name, s.name));
  }
  for (const std::string& p : problems) ADD_FAILURE() << p;
}

// The declarations are well formed: unique names, a one-line doc each, a default exactly for
// AttrUse::Default, and each default of its kind and within its allowed values.
TEST(AttrDecl, DeclarationsAreWellFormed) {
  for (const OpDef& op : all_ops()) {
    std::set<std::string_view> names;
    for (const AttrSpec& s : op.attrs) {
      SCOPED_TRACE(fmt::format("{}.{}", op.name, s.name));
      EXPECT_TRUE(names.insert(s.name).second) << "declared twice";
      EXPECT_TRUE(is_identifier(s.name));
      EXPECT_FALSE(s.doc.empty());
      EXPECT_EQ(s.doc.find('\n'), std::string_view::npos);
      EXPECT_EQ(s.use == AttrUse::Default, !s.dflt.empty());
      EXPECT_TRUE(s.choices.empty() || s.kind == AttrKind::String);
      EXPECT_TRUE(!s.at_least || (s.kind != AttrKind::String && s.kind != AttrKind::Bool &&
                                  s.kind != AttrKind::DType));
      if (s.use == AttrUse::Default) {
        EXPECT_EQ(
            testing::error_of([&] { check_attr(op, std::string(s.name), attr_default(s), "n"); }),
            "");
      }
    }
  }
}

}  // namespace
}  // namespace coil
