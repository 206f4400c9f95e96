// The store's schema: created at the newest version in WAL mode, migrations applied in order and
// atomically, newer databases refused, status values constrained.
#include <set>

#include "catch.h"
#include "mxablate/results/schema.h"
#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/store.h"
#include "temp_dir.h"

using namespace mxablate::results;
using mxablate::testing::TempDir;

namespace {

SweepRecord sweep_named(const std::string& name, const std::string& text = "name: s") {
  SweepRecord s;
  s.name = name;
  s.recipe_path = "r.yaml";
  s.recipe_text = text;
  s.runs_dir = "runs";
  return s;
}

std::set<std::string> objects(Database& db, const char* type) {
  Statement st(db, "SELECT name FROM sqlite_master WHERE type = ?1");
  st.bind(1, type);
  std::set<std::string> out;
  while (st.step()) out.insert(st.get_text(0));
  return out;
}

}  // namespace

TEST_CASE("a new store is at the newest schema version, in WAL mode, with every table and view") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  CHECK(schema_version(store.db()) == latest_schema_version());
  CHECK(latest_schema_version() == 6);
  for (const char* c : {"prestarted", "setup_s", "standby_s", "train_s", "eval_s", "checkpoint_s"})
    Statement(store.db(), std::string("SELECT ") + c + " FROM attempts").step();
  Statement mode(store.db(), "PRAGMA journal_mode");
  mode.step();
  CHECK(mode.get_text(0) == "wal");
  const auto tables = objects(store.db(), "table");
  for (const char* t : {"sweeps", "runs", "run_axes", "attempts", "evals", "train_steps",
                        "quant_stats", "events", "block_targets"})
    CHECK(tables.count(t) == 1);
  const auto views = objects(store.db(), "view");
  for (const char* v : {"run_summary", "run_targets", "run_tokens_to_target", "arm_summary",
                        "divergence_events", "run_extra_tokens"})
    CHECK(views.count(v) == 1);
  // Every view compiles against the tables (a typo in a view only fails when it is used).
  for (const auto& v : views) Statement(store.db(), "SELECT * FROM " + v).step();
}

TEST_CASE("reopening a store applies nothing, an older one gets only the missing migrations") {
  TempDir dir;
  { ResultsStore store(dir.file("a.db")); }
  Database db(dir.file("a.db"), Database::Mode::kReadWriteCreate);
  CHECK(migrate(db) == 0);

  const Migration extended[] = {
      migrations()[0],
      migrations()[1],
      migrations()[2],
      migrations()[3],
      migrations()[4],
      migrations()[5],
      {7, "add a note column", "ALTER TABLE runs ADD COLUMN note TEXT;"},
      {8, "add a table", "CREATE TABLE extra (x INTEGER);"},
  };
  CHECK(migrate(db, extended) == 2);
  CHECK(schema_version(db) == 8);
  Statement st(db, "SELECT note FROM runs");  // the column exists now
  CHECK_FALSE(st.step());
  CHECK(migrate(db, extended) == 0);
}

TEST_CASE("a version-1 database opened by this mxablate gets the later migrations") {
  TempDir dir;
  {
    Database db(dir.file("a.db"), Database::Mode::kReadWriteCreate);
    const Migration v1[] = {migrations()[0]};
    migrate(db, v1);
  }
  ResultsStore store(dir.file("a.db"));
  CHECK(schema_version(store.db()) == latest_schema_version());
  CHECK(objects(store.db(), "view").count("run_extra_tokens") == 1);
  Statement position(store.db(), "SELECT ingest_position FROM runs");  // version 3's column
  CHECK_FALSE(position.step());
  Statement occ(store.db(), "SELECT occ_fraction FROM quant_stats");  // version 4's column
  CHECK_FALSE(occ.step());
}

TEST_CASE("a migration that fails leaves the database at the version before it, untouched") {
  TempDir dir;
  Database db(dir.file("a.db"), Database::Mode::kReadWriteCreate);
  const Migration broken[] = {
      migrations()[0],
      {2, "half-broken", "CREATE TABLE half (x INTEGER); THIS IS NOT SQL;"},
  };
  CHECK_THROWS_AS(migrate(db, broken), SqliteError);
  CHECK(schema_version(db) == 0);  // both in one transaction: version 1 rolled back too
  CHECK(objects(db, "table").empty());
  CHECK(migrate(db) == latest_schema_version());
  CHECK(schema_version(db) == latest_schema_version());
}

