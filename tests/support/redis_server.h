// Test helper for the remote cache (runtime/remote_cache.h): a private redis-server on a free
// loopback port, started by the test itself (Debian's redis-server, installed by
// scripts/setup.sh), with no persistence, stopped (SIGKILL: as abruptly as a crash) when the
// object goes or stop() is called.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace coil::testing {

class RedisServer {
 public:
  RedisServer() {
    port_ = free_port();
    pid_ = ::fork();
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_WRONLY);  // its start-up banner is not the test's output
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::string port = std::to_string(port_);
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--loglevel", "warning", nullptr);
      ::_exit(127);
    }
    // Ready when it accepts a connection (a few ms; 10 s is a broken install).
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error(
            "redis-server did not start (is it installed? scripts/setup.sh installs it)");
      }
      if (accepts()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error("redis-server did not accept connections within 10 s");
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return fmt::format("redis://127.0.0.1:{}", port_); }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  bool accepts() const {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }

  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace coil::testing
