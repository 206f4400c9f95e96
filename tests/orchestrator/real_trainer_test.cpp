// The real trainer through the real path (issue: "once the trainer exists, a real CPU sweep runs
// through the same path"; docs/design.md §10): `mxablate run` with mxablate-train on a small prepared
// dataset, once undisturbed and once with a trainer SIGKILLed mid-run. The orchestrator must
// retry the killed run from its last checkpoint, and the results must equal the undisturbed
// sweep's exactly (the trainer resumes bit-exactly; nothing may be lost or doubled on the way).
#include <signal.h>

#include <fstream>
#include <vector>

#include "catch.h"
#include "mxablate/results/sqlite_db.h"
#include "run_test_support.h"
#include "test_util.h"

using namespace mxablate;
using namespace mxablate::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kTrainer = MXABLATE_TRAIN_EXE;

std::string recipe(const std::string& dataset) {
  // 24 steps of 512 tokens; evaluations and checkpoints every 4 steps.
  return R"(name: real-cpu
base:
  model: smoke
  data: {dataset: )" + dataset + R"(, seq_len: 64}
  train: {global_batch_tokens: 512, max_tokens: 12288, lr: 3e-3, warmup_tokens: 2048}
  eval: {every_tokens: 2048, tokens: 1024}
  checkpoint: {every_steps: 4}
  telemetry: {train_every_steps: 2, quant_every_steps: 8}
  threads: 1
arms:
  bf16: {}
  FDW+H16:
    precision: {fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}
    quant: {hadamard: {mode: deterministic, size: 16, gemms: [wgrad]}}
grid:
  seed: [1]
)";
}

struct RealSweep {
  TempDir dir;
  explicit RealSweep(const std::string& text) { write_file(dir.path() / "real.yaml", text); }
  std::vector<std::string> args() const {
    return {kMxablate.string(), "run", (dir.path() / "real.yaml").string(), "--trainer",
            kTrainer.string(), "--cpu", "2", "--poll-ms", "20", "--progress", "plain"};
  }
  std::string db() const { return (dir.path() / "mxablate.db").string(); }
  std::vector<std::vector<std::string>> rows(const std::string& sql) const {
    return query_rows(db(), sql);
  }
  std::string one(const std::string& sql) const {
    const auto r = rows(sql);
    return r.empty() || r[0].empty() ? "" : r[0][0];
  }
  // The pid of the FDW+H16 run's trainer once it has checkpointed at step 8 or later and still
  // runs (0 until then).
  int pid_to_kill() const {
    if (!fs::exists(db())) return 0;
    try {
      const std::string pid = one(
          "SELECT substr(a.executor_ref, 5) FROM attempts a JOIN runs r USING (run_id) "
          "WHERE r.arm = 'FDW+H16' AND a.ended_at IS NULL AND EXISTS (SELECT 1 FROM events e "
          "WHERE e.run_id = r.run_id AND e.kind = 'checkpoint' AND e.step >= 8) AND r.step < 20");
      return pid.empty() ? 0 : std::stoi(pid);
    } catch (const std::exception&) {
      return 0;  // the database is being created
    }
  }
};

}  // namespace

