// mxablate-train end to end on the CPU, as the orchestrator runs it: a process per run, a run
// directory with config.json, the events file as the only output that matters.
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "catch.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;
using nlohmann::json;

namespace {

// A config that exercises every random stream: all three GEMMs in MXFP4, stochastic rounding
// of the gradients, and a per-step-random Hadamard rotation of Wgrad.
contract::RunConfig mxfp4_config() {
  contract::RunConfig c = smoke_config();
  use_every_random_stream(c);
  c.train.global_batch_tokens = 512;
  c.train.micro_batch_tokens = 256;  // gradient accumulation over two micro-batches
  c.train.max_tokens = 512 * 30;
  c.eval.every_tokens = 512 * 5;
  c.eval.tokens = 1024;
  c.checkpoint.every_steps = 7;
  c.checkpoint.keep = 2;
  return c;
}

}  // namespace

TEST_CASE("The smoke model's validation loss falls clearly within a test-sized budget", "[train][slow]") {
  contract::RunConfig c = smoke_config();
  c.train.max_tokens = 1024 * 150;  // 150 steps of 16 sequences x 64 tokens
  c.train.warmup_tokens = 1024 * 10;
  c.eval.every_tokens = 1024 * 25;
  c.checkpoint.every_steps = 0;
  c.mllog = true;
  const std::string dir = fresh_run_dir("smoke_learns");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);

  // The contract: seq strictly increasing from 1, run_start first, run_end last.
  for (size_t i = 0; i < events.size(); ++i) CHECK(events[i]["seq"] == static_cast<int64_t>(i + 1));
  REQUIRE(events.front()["kind"] == "run_start");
  CHECK(events.front()["params"].get<int64_t>() < 1000000);
  CHECK(events.front()["device"] == "cpu");
  CHECK(events.front()["versions"].contains("torch"));
  const json end = events.back();
  REQUIRE(end["kind"] == "run_end");
  CHECK(end["status"] == "budget_exhausted");
  CHECK(end["step"] == 150);
  CHECK(end["tokens"] == 1024 * 150);
  CHECK(end["tokens_per_s"].get<double>() > 0);
  CHECK(end["peak_rss_bytes"].get<int64_t>() > 0);
  // Where the time went (docs/trainer.md, run_end): setup before the first step; training and
  // the 7 evaluations within wall_s; no checkpoints, no standby.
  CHECK(end["setup_s"].get<double>() > 0);
  CHECK(end["train_s"].get<double>() > 0);
  CHECK(end["eval_s"].get<double>() > 0);
  CHECK(end["checkpoint_s"] == 0.0);
  CHECK_FALSE(end.contains("standby_s"));
  CHECK_FALSE(events.front().contains("prestarted"));
  CHECK(end["train_s"].get<double>() + end["eval_s"].get<double>() ==
        Approx(end["wall_s"].get<double>()).margin(1e-6));

  // Evaluations at 0 and every 25 steps; the curve falls clearly.
  const auto curve = eval_curve(events);
  REQUIRE(curve.size() == 7);
  for (size_t i = 0; i < curve.size(); ++i) CHECK(curve[i].first == static_cast<int64_t>(i) * 25 * 1024);
  CHECK(curve.front().second == Approx(std::log(256.0)).margin(0.3));  // starts near uniform
  CHECK(curve.back().second < 0.55 * curve.front().second);
  CHECK(curve.back().second < curve[2].second);
  // Sampled train events every 5 steps (and step 1), with the schedule's learning rate.
  const auto train = events_of_kind(events, "train");
  REQUIRE(train.size() == 31);
  CHECK(train[1]["step"] == 5);
  CHECK(train[1]["lr"].get<double>() == Approx(3e-3 * 5 / 10));
  CHECK(train.back()["lr"].get<double>() == Approx(3e-4));
  CHECK(train.back()["loss"].get<double>() < train.front()["loss"].get<double>() - 1.5);

  // MLPerf lines on stdout: run_start, one eval_accuracy per evaluation, run_stop success.
  std::istringstream lines(r.output);
  std::string line;
  int evals = 0;
  bool start = false, stop = false;
  while (std::getline(lines, line)) {
    if (line.rfind(":::MLLOG ", 0) != 0) continue;
    const json j = json::parse(line.substr(9));
    start |= j["key"] == "run_start";
    if (j["key"] == "eval_accuracy") {
      CHECK(j["value"].get<double>() == curve[static_cast<size_t>(evals)].second);
      CHECK(j["metadata"]["samples_count"] == curve[static_cast<size_t>(evals)].first / 64);
      ++evals;
    }
    if (j["key"] == "run_stop") stop = j["metadata"]["status"] == "success";
  }
  CHECK(start);
  CHECK(evals == 7);
  CHECK(stop);
}

