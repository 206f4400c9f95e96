// Wakes the sweep loop when a watched event log is written (inotify), so that a run_end is seen
// within moments instead of at the next poll (docs/design.md §9, "Busy slots": a slot passes to
// its standby at the finishing run's run_end). Only the logs of runs a standby waits behind are
// watched, so the loop wakes for no other run's events. Where inotify is not available (no
// more watches, a filesystem without it) nothing is watched and the loop's poll interval holds.
#pragma once

#include <filesystem>
#include <map>
#include <string>

namespace mxablate::orchestrator {

class LogWatch {
 public:
  LogWatch();
  ~LogWatch();
  LogWatch(const LogWatch&) = delete;
  LogWatch& operator=(const LogWatch&) = delete;

  // Watches `log` for `run_id` (idempotent; a log not yet there is tried again on the next
  // call). Returns whether it is watched.
  bool watch(const std::string& run_id, const std::filesystem::path& log);
  void unwatch(const std::string& run_id);
  // Readable when a watched log was written since the last drain(); -1 without inotify.
  int fd() const { return fd_; }
  void drain();

 private:
  int fd_ = -1;
  std::map<std::string, int> watches_;  // run id → inotify watch descriptor
};

}  // namespace mxablate::orchestrator
