#include "fuzz/forked_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace coil::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop = 0;

struct Child {
  pid_t pid = -1;
  int fd = -1;
  size_t task = 0;
  std::string out;
  Clock::time_point start;
};

// The outcome travels as "class \x1f config \x1f message".
std::string encode(const Outcome& o) {
  constexpr size_t kMaxMessage = 12000;
  return fmt::format("{}\x1f{}\x1f{}", o.cls, o.config, o.message.substr(0, kMaxMessage));
}

Outcome decode(const std::string& s) {
  size_t a = s.find('\x1f'), b = s.find('\x1f', a + 1);
  if (a == std::string::npos || b == std::string::npos)
    return {"crash", "the child exited without a result"};
  return {s.substr(0, a), s.substr(b + 1), std::stoi(s.substr(a + 1, b - a - 1))};
}

[[noreturn]] void run_child(int fd, size_t task, int timeout_s,
                            const std::function<Outcome(size_t)>& fn) {
  std::signal(SIGALRM, SIG_DFL);
  alarm(static_cast<unsigned>(timeout_s));
  Outcome o;
  try {
    o = fn(task);
  } catch (const std::exception& e) {
    o = {"internal", std::string("uncaught exception: ") + e.what()};
  } catch (...) {
    o = {"internal", "uncaught non-standard exception"};
  }
  std::string data = encode(o);
  for (size_t done = 0; done < data.size();) {
    ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  // _exit: no static destructors or atexit handlers of the parent's state in the child.
  ::_exit(0);
}

Outcome finish(Child& c, int timeout_s) {
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(c.fd);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGALRM || sig == SIGKILL)
      return {"timeout", fmt::format("no result within {} s", timeout_s)};
    return {"crash", fmt::format("killed by signal {} ({})", sig, strsignal(sig))};
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return {"crash", fmt::format("the child exited with status {}", WEXITSTATUS(status))};
  return decode(c.out);
}

}  // namespace

void request_stop() {
  g_stop = 1;
}

bool stop_requested() {
  return g_stop != 0;
}

std::vector<Outcome> run_forked(size_t n, int jobs, int timeout_s,
                                const std::function<Outcome(size_t)>& task) {
  std::vector<Outcome> results(n, Outcome{"stopped", "", -1});
  std::vector<Child> running;
  size_t next = 0;
  while (next < n || !running.empty()) {
    if (g_stop) {
      for (Child& c : running) {
        ::kill(c.pid, SIGKILL);
        finish(c, timeout_s);
      }
      break;
    }
    while (next < n && static_cast<int>(running.size()) < std::max(jobs, 1)) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        results[next++] = {"crash", fmt::format("pipe: {}", std::strerror(errno))};
        continue;
      }
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        run_child(fds[1], next, timeout_s, task);
      }
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        results[next++] = {"crash", fmt::format("fork: {}", std::strerror(errno))};
        continue;
      }
      running.push_back(Child{pid, fds[0], next++, "", Clock::now()});
    }
    std::vector<pollfd> polls;
    for (const Child& c : running) polls.push_back(pollfd{c.fd, POLLIN, 0});
    ::poll(polls.data(), polls.size(), 1000);
    for (size_t i = running.size(); i-- > 0;) {
      Child& c = running[i];
      bool done = false;
      if (polls[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[8192];
        ssize_t r = ::read(c.fd, buf, sizeof buf);
        if (r > 0) c.out.append(buf, static_cast<size_t>(r));
        done = r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN);
      }
      // The child's alarm ends it; this is the backstop for one that blocks SIGALRM.
      if (!done && Clock::now() - c.start > std::chrono::seconds(timeout_s + 30)) {
        ::kill(c.pid, SIGKILL);
        done = true;
      }
      if (done) {
        results[c.task] = finish(c, timeout_s);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
  return results;
}

}  // namespace coil::fuzz