TEST_CASE("Full MXFP4 with SR and random Hadamard trains, with quantization telemetry", "[train][slow]") {
  const contract::RunConfig c = mxfp4_config();
  const std::string dir = fresh_run_dir("mxfp4");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);
  const auto curve = eval_curve(events);
  REQUIRE(curve.size() == 7);
  CHECK(curve.back().second < curve.front().second - 1.0);
  // Telemetry at steps 0, 10, 20 (sampled before the step is counted: reported at steps 1, 11,
  // 21): every blocks' linear, all three GEMMs, both operands; none for the BF16 LM head.
  const auto stats = events_of_kind(events, "quant_stats");
  REQUIRE(stats.size() == 3 * 14 * 6);
  std::set<std::string> names;
  for (const auto& s : stats) {
    names.insert(s["layer_name"].get<std::string>());
    CHECK(s["layer"].get<int>() < 14);
    CHECK(s["relative_error"].get<double>() > 0.01);
    CHECK(s["relative_error"].get<double>() < 0.6);
    CHECK(s["fraction_saturated"].get<double>() >= 0);
    CHECK(std::set<std::string>{"fprop", "dgrad", "wgrad"}.count(s["gemm"].get<std::string>()) == 1);
    CHECK(std::set<std::string>{"x", "w", "dy"}.count(s["operand"].get<std::string>()) == 1);
  }
  CHECK(names.count("blocks.1.mlp.down") == 1);
  CHECK(names.count("lm_head") == 0);
  CHECK(stats.front()["step"] == 1);
}

TEST_CASE("A run killed and resumed produces the same evaluation curve as one never interrupted",
          "[train][resume][slow]") {
  const contract::RunConfig c = mxfp4_config();
  // The uninterrupted run, once for both sections (Catch re-enters the test case per section).
  static const std::vector<json> reference = [&] {
    const std::string straight = fresh_run_dir("straight");
    REQUIRE(run_train(straight, &c).exit_code == 0);
    return effective_events(straight);
  }();
  const auto reference_curve = eval_curve(reference);
  REQUIRE(reference_curve.size() == 7);

  SECTION("kill -9 after step 19 (last checkpoint at 14), then --resume") {
    const std::string dir = fresh_run_dir("crashed");
    const TrainResult crashed = run_train(dir, &c, "--debug-crash-at-step 19");
    CHECK(crashed.exit_code == 137);
    const auto before = effective_events(dir);
    CHECK(events_of_kind(before, "run_end").empty());
    const TrainResult resumed = run_train(dir, nullptr, "--resume");
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const auto events = effective_events(dir);
    CHECK(eval_curve(events) == reference_curve);  // bit for bit
    const auto resumes = events_of_kind(events, "resume");
    REQUIRE(resumes.size() == 1);
    CHECK(resumes[0]["step"] == 14);
    // The resume discards exactly the lost timeline after the step-14 checkpoint was taken: what
    // it keeps is of step 14 or before (and the steps below say nothing of them is lost). The
    // checkpoint's own event is written once its write is seen complete (docs/design.md §4,
    // "Checkpoints and exact resume"): kept when it came right after the snapshot, lost with the
    // later steps' events when they came first.
    const int64_t discard_after = resumes[0]["discard_after_seq"];
    std::vector<json> kept_events;
    for (const auto& e : events)
      if (e["seq"].get<int64_t>() <= discard_after) kept_events.push_back(e);
    REQUIRE_FALSE(kept_events.empty());
    for (const auto& e : kept_events) CHECK(e["step"].get<int64_t>() <= 14);
    CHECK(kept_events.back()["seq"] == discard_after);
    // Surviving train events are those of an uninterrupted run, each step once.
    std::vector<int64_t> steps, ref_steps;
    for (const auto& e : events_of_kind(events, "train")) steps.push_back(e["step"]);
    for (const auto& e : events_of_kind(reference, "train")) ref_steps.push_back(e["step"]);
    CHECK(steps == ref_steps);
    std::vector<double> losses, ref_losses;
    for (const auto& e : events_of_kind(events, "train")) losses.push_back(e["loss"]);
    for (const auto& e : events_of_kind(reference, "train")) ref_losses.push_back(e["loss"]);
    CHECK(losses == ref_losses);
    CHECK(events.back()["status"] == "budget_exhausted");
    CHECK(events.back()["tokens"] == reference.back()["tokens"]);
    const auto starts = events_of_kind(events, "run_start");
    REQUIRE(starts.size() == 2);
    CHECK(starts[1]["attempt"] == 2);
    CHECK(starts[1]["resumed"] == true);
    // Only the newest `keep` checkpoints remain.
    int kept = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/checkpoints")) kept += e.is_directory();
    CHECK(kept == 2);
  }

  SECTION("SIGTERM after step 12: checkpoint, interrupted, exit 4; then --resume") {
    const std::string dir = fresh_run_dir("sigterm");
    const TrainResult stopped = run_train(dir, &c, "--debug-signal-at-step 12");
    CHECK(stopped.exit_code == 4);
    const auto before = effective_events(dir);
    REQUIRE(before.back()["kind"] == "run_end");
    CHECK(before.back()["status"] == "interrupted");
    CHECK(before.back()["step"] == 12);
    CHECK(before[before.size() - 2]["kind"] == "checkpoint");
    CHECK(before[before.size() - 2]["step"] == 12);
    const TrainResult resumed = run_train(dir, nullptr, "--resume");
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    const auto events = effective_events(dir);
    CHECK(eval_curve(events) == reference_curve);
    CHECK(events.back()["status"] == "budget_exhausted");
    // Resuming a finished run does nothing and succeeds.
    const auto lines_before = effective_events(dir).size();
    CHECK(run_train(dir, nullptr, "--resume").exit_code == 0);
    CHECK(effective_events(dir).size() == lines_before);
  }
}

