// `mxablate ingest` as a user runs it, on run directories written here (config.json from `mxablate
// plan --json`, events.jsonl by hand), checked through `mxablate query --json` against figures
// computed by hand: every train step, evaluation and lifecycle event, the runs row as a sweep run
// has it; ingesting again changes nothing; and each hostile input refused in one line naming the
// file, key or line (exit 2) with the database's earlier rows intact.
#include <nlohmann/json.hpp>

#include "catch.h"
#include "mxablate/results/store.h"
#include "test_util.h"

using namespace mxablate::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Arm A's run: 4 train steps (tokens/s 100, 200, 400, 300), evaluations at steps 2 and 4, a
// run_end, and a last line cut short (a writer killed mid-line), which is not read.
std::string log_of_run_a(bool with_run_end = true) {
  std::string log =
      R"({"seq": 1, "kind": "run_start", "time": 1700000001, "step": 0, "tokens": 0, "params": 622912, "device": "cpu", "recompute": {"blocks": 0, "of": 2, "reason": "every block kept"}}
{"seq": 2, "kind": "train", "time": 1700000002, "step": 1, "tokens": 1024, "loss": 8.0, "lr": 0.001, "grad_norm": 1.5, "tokens_per_s": 100}
{"seq": 3, "kind": "train", "time": 1700000003, "step": 2, "tokens": 2048, "loss": 7.0, "lr": 0.001, "grad_norm": 1.25, "tokens_per_s": 200}
{"seq": 4, "kind": "eval", "time": 1700000004, "step": 2, "tokens": 2048, "val_loss": 7.5}
{"seq": 5, "kind": "train", "time": 1700000005, "step": 3, "tokens": 3072, "loss": 6.0, "lr": 0.001, "grad_norm": 1.0, "tokens_per_s": 400}
{"seq": 6, "kind": "train", "time": 1700000006, "step": 4, "tokens": 4096, "loss": 5.0, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 300}
{"seq": 7, "kind": "eval", "time": 1700000007, "step": 4, "tokens": 4096, "val_loss": 5.5}
)";
  if (with_run_end)
    log += R"({"seq": 8, "kind": "run_end", "time": 1700000008, "step": 4, "tokens": 4096, "status": "budget_exhausted", "wall_s": 7.0, "tokens_per_s": 250, "peak_rss_bytes": 1000000, "peak_gpu_bytes": 2147483648}
)";
  return log + R"({"seq": 9, "kind": "train", "time": 1700000009, "st)";
}

struct IngestFixture {
  TempDir dir;
  fs::path db = dir.path() / "runs.db";
  std::vector<json> planned;  // `mxablate plan --json` of a two-arm, two-seed recipe

  IngestFixture() {
    write_file(dir.path() / "sweep.yaml", fake_recipe("cli", 4, 2, 0));
    const ProcessResult p = mx({"plan", (dir.path() / "sweep.yaml").string(), "--json"});
    REQUIRE(p.code() == 0);
    planned = json::parse(p.out).get<std::vector<json>>();
    REQUIRE(planned.size() == 4);
  }

  ProcessResult mx(std::vector<std::string> args) {
    args.insert(args.begin(), kMxablate.string());
    return run_process(args, dir.path());
  }

  // A run directory holding `config` and `log` (no events.jsonl when nullopt).
  fs::path run_dir(const std::string& name, const json& config, const std::optional<std::string>& log) {
    const fs::path d = dir.path() / name;
    write_file(d / "config.json", config.dump(2));
    if (log) write_file(d / "events.jsonl", *log);
    return fs::canonical(d);
  }

  ProcessResult ingest(const std::vector<std::string>& dirs, const std::string& sweep = "speed") {
    std::vector<std::string> args{"ingest", "--db", db.string(), "--sweep", sweep};
    args.insert(args.end(), dirs.begin(), dirs.end());
    return mx(args);
  }

  json query(const std::string& sql) {
    const ProcessResult r = mx({"query", "--db", db.string(), "--json", sql});
    INFO(r.err);
    REQUIRE(r.code() == 0);
    return json::parse(r.out);
  }

