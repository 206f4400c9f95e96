// The trainer's writer and the readers' definition of an event line must agree on every kind:
// a kind the writer has and event_line.h lacks is skipped by every reader as a bad line (this
// happened to checkpoint_rejected). Each RunEvents function writes once; the log reads back whole.
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "catch.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/rules/run_events.h"

using namespace mxablate;
using nlohmann::json;

TEST_CASE("every kind RunEvents writes reads back through the event reader") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mxablate_run_events_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "events.jsonl").string();
  std::vector<std::string> written;
  {
    trainer::RunEvents ev(path);
    ev.run_start({0, 0}, {{"attempt", 1}, {"device", "cpu"}, {"params", 10}});
    written.push_back("run_start");
    ev.train({1, 10}, 3.5, 1e-3, 0.5, 1000.0);
    written.push_back("train");
    ev.eval({1, 10}, 3.4);
    written.push_back("eval");
    kernels::QuantTelemetry t;
    t.elements = 64;
    t.nonzero_inputs = 60;
    t.sum_sq_input = 1.0;
    t.sum_sq_error = 0.01;
    ev.quant_stats({1, 10}, 0, "blocks.0.attn.q", "fprop", "x", t);
    written.push_back("quant_stats");
    ev.quant_stats({1, 10}, 0, "blocks.0.attn.q", "fprop", "x", t, 0.0125);  // under OCC
    written.push_back("quant_stats");
    ev.divergence({1, 10}, {"grad_norm_explosion", 50.0, 5.0, false});
    written.push_back("divergence");
    const int64_t ckpt = ev.checkpoint({2, 20}, dir.string() + "/checkpoints/step-00000002");
    written.push_back("checkpoint");
    ev.resume({2, 20}, ckpt, dir.string() + "/checkpoints/step-00000002");
    written.push_back("resume");
    // Both shapes the trainer writes: set aside, and "" when it could not be moved.
    ev.checkpoint_rejected({2, 20}, dir.string() + "/checkpoints/step-00000004",
                           "model.pt: missing", dir.string() + "/checkpoints/step-00000004.rejected");
    ev.checkpoint_rejected({2, 20}, dir.string() + "/checkpoints/step-00000006",
                           "state.json: not valid JSON", "");
    written.push_back("checkpoint_rejected");
    written.push_back("checkpoint_rejected");
    ev.target_reached({3, 30}, 3.0, 3.1);
    written.push_back("target_reached");
    // Both shapes: a target taken from target.json, and a file that was ignored.
    ev.live_target({3, 30}, 3.25, "median of arm fp8 at 30 % of its budget", "");
    ev.live_target({3, 30}, std::nullopt, "", "RUN/target.json: val_loss is missing");
    written.push_back("live_target");
    written.push_back("live_target");
    // Both shapes of a projection: one (its far end beyond the horizon, null), and none with why.
    trainer::ProjectionResult projected;
    projected.projection = trainer::Projection{};
    projected.projection->confidence = 0.95;
    projected.projection->points = 7;
    projected.projection->loss_at_budget = 3.4;
    projected.projection->loss_at_budget_lo = 3.35;
    projected.projection->loss_at_budget_hi = 3.45;
    projected.projection->tokens_to_target_lo = 4e6;
    projected.projection->not_reaching = true;
    ev.projection({3, 30}, 3.3, projected, 1);
    trainer::ProjectionResult none;
    none.no_projection_reason = "before 30 % of the budget (at 10 %)";
    ev.projection({3, 30}, 3.3, none, 0);
    written.push_back("projection");
    written.push_back("projection");
    trainer::RunEvents::End hopeless;
    hopeless.status = "projected_not_reached";
    ev.run_end({3, 30}, hopeless);
    written.push_back("run_end");
    trainer::RunEvents::End plain;
    plain.status = "converged";
    plain.wall_s = 1.5;
    plain.tokens_per_s = 1000.0;
    plain.peak_rss_bytes = 1 << 20;
    ev.run_end({3, 30}, plain);
    written.push_back("run_end");
    // With the timings the trainer reports (docs/design.md §9): a prestarted attempt's.
    trainer::RunEvents::End timed = plain;
    timed.wall_s = 10.0;
    timed.setup_s = 2.0;
    timed.standby_s = 5.0;
    timed.train_s = 8.5;
    timed.eval_s = 1.0;
    timed.checkpoint_s = 0.5;
    // An MXFP4 arm under fp8-where-exact: its output tiles each way (docs/design.md §3).
    timed.mxfp4_as_fp8_tiles = std::array<trainer::RouteTiles, 3>{{{40, 2}, {42, 0}, {30, 12}}};
    ev.run_end({3, 30}, timed);
    written.push_back("run_end");
  }
  std::vector<std::string> read;
  std::vector<json> quant;
  for (const json& e : contract::read_effective_events(path)) {
    read.push_back(e["kind"]);
    if (e["kind"] == "quant_stats") quant.push_back(e);
  }
  CHECK(read == written);
  REQUIRE(quant.size() == 2);
  CHECK_FALSE(quant[0].contains("occ_fraction"));  // written only under OCC
  CHECK(quant[1]["occ_fraction"] == 0.0125);
  const json end = contract::read_effective_events(path).back();
  CHECK(end["setup_s"] == 2.0);
  CHECK(end["standby_s"] == 5.0);
  CHECK(end["train_s"] == 8.5);
  CHECK(end["eval_s"] == 1.0);
  CHECK(end["checkpoint_s"] == 0.5);
  CHECK(end["mxfp4_as_fp8_tiles"] == json{{"fprop", {{"tensor_cores", 40}, {"recomputed", 2}}},
                                          {"dgrad", {{"tensor_cores", 42}, {"recomputed", 0}}},
                                          {"wgrad", {{"tensor_cores", 30}, {"recomputed", 12}}}});
  CHECK_FALSE(contract::read_effective_events(path).at(read.size() - 2).contains("mxfp4_as_fp8_tiles"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("process_age_seconds: the time since this process started, from /proc") {
  const std::optional<double> age = trainer::process_age_seconds();
  REQUIRE(age);
  CHECK(*age >= 0);
  CHECK(*age < 24 * 3600.0);
  const double later = trainer::process_age_seconds().value_or(-1);
  CHECK(later >= *age);
}
