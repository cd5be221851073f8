// The progress line (support/progress.h): drawn on a terminal only, only after a second, with
// the latest note, and erased at the end; nothing when disabled or when stderr is not a
// terminal. stderr is pointed at a pseudo-terminal for the test and restored afterwards.
#include "support/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace coil {
namespace {

// Runs `body` with stderr on a new pseudo-terminal; returns what was written to it.
template <typename Body>
std::string on_terminal(Body body) {
  int master = -1, slave = -1;
  if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return "<no pty>";
  std::fflush(stderr);
  int saved = ::dup(STDERR_FILENO);
  ::dup2(slave, STDERR_FILENO);
  body();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(slave);
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(master);
  return out;
}

void long_compile(bool with_notes) {
  ProgressScope scope;
  if (with_notes) progress_note("autotuning matmul 1 of 2 (64x64x64)");
  std::this_thread::sleep_for(std::chrono::milliseconds(1800));  // drawn after 1 s
  if (with_notes) progress_note("compiled 1 of 2 translation units");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

TEST(Progress, ALongCompileDrawsOneUpdatingLineAndErasesIt) {
  set_progress_enabled(true);
  std::string out = on_terminal([] { long_compile(true); });
  set_progress_enabled(false);
  EXPECT_NE(out.find("\rcoil: 1."), std::string::npos) << out;  // the elapsed seconds, 1.x
  EXPECT_NE(out.find("autotuning matmul 1 of 2 (64x64x64)\033[K"), std::string::npos) << out;
  EXPECT_NE(out.find("compiled 1 of 2 translation units\033[K"), std::string::npos) << out;
  EXPECT_EQ(out.find('\n'), std::string::npos) << "one line, redrawn in place: " << out;
  ASSERT_GE(out.size(), 4u);
  EXPECT_EQ(out.substr(out.size() - 4), "\r\033[K") << "the line is erased at the end: " << out;
}

TEST(Progress, ShortCompilesDisabledLinesAndNonTerminalsStaySilent) {
  set_progress_enabled(true);
  std::string quick = on_terminal([] {
    ProgressScope scope;
    progress_note("lowering");
  });
  EXPECT_EQ(quick, "");
  set_progress_enabled(false);  // --quiet, and library use
  EXPECT_EQ(on_terminal([] { long_compile(true); }), "");
  // Not a terminal: the test's own stderr (a pipe or file under ctest) gets nothing either.
  set_progress_enabled(true);
  if (::isatty(STDERR_FILENO) == 0) {
    testing::internal::CaptureStderr();
    long_compile(true);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  }
  set_progress_enabled(false);
}

}  // namespace
}  // namespace coil
