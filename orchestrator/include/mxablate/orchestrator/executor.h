// Where runs execute. The sweep loop (sweep_runner.h) decides *what* runs, retries and when to
// stop; an Executor only starts trainer processes somewhere, reports how they ended and signals
// them. The local executor runs them as child processes in slots (CPU or GPU); a Slurm executor
// implements the same interface with job arrays, squeue and scancel.
#pragma once

#include <chrono>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxablate::results {
struct OpenAttempt;
}

namespace mxablate::orchestrator {

// The trainer could not be started (exec failed, log files not writable, …).
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LaunchRequest {
  std::string run_id;
  std::filesystem::path run_dir;  // holds config.json; the trainer writes events.jsonl there
  std::filesystem::path trainer;  // the mxablate-train binary
  bool resume = false;            // pass --resume (a checkpoint exists)
  int attempt = 1;                // exported as MXABLATE_ATTEMPT
  // The run's ranks (parallel.data). Still one process per attempt: with N > 1 the trainer is a
  // launcher that starts the N rank processes itself, in its own process group, on the devices
  // the attempt was given — N slots of the local executor (N distinct GPUs for GPU slots), N
  // GPUs and N× the CPUs of one Slurm task.
  int ranks = 1;
};

struct Launched {
  std::string executor_ref;  // how to find it again (a pid, a job id), stored in the database
  std::string slot;          // e.g. "cpu1", "gpu0.1"; a run of several ranks: "gpu0.0+gpu1.0"
  std::string host;
  std::string device;  // "cpu", "cuda:0"; several ranks: "cuda:0+cuda:1"
};

struct AttemptExit {
  std::string run_id;
  std::optional<int> exit_code;  // the process exited
  std::optional<int> signal;     // the process was killed by a signal
  std::string detail;            // what the executor saw besides, e.g. "Slurm state TIMEOUT"
  // "exit code 1", "killed by signal 9 (SIGKILL)", "exit code 4; Slurm state TIMEOUT"
  std::string describe() const;
};

// Whether an attempt may be prestarted as a standby (contract/standby.h; docs/design.md §9, "Busy
// slots"): only a fresh start of a one-rank run. A resume starts normally (what it restores is
// decided when it starts), and a launcher of several ranks cannot hand the descriptor to them.
inline bool prestartable(const LaunchRequest& r) { return !r.resume && r.ranks == 1; }

// Local time, "2026-11-26 17:53:08": the executors' log lines and the Slurm script's header.
std::string executor_timestamp();

// One request's result in launch_batch: launched, or why not (the text of a LaunchError).
struct LaunchResult {
  std::optional<Launched> launched;
  std::string error;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;  // stored with each attempt: "local", "slurm"
  virtual size_t capacity() const = 0;   // attempts of one rank each that may run at once
  virtual size_t running() const = 0;
  // Whether attempts with these rank counts (LaunchRequest::ranks) can all be started now,
  // together, beside what runs: the sweep loop asks before it adds a run to a launch batch.
  // The default counts one slot per attempt whatever its ranks.
  virtual bool fits(const std::vector<int>& ranks) const {
    return running() + ranks.size() <= capacity();
  }
  // The most ranks one attempt can ever get here (a run of more can never start); a batch
  // system, which asks the cluster for what a task needs, has no limit of its own.
  virtual int max_ranks() const { return std::numeric_limits<int>::max(); }
  // Starts an attempt in free slots; requires fits({request.ranks}). Throws LaunchError.
  virtual Launched launch(const LaunchRequest& request) = 0;
  // Starts several attempts at once (requires fits() of their ranks); one result per request, in
  // order. A batch system submits them as job arrays; the default launches them one by one.
  virtual std::vector<LaunchResult> launch_batch(const std::vector<LaunchRequest>& requests);
  // True when attempts live outside the orchestrator (a batch system's jobs): stopping the
  // orchestrator (Ctrl-C, SIGTERM, an error of its own) then detaches from them instead of
  // stopping them, and the next run re-attaches through recover(). False for child processes.
  virtual bool detaches_on_stop() const { return false; }
  // Launched but still waiting in a batch system's queue (shown as pending, not running).
  virtual bool queued(const std::string& /*run_id*/) const { return false; }
  // Prestart (docs/design.md §9, "Busy slots"): the next run's trainer is started while a busy slot
  // still runs another, does its setup and waits (contract/standby.h) until released. A standby
  // is a process of the executor (running() counts it, collect_exits reports its end, kill and
  // request_stop reach it) but not an attempt until release(). Executors that cannot (a batch
  // system) keep the defaults: no standby ever.
  //
  // Whether a standby can be started now: a busy slot holds none yet (one per slot at most).
  virtual bool standby_room() const { return false; }
  // Starts `request` (prestartable) as a standby on such a slot; returns where it will run.
  // Throws LaunchError when it cannot start (no room, exec failed, logs not writable).
  virtual Launched prestart(const LaunchRequest& request) {
    throw LaunchError("the " + name() + " executor does not prestart runs (" + request.run_id + ")");
  }
  // True once the slot of this standby has freed and is held for it: release() it now.
  virtual bool standby_ready(const std::string& /*run_id*/) const { return false; }
  // Lets a ready standby train: from now on it is an ordinary running attempt.
  virtual void release(const std::string& /*run_id*/) {}
  // The standbys waiting for a slot that the attempt `run_id` holds.
  virtual std::vector<std::string> standbys_behind(const std::string& /*run_id*/) const {
    return {};
  }
  // The attempt `run_id` has written its run_end (its work is done, it tears down): its slot that
  // `standby` waits for passes to that standby now, before the process exits (docs/design.md §9,
  // "Busy slots"; the sweep loop decides when that is safe). The attempt itself stays running
  // until collect_exits reports its end, as any other; its slot takes no new standby until then.
  virtual void hand_over(const std::string& /*run_id*/, const std::string& /*standby*/) {}
  // Tells a standby to exit without training (closes its descriptor, then SIGTERM); its end
  // comes through collect_exits. It has written nothing; its run stays pending.
  virtual void abandon(const std::string& /*run_id*/) {}

  // Attempts that ended since the last call. Never blocks.
  virtual std::vector<AttemptExit> collect_exits() = 0;
  // Asks a running attempt to checkpoint and stop (SIGTERM for the trainer).
  virtual void request_stop(const std::string& run_id) = 0;
  // Stops it now (SIGKILL).
  virtual void kill(const std::string& run_id) = 0;
  // An attempt that an earlier orchestrator recorded as running and never saw end. Returns true
  // if the executor took it over (its end will come through collect_exits); false once it is
  // certain the attempt no longer runs (stopping it, within `grace`, if it still did).
  virtual bool recover(const results::OpenAttempt& attempt, std::chrono::milliseconds grace) = 0;
};

}  // namespace mxablate::orchestrator
