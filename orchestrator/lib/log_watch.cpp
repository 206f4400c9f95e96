#include "mxablate/orchestrator/log_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

namespace mxablate::orchestrator {

LogWatch::LogWatch() : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}

LogWatch::~LogWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool LogWatch::watch(const std::string& run_id, const std::filesystem::path& log) {
  if (fd_ < 0) return false;
  if (watches_.count(run_id)) return true;
  const int wd = ::inotify_add_watch(fd_, log.c_str(), IN_MODIFY | IN_CLOSE_WRITE);
  if (wd < 0) return false;
  watches_[run_id] = wd;
  return true;
}

void LogWatch::unwatch(const std::string& run_id) {
  const auto it = watches_.find(run_id);
  if (it == watches_.end()) return;
  // Two runs never share a log, so no other run's watch goes with it.
  ::inotify_rm_watch(fd_, it->second);
  watches_.erase(it);
}

void LogWatch::drain() {
  if (fd_ < 0) return;
  alignas(inotify_event) char buf[4096];
  while (::read(fd_, buf, sizeof buf) > 0) {
  }
}

}  // namespace mxablate::orchestrator
