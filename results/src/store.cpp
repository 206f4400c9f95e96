#include "mxablate/results/store.h"

#include <chrono>

#include "mxablate/results/database_file.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/schema.h"

namespace mxablate::results {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

namespace {

void configure_writer(Database& db) {
  // WAL: readers (status, query) never block the sweep and the sweep never blocks them.
  // synchronous=NORMAL is durable across process crashes; the event logs are the source of
  // truth for anything a power loss could take.
  std::string mode;
  {
    Statement wal(db, "PRAGMA journal_mode = WAL");
    wal.step();
    mode = wal.get_text(0);
  }
  if (mode != "wal")
    throw SqliteError(db.path() + ": cannot switch the database to WAL mode (got " + mode +
                          "); is it on a filesystem without shared memory support?",
                      0);
  db.exec("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;", "configuring");
}

// Creates the database if needed and checks what is there before anything locks or opens it.
const std::string& prepared(const std::string& path) {
  create_database_if_missing(path);
  check_database_file(path, /*read_header=*/true);
  return path;
}

}  // namespace

ResultsStore::ResultsStore(const std::string& path)
    : lock_(prepared(path)), db_(path, Database::Mode::kReadWrite) {
  if (!lock_.covers(path))
    throw DatabaseLocked(path + ": the database file was replaced while it was being opened; "
                                "run the command again");
  check_results_schema(db_);
  configure_writer(db_);
  migrate(db_);  // an existing database from an older mxablate
}

int64_t ResultsStore::register_sweep(const SweepRecord& s) {
  Transaction tx(db_);
  const double now = unix_now();
  Statement up(db_,
               "INSERT INTO sweeps (name, recipe_path, recipe_text, target_json, target_val_loss, "
               "runs_dir, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) "
               "ON CONFLICT (name) DO UPDATE SET recipe_path = ?2, recipe_text = ?3, "
               "target_json = ?4, target_val_loss = CASE WHEN sweeps.target_json = ?4 "
               "THEN COALESCE(?5, sweeps.target_val_loss) ELSE ?5 END, "
               "runs_dir = ?6, updated_at = ?7");
  up.bind(1, s.name).bind(2, s.recipe_path).bind(3, s.recipe_text).bind(4, s.target.dump());
  up.bind(5, s.target_val_loss).bind(6, s.runs_dir).bind(7, now);
  up.run();
  Statement id(db_, "SELECT sweep_id FROM sweeps WHERE name = ?1");
  id.bind(1, s.name);
  id.step();
  const int64_t sweep_id = id.get_int(0);
  id.reset();  // a statement mid-row would block the COMMIT
  tx.commit();
  return sweep_id;
}

bool ResultsStore::store_resolved_target(const std::string& sweep, double val_loss) {
  Statement up(db_, "UPDATE sweeps SET target_val_loss = ?1 WHERE name = ?2 AND target_val_loss IS NULL");
  up.bind(1, val_loss).bind(2, sweep);
  up.run();
  return db_.changes() > 0;
}

void ResultsStore::set_block_target(int64_t sweep_id, const std::string& model, double val_loss,
                                    const std::string& basis) {
  Statement up(db_,
               "INSERT INTO block_targets (sweep_id, model, val_loss, basis, fixed_at) "
               "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sweep_id, model) DO UPDATE SET "
               "val_loss = ?3, basis = ?4, fixed_at = ?5 "
               "WHERE block_targets.val_loss IS NOT ?3 OR block_targets.basis IS NOT ?4");
  up.bind(1, sweep_id).bind(2, model).bind(3, val_loss).bind(4, basis).bind(5, unix_now());
  up.run();
}

std::vector<BlockTarget> read_block_targets(Database& db, int64_t sweep_id) {
  std::vector<BlockTarget> out;
  if (schema_version(db) < 6) return out;  // no block_targets table before version 6
  Statement st(db,
               "SELECT model, val_loss, basis FROM block_targets WHERE sweep_id = ?1 "
               "ORDER BY model");
  st.bind(1, sweep_id);
  while (st.step()) out.push_back({st.get_text(0), st.get_double(1), st.get_text(2)});
  return out;
}

void ResultsStore::register_plan(int64_t sweep_id, const std::vector<PlannedRun>& plan) {
  Transaction tx(db_);
  const double now = unix_now();
  Statement clear(db_, "UPDATE runs SET plan_index = NULL WHERE sweep_id = ?1");
  clear.bind(1, sweep_id).run();
  Statement insert(db_,
                   "INSERT INTO runs (run_id, sweep_id, arm, arm_index, plan_index, config_json, "
                   "run_dir, max_tokens, created_at, interventions, model) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
                   "ON CONFLICT (run_id) DO UPDATE SET sweep_id = ?2, arm = ?3, arm_index = ?4, "
                   "plan_index = ?5, config_json = ?6, run_dir = ?7, max_tokens = ?8, "
                   "interventions = ?10, model = ?11");
  // A preset's name is its model label (contract::model_label); a custom shape's label is only
  // known to the planner, which passes it.
  Statement preset(db_,
                   "SELECT CASE WHEN json_valid(?1) AND json_type(?1, '$.model') = 'text' "
                   "THEN json_extract(?1, '$.model') END");
  Statement axis(db_,
                 "INSERT OR REPLACE INTO run_axes (run_id, axis, value, position) "
                 "VALUES (?1, ?2, ?3, ?4)");
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedRun& r = plan[i];
    insert.bind(1, r.run_id).bind(2, sweep_id).bind(3, r.arm).bind(4, r.arm_index);
    insert.bind(5, static_cast<int64_t>(i)).bind(6, r.config_json).bind(7, r.run_dir);
    insert.bind(8, r.max_tokens).bind(9, now).bind(10, r.interventions);
    std::optional<std::string> model;
    if (!r.model.empty()) {
      model = r.model;
    } else {
      preset.bind(1, r.config_json);
      if (preset.step()) model = preset.get_opt_text(0);
      preset.reset();
    }
    insert.bind(11, model);
    insert.run();
    for (size_t a = 0; a < r.axes.size(); ++a) {
      axis.bind(1, r.run_id).bind(2, r.axes[a].first).bind(3, r.axes[a].second);
      axis.bind(4, static_cast<int64_t>(a));
      axis.run();
    }
  }
  tx.commit();
}

