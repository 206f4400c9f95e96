// The `mxablate plan | run | status | query` commands as a user runs them: output, exit codes,
// and one clear line for each setup error (missing trainer, unwritable runs directory,
// database on a read-only or full filesystem).
#include <sys/mount.h>

#include <algorithm>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "test_util.h"

using namespace mxablate::testing;
namespace fs = std::filesystem;

namespace {

struct CliFixture {
  TempDir dir;
  fs::path recipe = dir.path() / "sweep.yaml";
  CliFixture(const std::string& text = fake_recipe("cli", 12, 4, 5)) { write_file(recipe, text); }
  std::vector<std::string> run_args(std::vector<std::string> extra = {}) {
    std::vector<std::string> a{kMxablate.string(), "run", recipe.string(), "--trainer",
                               kFakeTrainer.string(), "--cpu", "2", "--poll-ms", "20"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  ProcessResult mx(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), kMxablate.string());
    return run_process(args, dir.path(), env);
  }
};

}  // namespace

TEST_CASE("plan lists every run with its axes and the totals") {
  CliFixture f;
  const ProcessResult r = f.mx({"plan", f.recipe.string()});
  REQUIRE(r.code() == 0);
  CHECK(r.err.empty());
  const auto lines = lines_of(r.out);
  // title, header, 4 runs, what params and interventions mean, totals
  REQUIRE(lines.size() == 9);
  CHECK(lines[0] == "sweep cli (" + f.recipe.string() + ")");
  CHECK(lines[1].rfind("  #  run_id            arm  seed  model  params  fprop  dgrad  wgrad  interventions  tokens", 0) == 0);
  CHECK(contains(lines[5], " B "));
  CHECK(contains(lines[5], "mxfp4"));
  CHECK(contains(lines[5], " smoke  623k "));  // 622,912 parameters at the dataset's 4096 tokens
  CHECK(lines[6] == "params: the model's parameters with the embeddings of its dataset's "
                    "4096-token vocabulary");
  CHECK(lines[7] == "interventions: the settings that differ from arm A's run at the same grid point");
  CHECK(lines[8] == "4 runs (2 arms × 2 grid combinations), 49.2k tokens");
  const ProcessResult j = f.mx({"plan", f.recipe.string(), "--json"});
  const auto runs = nlohmann::json::parse(j.out);
  REQUIRE(runs.size() == 4);
  CHECK(runs[3]["arm"] == "B");
  CHECK(runs[3]["axes"]["seed"] == 2);
  CHECK(runs[3]["config"]["precision"]["wgrad"] == "mxfp4");
  CHECK(runs[3]["config"]["run_id"] == runs[3]["run_id"]);
  CHECK(runs[3]["model"] == nlohmann::json{{"label", "smoke"},
                                           {"non_embedding_parameters", 98624},
                                           {"vocab_size", 4096},
                                           {"parameters", 622912}});
}

TEST_CASE("plan names custom shapes by their label and counts each model's parameters") {
  std::string recipe = fake_recipe("cli", 12, 4, 5, "[1]");
  recipe.replace(recipe.find("  model: smoke"), std::string("  model: smoke").size(),
                 "  model: {d_model: 128, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 384}");
  recipe += "  model: [llama-350m, {d_model: 128, n_layers: 2, n_heads: 4, n_kv_heads: 2, "
            "ffn_hidden: 384}]\n";
  CliFixture f(recipe);
  const ProcessResult r = f.mx({"plan", f.recipe.string()});
  INFO(r.err);
  REQUIRE(r.code() == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 9);
  // The model axis names each run's model; no second model column repeats it.
  CHECK(lines[1].rfind("  #  run_id            arm  seed  model              params  fprop", 0) == 0);
  // llama-350m at 4096 tokens: 316,720,128; d128-L2: 2·(2·128² + 2·128·64 + 3·128·384 + 256)
  // + 128 + 2·4096·128 = 1,442,432.
  CHECK(contains(lines[2], " llama-350m         317M "));
  CHECK(contains(lines[3], " d128-L2-h4/2-f384  1.44M "));
  const ProcessResult j = f.mx({"plan", f.recipe.string(), "--json"});
  const auto runs = nlohmann::json::parse(j.out);
  REQUIRE(runs.size() == 4);
  CHECK(runs[0]["model"]["parameters"] == 316720128);
  CHECK(runs[1]["model"]["label"] == "d128-L2-h4/2-f384");
  CHECK(runs[1]["model"]["parameters"] == 1442432);
  CHECK(runs[1]["axes"]["model"]["d_model"] == 128);
  CHECK(runs[0]["config"]["model"] == "llama-350m");
}

