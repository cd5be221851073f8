#include "support/log.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "support/check.h"
#include "support/env.h"
#include "support/suggest.h"

namespace coil {
namespace {

constexpr std::string_view kChannelNames[] = {
#define COIL_LOG_NAME(name, doc) #name,
    COIL_LOG_CHANNELS(COIL_LOG_NAME)
#undef COIL_LOG_NAME
};

// Channels that only coil's Python code prints (python/coil_runtime/logs.py): the Triton
// launcher (launch) and the torch frontend's eager fallbacks (fallback). One COIL_LOGS serves
// both sides, so the C++ side accepts these without a warning (and prints nothing for them).
constexpr std::string_view kPythonChannelNames[] = {"launch", "fallback"};

struct LogState {
  unsigned mask = 0;
  std::mutex write_mutex;
};

unsigned parse_channels(std::string_view spec) {
  unsigned mask = 0;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    if (item == "all") return ~0u;
    bool found = std::find(std::begin(kPythonChannelNames), std::end(kPythonChannelNames), item) !=
                 std::end(kPythonChannelNames);
    for (size_t i = 0; i < std::size(kChannelNames); ++i) {
      if (kChannelNames[i] == item) {
        mask |= 1u << i;
        found = true;
      }
    }
    if (!found) {
      // Not through warn(): this runs while state() is being initialized.
      std::vector<std::string> names(std::begin(kChannelNames), std::end(kChannelNames));
      names.insert(names.end(), std::begin(kPythonChannelNames), std::end(kPythonChannelNames));
      names.emplace_back("all");
      fmt::print(stderr, "coil: warning: unknown COIL_LOGS channel '{}'{}; the channels: {}\n",
                 item, did_you_mean(item, names), fmt::join(names, ", "));
    }
  }
  return mask;
}

LogState& state() {
  static LogState s;
  static bool initialized = [] {
    s.mask = parse_channels(env(EnvVar::logs));
    return true;
  }();
  (void)initialized;
  return s;
}

thread_local LogCapture* t_capture = nullptr;

}  // namespace

LogCapture::LogCapture(std::initializer_list<LogChannel> channels)
    : texts_(std::size(kChannelNames)), outer_(t_capture) {
  for (LogChannel c : channels) mask_ |= 1u << static_cast<unsigned>(c);
  t_capture = this;
}

LogCapture::~LogCapture() {
  t_capture = outer_;
}

const std::string& LogCapture::text(LogChannel channel) const {
  return texts_[static_cast<size_t>(channel)];
}

bool log_enabled(LogChannel channel) {
  unsigned bit = 1u << static_cast<unsigned>(channel);
  return (state().mask & bit) || (t_capture && (t_capture->mask_ & bit));
}

void set_log_channels(std::string_view spec) {
  state().mask = parse_channels(spec);
}

void log_write(LogChannel channel, std::string_view message) {
  unsigned bit = 1u << static_cast<unsigned>(channel);
  if (t_capture && (t_capture->mask_ & bit)) {
    std::string& t = t_capture->texts_[static_cast<size_t>(channel)];
    t += message;
    if (message.empty() || message.back() != '\n') t += '\n';
  }
  if (!(state().mask & bit)) return;
  std::lock_guard<std::mutex> lock(state().write_mutex);
  std::string_view name = kChannelNames[static_cast<size_t>(channel)];
  fmt::print(stderr, "[coil:{}] {}", name, message);
  if (message.empty() || message.back() != '\n') std::fputc('\n', stderr);
}

void warn(std::string_view message) {
  std::lock_guard<std::mutex> lock(state().write_mutex);
  fmt::print(stderr, "coil: warning: {}\n", message);
}

}  // namespace coil
