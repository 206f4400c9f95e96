// Live targets end to end (docs/design.md §5, "Live targets"), with the fake trainer: the
// baseline runs fix a from_arm target mid-sweep; the orchestrator stores it (block_targets, and
// the sweep's target for one model) and hands it to the runs; the runs under way stop at their
// first evaluation at or below it, and a run that starts later starts with it. Over two models,
// each model gets its own target from its own baseline runs.
#include <algorithm>
#include <cmath>
#include <limits>

#include "catch.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/contract/target_file.h"
#include "mxablate/analysis/sweep_analysis.h"
#include "mxablate/orchestrator/live_targets.h"
#include "sweep_fixture.h"

using namespace mxablate;
using namespace mxablate::orchestrator;
using namespace mxablate::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// 200 steps of 1,024 tokens, evaluations every 5 steps; the target is the baseline A's median
// loss at 10 % of its budget (step 20, or at llama-5m's smaller budget step 10).
std::string live_recipe(const std::string& name, const std::string& grid) {
  return "name: " + name + R"(
base:
  model: smoke
  data: {seq_len: 64}
  train: {global_batch_tokens: 1024, max_tokens: 204800}
  eval: {every_tokens: 5120, tokens: 1024}
  checkpoint: {every_steps: 50}
  telemetry: {train_every_steps: 10, quant_every_steps: 10}
target: {from_arm: A, at_fraction: 0.1, stop_at_target: true}
arms:
  A: {}
  B: {precision: {fprop: mxfp4, dgrad: mxfp4, wgrad: mxfp4}}
grid:
)" + grid;
}

struct RunEvents {
  std::vector<std::pair<int64_t, double>> evals;  // (step, val_loss)
  std::vector<json> live;                          // live_target events
  json end;
};

RunEvents events_of(const fs::path& dir) {
  RunEvents r;
  for (const json& e : contract::read_effective_events((dir / "events.jsonl").string())) {
    const std::string kind = e["kind"];
    if (kind == "eval") r.evals.emplace_back(e["step"].get<int64_t>(), e["val_loss"].get<double>());
    if (kind == "live_target") r.live.push_back(e);
    if (kind == "run_end") r.end = e;
  }
  return r;
}

// The baseline arm's median validation loss at `step` (the evaluation there), as stored.
double median_of_a_at(SweepFixture& f, const std::string& model, int64_t step) {
  std::vector<double> losses;
  for (const RunSpec& r : f.plan.runs) {
    if (r.arm != "A" || contract::model_label(r.config.model) != model) continue;
    losses.push_back(f.scalar<double>("SELECT val_loss FROM evals WHERE run_id = '" + r.run_id +
                                      "' AND step = " + std::to_string(step)));
  }
  std::sort(losses.begin(), losses.end());
  REQUIRE(!losses.empty());
  const size_t n = losses.size();
  return n % 2 ? losses[n / 2] : 0.5 * (losses[n / 2 - 1] + losses[n / 2]);
}

// Every run took `target` once and stopped at its first evaluation from then on whose best loss
// so far is at or below it: never later, never before it knew.
void check_stopped_at(const RunSpec& spec, const RunEvents& ev, double target) {
  INFO(run_label(spec));
  REQUIRE(ev.live.size() == 1);
  CHECK(ev.live[0]["val_loss"].get<double>() == target);
  const int64_t known_at = ev.live[0]["step"].get<int64_t>();
  std::optional<int64_t> expected_end;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [step, loss] : ev.evals) {
    best = std::min(best, loss);
    if (step >= known_at && best <= target) {
      expected_end = step;
      break;
    }
  }
  REQUIRE(expected_end);
  CHECK(ev.end["status"] == "converged");
  CHECK(ev.end["step"].get<int64_t>() == *expected_end);
  CHECK(ev.evals.back().first == *expected_end);
  CHECK(*expected_end < 200);  // far short of the budget
}

}  // namespace