TEST_CASE("plan --layers prints every layer's resolved precisions per arm and phase") {
  std::string recipe = fake_recipe("cli", 12, 4, 5);
  recipe.replace(recipe.find("grid:"), 0, R"(  C:
    extends: B
    overrides: [{layers: "blocks.1.mlp.*", precision: {wgrad: bf16}}]
    precision_schedule: [{at_fraction: 0.5, precision: {fprop: fp8}}]
)");
  CliFixture f(recipe);
  const ProcessResult r = f.mx({"plan", f.recipe.string(), "--layers"});
  INFO(r.err);
  REQUIRE(r.code() == 0);
  const std::string& out = r.out;
  const auto section = [&](const std::string& from, const std::string& to) {
    const size_t a = out.find(from);
    REQUIRE(a != std::string::npos);
    return out.substr(a, to.empty() ? std::string::npos : out.find(to, a) - a);
  };
  // Arm A: the base precisions everywhere, the LM head plain BF16.
  const std::string a = section("arm A (run ", "arm B (run ");
  CHECK(contains(a, "blocks.0.attn.q    bf16   bf16   bf16"));
  CHECK(contains(a, "lm_head            bf16   bf16   bf16"));
  const std::string b = section("arm B (run ", "arm C (run ");
  CHECK(contains(b, "blocks.1.mlp.up    mxfp4  mxfp4  mxfp4"));
  // Arm C: its override, then from half the budget the schedule's Fprop under the override.
  const std::string c0 = section("arm C (run ", ", from 0.5 of the token budget");
  CHECK(contains(c0, "blocks.1.mlp.up    mxfp4  mxfp4  bf16"));
  CHECK(contains(c0, "blocks.0.mlp.up    mxfp4  mxfp4  mxfp4"));
  const std::string c1 = section(", from 0.5 of the token budget", "");
  CHECK(contains(c1, "blocks.1.mlp.up    fp8    mxfp4  bf16"));
  CHECK(contains(c1, "blocks.0.attn.q    fp8    mxfp4  mxfp4"));
  CHECK(contains(c1, "lm_head            bf16   bf16   bf16"));
}

TEST_CASE("run, then status and query read the results") {
  CliFixture f;
  const ProcessResult r = run_process(f.run_args({"--progress", "plain"}), f.dir.path());
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(contains(r.out, "sweep cli: 4 runs in 2 slot(s)"));
  CHECK(contains(r.out, "sweep cli: 0 converged, 4 budget_exhausted, 0 diverged, 0 failed"));
  CHECK(contains(r.err, "launched A seed=1 ["));
  CHECK(contains(r.err, "finished B seed=2 ["));

  const ProcessResult s = f.mx({"status"});
  REQUIRE(s.code() == 0);
  const auto lines = lines_of(s.out);
  REQUIRE(lines.size() == 12);
  CHECK(lines[0].rfind("sweep cli: 4 runs, 4 budget_exhausted (recipe " + f.recipe.string(), 0) == 0);
  CHECK(lines[1].rfind("  run_id            arm  seed  status            att  step  tokens", 0) == 0);
  CHECK(contains(lines[2], "  A       1  budget_exhausted    1    12  12.3k/12.3k"));
  CHECK(lines[6].rfind("  busy: cpu0 ", 0) == 0);  // prestart_test.cpp checks the figures
  // Where each slot's time went: a heading, the columns, a row per slot and one for all.
  CHECK(lines[7].rfind("  time per slot, as shares of the ", 0) == 0);
  CHECK(lines[8].rfind("    slot  train  eval", 0) == 0);
  CHECK(lines[9].rfind("    cpu0  ", 0) == 0);
  CHECK(lines[10].rfind("    cpu1  ", 0) == 0);
  CHECK(lines[11].rfind("    all   ", 0) == 0);

  ProcessResult q = f.mx({"query", "--csv", "SELECT arm, COUNT(*) AS runs, SUM(status = "
                                            "'budget_exhausted') AS done FROM runs GROUP BY arm"});
  REQUIRE(q.code() == 0);
  CHECK(q.out == "arm,runs,done\nA,2,2\nB,2,2\n");
  q = f.mx({"query", "--json", "SELECT e.step, val_loss FROM evals e JOIN runs r USING (run_id) "
                               "WHERE r.arm = 'A' AND r.run_id = (SELECT MIN(run_id) FROM runs "
                               "WHERE arm = 'A') ORDER BY e.step"});
  REQUIRE(q.code() == 0);
  const auto rows = nlohmann::json::parse(q.out);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["step"] == 4);
  CHECK(rows[2]["step"] == 12);
  CHECK(rows[2]["val_loss"].get<double>() < rows[0]["val_loss"].get<double>());
  q = f.mx({"query", "SELECT COUNT(*) AS n FROM run_summary"});
  CHECK(q.out == "n\n4\n(1 row)\n");
  q = f.mx({"query", "DELETE FROM runs"});
  CHECK(q.code() == 2);
  CHECK(contains(q.err, "refusing a statement that would modify the database (DELETE FROM runs); "
                        "`mxablate query` is read-only"));
  q = f.mx({"query", "SELECT * FROM no_such_table"});
  CHECK(q.code() == 2);
  CHECK(q.err == "mxablate: query: no such table: no_such_table\n");
  CHECK(f.mx({"status", "--sweep", "other"}).code() == 2);
  CHECK(f.mx({"status", "--db", f.dir.file("none.db")}).err ==
        "mxablate: " + f.dir.file("none.db") + ": no results database here (run a sweep first, or "
        "pass --db)\n");
}

