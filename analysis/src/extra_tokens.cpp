#include "mxablate/analysis/extra_tokens.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "mxablate/analysis/curves.h"

namespace mxablate::analysis {
namespace {

// The tokens each arm run needed, or at least needed (censored at what it trained).
std::vector<double> needed_tokens(const std::vector<RunOutcome>& runs) {
  std::vector<double> out;
  for (const auto& r : runs) out.push_back(r.tokens_to_target.value_or(r.tokens_trained));
  return out;
}

std::vector<double> reached_tokens(const std::vector<RunOutcome>& runs) {
  std::vector<double> out;
  for (const auto& r : runs)
    if (r.tokens_to_target) out.push_back(*r.tokens_to_target);
  return out;
}

double cost_pct(const std::vector<double>& arm_tokens, double baseline_median) {
  std::vector<double> pct;
  for (double t : arm_tokens) pct.push_back(100.0 * (t / baseline_median - 1.0));
  return median(pct);
}

// Percentile with linear interpolation between order statistics (numpy's default).
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// std::uniform_int_distribution is implementation-defined; this is the same everywhere.
size_t draw_index(std::mt19937_64& rng, size_t n) { return static_cast<size_t>(rng() % n); }

}  // namespace

ExtraTokenCost extra_token_cost(const std::vector<RunOutcome>& arm,
                                const std::vector<RunOutcome>& baseline, uint64_t bootstrap_seed,
                                int resamples) {
  ExtraTokenCost cost;
  cost.runs = static_cast<int>(arm.size());
  for (const auto& r : arm) {
    if (r.tokens_to_target) {
      ++cost.reached;
    } else {
      cost.lower_bound = true;
    }
  }
  const std::vector<double> base = reached_tokens(baseline);
  if (arm.empty() || base.empty()) return cost;
  const std::vector<double> needed = needed_tokens(arm);
  cost.median_pct = cost_pct(needed, median(base));
  if (arm.size() < 2 && base.size() < 2) return cost;

  std::mt19937_64 rng(bootstrap_seed);
  std::vector<double> medians;
  medians.reserve(static_cast<size_t>(resamples));
  std::vector<double> arm_sample(needed.size()), base_sample(base.size());
  for (int b = 0; b < resamples; ++b) {
    for (auto& v : arm_sample) v = needed[draw_index(rng, needed.size())];
    for (auto& v : base_sample) v = base[draw_index(rng, base.size())];
    medians.push_back(cost_pct(arm_sample, median(base_sample)));
  }
  cost.ci_low_pct = percentile(medians, 0.025);
  cost.ci_high_pct = percentile(medians, 0.975);
  return cost;
}

}  // namespace mxablate::analysis
