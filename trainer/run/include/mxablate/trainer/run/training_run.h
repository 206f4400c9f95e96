// One rank of one training run, in this process (docs/design.md §4, "The step engine"): built
// from a run config (model, data, step engine; and the process group when the run has several
// ranks), then run or resumed in options.run_dir. `mxablate-train` is this plus its process's
// concerns (the launcher of a data-parallel run, the standby wait, exit codes); tests drive it in
// process, several ranks on threads of one process where they need to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/run/fault_plan.h"
#include "mxablate/trainer/parallel/ranks.h"
#include "mxablate/trainer/run/trainer.h"

namespace mxablate::trainer {

struct RunSetup;

class TrainingRun {
 public:
  // Builds everything the first step needs; throws contract::ConfigError for a config, data or
  // device that cannot run (nothing is written then). `options` must outlive the run.
  // `faults`: a test's (fault_plan.h); empty for every real run.
  TrainingRun(const contract::RunConfig& config, const TrainOptions& options, const RankInfo& rank = {},
              const FaultPlan& faults = {});
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Where the time before the first step went (docs/design.md §9, "Busy slots"): the process
  // started at `process_start`; a prestarted run then waited `standby_s` for its slot.
  void set_setup_timing(std::chrono::steady_clock::time_point process_start, double standby_s, bool prestarted);
  // Trains (or resumes) to the run's end and returns the exit code mxablate-train gives it
  // (exit_code); throws on the failures run_trainer turns into codes.
  int run();
  // After an exception from run(): records the failure (run_end "failed") if the log is open.
  void record_failure(const std::string& why, int code);
  // The vocabulary of the run's data (the model's embedding rows).
  int64_t vocab_size() const;
  // The config as it runs, `auto` recompute resolved: what its memory plan (and an
  // out-of-memory line's prediction) is of.
  const contract::RunConfig& executed_config() const;

 private:
  class Loop;
  std::unique_ptr<RunSetup> setup_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace mxablate::trainer
