// Runs trainer attempts as Slurm job-array tasks (docs/design.md §8): the runs of one loop iteration
// become one array (a batch script in RUNS_DIR/<sweep>/slurm/, submitted with
// `sbatch --parsable --hold --array=0-N%K`, recorded in the submission journal, then released),
// each task runs mxablate-train for its run directory on the shared filesystem, and squeue —
// polled every few seconds for all of the sweep's jobs at once, no accounting database needed —
// tells when tasks end and how (slurm_job_state.h).
//
// The orchestrator stays the single SQLite writer: the job ids live in attempts.executor_ref
// ("12_3"), the executor itself only writes files under the sweep's slurm/ directory.
//
// Lifecycle rules:
// - Ranks: a run of N ranks (parallel.data N) is one task with N × --gpus-per-run GPUs and N ×
//   the CPUs of --cpus-per-task (slurm_array_script.h); runs of different rank counts go into
//   different arrays.
// - Throttle: --max-parallel K is the array's %K. Retries go into new arrays, whose throttles
//   share the same K: a new array is only submitted while the live arrays leave part of K unused,
//   and it gets that part — so at most K of the sweep's tasks ever run at once.
// - Detach: stopping the orchestrator (Ctrl-C, SIGTERM, a lost terminal) leaves the jobs queued
//   and running; the next `mxablate run` re-attaches to them (recover()) instead of submitting
//   them again. Cancelling is explicit: `mxablate cancel` (slurm_cancel.h).
// - Orphans: a task of the journal that no open attempt claims (the orchestrator died between
//   sbatch and recording the attempt) is cancelled before anything new is submitted, so no run
//   ever trains twice at once.
// - Cancel: a `mxablate cancel` while we run is noticed through slurm/cancels.jsonl; from then on
//   the executor submits nothing and stops like the local executor (no detaching), so the
//   cancelled attempts are recorded as interrupted.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mxablate/orchestrator/executor.h"
#include "mxablate/orchestrator/signal_watcher.h"
#include "mxablate/orchestrator/slurm_array_script.h"
#include "mxablate/orchestrator/slurm_client.h"
#include "mxablate/orchestrator/slurm_sweep_files.h"

namespace mxablate::orchestrator {

struct SlurmExecutorOptions {
  std::string sweep;
  std::filesystem::path sweep_dir;  // absolute: RUNS_DIR/<sweep>
  SlurmSubmitOptions submit;
  std::chrono::milliseconds poll{std::chrono::seconds(5)};  // squeue at most this often
  // squeue failing without a break for this long ends the sweep (the jobs keep running).
  std::chrono::milliseconds unreachable_limit{std::chrono::minutes(10)};
  // Tasks per array; 0: the cluster's MaxArraySize − 1 (1000 if it cannot be read).
  size_t max_tasks_per_array = 0;
};

class SlurmExecutor : public Executor {
 public:
  SlurmExecutor(SlurmExecutorOptions options, std::unique_ptr<SlurmClient> client);
  ~SlurmExecutor() override;

  std::string name() const override { return "slurm"; }
  // Queued tasks need no free slot (the array throttle limits what runs): while the throttle
  // has room, up to one array's worth more may be submitted; nothing while orphans drain or
  // after a cancel.
  size_t capacity() const override;
  size_t running() const override { return tasks_.size(); }
  // Runs of different rank counts go into different arrays (one array, one resource request),
  // each of which needs its own part of the throttle's room.
  bool fits(const std::vector<int>& ranks) const override;
  Launched launch(const LaunchRequest& request) override;
  std::vector<LaunchResult> launch_batch(const std::vector<LaunchRequest>& requests) override;
  std::vector<AttemptExit> collect_exits() override;
  void request_stop(const std::string& run_id) override;
  void kill(const std::string& run_id) override;
  bool recover(const results::OpenAttempt& attempt, std::chrono::milliseconds grace) override;
  bool detaches_on_stop() const override { return !cancel_seen_; }
  bool queued(const std::string& run_id) const override;

