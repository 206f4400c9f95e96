// The real trainer through the real path (issue: "once the trainer exists, a real CPU sweep runs
// through the same path"; docs/design.md §10): `mxablate run` with mxablate-train on a small prepared
// dataset, once undisturbed and once with a trainer SIGKILLed mid-run. The orchestrator must
// retry the killed run from its last checkpoint, and the results must equal the undisturbed
// sweep's exactly (the trainer resumes bit-exactly; nothing may be lost or doubled on the way).
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "catch.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/standby.h"
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

TEST_CASE("a real CPU sweep in one slot: the prestarted run trains exactly as without prestart, and "
          "run_end says where the time went",
          "[real-trainer][prestart]") {
  const std::string text = recipe(mxablate::test::test_dataset());
  const auto one_slot = [](std::vector<std::string> args) {
    args[args.size() - 5] = "1";  // --cpu 1: the second run waits for the first one's slot
    return args;
  };
  RealSweep with(text), without(text);
  ProcessResult r = run_process(one_slot(with.args()), with.dir.path());
  INFO(r.err);
  REQUIRE(r.code() == 0);
  CHECK(contains(r.err, "prestarted "));
  auto args = one_slot(without.args());
  args.push_back("--no-prestart");
  r = run_process(args, without.dir.path());
  REQUIRE(r.code() == 0);
  CHECK(with.one("SELECT COUNT(*) FROM attempts WHERE prestarted = 1") == "1");
  CHECK(without.one("SELECT COUNT(*) FROM attempts WHERE prestarted = 1") == "0");
  for (const char* sql :
       {"SELECT run_id, step, tokens, printf('%.17g', val_loss) FROM evals ORDER BY run_id, step",
        "SELECT run_id, step, printf('%.17g', loss), printf('%.17g', grad_norm) FROM train_steps "
        "ORDER BY run_id, step",
        "SELECT run_id, status, printf('%.17g', final_val_loss) FROM runs ORDER BY run_id"}) {
    INFO(sql);
    CHECK(with.rows(sql) == without.rows(sql));
  }
  // Timings of every attempt: setup before the first step; busy = train + eval + checkpoint,
  // within the attempt's span; the prestarted one waited, and its setup lies outside its span.
  const auto rows = with.rows(
      "SELECT prestarted, setup_s, standby_s, train_s, eval_s, checkpoint_s, "
      "ended_at - launched_at FROM attempts ORDER BY prestarted");
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    INFO(row[0]);
    CHECK(std::stod(row[1]) > 0);
    CHECK(std::stod(row[3]) > 0);
    CHECK(std::stod(row[4]) > 0);
    CHECK(std::stod(row[5]) > 0);  // checkpoints every 4 steps
    CHECK(std::stod(row[3]) + std::stod(row[4]) + std::stod(row[5]) < std::stod(row[6]));
  }
  CHECK(rows[0][2] == "");
  CHECK(std::stod(rows[1][2]) > 0);
  CHECK(std::stod(rows[0][6]) > std::stod(rows[0][1]));  // the first attempt's span holds its setup
}

TEST_CASE("the real trainer as a standby: end of file exits 4 without writing anything",
          "[real-trainer][prestart]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  fs::create_directories(run);
  contract::RunConfig c;
  c.model = "smoke";
  c.data.dataset = mxablate::test::test_dataset();
  c.data.seq_len = 64;
  c.train.global_batch_tokens = 512;
  c.train.max_tokens = 1024;
  c.eval.every_tokens = 512;
  c.eval.tokens = 512;
  c.threads = 1;
  contract::write_run_config((run / "config.json").string(), c);
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  bp::environment env = boost::this_process::environment();
  env[contract::kStandbyFdEnv] = std::to_string(fds[1]);
  const int fd = fds[1];
  bp::child trainer(kTrainer.string(), bp::args({"--run-dir", run.string()}), env,
                    bp::std_in < bp::null, bp::std_out > (dir.path() / "out.txt").string(),
                    bp::std_err > (dir.path() / "err.txt").string(),
                    bp::extend::on_exec_setup([fd](auto&) { ::fcntl(fd, F_SETFD, 0); }));
  ::close(fds[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::close(fds[0]);
  std::error_code ec;
  for (int i = 0; i < 6000 && trainer.running(ec); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  trainer.wait(ec);
  CHECK(trainer.exit_code() == 4);
  CHECK(!fs::exists(run / "events.jsonl"));
  CHECK(contains(read_file(dir.path() / "err.txt"), contract::abandoned_message()));
}
