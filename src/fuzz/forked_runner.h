// Runs fuzz tasks in forked child processes, a few at a time: a generated kernel that crashes
// (SIGSEGV) or hangs then costs one result, reported as "crash" or "timeout", instead of the
// fuzzer. The parent never compiles or runs a kernel itself, so it never starts an OpenMP thread
// pool, which a forked child could not use.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "fuzz/evaluate.h"

namespace coil::fuzz {

/// Runs task(0) ... task(n - 1), each in its own child, at most `jobs` at once; a child still
/// running after `timeout_s` seconds is killed. Returns the outcomes in task order; after
/// request_stop(), running children are killed and the unfinished tasks get class "stopped".
std::vector<Outcome> run_forked(size_t n, int jobs, int timeout_s,
                                const std::function<Outcome(size_t)>& task);

/// For a SIGINT/SIGTERM handler: stop soon (async-signal-safe).
void request_stop();
bool stop_requested();

}  // namespace coil::fuzz
