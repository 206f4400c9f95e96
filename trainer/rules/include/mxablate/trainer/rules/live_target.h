// The run's target as it stands at an evaluation (docs/design.md §4, "Training"; §5, "Live
// targets"): the config's fixed val_loss, or — for a target derived from a baseline arm, which
// the config cannot hold — the one the orchestrator fixed mid-sweep and wrote to
// RUN_DIR/target.json (contract/target_file.h). The loop holds one LiveTarget and every check
// that needs the target (reaching it, stopping at it, judging a run hopeless) reads current():
// one place, so no check sees a different target than another.
//
// A data-parallel run's rank 0 alone reads the file (it owns the run directory); the loop then
// shares what it found (agree) so that every rank decides on the same target.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {

class LiveTarget {
 public:
  LiveTarget(const contract::TargetConfig& config, std::filesystem::path run_dir);

  // The target now; nullopt while none is known.
  std::optional<double> current() const { return current_; }
  // Whether the run stops at its first evaluation at or below current() (target.stop_at_target).
  bool stop_at_target() const { return stop_at_target_; }
  // Whether the target can change while the run trains (no fixed val_loss in the config): only
  // then is the file read and the result shared between ranks.
  bool live() const { return live_; }

  // What one read of the file changed, for the run's record (a live_target event).
  struct Change {
    std::optional<double> adopted;  // a new target, taken from the file
    std::string basis;              // the file's words for it
    std::string ignored;            // a problem with the file not reported before ("": none)
  };
  // Rank 0, at an evaluation: reads RUN_DIR/target.json when live(). A valid file's target
  // becomes current(); a damaged one keeps the target known before (none, or an earlier file's)
  // and says why once per distinct problem, so a file that stays damaged is not reported at
  // every evaluation. A missing file changes nothing. Never throws on the file's content.
  Change read();
  // Every rank, after rank 0's read: takes rank 0's current() (all ranks then agree).
  void agree(std::optional<double> target) {
    if (live_) current_ = target;
  }

 private:
  std::filesystem::path run_dir_;
  bool live_ = false;
  bool stop_at_target_ = false;
  std::optional<double> current_;
  std::string last_problem_;
};

}  // namespace mxablate::trainer