TEST_CASE("A precision schedule switches once, as an event, and a resume across it is exact",
          "[train][resume][slow]") {
  contract::RunConfig c = mxfp4_config();
  // From half the budget (step 15 of 30) the blocks run in BF16; blocks.0.attn.q keeps an
  // MXFP4 Wgrad through an override.
  c.precision_schedule = {{0.5, {contract::GemmPrecision::kBF16, contract::GemmPrecision::kBF16,
                                 contract::GemmPrecision::kBF16}}};
  contract::LayerOverride keep{"blocks.0.attn.q", {}};
  keep.patch.wgrad = contract::GemmPrecision::kMXFP4;
  c.overrides = {keep};
  c.telemetry.quant_every_steps = 10;
  const std::string straight = fresh_run_dir("schedule_straight");
  REQUIRE(run_train(straight, &c).exit_code == 0);
  const auto reference = effective_events(straight);
  const auto switches = events_of_kind(reference, "precision_switch");
  REQUIRE(switches.size() == 1);
  CHECK(switches[0]["step"] == 15);
  CHECK(switches[0]["tokens"] == 15 * 512);
  CHECK(switches[0]["phase"] == 1);
  CHECK(switches[0]["fprop"] == "bf16");
  // Telemetry after the switch: only blocks.0.attn.q's Wgrad is still low-precision.
  for (const auto& s : events_of_kind(reference, "quant_stats")) {
    if (s["step"].get<int64_t>() <= 15) continue;
    CHECK(s["layer_name"] == "blocks.0.attn.q");
    CHECK(s["gemm"] == "wgrad");
  }
  // Differs from the run without the schedule: the switch took effect.
  const contract::RunConfig unscheduled = mxfp4_config();
  const std::string plain = fresh_run_dir("schedule_none");
  REQUIRE(run_train(plain, &unscheduled).exit_code == 0);
  CHECK(eval_curve(effective_events(plain)) != eval_curve(reference));

  const std::string dir = fresh_run_dir("schedule_crashed");
  CHECK(run_train(dir, &c, "--debug-crash-at-step 19").exit_code == 137);  // checkpoint at 14
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  CHECK(eval_curve(events) == eval_curve(reference));  // bit for bit
  REQUIRE(events_of_kind(events, "precision_switch").size() == 1);
  CHECK(events_of_kind(events, "precision_switch")[0]["step"] == 15);
}

// The events without what depends on the clock or the run directory.
std::vector<json> without_timing(std::vector<json> events) {
  for (json& e : events)
    for (const char* key :
         {"time", "tokens_per_s", "wall_s", "peak_rss_bytes", "peak_gpu_bytes", "path", "setup_s",
          "standby_s", "train_s", "eval_s", "checkpoint_s", "checkpoint_write_s"})
      e.erase(key);
  return events;
}