TEST_CASE("a database from a newer mxablate is refused with a message saying so") {
  TempDir dir;
  {
    Database db(dir.file("a.db"), Database::Mode::kReadWriteCreate);
    db.exec("PRAGMA user_version = 99");
  }
  try {
    ResultsStore store(dir.file("a.db"));
    FAIL("expected an error");
  } catch (const SqliteError& e) {
    CHECK(std::string(e.what()).find("schema version 99 is newer") != std::string::npos);
  }
}

TEST_CASE("run status is constrained to the known values") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const int64_t id = store.register_sweep(sweep_named("s"));
  store.register_plan(id, {{"r1", "arm", 0, "{}", "runs/s/r1", 10, {}}});
  CHECK(store.run("r1").status == "pending");
  CHECK_THROWS_AS(store.set_status("r1", "almost-done"), SqliteError);
  store.set_status("r1", status::kDiverged);
  CHECK(store.run("r1").status == "diverged");
  CHECK(is_final_result("diverged"));
  CHECK_FALSE(is_final_result("failed"));
  CHECK_FALSE(is_final_result("interrupted"));
}

TEST_CASE("re-registering a plan keeps run state and drops runs no longer planned from the plan") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const int64_t id = store.register_sweep(sweep_named("s"));
  store.register_plan(id, {{"r1", "a", 0, "{}", "d1", 10, {{"seed", "1"}}},
                           {"r2", "a", 0, "{}", "d2", 10, {{"seed", "2"}}}});
  store.set_status("r1", status::kConverged);
  // The recipe changed: r2 is gone, r3 is new, r1 stays (and keeps its result).
  store.register_plan(id, {{"r3", "a", 0, "{}", "d3", 10, {{"seed", "3"}}},
                           {"r1", "a", 0, "{}", "d1", 10, {{"seed", "1"}}}});
  const auto planned = store.planned_runs(id);
  REQUIRE(planned.size() == 2);
  CHECK(planned[0].run_id == "r3");
  CHECK(planned[1].run_id == "r1");
  CHECK(planned[1].status == "converged");
  CHECK_FALSE(store.run("r2").plan_index.has_value());
  // Registering the same sweep again returns the same id.
  CHECK(store.register_sweep(sweep_named("s", "name: s # edited")) == id);
}

TEST_CASE("a new database appears fully migrated or not at all") {
  TempDir dir;
  const std::string path = dir.file("new.db");
  { ResultsStore store(path); }
  // Built under a temporary name and linked into place: nothing of it is left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    CHECK(entry.path().filename().string().find(".creating-") == std::string::npos);
  Database reader(path, Database::Mode::kReadOnly);
  CHECK(schema_version(reader) == latest_schema_version());
  // When creation fails (here: a directory that does not exist) no file appears, and the
  // message names the file asked for.
  const std::string bad = dir.file("missing-dir/x.db");
  try {
    ResultsStore store(bad);
    FAIL("expected an error");
  } catch (const SqliteError& e) {
    CHECK(std::string(e.what()).rfind(bad + ": unable to open database file", 0) == 0);
  }
  CHECK_FALSE(std::filesystem::exists(bad));
}

TEST_CASE("each run's interventions are stored and arm_summary shows them per arm") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const int64_t id = store.register_sweep(sweep_named("s"));
  PlannedRun base{"r1", "fp8", 0, "{}", "d1", 10, {{"seed", "1"}}, "-"};
  PlannedRun arm{"r2", "FDW+mse", 1, "{}", "d2", 10, {{"seed", "1"}}, "scale_rule mse"};
  PlannedRun arm2{"r3", "FDW+mse", 1, "{}", "d3", 10, {{"seed", "2"}}, "scale_rule mse"};
  store.register_plan(id, {base, arm, arm2});
  Statement q(store.db(), "SELECT arm, interventions, runs FROM arm_summary ORDER BY arm_index");
  REQUIRE(q.step());
  CHECK(q.get_text(0) == "fp8");
  CHECK(q.get_text(1) == "-");
  REQUIRE(q.step());
  CHECK(q.get_text(0) == "FDW+mse");
  CHECK(q.get_text(1) == "scale_rule mse");
  CHECK(q.get_int(2) == 2);
  // Re-registering updates the description (the baseline or the recipe changed).
  arm.interventions = "scale_rule mse + weight_blocks 2d";
  store.register_plan(id, {base, arm});
  Statement again(store.db(), "SELECT interventions FROM runs WHERE run_id = 'r2'");
  REQUIRE(again.step());
  CHECK(again.get_text(0) == "scale_rule mse + weight_blocks 2d");
}

