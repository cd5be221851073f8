#include "fuzz/failure_store.h"

#include <fstream>
#include <sstream>

#include "coil/graph.h"
#include "support/check.h"

namespace coil::fuzz {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// The message as header comments: its first lines, each cut to a readable width.
std::vector<std::string> message_lines(const std::string& message) {
  constexpr size_t kLines = 30, kWidth = 300;
  std::vector<std::string> out;
  std::istringstream in(message);
  std::string line;
  while (std::getline(in, line) && out.size() < kLines)
    out.push_back((out.empty() ? "message: " : "  ") + line.substr(0, kWidth));
  return out;
}

}  // namespace

std::pair<std::filesystem::path, bool> save_failure(const std::filesystem::path& dir,
                                                    const FuzzCase& c, const Outcome& o,
                                                    const std::string& origin) {
  std::filesystem::create_directories(dir);
  std::string body = case_text(c);
  uint64_t h = fnv1a(o.cls + "\n" + failure_key(o) + "\n" + body);
  std::filesystem::path path = dir / fmt::format("{}-{:016x}.coil", o.cls, h);
  if (std::filesystem::exists(path)) return {path, false};
  std::vector<std::string> header{"class: " + o.cls, "key: " + failure_key(o)};
  for (std::string& line : message_lines(o.message)) header.push_back(std::move(line));
  header.push_back("found by: " + origin);
  header.push_back(fmt::format("reproduce: coil_fuzz --graphs-dir {}", path.string()));
  std::ofstream(path) << case_text(c, header);
  return {path, true};
}

void log_failure(const std::filesystem::path& dir, const std::string& origin, const Outcome& o,
                 const std::string& file) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "failures.tsv", std::ios::app)
      << origin << '\t' << o.cls << '\t' << failure_key(o) << '\t' << file << '\n';
}

std::map<std::string, std::string> load_known_failures(const std::filesystem::path& path) {
  std::ifstream in(path);
  COIL_USER_CHECK(in.good(), "cannot read known failures {}", path.string());
  std::map<std::string, std::string> known;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string key, cls;
    if (!(fields >> key)) continue;
    COIL_USER_CHECK(static_cast<bool>(fields >> cls), "{}: '{}' has no class", path.string(), key);
    known[key] = cls;
  }
  return known;
}

}  // namespace coil::fuzz
