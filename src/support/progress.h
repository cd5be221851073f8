// One updating status line on stderr while a long compile runs (issue 25): what the compile is
// doing and how far it is (matmul candidates timed, translation units and kernels compiled).
//
//   coil: 2.4 s  compiling 2 of 4 translation units (95 of 189 kernels)
//
// Shown only when enabled (the CLI enables it; --quiet, and library use, leave it off), stderr
// is a terminal, and the compile has taken more than a second; the line is erased when the
// compile ends, so that nothing is left in logs or piped output. Stages report with
// progress_note() whether or not a line is shown (it costs a mutex when nothing listens).
#pragma once

#include <string>

namespace coil {

/// Turns the line on or off for the process (default off).
void set_progress_enabled(bool enabled);

/// The span of one compile: while one is alive, progress_note() updates its line. Nested
/// scopes (a compile inside a compile) share the outer one's line.
class ProgressScope {
 public:
  ProgressScope();
  ~ProgressScope();
  ProgressScope(const ProgressScope&) = delete;
  ProgressScope& operator=(const ProgressScope&) = delete;

 private:
  bool owner_ = false;
};

/// What the compile is doing now ("timing matmul candidates: 3 of 12"); thread-safe.
void progress_note(std::string what);

}  // namespace coil
