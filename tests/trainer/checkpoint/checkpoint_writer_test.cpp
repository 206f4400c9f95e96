// Checkpoints written beside training (docs/design.md §4, "Checkpoints and exact resume";
// docs/reliability.md): the training thread takes a snapshot in host memory and a writer thread
// writes it. The files hold what those written in place hold (checkpoint_files.h); a kill during a write, or
// between its publishing and its event, resumes from the newest intact checkpoint to the
// uninterrupted curve; a stop leaves its step's checkpoint published before the exit; a write
// that fails ends the run with one line, as a write in place does.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.h"
#include "checkpoint_files.h"
#include "run_test_support.h"
#include "test_support.h"

using namespace mxablate;
using namespace mxablate::test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The resume tests' run with a train event every step.
contract::RunConfig writer_config() {
  contract::RunConfig c = resume_config("writer-run");
  c.telemetry.train_every_steps = 1;
  return c;
}

// The run ends as one never interrupted: the same evaluations, and each step's train event once
// with the same loss.
void check_same_run(const std::vector<json>& events, const std::vector<json>& reference) {
  CHECK(eval_curve(events) == eval_curve(reference));
  std::vector<int64_t> steps, ref_steps;
  std::vector<double> losses, ref_losses;
  for (const auto& e : events_of_kind(events, "train")) {
    steps.push_back(e["step"]);
    losses.push_back(e["loss"]);
  }
  for (const auto& e : events_of_kind(reference, "train")) {
    ref_steps.push_back(e["step"]);
    ref_losses.push_back(e["loss"]);
  }
  CHECK(steps == ref_steps);
  CHECK(losses == ref_losses);
  CHECK(events.back()["status"] == "budget_exhausted");
}

const std::vector<json>& uninterrupted() {
  static const std::vector<json> events = [] {
    const contract::RunConfig c = writer_config();
    const std::string dir = fresh_run_dir("writer_uninterrupted");
    REQUIRE(run_train(dir, &c).exit_code == 0);
    return effective_events(dir);
  }();
  return events;
}

// The line the trainer failed with: run_end's reason.
std::string failure_reason(const std::string& run_dir) {
  const auto ends = events_of_kind(effective_events(run_dir), "run_end");
  REQUIRE(ends.size() == 1);
  CHECK(ends[0]["status"] == "failed");
  return ends[0].value("reason", "");
}

// Resumes the killed run in `dir`: it restarts from the checkpoint of `step` and ends as the
// uninterrupted `reference`.
void resume_to_reference(const std::string& dir, int64_t step, const std::vector<json>& reference) {
  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  const auto resumes = events_of_kind(events, "resume");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["step"] == step);
  check_same_run(events, reference);
}

}  // namespace

TEST_CASE("Checkpoints written beside training hold what checkpoints written in place hold",
          "[train][checkpoint]") {
  const contract::RunConfig c = writer_config();
  const std::string in_place = fresh_run_dir("writer_in_place");
  const TrainResult sync = run_train(in_place, &c, "--debug-synchronous-checkpoints");
  INFO(sync.output);
  REQUIRE(sync.exit_code == 0);
  const std::string beside = fresh_run_dir("writer_beside");
  const TrainResult async = run_train(beside, &c);
  INFO(async.output);
  REQUIRE(async.exit_code == 0);

  check_same_checkpoints(in_place, beside);  // steps 4, 8 and 12
  const auto events = effective_events(beside);
  check_same_run(events, effective_events(in_place));
  // Each checkpoint recorded once, at its own step, before run_end, naming its directory.
  std::vector<int64_t> steps;
  for (const auto& e : events_of_kind(events, "checkpoint")) {
    steps.push_back(e["step"]);
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(e["step"].get<int64_t>()));
    CHECK(e["path"] == (fs::path(beside) / "checkpoints" / name).string());
  }
  CHECK(steps == std::vector<int64_t>{4, 8, 12});
  // The training thread's share is checkpoint_s; the writer's own time is reported beside it.
  const json end = events.back();
  REQUIRE(end["kind"] == "run_end");
  REQUIRE(end.contains("checkpoint_write_s"));
  CHECK(end["checkpoint_write_s"].get<double>() > 0);
  CHECK(end["train_s"].get<double>() + end["eval_s"].get<double>() + end["checkpoint_s"].get<double>() <=
        end["wall_s"].get<double>() + 1e-6);
}

