#include "mxablate/orchestrator/sweep_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <string>

namespace mxablate::orchestrator {

namespace fs = std::filesystem;

SweepLock::SweepLock(const fs::path& sweep_dir) {
  std::error_code ec;
  fs::create_directories(sweep_dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot create the runs directory {}: {}",
                                         sweep_dir.string(), ec.message()));
  const fs::path path = sweep_dir / ".mxablate.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error(fmt::format("cannot write in the runs directory {}: {}",
                                         sweep_dir.string(), std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    [[maybe_unused]] const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw SweepLocked(fmt::format("another mxablate (pid {}) is running this sweep ({} is "
                                  "locked); wait for it or stop it first",
                                  std::string(buf).empty() ? "?" : std::string(buf),
                                  path.string()));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // Only informational; the lock itself is held.
  }
}

SweepLock::~SweepLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace mxablate::orchestrator
