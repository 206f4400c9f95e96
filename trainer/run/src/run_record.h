// The run's record (docs/design.md §4, "Training"): its events (contract/event_log.h, rank 0's
// file; a writer of nothing on the other ranks), the MLPerf log, and where its time went (setup,
// training, evaluation, checkpoints; docs/design.md §9, "Busy slots"). The loop says what
// happened; the record decides how often a train event is written and what run_end holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxablate/trainer/rules/mllog.h"
#include "mxablate/trainer/numerics/mx_linear.h"
#include "mxablate/trainer/rules/run_events.h"
#include "run_setup.h"

namespace mxablate::trainer {

class RunRecord {
 public:
  using Clock = std::chrono::steady_clock;

  RunRecord(const RunSetup& setup, const std::string& run_dir);

  // Rank 0 opens RUN_DIR/events.jsonl; the other ranks get a record that writes nothing.
  void open(bool writes);
  // A progress line on stderr: the writing rank's only (the others would repeat it).
  void say(const std::string& line) const;
  bool is_open() const { return events_ != nullptr; }
  RunEvents& events() { return *events_; }
  MlLogger& mllog() { return mllog_; }
  const std::string& events_path() const { return events_path_; }

  // Where the time before the first step went: the process started at `process_start`; a
  // prestarted run then waited `standby_s` for its slot.
  void set_setup_timing(Clock::time_point process_start, double standby_s, bool prestarted);
  bool prestarted() const { return prestarted_; }
  // The first step is about to run, at `tokens` (more than 0 for a resumed run).
  void training_starts(int64_t tokens);

  void run_start(Progress p, int64_t attempt, bool resumed);
  // A train event when the cadence says (telemetry.train_every_steps, and step 1).
  void step_done(Progress p, double loss, double lr, double grad_norm);
  void quant_stats(Progress p, const std::vector<QuantSession::Record>& records);

  void add_eval_seconds(double s) { eval_s_ += s; }
  void add_checkpoint_seconds(double s) { checkpoint_s_ += s; }

  // run_end's fields from the run's timings; status, reason and the counters the caller adds.
  RunEvents::End end(int64_t tokens) const;

 private:
  const RunSetup& s_;
  std::string events_path_;
  std::unique_ptr<RunEvents> events_;
  bool writes_ = false;
  MlLogger mllog_;
  Clock::time_point process_start_ = Clock::now();
  double standby_s_ = 0;
  bool prestarted_ = false;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_train_event_ = Clock::now();
  int64_t tokens_at_last_train_event_ = 0;
  int64_t tokens_at_start_ = 0;
  double setup_s_ = 0, eval_s_ = 0, checkpoint_s_ = 0;
};

}  // namespace mxablate::trainer
