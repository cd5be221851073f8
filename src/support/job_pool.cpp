#include "support/job_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace coil {

void run_jobs(size_t n, int threads, const std::function<void(size_t)>& job) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&] {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= n || failed.load()) return;
      try {
        job(i);
      } catch (...) {
        errors[i] = std::current_exception();
        failed.store(true);
      }
    }
  };
  size_t extra = std::min(n, static_cast<size_t>(std::max(threads, 1))) - std::min<size_t>(n, 1);
  std::vector<std::thread> pool;
  pool.reserve(extra);
  for (size_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace coil