TEST_CASE("failed runs make `run` exit 1 and are retried by the next run") {
  CliFixture f;
  ProcessResult r = run_process(f.run_args(), f.dir.path(), {{"MXABLATE_FAKE_EXIT", "2@B/1"}});
  CHECK(r.code() == 1);
  CHECK(contains(r.err, "mxablate: 1 run(s) failed; see `mxablate status --db mxablate.db`"));
  r = run_process(f.run_args(), f.dir.path());
  CHECK(r.code() == 0);
  CHECK(contains(r.err, "retrying B seed=1 ["));
  CHECK(contains(f.mx({"status"}).out, "4 budget_exhausted"));
}

TEST_CASE("a missing trainer binary is one clear error (exit 2), before anything is created") {
  CliFixture f;
  ProcessResult r = run_process({kMxablate.string(), "run", f.recipe.string(), "--trainer",
                                 f.dir.file("mxablate-train")},
                                f.dir.path());
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: trainer binary " + f.dir.file("mxablate-train") +
                     " (from --trainer) does not exist\n");
  r = run_process({kMxablate.string(), "run", f.recipe.string()}, f.dir.path(),
                  {{"MXABLATE_TRAINER", f.dir.path().string()}});
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: trainer binary " + f.dir.path().string() +
                     " (from MXABLATE_TRAINER) is a directory\n");
  CHECK_FALSE(fs::exists(f.dir.path() / "runs"));
  CHECK_FALSE(fs::exists(f.dir.path() / "mxablate.db"));
}

TEST_CASE("an unwritable runs directory is one clear error, before the database is created") {
  CliFixture f;
  write_file(f.dir.path() / "plain-file", "x");
  const ProcessResult r = run_process(
      f.run_args({"--runs-dir", (f.dir.path() / "plain-file" / "runs").string()}), f.dir.path());
  CHECK(r.code() == 1);
  CHECK(r.err == "mxablate: cannot create the runs directory " +
                     (f.dir.path() / "plain-file" / "runs" / "cli").string() +
                     ": Not a directory\n");
  CHECK_FALSE(fs::exists(f.dir.path() / "mxablate.db"));
}

TEST_CASE("a database on a read-only path is one clear error") {
  CliFixture f;
  const ProcessResult r = run_process(f.run_args({"--db", "/proc/mxablate-test.db"}), f.dir.path());
  CHECK(r.code() == 1);
  CHECK_FALSE(r.signal);
  REQUIRE(lines_of(r.err).size() == 1);
  CHECK(r.err == "mxablate: results database: /proc/mxablate-test.db: unable to open database "
                 "file (opening the results database) — is the path's directory writable?\n");
}

