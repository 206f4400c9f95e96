// The measurable ceiling (docs/design.md §5, "The measurable ceiling"): the largest extra-token
// cost a sweep can show, a run's budget ÷ the baseline's tokens to target − 1. An arm that needs
// more never reaches the target within its budget and shows only as a lower bound, so a target
// at 80 % of a budget every arm shares can see at most +25 %; the paper's design (a target early
// in one long schedule) leaves room for several times the baseline's tokens. `mxablate plan`
// predicts it from the recipe (the baseline reaches a from_arm target at at_fraction × its
// budget); the table states it as measured (the baseline runs' median tokens to target). One
// definition for both.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mxablate::analysis {

struct SweepData;

// budget ÷ baseline_tokens − 1 (0.5 = +50 %).
double measurable_ceiling(double budget, double baseline_tokens);

struct Ceiling {
  double value = 0;            // the smallest over the arms
  std::string arm;             // the arm with the smallest ceiling
  double budget = 0;           // its budget (tokens)
  double baseline_tokens = 0;  // the baseline's tokens to target
};

// Of one model block of a plan: `runs` holds (arm, budget) for every run of the block; the
// baseline reaches its from_arm target at `at_fraction` × its budget (the largest of its runs',
// as the target is read: analysis/curves.h target_from_baseline). The smallest ceiling over the
// other arms (the baseline's own when it is the only arm); nullopt without a baseline run.
std::optional<Ceiling> planned_ceiling(const std::vector<std::pair<std::string, double>>& runs,
                                       const std::string& baseline_arm, double at_fraction);

// Of a sweep (one model block) once its baseline reached `target`: the baseline runs' median
// tokens to target (curves.h tokens_to_target), against each other arm's smallest budget.
// nullopt while no baseline run has reached it.
std::optional<Ceiling> measured_ceiling(const SweepData& block, const std::string& baseline_arm,
                                        double target);

// "+233 %"
std::string ceiling_percent(double ceiling);

struct ResolvedTarget;
// Adds the measured ceiling to a resolved target's caption (basis and description), when the
// baseline row's runs (`baseline_row`, a table row of `block`) have reached it: the table and
// the report then state how large a cost the sweep could see.
void add_measured_ceiling(ResolvedTarget& target, const SweepData& block,
                          const std::string& baseline_row);

}  // namespace mxablate::analysis