void ResultsStore::add_run(int64_t sweep_id, const PlannedRun& r) {
  Transaction tx(db_);
  Statement insert(db_,
                   "INSERT INTO runs (run_id, sweep_id, arm, arm_index, plan_index, config_json, "
                   "run_dir, max_tokens, created_at, interventions, model) "
                   "VALUES (?1, ?2, ?3, "
                   "COALESCE((SELECT MIN(arm_index) FROM runs WHERE sweep_id = ?2 AND arm = ?3), "
                   "         (SELECT COALESCE(MAX(arm_index) + 1, 0) FROM runs WHERE sweep_id = ?2)), "
                   "(SELECT COALESCE(MAX(plan_index) + 1, 0) FROM runs WHERE sweep_id = ?2), "
                   "?4, ?5, ?6, ?7, ?8, ?9) "
                   "ON CONFLICT (run_id) DO UPDATE SET config_json = ?4, run_dir = ?5, "
                   "max_tokens = ?6, model = ?9, "
                   "plan_index = COALESCE(runs.plan_index, excluded.plan_index) "
                   "WHERE runs.sweep_id = ?2");
  insert.bind(1, r.run_id).bind(2, sweep_id).bind(3, r.arm).bind(4, r.config_json);
  insert.bind(5, r.run_dir).bind(6, r.max_tokens).bind(7, unix_now());
  insert.bind(8, r.interventions.empty() ? std::nullopt : std::optional<std::string>(r.interventions));
  insert.bind(9, r.model.empty() ? std::nullopt : std::optional<std::string>(r.model));
  insert.run();
  if (db_.changes() == 0)
    throw SqliteError(db_.path() + ": run " + r.run_id + " belongs to another sweep", 0);
  tx.commit();
}

