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
  CHECK(latest_schema_version() == 5);
  for (const char* c : {"prestarted", "setup_s", "standby_s", "train_s", "eval_s", "checkpoint_s"})
    Statement(store.db(), std::string("SELECT ") + c + " FROM attempts").step();
  Statement mode(store.db(), "PRAGMA journal_mode");
  mode.step();
  CHECK(mode.get_text(0) == "wal");
  const auto tables = objects(store.db(), "table");
  for (const char* t : {"sweeps", "runs", "run_axes", "attempts", "evals", "train_steps",
                        "quant_stats", "events"})
    CHECK(tables.count(t) == 1);
  const auto views = objects(store.db(), "view");
  for (const char* v : {"run_summary", "run_tokens_to_target", "arm_summary", "divergence_events",
                        "run_extra_tokens"})
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
      {6, "add a note column", "ALTER TABLE runs ADD COLUMN note TEXT;"},
      {7, "add a table", "CREATE TABLE extra (x INTEGER);"},
  };
  CHECK(migrate(db, extended) == 2);
  CHECK(schema_version(db) == 7);
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