TEST_CASE("a database on a full disk is one clear error, not a crash") {
  CliFixture f;
  SECTION("the file-size limit (works anywhere): writes fail with EFBIG") {
    const ProcessResult r = run_process(
        {"/bin/sh", "-c", "ulimit -f 16 && exec \"$0\" \"$@\"", kMxablate.string(), "run",
         f.recipe.string(), "--trainer", kFakeTrainer.string()},
        f.dir.path());
    CHECK_FALSE(r.signal);  // SIGXFSZ would have killed it
    CHECK(r.code() == 1);
    REQUIRE(lines_of(r.err).size() == 1);
    CHECK(r.err.rfind("mxablate: results database: mxablate.db: ", 0) == 0);
    CHECK(contains(r.err, "— is the disk full?"));
  }
  SECTION("a real full filesystem (tmpfs, when this test may mount one)") {
    const fs::path mnt = f.dir.path() / "small";
    fs::create_directories(mnt);
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
      MXABLATE_SKIP("cannot mount a tmpfs here (not root?): no real-full-disk case");
    }
    write_file(mnt / "filler", std::string(60 * 1024, 'x'));
    const ProcessResult r = run_process(f.run_args({"--db", (mnt / "full.db").string()}),
                                        f.dir.path());
    ::umount(mnt.c_str());
    CHECK_FALSE(r.signal);
    CHECK(r.code() == 1);
    REQUIRE(lines_of(r.err).size() == 1);
    CHECK(contains(r.err, "database or disk is full"));
    CHECK(contains(r.err, "— free some space, then run the same command again"));
  }
}

TEST_CASE("bad options are exit 2 with one line") {
  CliFixture f;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--gpus", "0,x"}, "--gpus: 'x' is not a GPU index (expected e.g. 0,1,2)"},
      {{"--gpus", "0", "--cpu", "2"}, "--gpus and --cpu exclude each other"},
      {{"--timeout", "soon"}, "--timeout/--grace: 'soon' is not a duration"},
      {{"--max-attempts", "0"}, "--max-attempts: must be at least 1"},
      {{"--progress", "fancy"}, "--progress: expected auto, terminal, plain or none, got 'fancy'"},
  };
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args{kMxablate.string(), "run", f.recipe.string(), "--trainer",
                                  kFakeTrainer.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = run_process(args, f.dir.path());
    INFO(r.err);
    CHECK(r.code() == 2);
    CHECK(lines_of(r.err).size() == 1);
    CHECK(contains(r.err, message));
  }
  write_file(f.dir.path() / "data.yaml", fake_recipe("data", 12, 4, 5) +
                                             "include:\n  - {arm: A, seed: 7, data.dataset: "
                                             "/nonexistent/corpus}\n");
  const ProcessResult r = run_process({kMxablate.string(), "run", f.dir.file("data.yaml"),
                                       "--trainer", kFakeTrainer.string()},
                                      f.dir.path());
  CHECK(r.code() == 2);
  CHECK(r.err == "mxablate: " + f.dir.file("data.yaml") +
                     ":15:37: data.dataset: '/nonexistent/corpus' does not exist; prepare it with "
                     "`mxablate data prepare --input TEXT... --out /nonexistent/corpus` (or import "
                     "tokenized data with `mxablate data import --megatron PREFIX --vocab-size N "
                     "--out /nonexistent/corpus`) (run: A seed=7 "
                     "data.dataset=/nonexistent/corpus)\n");
}

