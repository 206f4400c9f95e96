// The writer side of the results store: the orchestrator (the single writer) records
// sweeps, their planned runs, every launch attempt and each run's status here. Event ingestion
// lives in ingest.h; read-only access in query.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/writer_lock.h"

namespace mxablate::results {

// sweeps.recipe_path of a sweep made by `mxablate ingest` from run directories: no recipe (a
// recipe's path is absolute, so no recipe can have this one).
inline constexpr const char* kIngestedRecipePath = "(ingested run directories)";

struct SweepRecord {
  std::string name;
  std::string recipe_path;
  std::string recipe_text;
  std::string runs_dir;
  nlohmann::json target = nlohmann::json::object();  // the recipe's target section
  std::optional<double> target_val_loss;             // when the target is a fixed loss
};

struct PlannedRun {
  std::string run_id;
  std::string arm;
  int arm_index = 0;
  std::string config_json;
  std::string run_dir;
  double max_tokens = 0;
  std::vector<std::pair<std::string, std::string>> axes;  // axis name, value as JSON text
  // How its settings differ from its baseline run's (contract::describe_differences): the
  // planner computes it once; the store keeps it for the views.
  std::string interventions = "-";
  // contract::model_label of its model: what its block target is found by (runs.model). Empty:
  // config_json's "model" when that is a preset's name, else NULL.
  std::string model;
};

struct RunState {
  std::string run_id;
  int64_t sweep_id = 0;
  std::string arm;
  std::optional<int64_t> plan_index;
  std::string status;
  int attempts = 0;
  std::string run_dir;
  int64_t ingest_offset = 0;
  int64_t last_seq = 0;
  std::optional<std::string> error;
};

struct AttemptStart {
  std::string executor;  // "local", "slurm", …
  std::string executor_ref;
  std::string slot;
  std::string host;
  std::string device;
  bool resumed = false;
  int64_t start_seq = 0;
  bool prestarted = false;  // waited as a standby for its slot (contract/standby.h)
};

struct AttemptEnd {
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string outcome;  // a run status, or "retry"
  std::string reason;
};

struct OpenAttempt {
  std::string run_id;
  int attempt = 0;
  std::string executor;
  std::string executor_ref;
  std::string run_dir;
  int64_t start_seq = 0;
  double launched_at = 0;
};

// The target of one model block of a sweep (table block_targets, docs/design.md §6).
struct BlockTarget {
  std::string model;  // contract::model_label, as runs.model
  double val_loss = 0;
  std::string basis;  // how it was found, for captions ("median of arm fp8 at 10 % of …"), or ""
};

// Every block target of the sweep, by model name. Empty for a database from before schema
// version 6 (opened read-only, it is not migrated) and for a sweep that has none. Works on a
// read-only connection (query.h), so analysis can read them too.
std::vector<BlockTarget> read_block_targets(Database& db, int64_t sweep_id);

// Seconds since the Unix epoch (the unit of every *_at column).
double unix_now();

class ResultsStore {
 public:
  // Opens for writing, creating the database when there is none (database_file.h): takes the
  // database's writer lock for the store's lifetime (writer_lock.h; DatabaseLocked when another
  // process holds it), refuses a file that is not an mxablate database (NotAResultsDatabase),
  // then WAL journal, busy timeout, foreign keys, migrations.
  explicit ResultsStore(const std::string& path);

  Database& db() { return db_; }

  // Creates the sweep or updates its recipe; returns its id. A target resolved earlier is kept
  // while the recipe's target section stays the same, and forgotten when it changes.
  int64_t register_sweep(const SweepRecord& sweep);
  // Stores a target derived from the baseline arm (analysis resolves it) unless one is stored.
  // Returns whether it was stored.
  bool store_resolved_target(const std::string& sweep, double val_loss);
  // Stores the target of the sweep's block of `model` (insert or replace: the latest call wins;
  // calling again with the same values changes nothing, fixed_at included). The views give each
  // run of that model this target (docs/design.md §6).
  void set_block_target(int64_t sweep_id, const std::string& model, double val_loss,
                        const std::string& basis);
  std::vector<BlockTarget> block_targets(int64_t sweep_id) {
    return read_block_targets(db_, sweep_id);
  }
  // Makes `plan` the sweep's current plan: new runs are inserted as pending, known ones keep
  // their state and get their new plan position; runs no longer planned keep their results
  // but drop out of the plan (plan_index NULL).
  void register_plan(int64_t sweep_id, const std::vector<PlannedRun>& plan);

  // Runs the trainer wrote outside a sweep (`mxablate ingest`). add_run puts `run` in the sweep's
  // current plan after its other runs, or, where the sweep holds it already, updates its config,
  // directory, budget and model in place; no other run moves or drops out of the plan. A new run
  // takes the arm_index of its arm in the sweep, or the next one for a new arm (run.arm_index and
  // run.axes are not used); an empty run.interventions is stored as NULL (no baseline to describe
  // it against). Throws SqliteError when the run belongs to another sweep: it is never moved.
  void add_run(int64_t sweep_id, const PlannedRun& run);
  // Sets a run's status from what was ingested of its log, as nothing else reports on it: the
  // status of its latest run_end (with that event's reason as the error of a failed or interrupted
  // run, and its time as finished_at), or interrupted, saying so, when there is no run_end.
  // Returns the status.
  std::string settle_status_from_log(const std::string& run_id);

  std::vector<RunState> planned_runs(int64_t sweep_id);
  RunState run(const std::string& run_id);

  // Records a launch: attempts + 1, status running. Returns the attempt number.
  int begin_attempt(const std::string& run_id, const AttemptStart& start);
  void end_attempt(const std::string& run_id, int attempt, const AttemptEnd& end);
  // end_attempt and set_status in one transaction, so that a crash between them cannot leave a
  // run marked running with no open attempt. The attempt's timings (setup_s, train_s, …) are
  // taken from its own run_end (the latest after its start_seq), if it wrote one.
  void finish_attempt(const std::string& run_id, int attempt, const AttemptEnd& end,
                      const std::string& status, const std::optional<std::string>& error);
  // Attempts of the sweep whose end was never recorded (an orchestrator died meanwhile).
  std::vector<OpenAttempt> open_attempts(int64_t sweep_id);

  void set_status(const std::string& run_id, const std::string& status,
                  const std::optional<std::string>& error = std::nullopt);

  // Forgets everything ingested for the run (before a restart from scratch).
  void reset_run_events(const std::string& run_id);

  // Status of the latest run_end event with seq > after_seq, if any.
  std::optional<std::string> run_end_status_after(const std::string& run_id, int64_t after_seq);
  // True when the run's surviving timeline holds a checkpoint event.
  bool has_checkpoint(const std::string& run_id);

 private:
  WriterLock lock_;  // before db_: held from before the first write until after the close
  Database db_;
};

}  // namespace mxablate::results