TEST_CASE("the baseline fixes the target mid-sweep: runs under way stop at it, later ones start "
          "with it") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "10"}});
  SweepFixture f(live_recipe("live-target", "  seed: [1, 2]\n"));
  f.slots = 3;  // A1, A2 and B1 train together; B2 waits for a slot
  const SweepResult r = f.run();
  CHECK(r.total == 4);
  CHECK(r.converged == 4);
  CHECK(r.all_finished());

  // The target is the analysis' value: the median of A's evaluations at step 20.
  const double target = median_of_a_at(f, "smoke", 20);
  CHECK(f.scalar<double>("SELECT val_loss FROM block_targets") == target);
  CHECK(f.scalar("SELECT COUNT(*) FROM block_targets") == 1);
  CHECK(f.scalar<std::string>("SELECT model FROM block_targets") == "smoke");
  CHECK(f.scalar<std::string>("SELECT basis FROM block_targets").find("median of arm A at 10 %") !=
        std::string::npos);
  CHECK(f.scalar<double>("SELECT target_val_loss FROM sweeps") == target);

  for (const RunSpec& spec : f.plan.runs) {
    const RunEvents ev = events_of(f.options.runs_dir / f.plan.sweep / spec.run_id);
    check_stopped_at(spec, ev, target);
    const int64_t known_at = ev.live[0]["step"].get<int64_t>();
    if (spec.arm == "A") CHECK(known_at > 20);  // fixed once both had evaluated at step 20
    // B seed 1 was training when the target was fixed; B seed 2, waiting for a slot until an A
    // run stopped at the target, started with it: it knew it at its first evaluation.
    if (spec.arm == "B" && spec.config.train.seed == 1) CHECK(known_at > ev.evals.front().first);
    if (spec.arm == "B" && spec.config.train.seed == 2) CHECK(known_at == ev.evals.front().first);
  }
  // The file the runs read, as the contract defines it.
  const auto file =
      contract::read_target_file(f.options.runs_dir / f.plan.sweep / f.run_of("B", 2).run_id);
  REQUIRE(file.target);
  CHECK(file.target->val_loss == target);

  // Running the sweep again changes nothing: the target is known, every run has its result.
  const SweepResult again = f.run();
  CHECK(again.converged == 4);
  CHECK(f.scalar<double>("SELECT val_loss FROM block_targets") == target);
}

TEST_CASE("over two models each block's baseline fixes that model's own target") {
  ScopedEnv env({{"MXABLATE_FAKE_STEP_MS", "10"}});
  // llama-5m has half the budget: its target is A's loss at step 10, smoke's at step 20.
  SweepFixture f(live_recipe("live-target-models",
                             "  scale:\n"
                             "    - {model: smoke, train.max_tokens: 204800}\n"
                             "    - {model: llama-5m, train.max_tokens: 102400}\n"
                             "  seed: [1, 2]\n"));
  f.slots = 4;
  const SweepResult r = f.run();
  CHECK(r.total == 8);
  CHECK(r.converged == 8);
  const double smoke = median_of_a_at(f, "smoke", 20);
  const double small = median_of_a_at(f, "llama-5m", 10);
  CHECK(smoke < small);  // the fake trainer's losses fall with steps
  CHECK(f.scalar("SELECT COUNT(*) FROM block_targets") == 2);
  CHECK(f.scalar<double>("SELECT val_loss FROM block_targets WHERE model = 'smoke'") == smoke);
  CHECK(f.scalar<double>("SELECT val_loss FROM block_targets WHERE model = 'llama-5m'") == small);
  // One value cannot be every model's target.
  CHECK(f.scalar("SELECT COUNT(*) FROM sweeps WHERE target_val_loss IS NULL") == 1);
  for (const RunSpec& spec : f.plan.runs) {
    const bool is_smoke = contract::model_label(spec.config.model) == "smoke";
    check_stopped_at(spec, events_of(f.options.runs_dir / f.plan.sweep / spec.run_id),
                     is_smoke ? smoke : small);
  }
}

TEST_CASE("a block is fixed only once every baseline run has evaluated at its fraction or ended") {
  // The rule on the analysis' own data (live_targets.h fixed_block_target).
  analysis::SweepData block;
  const auto run = [](const std::string& arm, const std::string& status,
                      std::vector<analysis::EvalPoint> evals) {
    analysis::RunRecord r;
    r.run_id = arm + status + std::to_string(evals.size());
    r.arm = arm;
    r.group = arm;
    r.status = status;
    r.max_tokens = 1000;
    r.evals = std::move(evals);
    return r;
  };
  block.target_spec = {{"from_arm", "A"}, {"at_fraction", 0.3}};
  block.groups = {"A", "B"};
  block.runs = {run("A", "running", {{0, 9}, {200, 6}, {300, 5}}),
                run("A", "running", {{0, 9}, {200, 7}}),
                run("B", "running", {{0, 9}})};
  CHECK_FALSE(fixed_block_target(block, "A", 0.3));  // the second A run is at 200 < 300
  block.runs[1].evals.push_back({400, 5});           // it passed 300: loss there 6 (interpolated)
  auto t = fixed_block_target(block, "A", 0.3);
  REQUIRE(t);
  CHECK(t->val_loss == Approx(5.5));  // the median of 5 and 6
  CHECK(t->basis.find("median of arm A at 30 %") == 0);
  // An A run that ended early (failed before 300) does not hold the target back forever.
  block.runs[1] = run("A", "failed", {{0, 9}, {100, 8}});
  t = fixed_block_target(block, "A", 0.3);
  REQUIRE(t);
  CHECK(t->val_loss == 5);
  // A stored target is not the rule's value.
  block.stored_target = 1.0;
  CHECK(fixed_block_target(block, "A", 0.3)->val_loss == 5);
}
