#include "mxablate/analysis/ceiling.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "mxablate/analysis/curves.h"
#include "mxablate/analysis/sweep_analysis.h"

namespace mxablate::analysis {

double measurable_ceiling(double budget, double baseline_tokens) {
  return budget / baseline_tokens - 1.0;
}

namespace {

// The smallest ceiling over the arms' budgets (each arm's smallest run budget), leaving the
// baseline out unless it is the only arm.
std::optional<Ceiling> smallest(const std::map<std::string, double>& budget_of,
                                const std::string& baseline_arm, double baseline_tokens) {
  if (!(baseline_tokens > 0)) return std::nullopt;
  std::optional<Ceiling> best;
  const bool others = std::any_of(budget_of.begin(), budget_of.end(),
                                  [&](const auto& a) { return a.first != baseline_arm; });
  for (const auto& [arm, budget] : budget_of) {
    if (others && arm == baseline_arm) continue;
    const double c = measurable_ceiling(budget, baseline_tokens);
    if (!best || c < best->value) best = Ceiling{c, arm, budget, baseline_tokens};
  }
  return best;
}

void keep_smallest(std::map<std::string, double>& budget_of, const std::string& arm, double b) {
  const auto [it, fresh] = budget_of.emplace(arm, b);
  if (!fresh) it->second = std::min(it->second, b);
}

}  // namespace

std::optional<Ceiling> planned_ceiling(const std::vector<std::pair<std::string, double>>& runs,
                                       const std::string& baseline_arm, double at_fraction) {
  std::map<std::string, double> budget_of;
  double baseline_budget = 0;
  for (const auto& [arm, budget] : runs) {
    keep_smallest(budget_of, arm, budget);
    if (arm == baseline_arm) baseline_budget = std::max(baseline_budget, budget);
  }
  return smallest(budget_of, baseline_arm, at_fraction * baseline_budget);
}

std::optional<Ceiling> measured_ceiling(const SweepData& block, const std::string& baseline_arm,
                                        double target) {
  std::map<std::string, double> budget_of;
  std::vector<double> reached;
  for (const RunRecord& r : block.runs) {
    keep_smallest(budget_of, r.arm, r.max_tokens);
    if (r.arm != baseline_arm) continue;
    if (const auto t = tokens_to_target(r.evals, target)) reached.push_back(*t);
  }
  if (reached.empty()) return std::nullopt;
  return smallest(budget_of, baseline_arm, median(reached));
}

std::string ceiling_percent(double ceiling) { return fmt::format("{:+.0f} %", 100.0 * ceiling); }

void add_measured_ceiling(ResolvedTarget& target, const SweepData& block,
                          const std::string& baseline_row) {
  if (!target.val_loss) return;
  std::string arm;
  for (const RunRecord& r : block.runs)
    if (r.group == baseline_row) arm = r.arm;
  const auto c = measured_ceiling(block, arm, *target.val_loss);
  if (!c) return;
  target.basis += fmt::format("; measurable ceiling {} (arm {}'s budget ÷ the baseline's median "
                              "tokens to target − 1)",
                              ceiling_percent(c->value), c->arm);
  target.description = target.caption(false);
}

}  // namespace mxablate::analysis
