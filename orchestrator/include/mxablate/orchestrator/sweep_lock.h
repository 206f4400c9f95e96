// One orchestrator per sweep: two processes driving the same run directories would launch the
// same run twice. An flock on RUNS_DIR/<sweep>/.mxablate.lock, released by the kernel when the
// holder dies however it dies (so a SIGKILLed orchestrator never leaves a stale lock).
#pragma once

#include <filesystem>
#include <stdexcept>

namespace mxablate::orchestrator {

struct SweepLocked : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SweepLock {
 public:
  // Creates the directory if needed. Throws SweepLocked when another process holds the lock,
  // std::runtime_error when the directory cannot be created or written.
  explicit SweepLock(const std::filesystem::path& sweep_dir);
  ~SweepLock();
  SweepLock(const SweepLock&) = delete;
  SweepLock& operator=(const SweepLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace mxablate::orchestrator
