#include "run_checkpoints.h"

#include <cstdlib>
#include <iostream>
#include <memory>

#include "mxablate/trainer/torch/error_line.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {

RunCheckpoints::RunCheckpoints(RunSetup& setup, const RankGroup& group, RunRecord& record, Evaluation& evaluation,
                               TrainerState& state, const TrainOptions& options, const FaultPlan& faults)
    : s_(setup),
      group_(group),
      record_(record),
      evaluation_(evaluation),
      state_(state),
      options_(options),
      faults_(faults),
      writer_(!options.synchronous_checkpoints) {}

CheckpointExpectation RunCheckpoints::expectation() const {
  CheckpointExpectation expect;
  expect.run_id = s_.config.run_id;
  expect.trajectory_config = trajectory_config(contract::to_json(s_.config));
  expect.total_steps = s_.plan.total_steps;
  expect.tokens_per_step = s_.plan.tokens_per_step;
  expect.samples_per_step = s_.plan.micro_batches_per_step * s_.plan.sequences_per_micro_batch;
  return expect;
}

bool RunCheckpoints::restore(const LogSummary& history) {
  const CheckpointExpectation expect = expectation();
  std::vector<std::pair<std::string, std::string>> rejected;
  std::optional<std::string> used;
  for (const std::string& path : checkpoints_newest_first(options_.run_dir)) {
    try {
      state_ = load_checkpoint(path, *s_.model, *s_.engine, expect);
      used = path;
      break;
    } catch (const CheckpointOfAnotherRun& e) {
      // A run directory reused for another config (or another run's copy): falling back would
      // set aside good checkpoints and train a different run under this one's name.
      throw contract::ConfigError("checkpoint " + path + ": " + e.what() +
                                  " (resume with the config it was written under, or use a new run directory)");
    } catch (const CheckpointRejected& e) {
      rejected.emplace_back(path, e.what());
    }
  }
  RunEvents& events = record_.events();
  if (used) {
    restored_from_ = *used;
    evaluation_.restore_detector(state_.divergence);
    // The timeline that survives ends where the checkpoint was taken: its last event then is
    // state.json's events_seq. The checkpoint's own event survives too when it came right
    // after; written once the write was seen complete (docs/design.md §4, "Checkpoints and
    // exact resume"), it may come after later steps' events, which are lost with it, and a
    // write killed after publishing has none.
    const std::optional<int64_t> event = history.checkpoint_seq(*used, state_.step);
    const int64_t discard_after = event && *event == state_.events_seq + 1 ? *event : state_.events_seq;
    events.resume(progress(), discard_after, *used);
  } else {
    events.resume(progress(), 0, "");
  }
  // After the resume event, which discards the lost timeline before it.
  for (const auto& [path, reason] : rejected) {
    const std::string moved_to = set_aside_checkpoint(path);
    events.checkpoint_rejected(progress(), path, reason, moved_to);
    std::cerr << "mxablate-train: checkpoint " << path << " rejected: " << reason
              << (used ? "; resuming from " + *used : std::string("; no intact checkpoint, starting over")) << "\n";
  }
  return used.has_value();
}

void RunCheckpoints::load_verified(const std::string& path) {
  state_ = load_checkpoint(path, *s_.model, *s_.engine, expectation(), false);
  evaluation_.restore_detector(state_.divergence);
}

bool RunCheckpoints::after_step() {
  collect(false);  // the write in flight, if it has finished
  const int64_t every = s_.config.checkpoint.every_steps;
  if (every > 0 && state_.step % every == 0 && state_.step < s_.plan.total_steps) {
    write(options_.synchronous_checkpoints);
    return true;
  }
  return false;
}

// On the training thread: the snapshot into host memory, and first waiting for the previous
// write if it is still going; the writing itself runs beside training unless `wait`. All of it
// is checkpoint_s.
void RunCheckpoints::write(bool wait) {
  compat::synchronize(s_.device);  // as for evaluations: the steps before are training time
  const auto checkpoint_start = RunRecord::Clock::now();
  collect(true);
  state_.divergence = evaluation_.detector_state();
  state_.events_seq = record_.events().last_seq();
  auto snapshot = std::make_shared<CheckpointSnapshot>(snapshot_checkpoint(
      options_.run_dir, *s_.model, *s_.engine, state_, contract::to_json(s_.config), group_.writes(), host_));
  writer_.start(progress(), [snapshot, probe = write_probe(state_.step), run_dir = options_.run_dir,
                             keep = s_.config.checkpoint.keep]() mutable {
    const std::string path = write_checkpoint(*snapshot, probe);
    snapshot.reset();
    if (!path.empty()) prune_checkpoints(run_dir, keep);  // only once the new one is published
    return path;
  });
  if (wait) collect(true);
  record_.add_checkpoint_seconds(seconds_between(checkpoint_start, RunRecord::Clock::now()));
}

void RunCheckpoints::collect(bool wait) {
  const auto written = writer_.collect(wait);
  if (written && group_.writes()) record_.events().checkpoint(written->at, written->path);
}

void RunCheckpoints::finish_in_background() {
  try {
    writer_.collect(true);
  } catch (const std::exception& e) {
    std::cerr << "mxablate-train: warning: the checkpoint written as the run ended was not completed: "
              << error_line(e) << "\n";
  }
}

// Killed during the write of checkpoint `step` (its files in the temporary directory), or just
// after publishing it, on the writer's thread.
CheckpointWriteProbe RunCheckpoints::write_probe(int64_t step) const {
  const bool here = faults_.acts_on(group_.rank());
  const bool while_writing = here && step == faults_.crash_writing_checkpoint;
  const bool after_publishing = here && step == faults_.crash_after_checkpoint_published;
  if (!while_writing && !after_publishing) return {};
  return [while_writing, after_publishing](CheckpointWriteStage stage) {
    if ((stage == CheckpointWriteStage::kFilesWritten && while_writing) ||
        (stage == CheckpointWriteStage::kPublished && after_publishing))
      std::_Exit(137);
  };
}

}  // namespace mxablate::trainer