TEST_CASE("a real CPU sweep: a trainer SIGKILLed mid-run resumes and ends exactly as if never killed",
          "[real-trainer]") {
  const std::string text = recipe(mxablate::test::test_dataset());

  RealSweep reference(text);
  const ProcessResult ref = run_process(reference.args(), reference.dir.path());
  INFO(ref.err);
  REQUIRE(ref.code() == 0);
  CHECK(reference.one("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted' AND "
                      "attempts = 1") == "2");
  // The trainer evaluates before the first step and then every 4 steps: 7 per run.
  CHECK(reference.one("SELECT COUNT(*) FROM evals") == "14");
  CHECK(reference.one("SELECT COUNT(DISTINCT run_id || '/' || step) FROM evals") == "14");
  CHECK(reference.one("SELECT COUNT(*) FROM quant_stats") != "0");  // MXFP4 telemetry arrived

  RealSweep crashed(text);
  Process p(crashed.args(), crashed.dir.path());
  // Once the MXFP4 run has checkpointed at step 8 or later and is still running, kill it.
  const bool killed = eventually(
      [&] {
        const int pid = crashed.pid_to_kill();
        return pid != 0 && ::kill(pid, SIGKILL) == 0;
      },
      std::chrono::seconds(120));
  const ProcessResult r = p.wait(std::chrono::seconds(300));
  INFO(r.err);
  REQUIRE(killed);
  CHECK(r.code() == 0);
  CHECK(contains(r.err, "killed by signal 9 (SIGKILL) without a final status; retrying from its "
                        "last checkpoint (attempt 2 of 3)"));
  const std::string run = crashed.one("SELECT run_id FROM runs WHERE arm = 'FDW+H16'");
  CHECK(crashed.rows("SELECT attempt, signal, outcome, resumed FROM attempts WHERE run_id = '" +
                     run + "' ORDER BY attempt") ==
        std::vector<std::vector<std::string>>{{"1", "9", "retry", "0"},
                                              {"2", "", "budget_exhausted", "1"}});
  // The same runs, the same evaluations to the last bit, each once.
  const std::string curve =
      "SELECT run_id, step, tokens, printf('%.17g', val_loss) FROM evals ORDER BY run_id, step";
  CHECK(crashed.rows(curve) == reference.rows(curve));
  CHECK(crashed.one("SELECT COUNT(*) FROM evals") == "14");
  CHECK(crashed.one("SELECT COUNT(DISTINCT run_id || '/' || step) FROM evals") == "14");
  CHECK(crashed.one("SELECT COUNT(*) FROM events WHERE kind = 'resume' AND run_id = '" + run +
                    "'") == "1");
  const std::string finals =
      "SELECT run_id, status, printf('%.17g', final_val_loss), printf('%.17g', best_val_loss) "
      "FROM runs ORDER BY run_id";
  CHECK(crashed.rows(finals) == reference.rows(finals));
}

TEST_CASE("a custom model shape trains through `mxablate run`, and the smoke shape written out trains "
          "exactly like the smoke preset",
          "[real-trainer]") {
  const std::string text = R"(name: shapes-cpu
base:
  data: {dataset: )" + mxablate::test::test_dataset() + R"(, seq_len: 64}
  train: {global_batch_tokens: 512, max_tokens: 4096, lr: 3e-3}
  eval: {every_tokens: 2048, tokens: 1024}
  checkpoint: {every_steps: 0}
  threads: 1
arms:
  bf16: {}
grid:
  model:
    - smoke
    - {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 192}
    - {d_model: 96, n_layers: 1, n_heads: 2, n_kv_heads: 1, ffn_hidden: 256, rope_theta: 500000}
)";
  RealSweep sweep(text);
  const ProcessResult plan =
      run_process({kMxablate.string(), "plan", (sweep.dir.path() / "real.yaml").string()},
                  sweep.dir.path());
  INFO(plan.err);
  REQUIRE(plan.code() == 0);
  CHECK(contains(plan.out, "d64-L2-h4/2-f192"));
  CHECK(contains(plan.out, "d96-L1-h2/1-f256-rt500000"));
  const ProcessResult r = run_process(sweep.args(), sweep.dir.path());
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(sweep.one("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted'") == "3");
  // The trainer names each model by its label and counts its parameters.
  const auto started = sweep.rows(
      "SELECT json_extract(detail, '$.model'), json_extract(detail, '$.params'), "
      "json_extract(detail, '$.vocab_size') FROM events WHERE kind = 'run_start' ORDER BY "
      "json_extract(detail, '$.model')");
  REQUIRE(started.size() == 3);
  CHECK(started[0][0] == "d64-L2-h4/2-f192");
  CHECK(started[1][0] == "d96-L1-h2/1-f256-rt500000");
  CHECK(started[2][0] == "smoke");
  CHECK(started[0][1] == started[2][1]);  // the same shape, the same parameters
  const int64_t vocab = std::stoll(started[1][2]);
  // d96, one block: q, o 96x96; k, v 96x48; gate, up, down 96x256; two norms; final norm; embeddings.
  const int64_t expected = 2 * 96 * 96 + 2 * 96 * 48 + 3 * 96 * 256 + 2 * 96 + 96 + 2 * vocab * 96;
  CHECK(std::stoll(started[1][1]) == expected);
  // Same shape, same seed: the same evaluations to the last bit, whatever the model is called.
  const auto curve = [&](const std::string& label) {
    return sweep.rows(
        "SELECT e.step, printf('%.17g', e.val_loss) FROM evals e WHERE e.run_id = (SELECT run_id "
        "FROM events WHERE kind = 'run_start' AND json_extract(detail, '$.model') = '" + label +
        "') ORDER BY e.step");
  };
  CHECK(curve("smoke").size() == 3);
  CHECK(curve("d64-L2-h4/2-f192") == curve("smoke"));
}

