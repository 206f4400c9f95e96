// The run's checkpoints (docs/design.md §4, "Checkpoints and exact resume"): restoring the newest
// intact one, writing one when the cadence (checkpoint.every_steps) or a stop asks, beside
// training (checkpoint_writer.h, at most one in flight), and what is left in flight when the run
// ends. Every rank takes part (a sharded run's ranks each write their optimizer shard); rank 0
// writes the rest and records it. The test-only faults of a write (fault_plan.h) act here.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxablate/trainer/checkpoint/checkpoint_writer.h"
#include "evaluation.h"
#include "mxablate/trainer/checkpoint/host_buffers.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"
#include "mxablate/trainer/run/fault_plan.h"
#include "mxablate/trainer/rules/run_events.h"
#include "rank_group.h"
#include "run_record.h"
#include "run_setup.h"

namespace mxablate::trainer {

class RunCheckpoints {
 public:
  RunCheckpoints(RunSetup& setup, const RankGroup& group, RunRecord& record, Evaluation& evaluation,
                 TrainerState& state, const TrainOptions& options, const FaultPlan& faults);

  // Rank 0, resuming: loads the newest intact checkpoint (true) or, without one, restarts from
  // scratch (false); either way a resume event tells readers which earlier events belong to a
  // lost timeline. Each checkpoint that fails verification is set aside and recorded
  // (checkpoint_rejected): a damaged newest checkpoint costs the steps since the one before it.
  bool restore(const LogSummary& history);
  const std::string& restored_from() const { return restored_from_; }
  // The other ranks: the checkpoint rank 0 verified; only what this rank reads is checked.
  void load_verified(const std::string& path);

  // After a step: the write in flight collected if it has finished, and a new one started when
  // the cadence says. Whether one was started.
  bool after_step();
  // A checkpoint now; `wait`: published before this returns.
  void write(bool wait);
  // Takes the result of the write in flight once it has finished (`wait`: waits for it): rank 0
  // records its checkpoint event; a write that failed throws its error here.
  void collect(bool wait);
  // The write still in flight when a run ended for good: finished before the process exits,
  // without an event (run_end is the attempt's last); its failure is a warning.
  void finish_in_background();
  double write_seconds() const { return writer_.write_seconds(); }

 private:
  CheckpointExpectation expectation() const;
  CheckpointWriteProbe write_probe(int64_t step) const;
  Progress progress() const { return {state_.step, state_.tokens}; }

  RunSetup& s_;
  const RankGroup& group_;
  RunRecord& record_;
  Evaluation& evaluation_;
  TrainerState& state_;
  const TrainOptions& options_;
  FaultPlan faults_;
  std::string restored_from_;  // the checkpoint rank 0 resumed from
  HostBuffers host_;           // snapshots' host copies, kept between checkpoints
  CheckpointWriter writer_;    // last: its destructor waits for a write in flight
};

}  // namespace mxablate::trainer