  // Every row the runs' ingestion writes, for comparing the database before and after.
  std::string dump() {
    std::string all;
    for (const char* table : {"sweeps", "runs", "train_steps", "evals", "quant_stats", "events"})
      all += query(std::string("SELECT * FROM ") + table).dump() + "\n";
    return all;
  }
};

std::string ingested_line(const fs::path& d, const json& config, const std::string& what) {
  return "ingested " + d.string() + ": run " + config["run_id"].get<std::string>() +
         " of sweep speed, arm " + config["arm"].get<std::string>() + ": " + what + "\n";
}

}  // namespace

TEST_CASE("ingest stores a run directory as a sweep's run: rows as computed by hand") {
  IngestFixture f;
  const json& config = f.planned[0]["config"];  // arm A, seed 1
  const fs::path a = f.run_dir("run-a", config, log_of_run_a());
  const ProcessResult r = f.ingest({a.string()});
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(r.err.empty());
  CHECK(r.out == ingested_line(a, config, "budget_exhausted, 8 events (8 new)"));

  // Every complete train line, in order; the line cut short is not there.
  CHECK(f.query("SELECT step, tokens, loss, tokens_per_s FROM train_steps ORDER BY seq") ==
        json::parse(R"([{"step": 1, "tokens": 1024, "loss": 8.0, "tokens_per_s": 100.0},
                        {"step": 2, "tokens": 2048, "loss": 7.0, "tokens_per_s": 200.0},
                        {"step": 3, "tokens": 3072, "loss": 6.0, "tokens_per_s": 400.0},
                        {"step": 4, "tokens": 4096, "loss": 5.0, "tokens_per_s": 300.0}])"));
  CHECK(f.query("SELECT step, val_loss FROM evals ORDER BY seq") ==
        json::parse(R"([{"step": 2, "val_loss": 7.5}, {"step": 4, "val_loss": 5.5}])"));
  // The median tokens/s after the warm-up steps (run_figures.py's 3): the step-4 rate.
  CHECK(f.query("SELECT tokens_per_s FROM train_steps WHERE step > 3") ==
        json::parse(R"([{"tokens_per_s": 300.0}])"));
  // Lifecycle events keep what their lines said, in detail: run_start's recompute, run_end's peaks.
  CHECK(f.query("SELECT kind, json_extract(detail, '$.recompute.reason') AS recompute, "
                "json_extract(detail, '$.peak_gpu_bytes') AS peak FROM events ORDER BY seq") ==
        json::parse(R"([{"kind": "run_start", "recompute": "every block kept", "peak": null},
                        {"kind": "run_end", "recompute": null, "peak": 2147483648}])"));
  // The runs row: identity from config.json, figures from the log, status from run_end.
  const json row = f.query(
      "SELECT r.run_id, s.name AS sweep, s.recipe_path, r.arm, r.plan_index, r.model, r.max_tokens, "
      "r.run_dir, r.status, r.trainer_status, r.error, r.step, r.tokens, r.train_loss, "
      "r.final_val_loss, r.best_val_loss, r.tokens_per_s, r.peak_rss_bytes, r.peak_gpu_bytes, "
      "r.params, r.device, r.started_at, r.finished_at FROM runs r JOIN sweeps s USING (sweep_id)");
  REQUIRE(row.size() == 1);
  const json& got = row[0];
  CHECK(got["run_id"] == config["run_id"]);
  CHECK(got["sweep"] == "speed");
  CHECK(got["recipe_path"] == mxablate::results::kIngestedRecipePath);
  CHECK(got["arm"] == "A");
  CHECK(got["plan_index"] == 0);
  CHECK(got["model"] == "smoke");
  CHECK(got["max_tokens"] == 4096.0);
  CHECK(got["run_dir"] == a.string());
  CHECK(got["status"] == "budget_exhausted");
  CHECK(got["trainer_status"] == "budget_exhausted");
  CHECK(got["error"].is_null());
  CHECK(got["step"] == 4);
  CHECK(got["tokens"] == 4096);
  CHECK(got["train_loss"] == 5.0);
  CHECK(got["final_val_loss"] == 5.5);
  CHECK(got["best_val_loss"] == 5.5);
  CHECK(got["tokens_per_s"] == 250.0);
  CHECK(got["peak_rss_bytes"] == 1000000);
  CHECK(got["peak_gpu_bytes"] == 2147483648LL);
  CHECK(got["params"] == 622912);
  CHECK(got["device"] == "cpu");
  CHECK(got["started_at"] == 1700000001.0);
  CHECK(got["finished_at"] == 1700000008.0);
  // The config as `mxablate run` stores it: the contract's writer's JSON, its run_id included.
  CHECK(json::parse(f.query("SELECT config_json FROM runs")[0]["config_json"].get<std::string>()) ==
        config);
  // The views answer for it as for a sweep run.
  CHECK(f.query("SELECT sweep, arm, runs, budget_exhausted FROM arm_summary") ==
        json::parse(R"([{"sweep": "speed", "arm": "A", "runs": 1, "budget_exhausted": 1}])"));
  const ProcessResult s = f.mx({"status", "--db", f.db.string()});
  CHECK(s.code() == 0);
  CHECK(contains(s.out, "sweep speed: 1 runs"));
}

