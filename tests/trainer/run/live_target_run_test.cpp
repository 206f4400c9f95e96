// A live target (docs/design.md §5, "Live targets") reaching a real mxablate-train: the
// orchestrator writes RUN_DIR/target.json mid-run; the trainer takes it at its next evaluation
// and, with stop_at_target, stops at its first evaluation at or below it. A run that starts with
// the file takes it at step 0; a damaged file is a warning event and the run trains on.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "catch.h"
#include "mxablate/contract/target_file.h"
#include "run_test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {

// A from_arm run: no target in its config, stopping at the one it will be given.
contract::RunConfig live_config(int64_t steps) {
  contract::RunConfig c = smoke_config();
  c.train.max_tokens = 1024 * static_cast<double>(steps);
  c.eval.every_tokens = 1024 * 2;
  c.checkpoint.every_steps = 0;
  c.target.stop_at_target = true;
  return c;
}

// The latest evaluation in the run's log at or after `min_step`, once there is one.
std::optional<std::pair<int64_t, double>> eval_at_or_after(const std::string& dir, int64_t min_step) {
  std::ifstream in(dir + "/events.jsonl");
  std::string line;
  std::optional<std::pair<int64_t, double>> found;
  while (std::getline(in, line)) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == "eval" && e.value("step", int64_t{-1}) >= min_step &&
        e["val_loss"].is_number())
      found = std::make_pair(e["step"].get<int64_t>(), e["val_loss"].get<double>());
  }
  return found;
}

}  // namespace

TEST_CASE("A target written mid-run stops the trainer at its first evaluation at or below it",
          "[train][target]") {
  const contract::RunConfig c = live_config(400);  // far more steps than it will take
  const std::string dir = fresh_run_dir("live_target_mid_run");
  auto run = std::async(std::launch::async, [&] { return run_train(dir, &c); });
  // Once the run is under way, a target a little below its current loss: not reached yet.
  std::optional<std::pair<int64_t, double>> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!(seen = eval_at_or_after(dir, 6)) && std::chrono::steady_clock::now() < deadline &&
         run.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
  }
  REQUIRE(seen);
  const double target = seen->second - 0.05;
  contract::write_target_file(dir, {target, "test: median of arm fp8 at 10 % of its budget"});
  const TrainResult r = run.get();
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);
  const auto taken = events_of_kind(events, "live_target");
  REQUIRE(taken.size() == 1);
  CHECK(taken[0]["val_loss"].get<double>() == target);
  CHECK(taken[0]["basis"] == "test: median of arm fp8 at 10 % of its budget");
  // Read at the first evaluation that looks for it after it was written. The trainer looks after
  // logging an evaluation, so on a loaded machine that can be the very evaluation the test saw.
  CHECK(taken[0]["step"].get<int64_t>() >= seen->first);
  const auto reached = events_of_kind(events, "target_reached");
  REQUIRE(reached.size() == 1);
  CHECK(reached[0]["val_loss"].get<double>() <= target);
  CHECK(events.back()["kind"] == "run_end");
  CHECK(events.back()["status"] == "converged");
  CHECK(events.back()["step"] == reached[0]["step"]);
  CHECK(events.back()["step"].get<int64_t>() < 400);
  // It stopped at its first evaluation at or below the target once it knew it, not later.
  const int64_t known_at = taken[0]["step"].get<int64_t>();
  for (const auto& [tokens, loss] : eval_curve(events))
    if (tokens / 1024 >= known_at && tokens < reached[0]["tokens"].get<int64_t>()) CHECK(loss > target);
}

TEST_CASE("A run that starts with a target file it has passed already stops at its first "
          "evaluation, and a damaged file is a warning event",
          "[train][target]") {
  SECTION("a target above the initial loss: stopped at step 0") {
    const contract::RunConfig c = live_config(20);
    const std::string dir = fresh_run_dir("live_target_at_start");
    contract::write_target_file(dir, {50.0, ""});
    const TrainResult r = run_train(dir, &c);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto events = effective_events(dir);
    REQUIRE(events_of_kind(events, "live_target").size() == 1);
    CHECK(events_of_kind(events, "live_target")[0]["step"] == 0);
    CHECK(events.back()["status"] == "converged");
    CHECK(events.back()["step"] == 0);
  }
  SECTION("a damaged file: reported once, the run trains to its budget") {
    const contract::RunConfig c = live_config(6);
    const std::string dir = fresh_run_dir("live_target_damaged");
    std::ofstream(dir + "/target.json") << "{\"val_loss\": \"low\"}";
    const TrainResult r = run_train(dir, &c);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("warning: " + dir + "/target.json: val_loss: expected a finite number > 0") !=
          std::string::npos);
    const auto events = effective_events(dir);
    const auto ignored = events_of_kind(events, "live_target");
    REQUIRE(ignored.size() == 1);  // four evaluations, one report
    CHECK(ignored[0]["ignored"].get<std::string>().find("val_loss: expected a finite number > 0") !=
          std::string::npos);
    CHECK_FALSE(ignored[0].contains("val_loss"));
    CHECK(events_of_kind(events, "target_reached").empty());
    CHECK(events.back()["status"] == "budget_exhausted");
    CHECK(events.back()["step"] == 6);
  }
}