TEST_CASE("A kill while a checkpoint is being written resumes from the newest intact one, same result",
          "[train][resume][checkpoint]") {
  const contract::RunConfig c = writer_config();
  const std::vector<json>& reference = uninterrupted();
  const std::string dir = fresh_run_dir("writer_killed_writing");
  const TrainResult crashed = run_train(dir, &c, "--debug-crash-writing-checkpoint 8");
  INFO(crashed.output);
  REQUIRE(crashed.exit_code == 137);
  const fs::path checkpoints = fs::path(dir) / "checkpoints";
  // Killed with step 8's files in its temporary directory: never published.
  CHECK(fs::exists(checkpoints / "step-00000008.tmp" / "model.pt"));
  CHECK_FALSE(fs::exists(checkpoints / "step-00000008.tmp" / "state.json"));
  CHECK_FALSE(fs::exists(checkpoints / "step-00000008"));
  CHECK(fs::exists(checkpoints / "step-00000004" / "state.json"));

  resume_to_reference(dir, 4, reference);
  CHECK_FALSE(fs::exists(checkpoints / "step-00000008.tmp"));  // the leftover is pruned
}

TEST_CASE("A kill after a checkpoint is published, before its event, resumes from it", "[train][resume][checkpoint]") {
  const contract::RunConfig c = writer_config();
  const std::vector<json>& reference = uninterrupted();
  const std::string dir = fresh_run_dir("writer_killed_published");
  const TrainResult crashed = run_train(dir, &c, "--debug-crash-after-checkpoint-published 8");
  INFO(crashed.output);
  REQUIRE(crashed.exit_code == 137);
  CHECK(fs::exists(fs::path(dir) / "checkpoints" / "step-00000008" / "state.json"));
  for (const auto& e : events_of_kind(effective_events(dir), "checkpoint")) CHECK(e["step"] != 8);

  resume_to_reference(dir, 8, reference);
}

TEST_CASE("A stop leaves its step's checkpoint published before the process exits", "[train][resume][checkpoint]") {
  const contract::RunConfig c = writer_config();
  const std::vector<json>& reference = uninterrupted();
  int64_t step = 0;
  SECTION("SIGTERM at a checkpoint's step: its write is in flight when the stop comes") { step = 8; }
  SECTION("SIGTERM between checkpoints, one written two steps before") { step = 6; }
  const std::string dir = fresh_run_dir("writer_stop_" + std::to_string(step));
  const TrainResult stopped = run_train(dir, &c, "--debug-signal-at-step " + std::to_string(step));
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 4);
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  CHECK(fs::exists(fs::path(dir) / "checkpoints" / name / "state.json"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "checkpoints" / (std::string(name) + ".tmp")));
  const auto before = effective_events(dir);
  REQUIRE(before.size() >= 2);
  CHECK(before.back()["kind"] == "run_end");
  CHECK(before.back()["status"] == "interrupted");
  CHECK(before[before.size() - 2]["kind"] == "checkpoint");
  CHECK(before[before.size() - 2]["step"] == step);

  const TrainResult resumed = run_train(dir, nullptr, "--resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto events = effective_events(dir);
  CHECK(events_of_kind(events, "resume").at(0)["step"] == step);
  check_same_run(events, reference);
}

TEST_CASE("A checkpoint write that fails ends the run with the one line a write in place gives (exit 1)",
          "[train][checkpoint]") {
  contract::RunConfig c = writer_config();
  std::vector<std::string> reasons;
  for (const std::string mode : {"--debug-synchronous-checkpoints", ""}) {
    const std::string dir = fresh_run_dir("writer_fails" + std::string(mode.empty() ? "" : "_sync"));
    std::ofstream(fs::path(dir) / "checkpoints") << "a file where the checkpoints directory goes\n";
    const TrainResult r = run_train(dir, &c, mode);
    INFO(mode << ": " << r.output);
    CHECK(r.exit_code == 1);
    const std::string reason = failure_reason(dir);
    REQUIRE(reason.find(dir) != std::string::npos);
    CHECK_THAT(reason, has_text("step-00000004.tmp"));  // seen at a later step
    CHECK(reason.find('\n') == std::string::npos);
    CHECK_THAT(r.output, has_text("mxablate-train: " + reason + "\n"));
    reasons.push_back(std::string(reason).replace(reason.find(dir), dir.size(), "RUN_DIR"));
  }
  CHECK(reasons[0] == reasons[1]);
}

TEST_CASE("A run that ended for good records run_end before its last checkpoint's write is done, and exits after it",
          "[train][checkpoint]") {
  // The only checkpoint is the last step's but one: still being written when the budget ends.
  // (A failure of that write is a warning if it is seen after run_end and the run's failure if
  // the training thread sees it first: a race this test leaves alone.)
  contract::RunConfig c = writer_config();
  c.checkpoint.every_steps = 15;
  const std::string dir = fresh_run_dir("writer_at_end");
  const TrainResult r = run_train(dir, &c);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto events = effective_events(dir);
  CHECK(events.back()["kind"] == "run_end");
  CHECK(events.back()["status"] == "budget_exhausted");
  // The process waited for the write: the checkpoint is complete on disk, nothing half-written.
  CHECK(fs::exists(fs::path(dir) / "checkpoints" / "step-00000015" / "state.json"));
  CHECK_FALSE(fs::exists(fs::path(dir) / "checkpoints" / "step-00000015.tmp"));
}