TEST_CASE("Activation checkpointing changes no event, with data-parallel ranks too, and may be "
          "switched on for a resume",
          "[train][checkpointing]") {
  contract::RunConfig c = mxfp4_config();  // every random stream, two micro-batches a step
  c.quant.occ = contract::OccConfig{0.99};
  c.train.max_tokens = 512 * 3;
  c.eval.every_tokens = 512;
  c.checkpoint.every_steps = 1;
  c.telemetry.train_every_steps = 1;
  c.telemetry.quant_every_steps = 1;
  // Checkpoints written in place: written beside training, each checkpoint's event comes when
  // its write is seen complete, at a place in the log that depends on the clock
  // (docs/design.md §4, "Checkpoints and exact resume").
  const std::string in_place = "--debug-synchronous-checkpoints";
  const std::string plain = fresh_run_dir("ckpt_off");
  REQUIRE(run_train(plain, &c, in_place).exit_code == 0);
  const auto reference = without_timing(effective_events(plain));
  REQUIRE(events_of_kind(reference, "train").size() == 3);
  REQUIRE(events_of_kind(reference, "quant_stats").size() == 3 * 14 * 6);

  // Every block recomputed, the first of the two, selective recompute alone and beside the first
  // block, and auto (none on the CPU): train losses, gradient norms, evaluations and telemetry,
  // bit for bit and in the same order; run_start says which blocks recomputed whole and whether
  // the others selectively.
  using Mode = contract::Recompute::Mode;
  contract::RunConfig on = c;
  on.train.activation_checkpointing = {Mode::kAll, 0};
  struct Expected {
    contract::Recompute setting;
    int blocks;
  };
  for (const auto& [setting, blocks] :
       {Expected{{Mode::kAll, 0}, 2}, Expected{{Mode::kFirstBlocks, 1}, 1}, Expected{{Mode::kNone, 0, true}, 0},
        Expected{{Mode::kFirstBlocks, 1, true}, 1}, Expected{{Mode::kAuto, 0}, 0}}) {
    contract::RunConfig cfg = c;
    cfg.train.activation_checkpointing = setting;
    INFO(contract::to_string(setting));
    const std::string checked = fresh_run_dir("ckpt_" + contract::to_string(setting));
    const TrainResult r = run_train(checked, &cfg, in_place);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto events = without_timing(effective_events(checked));
    REQUIRE(!events.empty());
    REQUIRE(events[0]["kind"] == "run_start");
    CHECK(events[0]["recompute"]["blocks"] == blocks);
    CHECK(events[0]["recompute"]["of"] == 2);
    CHECK(events[0]["recompute"]["selective"] == setting.selective);
    if (setting.mode == Mode::kAuto)
      CHECK(events[0]["recompute"]["reason"] == "auto: none on the CPU (its memory is not planned)");
    events[0]["recompute"] = reference[0]["recompute"];
    CHECK(events == reference);
  }

  // Data-parallel ranks sum gradients from hooks on each parameter's accumulator: with the
  // blocks checkpointed those still fire once per backward, after the recompute.
  contract::RunConfig ranks = on;
  ranks.parallel.data = 2;  // one of the step's two micro-batches each
  const std::string parallel = fresh_run_dir("ckpt_on_2_ranks");
  const TrainResult pr = run_train(parallel, &ranks, in_place);
  INFO(pr.output);
  if (lacks_gloo(pr.output)) MXABLATE_SKIP(kNoGloo);
  REQUIRE(pr.exit_code == 0);
  const auto parallel_events = without_timing(effective_events(parallel));
  for (const char* kind : {"train", "eval", "quant_stats"})
    CHECK(events_of_kind(parallel_events, kind) == events_of_kind(reference, kind));

  // A run that crashed without it resumes with it (e.g. after running out of memory).
  const std::string dir = fresh_run_dir("ckpt_resume");
  CHECK(run_train(dir, &c, "--debug-crash-at-step 2").exit_code == 137);
  const TrainResult resumed = run_train(dir, &on, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto after = effective_events(dir);
  CHECK(events_of_kind(after, "checkpoint_rejected").empty());
  REQUIRE(events_of_kind(after, "resume").size() == 1);
  CHECK(eval_curve(after) == eval_curve(reference));
  CHECK(events_of_kind(after, "train").back()["loss"] ==
        events_of_kind(reference, "train").back()["loss"]);
}

TEST_CASE("A crash before the first checkpoint restarts the run from scratch on --resume", "[train][resume]") {
  contract::RunConfig c = smoke_config();
  c.train.max_tokens = 1024 * 8;
  c.checkpoint.every_steps = 0;
  const std::string straight = fresh_run_dir("no_ckpt_straight");
  REQUIRE(run_train(straight, &c).exit_code == 0);
  const std::string dir = fresh_run_dir("no_ckpt");
  CHECK(run_train(dir, &c, "--debug-crash-at-step 3").exit_code == 137);
  REQUIRE(run_train(dir, nullptr, "--resume").exit_code == 0);
  const auto events = effective_events(dir);
  CHECK(events.front()["kind"] == "resume");
  CHECK(events.front()["discard_after_seq"] == 0);
  CHECK(eval_curve(events) == eval_curve(effective_events(straight)));
}

TEST_CASE("An injected non-finite value is a fatal divergence: event and exit status 3", "[train][divergence]") {
  for (const char* precision : {"bf16", "mxfp4"}) {
    contract::RunConfig c = smoke_config();
    const contract::GemmPrecision p = *contract::parse_gemm_precision(precision);
    c.precision = {p, p, p};
    const std::string dir = fresh_run_dir(std::string("nan_") + precision);
    const TrainResult r = run_train(dir, &c, "--debug-inject-nonfinite-at-step 4");
    INFO(precision << "\n" << r.output);
    CHECK(r.exit_code == 3);
    const auto events = effective_events(dir);
    const auto divergences = events_of_kind(events, "divergence");
    REQUIRE_FALSE(divergences.empty());
    CHECK(divergences.front()["reason"] == "nonfinite_loss");
    CHECK(divergences.front()["severity"] == "fatal");
    CHECK(divergences.front()["step"] == 4);
    CHECK(divergences.front()["value"].is_null());
    REQUIRE(events.back()["kind"] == "run_end");
    CHECK(events.back()["status"] == "diverged");
    CHECK(events.back()["reason"] == "nonfinite_loss");
    CHECK(events_of_kind(events, "train").size() == 1);  // step 1 only; no step after the NaN
  }
}

TEST_CASE("Validation regressions and the target are events, stop_at_target converges", "[train]") {
  contract::RunConfig c = smoke_config();
  c.train.max_tokens = 1024 * 60;
  c.eval.every_tokens = 1024 * 5;
  c.target.val_loss = 4.6;
  c.target.stop_at_target = true;
  const std::string dir = fresh_run_dir("target");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);
  const auto reached = events_of_kind(events, "target_reached");
  REQUIRE(reached.size() == 1);
  CHECK(reached[0]["val_loss"].get<double>() <= 4.6);
  CHECK(events.back()["status"] == "converged");
  CHECK(events.back()["step"] == reached[0]["step"]);
  CHECK(events.back()["step"].get<int64_t>() < 60);
}

