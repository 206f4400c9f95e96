// One training run, end to end (docs/design.md §4): reads RUN_DIR/config.json, trains, and writes
// RUN_DIR/events.jsonl (contract/event_log.h), checkpoints under RUN_DIR/checkpoints, and
// optional :::MLLOG lines on stdout. This is `mxablate-train`'s whole job; main() only parses
// arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/trainer/run/fault_plan.h"

namespace mxablate::trainer {

namespace exit_code {
inline constexpr int kSuccess = 0;      // run_end written: converged or budget_exhausted
inline constexpr int kInternal = 1;     // an unexpected failure (run_end "failed" when possible)
inline constexpr int kBadConfig = 2;    // bad config, data or device (data: also mid-run, with
                                        // run_end "failed" naming the shard, position and id)
inline constexpr int kDiverged = 3;     // fatal divergence (run_end "diverged")
inline constexpr int kInterrupted = 4;  // SIGTERM/SIGINT: checkpointed, run_end "interrupted"
inline constexpr int kOutOfMemory = 5;  // the GPU ran out of memory (run_end "failed", one line
                                        // with the prediction and the setting to change): final,
                                        // a retry would run out again (docs/design.md §4)
}  // namespace exit_code

struct TrainOptions {
  std::vector<std::string> arguments;  // the command line (without the program): what ranks rerun
  std::string run_dir;
  std::string config_path;  // empty: RUN_DIR/config.json
  bool resume = false;      // continue from the newest intact checkpoint (or restart the lost timeline)
  bool verify_data = false;  // checksums and every token id of the data before training
  int64_t always_verify_data_bytes = int64_t{64} << 20;  // smaller data is always verified
  // A prestarted run (contract/standby.h, from MXABLATE_STANDBY_FD): everything up to the first
  // step is done, then the trainer waits on this descriptor for the orchestrator's go before it
  // writes anything; closed instead, it exits 4 having written nothing.
  std::optional<int> standby_fd;
  // Checkpoints written on the training thread, as before they had a writer thread of their own
  // (docs/design.md §4, "Checkpoints and exact resume"): for tests that compare the two.
  bool synchronous_checkpoints = false;
  // A Kineto trace of optimizer steps [profile_first_step, profile_last_step] written to
  // profile_trace by rank 0 (0: no profiling; step_profiler.h).
  int64_t profile_first_step = 0;
  int64_t profile_last_step = 0;
  std::string profile_trace;
};

// Runs and returns the exit code; errors reach stderr as one line. `faults`: a test's
// (fault_plan.h); empty for every real run.
int run_trainer(const TrainOptions& options, const FaultPlan& faults = {});

// Where config "data.dataset" points: "default" is $MXABLATE_DEFAULT_DATASET or the repository's
// data/default (built by scripts/build-corpus.sh); anything else is a prepared data directory.
std::string resolve_dataset_dir(const std::string& dataset);

}  // namespace mxablate::trainer
