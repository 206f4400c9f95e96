// The extra-token cost of an arm relative to the baseline: each run's tokens-to-target over the
// baseline run's of the same seed, minus one, in percent; the median over seeds, an interval that
// says what it is, and the exact paired test (seed_stats.h; docs/design.md §6, "Intervals and the
// paired test").
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxablate/analysis/run_projection.h"
#include "mxablate/analysis/seed_stats.h"

namespace mxablate::analysis {

struct RunOutcome {
  RunOutcome(std::optional<double> to_target = std::nullopt, double trained = 0,
             std::string key = {})
      : tokens_to_target(to_target), tokens_trained(trained), pair_key(std::move(key)) {}

  std::optional<double> tokens_to_target;  // nullopt: never reached
  double tokens_trained = 0;               // how far the run got (the censoring point)
  // Which baseline run this one is compared with: runs of different arms with the same key
  // share their random streams (the seeds: initialization and data order). Empty: none.
  std::string pair_key;
  // Stopped early as projected not to reach the target (status projected_not_reached): censored
  // at its budget like a spent one, with the projection that stopped it in `projection`.
  bool projected_not_reached = false;
  // The run's last projection towards the target (docs/design.md §4, "Projected outcomes and
  // hopeless runs"), or, in no_projection_reason, why it has none.
  std::optional<RunProjection> projection;
  std::string no_projection_reason;
};

// One run's cost: 100 · (its tokens / the baseline's − 1). A run that never reached the target
// enters at the tokens it trained: its cost is at least `pct` (`at_least`, censored).
struct SeedCost {
  std::string pair_key;  // the seed (paired); empty when unpaired
  double pct = 0;
  bool at_least = false;
  // A censored run's projected cost (its last projection's tokens to target, and that interval's
  // ends, against the same baseline tokens): shown beside the bound, never used as a value.
  std::optional<double> projected_pct, projected_low_pct, projected_high_pct;
  // Why a censored run has no projected cost (too few evaluations to fit, no target known while
  // it trained, …): the table says it instead of a figure.
  std::string no_projection_reason;
};

struct ExtraTokenCost {
  int runs = 0;
  int reached = 0;
  // Median extra-token cost in percent; nullopt when it cannot be computed (no arm runs, or no
  // baseline run reached the target).
  std::optional<double> median_pct;
  // The median is only a lower bound: raising the censored costs would move it. A censored run
  // above the median leaves it exact.
  bool lower_bound = false;
  // Paired: one cost per seed whose baseline run reached the target, in the arm's run order.
  // Unpaired: each run against the median of the baseline runs.
  std::vector<SeedCost> per_seed;
  // Paired, >= 2 costs: the range below min_values_for_interval() (6 at 95 %), else the
  // order-statistic 95 % interval of the median. Unpaired: the range of the costs (the baseline's
  // own spread is not in it: never an interval for the median).
  std::optional<MedianInterval> interval;
  // Paired only: the exact sign-flip test of "the costs are symmetric about 0" (nullopt unpaired,
  // or when censored costs leave p unbounded).
  std::optional<SignFlipTest> test;
  // Each run was compared with the baseline run of its own seed (see extra_token_cost).
  bool paired = false;
  // Paired runs left out because their baseline run never reached the target.
  int pairs_without_baseline = 0;
};

// The costs as the statistics take them.
std::vector<SeedValue> seed_values(const std::vector<SeedCost>& costs);

// Paired when every arm run has exactly one baseline run with its pair key and the keys are
// distinct: the cost of each run is against its own baseline run (seed-to-seed differences in
// initialization and data order, which dominate small sweeps, cancel) and the median, interval
// and test are over the pairs. A pair whose baseline never reached the target has no defined
// cost and is left out (counted). Otherwise unpaired: each run against the median of the
// baseline runs that reached it, the range of those costs, no test.
ExtraTokenCost extra_token_cost(const std::vector<RunOutcome>& arm,
                                const std::vector<RunOutcome>& baseline);

}  // namespace mxablate::analysis
