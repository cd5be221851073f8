#include "support/progress.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace coil {
namespace {

using clock = std::chrono::steady_clock;

// The line is drawn this long after a compile starts (shorter compiles print nothing), then
// redrawn at this interval, so that the elapsed time moves while one g++ runs.
constexpr auto kShowAfter = std::chrono::milliseconds(1000);
constexpr auto kRedrawEvery = std::chrono::milliseconds(250);

std::atomic<bool> g_enabled{false};

struct Line {
  std::mutex mu;
  std::condition_variable wake;
  bool active = false;  // a scope is alive
  bool stop = false;
  bool shown = false;  // something was drawn and must be erased
  std::string what = "compiling";
  clock::time_point start;
  std::thread ticker;
};

Line& line() {
  static Line l;
  return l;
}

void draw(Line& l) {
  double s = std::chrono::duration<double>(clock::now() - l.start).count();
  // \r back to the start of the line, the text, then erase what a longer line left behind.
  std::fprintf(stderr, "\rcoil: %.1f s  %s\033[K", s, l.what.c_str());
  std::fflush(stderr);
  l.shown = true;
}

void tick() {
  Line& l = line();
  std::unique_lock<std::mutex> lock(l.mu);
  if (l.wake.wait_until(lock, l.start + kShowAfter, [&] { return l.stop; })) return;
  while (!l.stop) {
    draw(l);
    l.wake.wait_for(lock, kRedrawEvery, [&] { return l.stop; });
  }
}

}  // namespace

void set_progress_enabled(bool enabled) {
  g_enabled = enabled;
}

ProgressScope::ProgressScope() {
  if (!g_enabled || ::isatty(STDERR_FILENO) != 1) return;
  Line& l = line();
  std::lock_guard<std::mutex> lock(l.mu);
  if (l.active) return;
  l.active = true;
  l.stop = false;
  l.shown = false;
  l.what = "compiling";
  l.start = clock::now();
  owner_ = true;
  l.ticker = std::thread(tick);
}

ProgressScope::~ProgressScope() {
  if (!owner_) return;
  Line& l = line();
  {
    std::lock_guard<std::mutex> lock(l.mu);
    l.stop = true;
  }
  l.wake.notify_all();
  l.ticker.join();
  std::lock_guard<std::mutex> lock(l.mu);
  if (l.shown) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  l.active = false;
}

void progress_note(std::string what) {
  Line& l = line();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!l.active) return;
  l.what = std::move(what);
  if (l.shown) draw(l);
}

}  // namespace coil