namespace {

// The ranks a data-parallel run's launcher started (its children).
std::vector<int> children_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<int> out;
  for (int child = 0; in >> child;) out.push_back(child);
  return out;
}

}  // namespace

TEST_CASE("a real 2-rank CPU run: one rank SIGKILLed mid-run, the run is retried and ends as if never killed",
          "[real-trainer][parallel]") {
  std::string text = recipe(mxablate::test::test_dataset());
  // Two ranks with one micro-batch of each step apiece; the bf16 arm keeps one rank.
  text.replace(text.find("global_batch_tokens: 512,"), 25,
               "global_batch_tokens: 512, micro_batch_tokens: 256,");
  text.replace(text.find("  FDW+H16:\n"), 11, "  FDW+H16:\n    parallel: {data: 2}\n");

  RealSweep reference(text);
  const ProcessResult ref = run_process(reference.args(), reference.dir.path());
  INFO(ref.err);
  if (mxablate::test::lacks_gloo(ref.err)) MXABLATE_SKIP(mxablate::test::kNoGloo);
  REQUIRE(ref.code() == 0);
  CHECK(reference.one("SELECT COUNT(*) FROM runs WHERE status = 'budget_exhausted' AND attempts = 1") == "2");
  CHECK(reference.one("SELECT slot FROM attempts a JOIN runs r USING (run_id) WHERE r.arm = 'FDW+H16'") ==
        "cpu0+cpu1");

  RealSweep crashed(text);
  Process p(crashed.args(), crashed.dir.path());
  bool killed = false;
  eventually(
      [&] {
        const int pid = crashed.pid_to_kill();
        if (pid == 0) return false;
        const std::vector<int> ranks = children_of(pid);
        killed = ranks.size() == 2 && ::kill(ranks[1], SIGKILL) == 0;  // rank 1, not the launcher
        return killed;
      },
      std::chrono::seconds(120));
  const ProcessResult r = p.wait(std::chrono::seconds(300));
  INFO(r.err);
  REQUIRE(killed);
  CHECK(r.code() == 0);
  const std::string run = crashed.one("SELECT run_id FROM runs WHERE arm = 'FDW+H16'");
  // The launcher ends with its rank's 128 + 9; the orchestrator retries from the checkpoint.
  CHECK(crashed.rows("SELECT attempt, exit_code, outcome, resumed FROM attempts WHERE run_id = '" + run +
                     "' ORDER BY attempt") ==
        std::vector<std::vector<std::string>>{{"1", "137", "retry", "0"}, {"2", "0", "budget_exhausted", "1"}});
  const std::string curve =
      "SELECT run_id, step, tokens, printf('%.17g', val_loss) FROM evals ORDER BY run_id, step";
  CHECK(crashed.rows(curve) == reference.rows(curve));
  CHECK(crashed.one("SELECT COUNT(*) FROM events WHERE kind = 'resume' AND run_id = '" + run + "'") == "1");
}
