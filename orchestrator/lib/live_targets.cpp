#include "mxablate/orchestrator/live_targets.h"

#include <algorithm>

#include "mxablate/analysis/sweep_analysis.h"
#include "mxablate/results/schema.h"

namespace mxablate::orchestrator {

bool run_has_ended(const std::string& status) {
  return results::is_final_result(status) || status == results::status::kFailed;
}

std::optional<contract::TargetFile> fixed_block_target(const analysis::SweepData& block,
                                                       const std::string& from_arm,
                                                       double at_fraction) {
  // The budget as the analysis reads the target (sweep_analysis.cpp baseline_curves): the
  // largest of the baseline runs'.
  double budget = 0;
  bool any = false;
  for (const analysis::RunRecord& r : block.runs)
    if (r.arm == from_arm) {
      any = true;
      budget = std::max(budget, r.max_tokens);
    }
  if (!any) return std::nullopt;
  for (const analysis::RunRecord& r : block.runs) {
    if (r.arm != from_arm || run_has_ended(r.status)) continue;
    if (r.evals.empty() || r.evals.back().tokens < at_fraction * budget) return std::nullopt;
  }
  analysis::SweepData unstored = block;
  unstored.stored_target.reset();  // the rule's own value, not one stored earlier
  const analysis::ResolvedTarget t = analysis::resolve_target_value(unstored);
  if (!t.val_loss) return std::nullopt;
  std::string basis = t.basis;
  if (basis.rfind(": ", 0) == 0) basis = basis.substr(2);
  return contract::TargetFile{*t.val_loss, basis};
}

LiveTargets::LiveTargets(const Recipe& recipe, const Plan& plan) {
  active_ = recipe.target.from_arm.has_value();
  if (active_) from_arm_ = *recipe.target.from_arm;
  at_fraction_ = recipe.target.at_fraction;
  for (const RunSpec& r : plan.runs) {
    // A block is a model by its one label, as the analysis forms blocks (model_blocks.h).
    const std::string model = contract::model_label(r.config.model);
    if (!runs_of_.count(model)) models_.push_back(model);
    model_of_[r.run_id] = model;
    runs_of_[model].push_back(r.run_id);
    if (active_ && r.arm == from_arm_) {
      baseline_of_[model].push_back(r.run_id);
      baseline_budget_[model] = std::max(baseline_budget_[model], r.config.train.max_tokens);
    }
  }
  for (const std::string& m : models_) dirty_.insert(m);
}

const std::string& LiveTargets::model_of(const std::string& run_id) const {
  static const std::string none;
  const auto it = model_of_.find(run_id);
  return it == model_of_.end() ? none : it->second;
}

const std::vector<std::string>& LiveTargets::runs_of(const std::string& model) const {
  static const std::vector<std::string> none;
  const auto it = runs_of_.find(model);
  return it == runs_of_.end() ? none : it->second;
}

std::optional<contract::TargetFile> LiveTargets::target_of(const std::string& model) const {
  const auto it = targets_.find(model);
  if (it == targets_.end()) return std::nullopt;
  return it->second;
}

std::optional<contract::TargetFile> LiveTargets::target_of_run(const std::string& run_id) const {
  return target_of(model_of(run_id));
}

void LiveTargets::fix(const std::string& model, contract::TargetFile target) {
  targets_[model] = std::move(target);
  dirty_.erase(model);
}

void LiveTargets::note_eval(const std::string& run_id, double tokens) {
  last_eval_[run_id] = tokens;
  dirty_.insert(model_of(run_id));
}

void LiveTargets::note_status(const std::string& run_id, const std::string& status) {
  const auto it = status_.find(run_id);
  if (it != status_.end() && it->second == status) return;
  status_[run_id] = status;
  dirty_.insert(model_of(run_id));
}

std::vector<std::string> LiveTargets::due() const {
  std::vector<std::string> out;
  if (!active_) return out;
  for (const std::string& model : models_) {
    if (!dirty_.count(model) || targets_.count(model)) continue;
    const auto b = baseline_of_.find(model);
    if (b == baseline_of_.end()) continue;
    const double point = at_fraction_ * baseline_budget_.at(model);
    const bool all = std::all_of(b->second.begin(), b->second.end(), [&](const std::string& id) {
      const auto s = status_.find(id);
      if (s != status_.end() && run_has_ended(s->second)) return true;
      const auto e = last_eval_.find(id);
      return e != last_eval_.end() && e->second >= point;
    });
    if (all) out.push_back(model);
  }
  return out;
}

}  // namespace mxablate::orchestrator