TEST_CASE("plan prints the measurable ceiling and warns at the target's line when it is low") {
  const auto plan = [](const std::string& target, const std::string& grid = "") {
    CliFixture f(fake_recipe("ceiling", 20, 4, 5) + grid + target);
    return std::make_pair(f.recipe.string(), f.mx({"plan", f.recipe.string()}));
  };
  // The default design: a target at 80 % of a budget every arm shares sees at most +25 %.
  auto [file, r] = plan("target: {from_arm: A, at_fraction: 0.8}\n");
  REQUIRE(r.code() == 0);
  CHECK(lines_of(r.out)[1] == "target: arm A's median validation loss at 0.8 of its budget");
  CHECK(lines_of(r.out)[2] ==
        "measurable ceiling: +25 % (arm B's budget 20.5k ÷ the 16.4k tokens arm A needs to reach "
        "the target at 0.8 of its budget, − 1): an arm needing more shows only as a lower bound");
  // The recipe's `target` key is on line 14, column 1 (fake_recipe's 13 lines before it).
  CHECK(r.err == "mxablate: warning: " + file + ":14:1: target: the measurable ceiling is +25 %, "
                 "below +50 % (set target.min_ceiling to accept less): place the target earlier in "
                 "the schedule (at_fraction) or give the arms a longer budget\n");
  // Early in the schedule, stopping there: room for more than three times the baseline's tokens.
  std::tie(file, r) = plan("target: {from_arm: A, at_fraction: 0.3, stop_at_target: true}\n");
  REQUIRE(r.code() == 0);
  CHECK(lines_of(r.out)[1] ==
        "target: arm A's median validation loss at 0.3 of its budget (runs stop there)");
  CHECK(contains(lines_of(r.out)[2], "measurable ceiling: +233 % "));
  CHECK(r.err.empty());
  // The recipe's own floor.
  std::tie(file, r) = plan("target: {from_arm: A, at_fraction: 0.3, min_ceiling: 3}\n");
  REQUIRE(r.code() == 0);
  CHECK(contains(r.err, file + ":14:1: target: the measurable ceiling is +233 %, below +300 % "
                               "(target.min_ceiling)"));
  // A fixed loss: the baseline's tokens to it are not known before the runs.
  std::tie(file, r) = plan("target: {val_loss: 3.3, stop_at_target: true}\n");
  REQUIRE(r.code() == 0);
  CHECK(lines_of(r.out)[2].rfind("measurable ceiling: not known before the runs", 0) == 0);
  CHECK(r.err.empty());
}

TEST_CASE("over several models plan prints each model's ceiling, from its own budgets") {
  // fake_recipe's grid is `seed`: a linked model axis added under it gives smoke 20 steps and
  // llama-5m 80; each block's ceiling comes from its own baseline budget.
  std::string text = fake_recipe("ceilings", 20, 4, 5);
  text += "  scale:\n"
          "    - {model: smoke, train.max_tokens: 20480}\n"
          "    - {model: llama-5m, train.max_tokens: 81920}\n"
          "target: {from_arm: A, at_fraction: 0.25}\n";
  CliFixture f(text);
  const ProcessResult r = f.mx({"plan", f.recipe.string()});
  REQUIRE(r.code() == 0);
  CHECK(contains(r.out, "measurable ceiling at smoke: +300 % (arm B's budget 20.5k ÷ the 5.12k "
                        "tokens arm A needs"));
  CHECK(contains(r.out, "measurable ceiling at llama-5m: +300 % (arm B's budget 81.9k ÷ the 20.5k "
                        "tokens arm A needs"));
  CHECK(r.err.empty());
}

TEST_CASE("a perplexity target reaches the same tokens_to_target as the equivalent val_loss") {
  // e^6 = 403.428793…: the fake trainer's losses pass 6.0 between steps 12 and 16.
  CliFixture f(fake_recipe("ppl", 20, 4, 5) + "target: {perplexity: 403.4287934927351}\n");
  write_file(f.dir.path() / "loss.yaml",
             fake_recipe("loss", 20, 4, 5) + "target: {val_loss: 6.0}\n");
  const ProcessResult plan = f.mx({"plan", f.recipe.string()});
  REQUIRE(plan.code() == 0);
  CHECK(lines_of(plan.out)[1] == "target: perplexity 403.4287934927351 (validation loss 6.0000)");
  for (const std::string& recipe : {f.recipe.string(), f.dir.file("loss.yaml")}) {
    std::vector<std::string> args = f.run_args({"--progress", "none"});
    args[2] = recipe;
    const ProcessResult r = run_process(args, f.dir.path());
    INFO(r.err);
    REQUIRE(r.code() == 0);
  }
  const auto tokens = [&](const std::string& sweep) {
    return query_rows(f.dir.file("mxablate.db"),
                      "SELECT t.arm, ROUND(t.tokens_to_target, 6), r.tokens_to_target, t.target "
                      "FROM run_tokens_to_target t JOIN runs r USING (run_id) WHERE t.sweep = '" +
                          sweep + "' ORDER BY t.arm, r.tokens_to_target, t.tokens_to_target");
  };
  const auto ppl = tokens("ppl"), loss = tokens("loss");
  REQUIRE(ppl.size() == 4);
  REQUIRE(loss.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO(i);
    CHECK(ppl[i][0] == loss[i][0]);
    CHECK(ppl[i][1] == loss[i][1]);  // the store's view, interpolated
    CHECK(ppl[i][2] == loss[i][2]);  // the trainer's target_reached
    CHECK_FALSE(ppl[i][1].empty());
    CHECK(std::stod(ppl[i][3]) == Approx(6.0).epsilon(1e-12));
  }
  ProcessResult t = f.mx({"table", "--sweep", "ppl", "--metric", "perplexity"});
  REQUIRE(t.code() == 0);
  // The caption states the measurable ceiling as the runs measured it (docs/design.md §5).
  CHECK(lines_of(t.out)[0].rfind("Sweep ppl: target perplexity 403.43 (val loss 6.0000); "
                                 "measurable ceiling +",
                                 0) == 0);
  CHECK(contains(t.out, "| final / best val ppl |"));
  t = f.mx({"table", "--sweep", "loss"});
  REQUIRE(t.code() == 0);
  CHECK(lines_of(t.out)[0].rfind("Sweep loss: target val loss 6.0000 (perplexity 403.43); "
                                 "measurable ceiling +",
                                 0) == 0);
  t = f.mx({"table", "--sweep", "loss", "--metric", "bits"});
  CHECK(t.code() == 2);
  CHECK(t.err == "mxablate: --metric: 'bits' is not one of: loss, perplexity\n");
}

