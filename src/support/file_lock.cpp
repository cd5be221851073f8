#include "support/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

namespace coil {

FileLock::FileLock(const std::filesystem::path& path, bool remove_when_done)
    : path_(path),
      fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)),
      remove_when_done_(remove_when_done) {
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  if (remove_when_done_) ::unlink(path_.c_str());  // (still held: no one else deletes it now)
  ::close(fd_);                                    // closing releases the lock
}

}  // namespace coil