  // Where warnings and lifecycle notes go (the progress display); default: nowhere.
  void set_notify(std::function<void(const std::string&)> notify) { notify_ = std::move(notify); }
  // A `mxablate cancel` of this sweep arrived while this executor ran.
  bool cancel_requested() const { return cancel_seen_; }
  // The task of a run this executor tracks, and what Slurm last said about it.
  std::optional<SlurmTaskStatus> status_of(const std::string& run_id) const;

 private:
  struct Tracked {
    std::string run_id;
    SlurmTaskStatus status;
    int missing_polls = 0;
    bool announced_start = false;
    std::chrono::steady_clock::time_point submitted;
  };

  std::vector<LaunchResult> submit_array(const std::vector<LaunchRequest>& requests);
  std::string submit_with_retries(const std::filesystem::path& script, const std::string& spec);
  void scan_for_orphans();
  bool check_cancels(bool reread);  // true when a cancel is seen for the first time
  void poll(std::vector<AttemptExit>& exits);
  void tolerate(const SlurmError& e);  // transient: warn, until unreachable_limit; else throw
  void answered();
  void send_stops();
  bool ours(const SlurmTaskStatus& s) const;  // of this sweep's job name
  AttemptExit make_exit(const std::string& run_id, const SlurmTaskRef& ref,
                        const SlurmTaskStatus* status, const std::string& why) const;
  std::vector<SlurmTaskStatus> recovery_snapshot(const std::string& job_id);
  size_t tasks_per_array() const;
  size_t throttle_room() const;  // of K, what live arrays leave unused (SIZE_MAX: no limit)
  void note(const std::string& line) const;

  SlurmExecutorOptions opt_;
  std::unique_ptr<SlurmClient> client_;
  SlurmSweepFiles files_;
  std::string job_name_;
  size_t max_tasks_per_array_ = 1000;

  std::map<std::string, Tracked> tasks_;        // by run_id
  std::map<std::string, int> array_throttle_;   // live arrays: job id → %K it was given (0: none)
  std::vector<AttemptExit> ready_exits_;        // found outside a poll (during recovery)
  std::set<SlurmTaskRef> draining_orphans_;     // cancelled, not yet gone
  std::set<std::string> to_stop_, to_kill_;     // tasks to scancel at the next collect_exits
  bool orphans_scanned_ = false;

  std::set<std::string> cancelled_jobs_;  // job ids named by any `mxablate cancel`
  uintmax_t cancels_size_ = 0;            // bytes of cancels.jsonl already read
  size_t cancel_records_ = 0;             // records of cancels.jsonl already seen
  bool cancel_seen_ = false;

  std::optional<std::vector<SlurmTaskStatus>> recovery_statuses_;
  std::set<std::string> recovery_jobs_;
  std::chrono::steady_clock::time_point last_poll_{};
  bool force_poll_ = true;
  std::optional<std::chrono::steady_clock::time_point> failing_since_;
  std::chrono::steady_clock::time_point last_failure_note_{};
  std::function<void(const std::string&)> notify_;
};

// Turns a `mxablate cancel` noticed by the executor into a stop request for the sweep loop
// (which then stops the cancelled attempts and records them as interrupted).
class CancelAwareWaker : public Waker {
 public:
  CancelAwareWaker(Waker& inner, const SlurmExecutor& executor) : inner_(inner), executor_(executor) {}
  void wait_for(std::chrono::milliseconds timeout) override { inner_.wait_for(timeout); }
  void wait_for_readable(std::chrono::milliseconds timeout, int fd) override {
    inner_.wait_for_readable(timeout, fd);
  }
  int stop_requests() const override {
    return inner_.stop_requests() + (executor_.cancel_requested() ? 1 : 0);
  }
  int first_stop_signal() const override { return inner_.first_stop_signal(); }

 private:
  Waker& inner_;
  const SlurmExecutor& executor_;
};

}  // namespace mxablate::orchestrator
