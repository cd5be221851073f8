#include "support/env.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/log.h"
#include "support/suggest.h"

extern char** environ;

namespace coil {
namespace {

constexpr EnvVarInfo kEnvVars[] = {
#define COIL_ENV_INFO(id, name, scope, doc) {EnvVar::id, name, EnvScope::scope, doc},
    COIL_ENV_VARS(COIL_ENV_INFO)
#undef COIL_ENV_INFO
};

}  // namespace

std::span<const EnvVarInfo> known_env_vars() {
  return kEnvVars;
}

std::string_view env_name(EnvVar v) {
  return kEnvVars[static_cast<size_t>(v)].name;
}

std::string env(EnvVar v) {
  const char* value = std::getenv(env_name(v).data());
  return value ? value : "";
}

std::string unknown_env_vars_message(const std::vector<std::string>& set_names) {
  std::vector<std::string> known, users_ones;
  for (const EnvVarInfo& e : kEnvVars) {
    known.emplace_back(e.name);
    if (e.scope != EnvScope::scripts) users_ones.emplace_back(e.name);
  }
  std::vector<std::string> unknown;
  for (const std::string& name : set_names) {
    if (name.rfind("COIL_", 0) != 0) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    unknown.push_back(name + did_you_mean(name, known));
  }
  if (unknown.empty()) return "";
  return fmt::format(
      "unknown environment variable{} {}, ignored; coil reads {} (README.md lists them with the "
      "scripts' own)",
      unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", "), fmt::join(users_ones, ", "));
}

void warn_unknown_env_vars() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    for (char** e = environ; e && *e; ++e) {
      std::string_view entry(*e);
      names.emplace_back(entry.substr(0, entry.find('=')));
    }
    std::string message = unknown_env_vars_message(names);
    if (!message.empty()) warn(message);
  });
}

}  // namespace coil