std::string ResultsStore::settle_status_from_log(const std::string& run_id) {
  Statement end(db_,
                "SELECT json_extract(detail, '$.status'), json_extract(detail, '$.reason'), time "
                "FROM events WHERE run_id = ?1 AND kind = 'run_end' ORDER BY seq DESC LIMIT 1");
  end.bind(1, run_id);
  std::string s = status::kInterrupted;
  std::optional<std::string> error =
      "events.jsonl has no run_end: the trainer stopped before its final status, or is still "
      "running";
  std::optional<double> finished;
  if (end.step()) {
    // The contract's checks (event_line.h) admit only the statuses runs.status holds.
    s = end.get_opt_text(0).value_or(status::kFailed);
    const std::optional<std::string> reason = end.get_opt_text(1);
    finished = end.get_opt_double(2);
    if (s == status::kFailed)
      error = reason.value_or("the trainer reported failure");
    else if (s == status::kInterrupted)
      error = reason.value_or("the trainer was stopped");
    else
      error = std::nullopt;
  }
  end.reset();
  Statement st(db_,
               "UPDATE runs SET status = ?2, error = ?3, finished_at = ?4, "
               "started_at = (SELECT MIN(time) FROM events WHERE run_id = ?1 AND "
               "              kind = 'run_start') WHERE run_id = ?1");
  st.bind(1, run_id).bind(2, s).bind(3, error).bind(4, finished);
  st.run();
  return s;
}

namespace {

constexpr const char* kRunColumns =
    "run_id, sweep_id, arm, plan_index, status, attempts, run_dir, ingest_offset, last_seq, error";

RunState read_run(const Statement& st) {
  RunState r;
  r.run_id = st.get_text(0);
  r.sweep_id = st.get_int(1);
  r.arm = st.get_text(2);
  r.plan_index = st.get_opt_int(3);
  r.status = st.get_text(4);
  r.attempts = static_cast<int>(st.get_int(5));
  r.run_dir = st.get_text(6);
  r.ingest_offset = st.get_int(7);
  r.last_seq = st.get_int(8);
  r.error = st.get_opt_text(9);
  return r;
}

}  // namespace

std::vector<RunState> ResultsStore::planned_runs(int64_t sweep_id) {
  Statement st(db_, std::string("SELECT ") + kRunColumns +
                        " FROM runs WHERE sweep_id = ?1 AND plan_index IS NOT NULL "
                        "ORDER BY plan_index");
  st.bind(1, sweep_id);
  std::vector<RunState> out;
  while (st.step()) out.push_back(read_run(st));
  return out;
}

RunState ResultsStore::run(const std::string& run_id) {
  Statement st(db_, std::string("SELECT ") + kRunColumns + " FROM runs WHERE run_id = ?1");
  st.bind(1, run_id);
  if (!st.step()) throw SqliteError(db_.path() + ": no run " + run_id, 0);
  return read_run(st);
}

