// Checkpoints off the critical path (docs/design.md §4, "Checkpoints and exact resume"): the
// training thread takes a checkpoint's snapshot (host copies, checkpoint.h) and hands the writing
// (serialize, write, fsync, rename, prune) to this writer's thread, then trains on. At most one
// write is in flight; what it published, or the error that stopped it, is collected on the
// training thread, which alone records events and turns an error into the run's failure, so a
// write error is never lost and the event log has one writer.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <optional>
#include <string>

#include "mxablate/trainer/rules/run_events.h"

namespace mxablate::trainer {

class CheckpointWriter {
 public:
  // A write that finished: the checkpoint's step and tokens, the directory it published ("" on a
  // rank that publishes none), and how long the write took.
  struct Written {
    Progress at;
    std::string path;
    double seconds = 0;
  };

  // `background`: write on a thread of its own; otherwise start() writes before it returns (the
  // synchronous path, kept for tests and comparison).
  explicit CheckpointWriter(bool background) : background_(background) {}
  // Waits for a write in flight: a checkpoint is never left half-written by an orderly exit. Its
  // error, if any, is dropped: the run is ending on another one.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Starts writing the checkpoint at `at`; `write` returns the published path. Any write before
  // must have been collected (collect(true)).
  void start(Progress at, std::function<std::string()> write);
  // The write in flight, once it has finished (nullopt while it runs, or when there is none);
  // `wait`: blocks until it has. A write that failed throws its exception here, once.
  std::optional<Written> collect(bool wait);
  // Seconds spent writing, over the writes collected so far.
  double write_seconds() const { return write_seconds_; }

 private:
  struct Pending {
    Progress at;
    std::future<std::string> result;
    std::shared_ptr<double> seconds;  // set by the write itself
  };
  bool background_;
  std::optional<Pending> pending_;
  double write_seconds_ = 0;
};

}  // namespace mxablate::trainer
