// The extra-token cost of an arm relative to the baseline: tokens-to-target over the baseline's,
// minus one, in percent — median over seeds with a bootstrap 95 % interval.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace mxablate::analysis {

struct RunOutcome {
  std::optional<double> tokens_to_target;  // nullopt: never reached
  double tokens_trained = 0;               // how far the run got (the censoring point)
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
};

inline constexpr uint64_t kBootstrapSeed = 20260522;
inline constexpr int kBootstrapResamples = 4000;

// Runs that never reached the target enter at their censoring point (tokens trained). Each
// bootstrap resample redraws the arm's and the baseline's runs with replacement; the seed is
// fixed so that tables are stable from one regeneration to the next.
ExtraTokenCost extra_token_cost(const std::vector<RunOutcome>& arm,
                                const std::vector<RunOutcome>& baseline,
                                uint64_t bootstrap_seed = kBootstrapSeed,
                                int resamples = kBootstrapResamples);

}  // namespace mxablate::analysis