namespace {

// Every row of `table` as text, in key order: what a rebuild must keep.
std::vector<std::string> rows_of(Database& db, const std::string& table, const std::string& columns,
                                 const std::string& order) {
  Statement st(db, "SELECT " + columns + " FROM " + table + " ORDER BY " + order);
  std::vector<std::string> out;
  while (st.step()) {
    std::string row;
    for (int i = 0; i < st.column_count(); ++i) row += (st.is_null(i) ? "NULL" : st.get_text(i)) + "|";
    out.push_back(row);
  }
  return out;
}

constexpr const char* kRunColumnsV5 =
    "run_id, sweep_id, arm, arm_index, plan_index, config_json, run_dir, status, attempts, "
    "max_tokens, step, tokens, train_loss, final_val_loss, best_val_loss, tokens_to_target, "
    "trainer_status, wall_s, tokens_per_s, peak_rss_bytes, peak_gpu_bytes, params, host, device, "
    "error, created_at, started_at, finished_at, ingest_offset, last_seq, ingest_position, "
    "interventions";

}  // namespace

TEST_CASE("a version-5 store with runs upgrades to version 6 with every row intact") {
  TempDir dir;
  const std::string path = dir.file("old.db");
  std::vector<std::string> runs, axes, attempts, evals;
  {
    Database db(path, Database::Mode::kReadWriteCreate);
    const Migration v5[] = {migrations()[0], migrations()[1], migrations()[2], migrations()[3],
                            migrations()[4]};
    migrate(db, v5);
    db.exec(R"sql(
      INSERT INTO sweeps (sweep_id, name, recipe_path, recipe_text, target_json, target_val_loss,
                          runs_dir, created_at, updated_at)
      VALUES (1, 's', 'r.yaml', 'name: s', '{"from_arm":"fp8"}', 3.25, 'runs', 1.5, 2.5);
      INSERT INTO runs (run_id, sweep_id, arm, arm_index, plan_index, config_json, run_dir, status,
                        attempts, max_tokens, step, tokens, final_val_loss, params, host, error,
                        created_at, started_at, finished_at, ingest_offset, last_seq,
                        ingest_position, interventions)
      VALUES ('a', 1, 'fp8', 0, 0, '{"model":"llama-20m"}', 'runs/a', 'converged', 2, 1e6, 10,
              1000, 3.1, 22020096, 'h1', NULL, 1.0, 2.0, 3.0, 512, 7, '{"hash":"x"}', '-'),
             ('b', 1, 'F', 1, 1, '{"model":{"d_model":64}}', 'runs/b', 'failed', 1, 1e6, NULL,
              NULL, NULL, NULL, NULL, 'out of memory', 1.0, NULL, NULL, 0, 0, NULL, 'F'),
             ('c', 1, 'F', 1, NULL, 'not json', 'runs/c', 'interrupted', 3, 2e6, 5, 500, NULL,
              NULL, 'h2', NULL, 1.0, 2.0, NULL, 10, 2, NULL, NULL);
      INSERT INTO run_axes VALUES ('a', 'seed', '1', 0), ('b', 'seed', '1', 0), ('c', 'seed', '2', 0);
      INSERT INTO attempts (run_id, attempt, executor, launched_at, ended_at, outcome, prestarted,
                            train_s)
      VALUES ('a', 1, 'local', 1.0, 2.0, 'retry', 1, 0.5), ('a', 2, 'local', 2.0, 3.0,
              'converged', 0, NULL), ('b', 1, 'slurm', 1.0, 1.5, 'failed', 0, NULL);
      INSERT INTO evals VALUES ('a', 3, 5, 500, 3.4, 1.0), ('a', 6, 10, 1000, 3.1, 2.0);
    )sql");
    runs = rows_of(db, "runs", kRunColumnsV5, "run_id");
    axes = rows_of(db, "run_axes", "*", "run_id, axis");
    attempts = rows_of(db, "attempts", "*", "run_id, attempt");
    evals = rows_of(db, "evals", "*", "run_id, seq");
  }
  // The store opens with foreign keys on: the rebuild must not cascade into run_axes or attempts.
  ResultsStore store(path);
  REQUIRE(schema_version(store.db()) == 6);
  CHECK(rows_of(store.db(), "runs", kRunColumnsV5, "run_id") == runs);
  CHECK(rows_of(store.db(), "run_axes", "*", "run_id, axis") == axes);
  CHECK(rows_of(store.db(), "attempts", "*", "run_id, attempt") == attempts);
  CHECK(rows_of(store.db(), "evals", "*", "run_id, seq") == evals);
  // A preset's name is its model label; a custom shape's and unreadable JSON's are unknown.
  CHECK(rows_of(store.db(), "runs", "run_id, model", "run_id") ==
        std::vector<std::string>{"a|llama-20m|", "b|NULL|", "c|NULL|"});
  Statement fk(store.db(), "PRAGMA foreign_keys");
  fk.step();
  CHECK(fk.get_int(0) == 1);  // back on after the migration
  Statement check(store.db(), "PRAGMA foreign_key_check");
  CHECK_FALSE(check.step());
  // The index and every view are back.
  CHECK(objects(store.db(), "index").count("runs_by_sweep") == 1);
  for (const auto& v : objects(store.db(), "view")) Statement(store.db(), "SELECT * FROM " + v).step();
  // The widened constraint: the new status is accepted, unknown ones still refused.
  store.set_status("b", status::kProjectedNotReached);
  CHECK(store.run("b").status == "projected_not_reached");
  CHECK_THROWS_AS(store.set_status("b", "hopeless"), SqliteError);
  // The foreign keys hold after the rebuild: a plan of runs of a sweep that does not exist fails.
  CHECK_THROWS_AS(store.db().exec("INSERT INTO runs (run_id, sweep_id, arm, arm_index, "
                                  "config_json, run_dir, created_at) VALUES ('x', 99, 'a', 0, "
                                  "'{}', 'd', 1)"),
                  SqliteError);
}

