// "Did you mean ...?" for misspelled names: CLI commands and options, COIL_* environment
// variables, log channels.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace coil {

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, or "" when none is close enough to be a likely typo (at
/// most one edit per three characters of `word`, and at least one allowed).
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

/// " (did you mean 'X'?)" for nearest(word, candidates), or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace coil
