// Support for the tests against a real one-node Slurm cluster: the cluster itself (started once
// per test binary with scripts/slurm-test-cluster.sh, stopped at exit — and by a watchdog should
// the binary be killed), `mxablate` processes run in the background, recipes, and read-only
// looks at the results database, run directories and squeue.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/orchestrator/boost_process.h"

namespace mxablate::slurm_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class TestCluster {
 public:
  // Starts the cluster and sets SLURM_CONF for this process and its children. Returns the
  // reason when Slurm cannot run here (the script's exit code 3); throws on other failures.
  static std::optional<std::string> start();
  static void stop();
  static const fs::path& dir();
};

// An `mxablate` run in the background, output (stdout and stderr) captured to a file.
class Mxablate {
 public:
  Mxablate(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
           const fs::path& output);
  ~Mxablate();  // kills it if it still runs
  // Waits for the exit; nullopt on timeout (the process keeps running).
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void signal(int sig);
  bool running();
  std::string output() const;
  int pid() const { return pid_; }

 private:
  bp::child child_;
  fs::path output_;
  int pid_ = 0;
  std::optional<int> exit_code_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

// Runs `mxablate ARGS` to completion (at most `timeout`).
CommandResult run_mxablate(const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env = {},
                           std::chrono::milliseconds timeout = 120s);

// A recipe for the fake trainer: `arms` × `seeds`, `steps` steps of 2048 tokens, an evaluation
// every 10 steps and a checkpoint every `checkpoint_every` steps; no target.
std::string fake_recipe(const std::string& name, int steps, const std::vector<std::string>& arms,
                        const std::vector<int>& seeds, int checkpoint_every = 10);

// Rows of a read-only query, each cell as JSON.
std::vector<std::vector<nlohmann::json>> query(const fs::path& db, const std::string& sql);

// The events of a run directory's events.jsonl (complete lines only).
std::vector<nlohmann::json> read_events(const fs::path& run_dir);

// Polls `done` every 100 ms; false when `timeout` passes first.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// What the test's watchers collect about a sweep's tasks while it runs.
struct QueueObservation {
  int max_running = 0;
  bool saw_throttled = false;  // a PENDING task with reason JobArrayTaskLimit
  int polls = 0;
};

// squeue for a sweep's job name, every 150 ms until `stop()` returns true.
QueueObservation watch_queue(const std::string& job_name, const std::function<bool()>& stop);

// Live (queued or running) tasks of a job name right now.
int live_tasks(const std::string& job_name);

std::string read_file(const fs::path& p);

// Seconds spent by the named stages (printed at the end of the run).
void record_timing(const std::string& what, double seconds);
std::string timings_report();

}  // namespace mxablate::slurm_test