TEST_CASE("a run projected not to reach the target is a final result") {
  CHECK(is_final_result(status::kProjectedNotReached));
  CHECK(is_final_result(status::kConverged));
  CHECK_FALSE(is_final_result(status::kFailed));
  CHECK_FALSE(is_final_result(status::kRunning));
}

TEST_CASE("block targets: one per model of a sweep, stored idempotently, read back by sweep") {
  TempDir dir;
  ResultsStore store(dir.file("a.db"));
  const int64_t id = store.register_sweep(sweep_named("s"));
  const int64_t other = store.register_sweep(sweep_named("t"));
  CHECK(store.block_targets(id).empty());
  store.set_block_target(id, "llama-20m", 3.5, "median of arm fp8 at 10 % of its budget");
  store.set_block_target(id, "llama-125m", 3.0, "");
  store.set_block_target(other, "llama-20m", 4.0, "fixed");
  store.db().exec("UPDATE block_targets SET fixed_at = 1.0");
  // The same values again change nothing, not even when it was fixed.
  store.set_block_target(id, "llama-20m", 3.5, "median of arm fp8 at 10 % of its budget");
  Statement at(store.db(), "SELECT fixed_at FROM block_targets WHERE model = 'llama-20m' AND sweep_id = ?1");
  at.bind(1, id);
  REQUIRE(at.step());
  CHECK(at.get_double(0) == 1.0);
  at.reset();
  // New values replace the old ones.
  store.set_block_target(id, "llama-125m", 2.9, "re-resolved");
  const std::vector<BlockTarget> targets = store.block_targets(id);
  REQUIRE(targets.size() == 2);
  CHECK(targets[0].model == "llama-125m");
  CHECK(targets[0].val_loss == 2.9);
  CHECK(targets[0].basis == "re-resolved");
  CHECK(targets[1].model == "llama-20m");
  CHECK(targets[1].val_loss == 3.5);
  CHECK(store.block_targets(other).size() == 1);
  // A read-only connection reads them too; one to a database from before version 6 reads none.
  Database reader(dir.file("a.db"), Database::Mode::kReadOnly);
  CHECK(read_block_targets(reader, id).size() == 2);
  {
    Database old(dir.file("v5.db"), Database::Mode::kReadWriteCreate);
    const Migration v5[] = {migrations()[0], migrations()[1], migrations()[2], migrations()[3],
                            migrations()[4]};
    migrate(old, v5);
  }
  Database old_reader(dir.file("v5.db"), Database::Mode::kReadOnly);
  CHECK(read_block_targets(old_reader, 1).empty());
}
