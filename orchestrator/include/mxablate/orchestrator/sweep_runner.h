// The sweep loop: registers the plan in the results store, launches pending runs in the
// executor's free slots (a run of N ranks in N of them; SweepOptions::backfill), tails and ingests every running run's event log, decides what each
// ended attempt means (result, failure, retry from checkpoint), prestarts the next run of a busy
// slot as a standby (SweepOptions::prestart) and hands it the slot at the finishing run's run_end
// (SweepOptions::handover), enforces the per-run timeout,
// and on SIGINT/SIGTERM stops launching, asks the trainers to checkpoint and stop, records
// their state and returns. Re-running the same plan continues where it stopped: finished runs
// are skipped, attempts an earlier (killed) orchestrator left open are recovered first.
#pragma once

#include <memory>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "mxablate/orchestrator/executor.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/progress.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/signal_watcher.h"
#include "mxablate/orchestrator/slot_handover.h"
#include "mxablate/results/store.h"

namespace mxablate::orchestrator {

struct SweepOptions {
  std::filesystem::path runs_dir = "runs";  // runs live in RUNS_DIR/<sweep>/<run_id>/
  std::filesystem::path trainer;
  int max_attempts = 3;                       // per run and invocation, retries included
  std::chrono::milliseconds timeout{0};       // per attempt; 0: none
  std::chrono::milliseconds grace{60000};     // SIGTERM → SIGKILL
  std::chrono::milliseconds poll{200};        // ingestion interval (exits wake the loop at once)
  // Runs are launched in plan order as the executor's free slots allow (a run of N ranks needs N
  // slots, Executor::fits). When the next run in order does not fit, later runs that do fit may
  // start ahead of it — for this long after it began to wait; from then on nothing starts ahead
  // of it, so it gets its slots once the running attempts end (a big run never starves behind a
  // stream of small ones). 0: strictly in order.
  std::chrono::milliseconds backfill{std::chrono::minutes(10)};
  // The run ids in the order to launch them (plan.h launch_order; `mxablate run --order`);
  // empty: plan order. Runs it leaves out follow in plan order. Prestart takes the next run in
  // this order too.
  std::vector<std::string> launch_order;
  // Busy slots (docs/design.md §9): while a slot runs a run, the next queued run in plan order
  // (a fresh start of one rank: executor.h prestartable) is started as a standby on it, does its
  // setup and starts training the moment the slot frees. Off (`--no-prestart`) when a model's
  // weights and optimizer state do not fit twice in one device's memory.
  bool prestart = true;
  // When a slot passes to its standby (slot_handover.h): at the finishing run's run_end where
  // the memory plan says both fit, else at its exit. The default knows no GPU memory: CPU runs
  // at run_end, GPU runs at exit.
  HandoverRule handover;
};

struct SweepResult {
  size_t total = 0, converged = 0, budget_exhausted = 0, diverged = 0, failed = 0,
         interrupted = 0, unfinished = 0;
  // Stopped as projected not to reach the target: a result (a lower bound), neither a failure
  // nor a divergence (docs/design.md §4, "Projected outcomes and hopeless runs").
  size_t projected_not_reached = 0;
  int stop_signal = 0;  // SIGINT or SIGTERM when the sweep was stopped on request
  size_t left_running = 0;  // attempts left running in a batch system when it stopped
  bool all_finished() const { return failed == 0 && interrupted == 0 && unfinished == 0; }
};

// Timestamps of lifecycle points, for the overhead benchmark and tests.
struct SweepHooks {
  using Clock = std::chrono::steady_clock;
  std::function<void(const std::string& run_id, Clock::time_point)> launched;
  std::function<void(const std::string& run_id, Clock::time_point)> prestarted;  // as a standby
  std::function<void(const std::string& run_id, Clock::time_point)> first_event;
  // The attempt's run_end was ingested (before its exit is seen, or with it).
  std::function<void(const std::string& run_id, Clock::time_point)> run_end_seen;
  std::function<void(const std::string& run_id, Clock::time_point)> exit_seen;
  std::function<void(size_t events, std::chrono::nanoseconds)> ingested;
};

class SweepRunner {
 public:
  SweepRunner(const Recipe& recipe, const Plan& plan, results::ResultsStore& store,
              Executor& executor, Waker& waker, ProgressSink& progress, SweepOptions options);
  ~SweepRunner();
  void set_hooks(SweepHooks hooks);

  // Runs the sweep to completion or until stopped. Throws on failures of the sweep itself (the
  // runs directory, the database); before throwing it stops the trainers it started.
  SweepResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RUNS_DIR/<sweep>/<run_id>
std::filesystem::path run_directory(const std::filesystem::path& runs_dir,
                                    const std::string& sweep, const std::string& run_id);

// run_label(spec) ("FDW+H16 seed=2 train.lr=0.001") is declared in plan.h.

}  // namespace mxablate::orchestrator
