// COIL_LOGS: comma-separated channels printed to stderr, e.g. COIL_LOGS=ir,output_code.
// "all" enables every channel. Channels are declared once in COIL_LOG_CHANNELS.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace coil {

#define COIL_LOG_CHANNELS(X)                                                                 \
  X(graph, "the input graph after parsing and verification")                                 \
  X(ir, "loop IR after lowering (buffers, Pointwise/Reduction bodies)")                      \
  X(ir_passes, "the graph, loop IR or schedule after every pass, labeled with the pass")     \
  X(fusion, "every fusion made and every candidate refused, with why")                       \
  X(schedule, "the final kernels, their nodes, bytes moved, arena plan")                     \
  X(plan, "the CPU backend's plan of each kernel: nest kinds, vector loops, parallel loops") \
  X(output_code, "the generated source of the whole graph")                                  \
  X(cache, "code cache hits, misses, rebuilds")                                              \
  X(autotune, "candidates and timings of autotuned choices")                                 \
  X(perf, "time spent in each compile stage")                                                \
  X(guards, "size-generic models: each call's sizes, the variant it ran, each recompile and why")

enum class LogChannel {
#define COIL_LOG_ENUM(name, doc) name,
  COIL_LOG_CHANNELS(COIL_LOG_ENUM)
#undef COIL_LOG_ENUM
};

/// True when COIL_LOGS names the channel (read once per process; see set_log_channels).
bool log_enabled(LogChannel channel);

/// Replaces the enabled set, as if COIL_LOGS were `spec` (used by tests and the CLI).
void set_log_channels(std::string_view spec);

/// Writes one message to stderr, prefixed with "[coil:<channel>] ".
void log_write(LogChannel channel, std::string_view message);

/// While alive, every message of `channels` written on this thread is also appended to
/// text(channel), whether or not COIL_LOGS prints it (log_enabled is true for them meanwhile).
/// The debug directory (driver/debug_dir.h) records fusion decisions and plans with it.
/// Captures nest: the innermost one receives the messages.
class LogCapture {
 public:
  explicit LogCapture(std::initializer_list<LogChannel> channels);
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  const std::string& text(LogChannel channel) const;

 private:
  friend bool log_enabled(LogChannel channel);
  friend void log_write(LogChannel channel, std::string_view message);
  unsigned mask_ = 0;
  std::vector<std::string> texts_;
  LogCapture* outer_ = nullptr;
};

/// A warning is always printed (no channel needed).
void warn(std::string_view message);

}  // namespace coil

#define COIL_LOG(channel, ...)                                                  \
  do {                                                                          \
    if (::coil::log_enabled(::coil::LogChannel::channel))                       \
      ::coil::log_write(::coil::LogChannel::channel, fmt::format(__VA_ARGS__)); \
  } while (0)
