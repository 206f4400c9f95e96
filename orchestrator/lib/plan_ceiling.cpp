// `plan`'s measurable ceiling (plan.h ceiling_report; docs/design.md §5, "The measurable
// ceiling"). Apart from plan.cpp, which the recipe fuzzer compiles without the analysis library.
#include <fmt/format.h>

#include <map>

#include "mxablate/analysis/ceiling.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/progress.h"

namespace mxablate::orchestrator {

CeilingReport ceiling_report(const Recipe& recipe, const Plan& plan) {
  CeilingReport out;
  const TargetSpec& t = recipe.target;
  if (!t.val_loss && !t.from_arm) return out;
  if (!t.from_arm) {
    out.lines.push_back("measurable ceiling: not known before the runs (a fixed target loss: it is "
                        "each arm's budget ÷ the baseline's tokens to reach it − 1, which the "
                        "table states once the baseline has reached it)");
    return out;
  }
  // Model blocks as the analysis forms them (analysis/model_blocks.h): by the model's label.
  std::vector<std::string> models;
  std::map<std::string, std::vector<std::pair<std::string, double>>> runs_of;
  for (const RunSpec& r : plan.runs) {
    const std::string model = contract::model_label(r.config.model);
    if (!runs_of.count(model)) models.push_back(model);
    runs_of[model].emplace_back(r.arm, r.config.train.max_tokens);
  }
  const double floor = t.min_ceiling.value_or(kDefaultMinCeiling);
  for (const std::string& model : models) {
    const auto c = analysis::planned_ceiling(runs_of[model], *t.from_arm, t.at_fraction);
    if (!c) continue;
    const std::string where = models.size() > 1 ? " at " + model : "";
    out.lines.push_back(fmt::format(
        "measurable ceiling{}: {} (arm {}'s budget {} ÷ the {} tokens arm {} needs to reach the "
        "target at {:g} of its budget, − 1): an arm needing more shows only as a lower bound",
        where, analysis::ceiling_percent(c->value), c->arm, format_count(c->budget),
        format_count(c->baseline_tokens), *t.from_arm, t.at_fraction));
    if (c->value < floor)
      out.warnings.push_back(fmt::format(
          "{}:{}:{}: target: the measurable ceiling{} is {}, below {}{}: place the target earlier "
          "in the schedule (at_fraction) or give the arms a longer budget",
          recipe.file, t.at.line, t.at.column, where, analysis::ceiling_percent(c->value),
          analysis::ceiling_percent(floor),
          t.min_ceiling ? " (target.min_ceiling)" : " (set target.min_ceiling to accept less)"));
  }
  return out;
}

}  // namespace mxablate::orchestrator
