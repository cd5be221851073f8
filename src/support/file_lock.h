// An exclusive advisory lock on a file, held for the life of the object, so that processes
// about to do the same expensive work (compile one module, precompile one header, time one
// matmul shape) do it once: the others wait, then find the result. flock: the kernel releases it
// when its process dies, even by kill -9, so a killed holder never blocks the others. Where the
// lock file cannot be opened (a read-only directory) nothing is locked and each process does
// the work itself, as it would without the lock; callers install their results atomically
// either way, so the lock saves work and is never needed for correctness.
#pragma once

#include <filesystem>

namespace coil {

class FileLock {
 public:
  /// Locks `path` (created if missing), waiting while another process holds it. With
  /// `remove_when_done`, the holder deletes the file as it lets go, so that a directory of
  /// results does not keep one lock file per result (a process that waited on the deleted
  /// file still gets the lock; at worst a newcomer locks a new file and repeats the work,
  /// which callers must allow anyway).
  explicit FileLock(const std::filesystem::path& path, bool remove_when_done = false);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool remove_when_done_ = false;
};

}  // namespace coil
