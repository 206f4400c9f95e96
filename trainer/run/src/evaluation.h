// Evaluation (docs/design.md §4, "Training" and "Projected outcomes and hopeless runs"): the
// validation loss, the target the run is measured against (the config's, or one fixed mid-sweep:
// live_target.h), reaching it, the projection and the hopeless-run rule, and the divergence
// judgement of every step and every evaluation. It decides; the loop carries a decision out
// (an Ending). Every rank takes the same decisions: rank 0's reads are shared (rank_group.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxablate/trainer/rules/checkpoint_state.h"
#include "mxablate/trainer/rules/curve_projection.h"
#include "mxablate/trainer/rules/divergence.h"
#include "mxablate/trainer/rules/live_target.h"
#include "rank_group.h"
#include "run_record.h"
#include "run_setup.h"

namespace mxablate::trainer {

// How the run ends here: its run_end status, the exit code, the reason ("" for none).
struct Ending {
  std::string status;
  int code = 0;
  std::string reason;
};

class Evaluation {
 public:
  Evaluation(RunSetup& setup, const RankGroup& group, RunRecord& record, TrainerState& state,
             const std::string& run_dir);

  // After a step's passes, before its update: the loss and gradient norm at `at_step`.
  std::optional<Ending> judge_step(Progress at_step, double loss, double grad_norm);
  // An evaluation at the state's progress: validation, the target, the projection.
  std::optional<Ending> evaluate_and_judge();

  // A resumed run: the detector's state from its checkpoint; rank 0 also takes the curve and
  // the verdict streak the surviving timeline of its log holds (the same decisions as an
  // uninterrupted run).
  void restore_detector(const nlohmann::json& state);
  void restore_projection();
  nlohmann::json detector_state() const { return detector_.state(); }

 private:
  double validation_loss();
  std::optional<double> current_target();
  std::optional<Ending> project_and_judge(std::optional<double> target, double val_loss);
  Progress progress() const { return {state_.step, state_.tokens}; }

  RunSetup& s_;
  const RankGroup& group_;
  RunRecord& record_;
  TrainerState& state_;
  DivergenceDetector detector_;
  LiveTarget live_target_;                 // the target every check reads (current())
  std::vector<CurvePoint> curve_;          // the evaluations so far, for the projection
  std::optional<LrSchedule> schedule_;     // the run's learning rates, built at the first projection
  HopelessRule hopeless_{ProjectionSettings{}.consecutive};
};

}  // namespace mxablate::trainer