TEST_CASE("ingest again: nothing changes, and a second run joins after the first") {
  IngestFixture f;
  const json& config_a = f.planned[0]["config"];
  const json& config_b = f.planned[3]["config"];  // arm B, seed 2
  const fs::path a = f.run_dir("run-a", config_a, log_of_run_a());
  REQUIRE(f.ingest({a.string()}).code() == 0);
  const std::string before = f.dump();
  for (int i = 0; i < 2; ++i) {
    // The same directory again, also named twice on one command line.
    const ProcessResult r = i == 0 ? f.ingest({a.string()}) : f.ingest({a.string(), a.string()});
    INFO(r.err);
    REQUIRE(r.code() == 0);
    CHECK(r.out == ingested_line(a, config_a, "budget_exhausted, 8 events (0 new)"));
    // Every row as it was (sweeps.updated_at aside: the sweep was written to).
    std::string now = f.dump();
    CHECK(f.query("SELECT COUNT(*) AS n FROM train_steps")[0]["n"] == 4);
    CHECK(now.substr(now.find('\n')) == before.substr(before.find('\n')));
  }

  // A run without run_end (the trainer was killed, or still writes): interrupted, saying why.
  const fs::path b = f.run_dir("run-b", config_b, log_of_run_a(false));
  ProcessResult r = f.ingest({b.string()});
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(r.out == ingested_line(b, config_b, "interrupted, 7 events (7 new)"));
  CHECK(f.query("SELECT arm, plan_index, status, error FROM runs ORDER BY plan_index") ==
        json{{{"arm", "A"}, {"plan_index", 0}, {"status", "budget_exhausted"}, {"error", nullptr}},
             {{"arm", "B"}, {"plan_index", 1}, {"status", "interrupted"},
              {"error", "events.jsonl has no run_end: the trainer stopped before its final status, "
                        "or is still running"}}});
  // Its log gains the rest: ingested again, only the new lines are added and the status follows.
  std::string log = log_of_run_a();
  write_file(b / "events.jsonl", log);
  r = f.ingest({b.string()});
  REQUIRE(r.code() == 0);
  CHECK(r.out == ingested_line(b, config_b, "budget_exhausted, 8 events (1 new)"));
  CHECK(f.query("SELECT run_id, COUNT(*) AS n FROM train_steps GROUP BY run_id ORDER BY n").size() == 2);
  CHECK(f.query("SELECT status FROM runs ORDER BY plan_index") ==
        json::parse(R"([{"status": "budget_exhausted"}, {"status": "budget_exhausted"}])"));
}