TEST_CASE("every read command answers a missing or foreign database the same way: exit 2, one line") {
  CliFixture f;
  write_file(f.dir.path() / "notes.db", "not a database\n");
  write_file(f.dir.path() / "empty.db", "");
  struct Db {
    std::string path, message;
  };
  const std::vector<Db> dbs{
      {f.dir.file("none.db"), ": no results database here (run a sweep first, or pass --db)"},
      // Readers never open the file outside SQLite (that would drop this process's locks on it):
      // SQLite itself says it is not a database.
      {f.dir.file("notes.db"), ": not a results database (not an SQLite file, or a damaged one: "
                               "file is not a database); it is left alone — pass another --db"},
      {f.dir.file("empty.db"), ": an empty file, not a results database; it is left alone — remove it or pass another --db"},
  };
  for (const Db& db : dbs) {
    for (const std::vector<std::string>& cmd :
         std::vector<std::vector<std::string>>{{"status"},
                                               {"query", "SELECT 1"},
                                               {"table"},
                                               {"report", "--out", f.dir.file("report")},
                                               {"cancel"}}) {
      std::vector<std::string> args = cmd;
      args.insert(args.end(), {"--db", db.path});
      const ProcessResult r = f.mx(args);
      INFO(cmd[0] << " --db " << db.path);
      CHECK(r.code() == 2);
      CHECK(r.out.empty());
      // (`report` may first say that gnuplot is missing, on a machine without it)
      REQUIRE_FALSE(lines_of(r.err).empty());
      CHECK(lines_of(r.err).back() == "mxablate: " + db.path + db.message);
      if (cmd[0] != "report") CHECK(lines_of(r.err).size() == 1);
    }
  }
  CHECK(fs::exists(f.dir.path() / "empty.db"));  // left alone
  CHECK_FALSE(fs::exists(f.dir.path() / "none.db"));  // readers never create one
  // `run` refuses to write into a file that is not a results database, and leaves it as it was.
  const ProcessResult r = run_process(f.run_args({"--db", f.dir.file("notes.db")}), f.dir.path());
  CHECK(r.code() == 2);
  // (A writer reads the header itself before it opens the file, so it can say what it is.)
  CHECK(r.err == "mxablate: " + f.dir.file("notes.db") +
                     ": not a results database (not an SQLite file); it is left alone — pass "
                     "another --db\n");
  CHECK(read_file(f.dir.path() / "notes.db") == "not a database\n");
}

