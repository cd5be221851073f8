// Runs one test of this test binary again in a fresh process, for what must be measured apart
// from the test runner (peak memory: getrusage's maxrss covers the whole process). A fresh
// process (posix_spawn of /proc/self/exe), not a fork: a fork of a process whose OpenMP threads
// exist can hang.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace coil::testing {

/// Runs the test `test` ("Suite.Name") in a child process with the environment variable
/// `result_var` naming a file for its figures (the child sees the variable set and writes the
/// file; the parent sees it unset). Returns the file's text; a child that fails or writes
/// nothing fails the calling test (and returns "").
inline std::string run_test_in_child(const std::string& test, const std::string& result_var) {
  const char* dir = std::getenv("COIL_CACHE_DIR");
  const std::string result_path = fmt::format(
      "{}/{}-{}.txt", dir ? dir : std::filesystem::temp_directory_path().string(), test, getpid());
  const std::string env_var = result_var + "=" + result_path;
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(env_var.c_str()));
  env.push_back(nullptr);
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=" + test;
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, env.data()) != 0) {
    ADD_FAILURE() << "could not start the child for " << test;
    return "";
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "the child running " << test << " failed";
    return "";
  }
  std::ifstream in(result_path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(result_path.c_str());
  if (text.str().empty()) ADD_FAILURE() << "the child running " << test << " wrote nothing";
  return text.str();
}

}  // namespace coil::testing
