// Read-only queries: results come back typed, anything that would write is refused before it
// runs, and the database is never modified.
#include "catch.h"
#include "mxablate/results/ingest.h"
#include "mxablate/results/query.h"
#include "mxablate/results/schema.h"
#include "store_fixture.h"

using namespace mxablate::results;
using mxablate::testing::StoreFixture;
using mxablate::testing::TempDir;

TEST_CASE("a read-only query returns columns and typed rows") {
  StoreFixture f({"r1", "r2"});
  ingest_events(f.store.db(), "r1",
                {{{"seq", 1}, {"kind", "eval"}, {"step", 5}, {"tokens", 500}, {"val_loss", 3.25}}},
                1);
  auto db = open_read_only(f.dir.file("results.db"));
  const QueryResult r = run_read_only_query(
      *db, "SELECT run_id, step, val_loss, NULL AS empty FROM evals ORDER BY run_id");
  REQUIRE(r.columns == std::vector<std::string>{"run_id", "step", "val_loss", "empty"});
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0][0] == "r1");
  CHECK(r.rows[0][1] == 5);
  CHECK(r.rows[0][2].get<double>() == Approx(3.25));
  CHECK(r.rows[0][3].is_null());
  // Several statements: the rows of the last one with columns.
  const QueryResult two = run_read_only_query(*db, "SELECT 1; SELECT 2 AS b, 3 AS c;");
  CHECK(two.columns == std::vector<std::string>{"b", "c"});
  CHECK(two.rows[0][1] == 3);
}

TEST_CASE("statements that would write are refused and change nothing") {
  StoreFixture f({"r1"});
  auto db = open_read_only(f.dir.file("results.db"));
  for (const char* sql : {"DELETE FROM runs", "UPDATE runs SET status = 'failed'",
                          "INSERT INTO sweeps (name) VALUES ('x')", "DROP TABLE evals",
                          "CREATE TABLE t (x)", "PRAGMA user_version = 7",
                          "SELECT 1; DELETE FROM runs", "VACUUM", "REINDEX"}) {
    INFO(sql);
    try {
      run_read_only_query(*db, sql);
      FAIL("expected a refusal");
    } catch (const WriteRefused& e) {
      CHECK(std::string(e.what()).find("read-only") != std::string::npos);
    }
  }
  try {
    run_read_only_query(*db, "ATTACH DATABASE '" + f.dir.file("other.db") + "' AS o");
    FAIL("expected a refusal");
  } catch (const WriteRefused& e) {
    CHECK(std::string(e.what()).find("ATTACH") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(f.dir.file("other.db")));
  CHECK(f.scalar<int>("SELECT COUNT(*) FROM runs") == 1);
  CHECK(f.scalar<std::string>("SELECT status FROM runs") == "pending");
  CHECK(f.scalar<int>("PRAGMA user_version") == latest_schema_version());
}

TEST_CASE("bad SQL and missing databases are one clear error each") {
  StoreFixture f;
  auto db = open_read_only(f.dir.file("results.db"));
  try {
    run_read_only_query(*db, "SELEC * FROM runs");
    FAIL("expected an error");
  } catch (const SqliteError& e) {
    CHECK(std::string(e.what()).find("query: near \"SELEC\"") != std::string::npos);
  }
  CHECK_THROWS_AS(run_read_only_query(*db, "  -- only a comment"), SqliteError);
  TempDir empty;
  try {
    open_read_only(empty.file("nothing.db"));
    FAIL("expected an error");
  } catch (const SqliteError& e) {
    CHECK(std::string(e.what()).find("nothing.db: no results database") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(empty.file("nothing.db")));  // not created by looking
}