TEST_CASE("Bad configs and misuse exit with status 2 and one clear line", "[train]") {
  const auto expect_bad = [](contract::RunConfig c, const std::string& message) {
    const std::string dir = fresh_run_dir("bad");
    const TrainResult r = run_train(dir, &c);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, has_text(message));
  };
  contract::RunConfig c = smoke_config();
  c.model = "llama-7b";
  expect_bad(c, "model: expected one of smoke, llama-5m");
  c = smoke_config();
  c.data.dataset = "/nonexistent/data";
  expect_bad(c, "data.dataset: /nonexistent/data/manifest.json: does not exist (is this a prepared data directory?)");
  c = smoke_config();
  c.precision.wgrad = contract::GemmPrecision::kMXFP4;
  c.train.global_batch_tokens = 64 * 3;  // 192 tokens: fine for blocks of 32…
  // …but not for a 128-point rotation
  c.quant.hadamard = {kernels::HadamardMode::kDeterministic, 128, {kernels::GemmKind::kWgrad}};
  expect_bad(c, "layer blocks.0.attn.q");
  c = smoke_config();
  c.eval.tokens = 1e6;
  expect_bad(c, "eval.tokens");
  c = smoke_config();
  c.device = contract::Device::kCUDA;
  {
    // No GPU visible, whether or not this machine has one.
    ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
    expect_bad(c, "device: \"cuda\" requested");
    ::unsetenv("CUDA_VISIBLE_DEVICES");
  }

  const std::string dir = fresh_run_dir("bad_json");
  std::ofstream(dir + "/config.json") << R"({"model": "smoke", "trian": {}})";
  const TrainResult unknown = run_train(dir, nullptr);
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.output, has_text("trian: unknown key"));

  // A second run into a used run directory needs --resume.
  contract::RunConfig small = smoke_config();
  small.train.max_tokens = 1024 * 2;
  const std::string used = fresh_run_dir("used");
  REQUIRE(run_train(used, &small).exit_code == 0);
  const TrainResult again = run_train(used, &small);
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.output, has_text("pass --resume"));
}