int ResultsStore::begin_attempt(const std::string& run_id, const AttemptStart& a) {
  Transaction tx(db_);
  const double now = unix_now();
  Statement upd(db_,
                "UPDATE runs SET attempts = attempts + 1, status = 'running', host = ?2, "
                "device = ?3, started_at = COALESCE(started_at, ?4), finished_at = NULL "
                "WHERE run_id = ?1 RETURNING attempts");
  upd.bind(1, run_id).bind(2, a.host).bind(3, a.device).bind(4, now);
  if (!upd.step()) throw SqliteError(db_.path() + ": no run " + run_id, 0);
  const int attempt = static_cast<int>(upd.get_int(0));
  upd.reset();
  Statement ins(db_,
                "INSERT INTO attempts (run_id, attempt, executor, executor_ref, slot, host, "
                "resumed, start_seq, launched_at, prestarted) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  ins.bind(1, run_id).bind(2, attempt).bind(3, a.executor).bind(4, a.executor_ref);
  ins.bind(5, a.slot).bind(6, a.host).bind(7, a.resumed ? 1 : 0).bind(8, a.start_seq);
  ins.bind(9, now).bind(10, a.prestarted ? 1 : 0);
  ins.run();
  tx.commit();
  return attempt;
}

void ResultsStore::end_attempt(const std::string& run_id, int attempt, const AttemptEnd& e) {
  Statement st(db_,
               "UPDATE attempts SET ended_at = ?3, exit_code = ?4, signal = ?5, outcome = ?6, "
               "reason = ?7 WHERE run_id = ?1 AND attempt = ?2");
  st.bind(1, run_id).bind(2, attempt).bind(3, unix_now()).bind(4, e.exit_code);
  st.bind(5, e.signal).bind(6, e.outcome).bind(7, e.reason);
  st.run();
}

void ResultsStore::finish_attempt(const std::string& run_id, int attempt, const AttemptEnd& end,
                                  const std::string& s, const std::optional<std::string>& error) {
  Transaction tx(db_);
  end_attempt(run_id, attempt, end);
  set_status(run_id, s, error);
  // The event passed the contract's checks (event_line.h): durations in [0, 1e8], their parts
  // within wall_s.
  Statement timing(db_,
                   "UPDATE attempts SET setup_s = json_extract(e.detail, '$.setup_s'), "
                   "standby_s = json_extract(e.detail, '$.standby_s'), "
                   "train_s = json_extract(e.detail, '$.train_s'), "
                   "eval_s = json_extract(e.detail, '$.eval_s'), "
                   "checkpoint_s = json_extract(e.detail, '$.checkpoint_s') "
                   "FROM (SELECT detail FROM events WHERE run_id = ?1 AND kind = 'run_end' AND "
                   "      seq > (SELECT start_seq FROM attempts WHERE run_id = ?1 AND attempt = ?2) "
                   "      ORDER BY seq DESC LIMIT 1) AS e "
                   "WHERE attempts.run_id = ?1 AND attempts.attempt = ?2");
  timing.bind(1, run_id).bind(2, attempt).run();
  // Wall time of a run: all its attempts, as the orchestrator saw them (a trainer's run_end
  // only knows its own attempt).
  Statement wall(db_,
                 "UPDATE runs SET wall_s = (SELECT SUM(ended_at - launched_at) FROM attempts "
                 "WHERE run_id = ?1 AND ended_at IS NOT NULL) WHERE run_id = ?1");
  wall.bind(1, run_id).run();
  tx.commit();
}

std::vector<OpenAttempt> ResultsStore::open_attempts(int64_t sweep_id) {
  Statement st(db_,
               "SELECT a.run_id, a.attempt, a.executor, a.executor_ref, r.run_dir, a.start_seq, "
               "a.launched_at FROM attempts a JOIN runs r USING (run_id) "
               "WHERE r.sweep_id = ?1 AND a.ended_at IS NULL ORDER BY a.launched_at");
  st.bind(1, sweep_id);
  std::vector<OpenAttempt> out;
  while (st.step()) {
    out.push_back({st.get_text(0), static_cast<int>(st.get_int(1)), st.get_text(2),
                   st.get_text(3), st.get_text(4), st.get_int(5), st.get_double(6)});
  }
  return out;
}

void ResultsStore::set_status(const std::string& run_id, const std::string& s,
                              const std::optional<std::string>& error) {
  const bool ended = s != status::kRunning && s != status::kPending;
  Statement st(db_,
               "UPDATE runs SET status = ?2, error = ?3, "
               "finished_at = CASE WHEN ?4 THEN ?5 ELSE NULL END WHERE run_id = ?1");
  st.bind(1, run_id).bind(2, s).bind(3, error).bind(4, ended ? 1 : 0).bind(5, unix_now());
  st.run();
}

void ResultsStore::reset_run_events(const std::string& run_id) {
  Transaction tx(db_);
  forget_run_events(db_, run_id);
  tx.commit();
}

std::optional<std::string> ResultsStore::run_end_status_after(const std::string& run_id,
                                                              int64_t after_seq) {
  Statement st(db_,
               "SELECT json_extract(detail, '$.status') FROM events WHERE run_id = ?1 AND "
               "kind = 'run_end' AND seq > ?2 ORDER BY seq DESC LIMIT 1");
  st.bind(1, run_id).bind(2, after_seq);
  if (!st.step()) return std::nullopt;
  return st.get_opt_text(0);
}

bool ResultsStore::has_checkpoint(const std::string& run_id) {
  Statement st(db_, "SELECT 1 FROM events WHERE kind = 'checkpoint' AND run_id = ?1 LIMIT 1");
  st.bind(1, run_id);
  return st.step();
}

}  // namespace mxablate::results
