// The extra-token cost of an arm relative to the baseline: tokens-to-target over the baseline's,
// minus one, in percent — median over seeds with a bootstrap 95 % interval.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
};

struct ExtraTokenCost {
  int runs = 0;
  int reached = 0;
  // Median extra-token cost in percent; nullopt when it cannot be computed (no arm runs, or no
  // baseline run reached the target).
  std::optional<double> median_pct;
  std::optional<double> ci_low_pct;   // bootstrap 2.5 % / 97.5 % percentiles (>= 2 runs)
  std::optional<double> ci_high_pct;
  // Some run never reached the target: its cost is only known to exceed what it had spent, so
  // the median (and the interval) are lower bounds.
  bool lower_bound = false;
  // Each run was compared with the baseline run of its own seed (see extra_token_cost).
  bool paired = false;
  // Paired runs left out because their baseline run never reached the target.
  int pairs_without_baseline = 0;
};

inline constexpr uint64_t kBootstrapSeed = 20260522;
inline constexpr int kBootstrapResamples = 4000;

// Paired when every arm run has exactly one baseline run with its pair key and the keys are
// distinct: the cost of each run is against its own baseline run (seed-to-seed differences in
// initialization and data order, which dominate small sweeps, cancel), the median is over the
// pairs, and the bootstrap redraws pairs. A pair whose baseline never reached the target has no
// defined cost and is left out (counted). Otherwise unpaired: each run against the median of the
// baseline runs that reached it, both sides redrawn. Runs that never reached the target enter at
// their censoring point (tokens trained). The bootstrap seed is fixed so that tables are stable
// from one regeneration to the next.
ExtraTokenCost extra_token_cost(const std::vector<RunOutcome>& arm,
                                const std::vector<RunOutcome>& baseline,
                                uint64_t bootstrap_seed = kBootstrapSeed,
                                int resamples = kBootstrapResamples);

}  // namespace mxablate::analysis