TEST_CASE("query streams rows of any number: CSV and JSON as before, tables in aligned blocks") {
  CliFixture f;
  REQUIRE(run_process(f.run_args(), f.dir.path()).code() == 0);
  const std::string many =
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500) "
      "SELECT i, 'row ' || i AS label FROM n";
  ProcessResult q = f.mx({"query", "--csv", many});
  REQUIRE(q.code() == 0);
  auto lines = lines_of(q.out);
  REQUIRE(lines.size() == 2501);
  CHECK(lines[0] == "i,label");
  CHECK(lines[2500] == "2500,row 2500");
  q = f.mx({"query", "--json", "SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, NULL"});
  REQUIRE(q.code() == 0);
  CHECK(q.out == nlohmann::json::parse(q.out).dump(2) + "\n");  // the layout of a dumped array
  CHECK(nlohmann::json::parse(q.out) ==
        nlohmann::json::parse(R"([{"a":1,"b":"x"},{"a":2,"b":null}])"));
  q = f.mx({"query", "--json", "SELECT 1 WHERE 0"});
  CHECK(q.out == "[]\n");
  q = f.mx({"query", many});
  REQUIRE(q.code() == 0);
  lines = lines_of(q.out);
  CHECK(lines.back() == "(2500 rows)");
  // One header (and rule) per block of 1000 rows.
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
          return l.find("label") != std::string::npos;
        }) == 3);
}

TEST_CASE("runs of several ranks: plan shows them, run refuses what its slots can never give") {
  std::string recipe = fake_recipe("cli", 12, 4, 5);
  recipe.replace(recipe.find("grid:"), 0,
                 "  W: {parallel: {data: 2}, train: {micro_batch_tokens: 512}}\n");
  CliFixture f(recipe);
  const ProcessResult plan = f.mx({"plan", f.recipe.string()});
  REQUIRE(plan.code() == 0);
  const auto lines = lines_of(plan.out);
  REQUIRE(lines.size() >= 8);
  const auto words = [](const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string x; in >> x;) w.push_back(x);
    return w;
  };
  const auto header = words(lines[1]);
  REQUIRE(header.size() > 3);
  CHECK(std::vector<std::string>(header.end() - 3, header.end()) ==
        std::vector<std::string>{"interventions", "ranks", "tokens"});
  const auto a1 = words(lines[2]), w1 = words(lines[6]);
  REQUIRE(a1.size() > 3);
  REQUIRE(w1.size() > 3);
  CHECK(a1[2] == "A");
  CHECK(a1[a1.size() - 2] == "1");  // one rank
  CHECK(w1[2] == "W");
  CHECK(w1[w1.size() - 2] == "2");  // two ranks
  CHECK(w1.back() == "12.3k");
  // Without any run of several ranks there is no such column.
  write_file(f.dir.path() / "one.yaml", fake_recipe("one", 12, 4, 5));
  const ProcessResult one = f.mx({"plan", f.dir.file("one.yaml")});
  CHECK(one.code() == 0);
  CHECK_FALSE(contains(one.out, "ranks"));

  const std::string where = f.recipe.string() + ":12:";
  for (const auto& [options, text] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--cpu", "1"},
            "parallel.data: 2 ranks need 2 CPU slots, more than the 1 of --cpu 1; raise --cpu, or "
            "lower parallel.data (run: W seed=1)"},
           {{"--gpus", "0", "--per-gpu", "2"},
            "parallel.data: 2 ranks need 2 distinct GPUs, more than the 1 of --gpus 0; give more "
            "GPUs with --gpus (--per-gpu adds slots on the same GPUs, which the ranks of one run "
            "cannot share), or lower parallel.data (run: W seed=1)"}}) {
    std::vector<std::string> args{"run", f.recipe.string(), "--trainer", kFakeTrainer.string()};
    args.insert(args.end(), options.begin(), options.end());
    const ProcessResult r = f.mx(args);
    INFO(r.err);
    CHECK(r.code() == 2);
    CHECK(lines_of(r.err).size() == 1);
    CHECK(r.err.rfind("mxablate: " + where, 0) == 0);
    CHECK(contains(r.err, text));
    CHECK_FALSE(fs::exists(f.dir.path() / "runs"));
    CHECK_FALSE(fs::exists(f.dir.path() / "mxablate.db"));
  }

  // Two CPU slots: the 2-rank runs take both, the others one each; all finish.
  const ProcessResult r = run_process(f.run_args(), f.dir.path());
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(contains(r.out, "6 budget_exhausted"));
  CHECK(query_rows(f.dir.file("mxablate.db"),
                   "SELECT a.slot FROM attempts a JOIN runs USING (run_id) WHERE arm = 'W'") ==
        std::vector<std::vector<std::string>>{{"cpu0+cpu1"}, {"cpu0+cpu1"}});
}
