// A pool of std::threads for a batch of independent jobs: the translation units of a module
// compiled at once (runtime/code_cache.h). Each job is started once, in index order, on the next
// free thread; the calling thread works as one of them.
#pragma once

#include <cstddef>
#include <functional>

namespace coil {

/// Runs job(0) ... job(n - 1) on min(threads, n) threads and returns when every started job
/// has finished. After a job throws, the jobs not yet started are skipped, and the exception of
/// the failed job with the lowest index is rethrown (so that a given failure reads the same
/// whatever the timing). `threads` < 1 counts as 1.
void run_jobs(size_t n, int threads, const std::function<void(size_t)>& job);

/// The cores this process may run on (its CPU affinity mask, which taskset and cgroup cpusets
/// narrow), else std::thread::hardware_concurrency(); at least 1.
int available_cores();

}  // namespace coil