TEST_CASE("ingest refuses hostile input in one line, exit 2, the database intact") {
  IngestFixture f;
  const json& config = f.planned[0]["config"];
  const fs::path a = f.run_dir("run-a", config, log_of_run_a());
  REQUIRE(f.ingest({a.string()}).code() == 0);
  const std::string before = f.dump();

  json wrong_type = f.planned[1]["config"];
  wrong_type["train"]["lr"] = "fast";
  std::string garbage = log_of_run_a();
  garbage.insert(garbage.find("{\"seq\": 3"), "this is no event\n");
  const fs::path copy = f.dir.path() / "copy-of-run-a";
  fs::create_directories(copy);
  fs::copy(a, copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);

  struct Case {
    std::string what;
    std::vector<std::string> dirs;
    std::string sweep;
    std::string message;  // what the one line says (after "mxablate: ")
  };
  const fs::path bad_json = f.dir.path() / "bad-json";
  write_file(bad_json / "config.json", "{\"run_id\": \"x\", \"train\": {");
  write_file(bad_json / "events.jsonl", log_of_run_a());
  const fs::path no_config = f.dir.path() / "no-config";
  write_file(no_config / "events.jsonl", log_of_run_a());
  const std::vector<Case> cases{
      {"malformed config.json", {bad_json.string()}, "speed",
       fs::canonical(bad_json).string() + "/config.json: "},
      {"a key of the wrong type", {f.run_dir("wrong-type", wrong_type, log_of_run_a()).string()},
       "speed", "/wrong-type/config.json: train.lr: "},
      {"no config.json", {no_config.string()}, "speed", "/no-config/config.json: does not exist"},
      {"a garbage line in the middle of the log",
       {f.run_dir("garbage", f.planned[1]["config"], garbage).string()}, "speed",
       "/garbage/events.jsonl: line 3: "},
      {"no events.jsonl", {f.run_dir("no-log", f.planned[1]["config"], std::nullopt).string()},
       "speed", "/no-log/events.jsonl: does not exist"},
      {"a directory that does not exist", {(f.dir.path() / "nowhere").string()}, "speed",
       (f.dir.path() / "nowhere").string() + ": no such run directory"},
      {"a good directory after a bad one: neither is stored",
       {f.run_dir("good-b", f.planned[3]["config"], log_of_run_a()).string(),
        (f.dir.path() / "nowhere").string()},
       "speed", "nowhere: no such run directory"},
      {"the run into another sweep", {a.string()}, "other", "is already in sweep 'speed'"},
      {"the same run from another directory", {copy.string()}, "speed",
       "is already ingested from " + a.string()},
      {"one run from two directories at once",
       {f.run_dir("twin-1", f.planned[2]["config"], log_of_run_a()).string(),
        f.run_dir("twin-2", f.planned[2]["config"], log_of_run_a()).string()},
       "speed", "(the same config.json) is also "},
      {"a sweep name no recipe could have", {a.string()}, "no/such", "--sweep: \"no/such\""},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const ProcessResult r = f.ingest(c.dirs, c.sweep);
    CHECK(r.code() == 2);
    CHECK(r.out.empty());
    INFO(r.err);
    CHECK(lines_of(r.err).size() == 1);
    CHECK(r.err.rfind("mxablate: ", 0) == 0);
    CHECK(contains(r.err, c.message));
    CHECK(f.dump() == before);
  }

  // A --db that is not a results database: refused as `run` refuses it, and left as it was.
  write_file(f.dir.path() / "notes.db", "not a database\n");
  const ProcessResult n =
      f.mx({"ingest", "--db", f.dir.file("notes.db"), "--sweep", "speed", a.string()});
  CHECK(n.code() == 2);
  CHECK(n.err == "mxablate: " + f.dir.file("notes.db") +
                     ": not a results database (not an SQLite file); it is left alone — pass "
                     "another --db\n");
  CHECK(read_file(f.dir.path() / "notes.db") == "not a database\n");

  // A sweep of that name made by `mxablate run` (a recipe's absolute path): never joined.
  {
    mxablate::results::ResultsStore store(f.db.string());
    mxablate::results::SweepRecord s;
    s.name = "from-recipe";
    s.recipe_path = "/recipes/from-recipe.yaml";
    s.recipe_text = "name: from-recipe";
    s.runs_dir = "/runs";
    store.register_sweep(s);
  }
  const std::string with_sweep = f.dump();
  const fs::path b = f.run_dir("run-b", f.planned[3]["config"], log_of_run_a());
  const ProcessResult r = f.ingest({b.string()}, "from-recipe");
  CHECK(r.code() == 2);
  CHECK(lines_of(r.err).size() == 1);
  CHECK(contains(r.err, "sweep 'from-recipe' holds the runs of the recipe "
                        "/recipes/from-recipe.yaml (mxablate run); ingest into a sweep of another name"));
  CHECK(f.dump() == with_sweep);
}
