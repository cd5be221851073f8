#include "support/suggest.h"

#include <algorithm>

#include <fmt/format.h>

namespace coil {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent swaps, the commonest typo ("COIL_LGOS").
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string n = nearest(word, candidates);
  return n.empty() ? "" : fmt::format(" (did you mean '{}'?)", n);
}

}  // namespace coil
