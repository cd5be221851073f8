// Where the fuzzer's findings go: shrunk failing cases saved as .coil files (deduplicated by a
// signature of class, key and shrunk text), a failures.tsv log of every failing graph, and the
// known-failures list that the CI test checks its results against.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "fuzz/evaluate.h"
#include "fuzz/fuzz_case.h"

namespace coil::fuzz {

/// Saves a failing case as DIR/<class>-<signature hash>.coil, with a header naming the class,
/// the message and where it came from. Returns the path and whether the file is new (an equal
/// signature was saved before, by this run or an earlier one, when not).
std::pair<std::filesystem::path, bool> save_failure(const std::filesystem::path& dir,
                                                    const FuzzCase& c, const Outcome& o,
                                                    const std::string& origin);

/// Appends "origin \t class \t key \t file" to DIR/failures.tsv.
void log_failure(const std::filesystem::path& dir, const std::string& origin, const Outcome& o,
                 const std::string& file);

/// tests/fuzz/known_failures.txt: "KEY CLASS REASON..." per line (KEY: a graph index of the run,
/// or the file name of a --graphs-dir case); '#' starts a comment. Maps KEY to CLASS.
std::map<std::string, std::string> load_known_failures(const std::filesystem::path& path);

}  // namespace coil::fuzz
