// Live targets (docs/design.md §5, "Live targets"): a `from_arm` target fixed while the sweep
// runs, one per model block, and handed to every run of that model still training or not yet
// started through RUN_DIR/target.json (contract/target_file.h).
//
// A block's target is fixed the moment every baseline run of the model has an evaluation at or
// past at_fraction × the baseline's budget, or has ended: from then on the analysis' value
// (analysis/sweep_analysis.h resolve_target_value: the median over the baseline runs of the loss
// at that point, curves.h target_from_baseline) can no longer move. fixed_block_target is that
// rule on the analysis' own data; LiveTargets is the sweep loop's bookkeeping, which says cheaply
// (from the evaluations it ingests) when a block is worth the full check.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mxablate/contract/target_file.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::analysis {
struct SweepData;
}

namespace mxablate::orchestrator {

// Whether a run with this store status has ended for good in this invocation (its curve will not
// grow): a final result, or failed.
bool run_has_ended(const std::string& status);

// The target of one model block (analysis/model_blocks.h split_by_model's block, a target stored
// with the sweep ignored) once it is fixed; nullopt before, and when no baseline run reached the
// fraction. `basis` says how it was found ("median of arm fp8 at 30 % of its 2e+07-token budget").
std::optional<contract::TargetFile> fixed_block_target(const analysis::SweepData& block,
                                                       const std::string& from_arm,
                                                       double at_fraction);

class LiveTargets {
 public:
  LiveTargets(const Recipe& recipe, const Plan& plan);

  // A from_arm target: there is something to fix and hand out.
  bool active() const { return active_; }
  const std::string& model_of(const std::string& run_id) const;
  // The run ids of a block, in plan order.
  const std::vector<std::string>& runs_of(const std::string& model) const;
  std::optional<contract::TargetFile> target_of(const std::string& model) const;
  std::optional<contract::TargetFile> target_of_run(const std::string& run_id) const;
  void fix(const std::string& model, contract::TargetFile target);

  // What the sweep loop learns as it goes: a run's latest evaluation, a run's status.
  void note_eval(const std::string& run_id, double tokens);
  void note_status(const std::string& run_id, const std::string& status);
  // Blocks without a target whose baseline runs, by these notes, have all evaluated far enough
  // or ended, and that changed since their last full check: the ones to check now.
  std::vector<std::string> due() const;
  void checked(const std::string& model) { dirty_.erase(model); }

 private:
  bool active_ = false;
  std::string from_arm_;
  double at_fraction_ = 1.0;
  std::vector<std::string> models_;  // in plan order
  std::map<std::string, std::string> model_of_;
  std::map<std::string, std::vector<std::string>> runs_of_;
  std::map<std::string, std::vector<std::string>> baseline_of_;
  std::map<std::string, double> baseline_budget_;
  std::map<std::string, double> last_eval_;
  std::map<std::string, std::string> status_;
  std::map<std::string, contract::TargetFile> targets_;
  std::set<std::string> dirty_;
};

}  // namespace mxablate::orchestrator
