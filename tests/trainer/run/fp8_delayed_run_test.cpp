// FP8 delayed scaling in a whole run (docs/design.md §3, §4): the amax history is saved in the
// checkpoints and restored on resume, so a run killed and resumed continues bit for bit as one
// never interrupted; the run differs from current scaling; run_start says which scaling ran; a
// resume under another window is refused.
#include <filesystem>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/contract/run_config.h"
#include "run_test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {

// 16 steps of 512 tokens in two micro-batches, all three GEMMs FP8 (emulated on the CPU), a
// window of 3 steps so that it rolls over well before the checkpoint the resume starts from.
contract::RunConfig delayed_config() {
  contract::RunConfig c = smoke_config();
  c.run_id = "fp8-delayed";
  c.precision = {contract::GemmPrecision::kFP8, contract::GemmPrecision::kFP8, contract::GemmPrecision::kFP8};
  c.quant.fp8_scaling = contract::Fp8Scaling::kDelayed;
  c.quant.fp8_amax_history = 3;
  c.quant.fp8_margin = 1;
  c.train.global_batch_tokens = 512;
  c.train.micro_batch_tokens = 256;
  c.train.max_tokens = 512 * 16;
  c.train.warmup_tokens = 512 * 2;
  c.eval.every_tokens = 512 * 4;
  c.eval.tokens = 1024;
  c.checkpoint.every_steps = 5;
  c.checkpoint.keep = 2;
  c.telemetry.train_every_steps = 1;
  return c;
}

}  // namespace

TEST_CASE("An FP8 delayed-scaling run killed and resumed equals the uninterrupted run bit for bit",
          "[train][resume][fp8_delayed]") {
  const contract::RunConfig c = delayed_config();
  const std::string straight = fresh_run_dir("fp8_delayed_straight");
  const TrainResult s = run_train(straight, &c);
  INFO(s.output);
  REQUIRE(s.exit_code == 0);
  const auto reference = effective_events(straight);
  const Trajectory want = trajectory_of(straight);
  REQUIRE(want.loss.size() == 16);
  const auto starts = events_of_kind(reference, "run_start");
  REQUIRE(starts.size() == 1);
  CHECK(starts[0]["fp8_scaling"] == json({{"mode", "delayed"}, {"amax_history", 3}, {"margin", 1}}));

  // Killed after step 8: the last checkpoint is step 5's, whose history holds steps 3 to 5.
  const std::string dir = fresh_run_dir("fp8_delayed_crashed");
  CHECK(run_train(dir, &c, "--debug-crash-at-step 8").exit_code == 137);
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  REQUIRE(events_of_kind(events, "resume").size() == 1);
  CHECK(events_of_kind(events, "resume")[0]["step"] == 5);
  const Trajectory got = trajectory_of(dir);
  CHECK(got.loss == want.loss);  // bit for bit
  CHECK(got.grad_norm == want.grad_norm);
  CHECK(got.evals == want.evals);

  // The same run under current scaling computes something else: the history was in use.
  contract::RunConfig current = c;
  current.quant.fp8_scaling = contract::Fp8Scaling::kCurrent;
  current.quant.fp8_amax_history = contract::kDefaultFp8AmaxHistory;
  current.quant.fp8_margin = 0;
  const std::string plain = fresh_run_dir("fp8_current");
  REQUIRE(run_train(plain, &current).exit_code == 0);
  const auto current_events = effective_events(plain);
  const Trajectory other = trajectory_of(plain);
  CHECK(other.loss.front() != want.loss.front());  // margin 1 from the first step
  CHECK(other.loss != want.loss);
  CHECK(events_of_kind(current_events, "run_start")[0]["fp8_scaling"] == json({{"mode", "current"}}));
}

TEST_CASE("A resume under another FP8 amax window is refused", "[train][resume][fp8_delayed]") {
  const contract::RunConfig c = delayed_config();
  const std::string dir = fresh_run_dir("fp8_delayed_changed");
  CHECK(run_train(dir, &c, "--debug-crash-at-step 6").exit_code == 137);
  contract::RunConfig longer = c;
  longer.quant.fp8_amax_history = 4;
  const TrainResult resumed = run_train(dir, &longer, "--resume");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 2);
  CHECK(resumed.output.find("fp8_amax_history") != std::string::npos);
}
