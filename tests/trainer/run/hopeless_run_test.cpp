// mxablate-train with target.stop_hopeless (docs/design.md §4, "Projected outcomes and hopeless
// runs"): a run whose target it cannot reach writes its projections and ends early as
// projected_not_reached; the same run without stop_hopeless records the same projections and
// trains to its budget; a run killed and resumed decides at the same evaluation.
#include <filesystem>

#include "catch.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {

contract::RunConfig hopeless_config() {
  contract::RunConfig c = smoke_config();
  c.train.max_tokens = 1024 * 60;
  c.eval.every_tokens = 1024 * 3;
  c.checkpoint.every_steps = 6;
  c.target.val_loss = 0.5;  // far below anything the smoke model reaches in 60 steps
  c.target.stop_hopeless = true;
  return c;
}

}  // namespace

TEST_CASE("A run projected not to reach its target ends early as projected_not_reached", "[train]") {
  const contract::RunConfig c = hopeless_config();
  const std::string dir = fresh_run_dir("hopeless");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);
  const auto projections = events_of_kind(events, "projection");
  REQUIRE(projections.size() >= 3);
  // Too early at first: no projection, with the reason.
  CHECK(projections.front().contains("no_projection"));
  CHECK(projections.front()["no_projection"].get<std::string>().find("before 30 %") == 0);
  const json& last = projections.back();
  REQUIRE(last.contains("loss_at_budget_lo"));
  CHECK(last["not_reaching"] == true);
  CHECK(last["streak"] == 3);
  CHECK(last["loss_at_budget_lo"].get<double>() > 0.5);
  CHECK(last["confidence"] == 0.95);
  const json& end = events.back();
  CHECK(end["kind"] == "run_end");
  CHECK(end["status"] == "projected_not_reached");
  CHECK(end["step"] == last["step"]);
  CHECK(end["step"].get<int64_t>() < 60);
  CHECK(end["reason"].get<std::string>().find("above the target 0.5") != std::string::npos);

  SECTION("without stop_hopeless the same projections are recorded and the run trains on") {
    contract::RunConfig off = c;
    off.target.stop_hopeless = false;
    const std::string dir_off = fresh_run_dir("hopeless-off");
    REQUIRE(run_train(dir_off, &off).exit_code == 0);
    const auto events_off = effective_events(dir_off);
    CHECK(events_off.back()["status"] == "budget_exhausted");
    const auto projections_off = events_of_kind(events_off, "projection");
    REQUIRE(projections_off.size() > projections.size());
    CHECK(projections_off[projections.size() - 1]["streak"] == 3);
    CHECK(projections_off[projections.size() - 1]["loss_at_budget"] == last["loss_at_budget"]);
  }
  SECTION("killed between two verdicts and resumed, it stops at the same evaluation") {
    const std::string dir_crash = fresh_run_dir("hopeless-crash");
    const int64_t stop_step = end["step"].get<int64_t>();
    // The last checkpoint before the kill holds a streak of at least one verdict.
    const int64_t crash_at = stop_step - 2;
    CHECK(run_train(dir_crash, &c, "--debug-crash-at-step " + std::to_string(crash_at)).exit_code == 137);
    const TrainResult resumed = run_train(dir_crash, nullptr, "--resume");
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const auto after = effective_events(dir_crash);
    CHECK(after.back()["status"] == "projected_not_reached");
    CHECK(after.back()["step"] == stop_step);
  }
}
