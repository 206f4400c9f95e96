#include "mxablate/analysis/extra_tokens.h"

#include <algorithm>
#include <cmath>
#include <map>
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

// For each arm run, the index of the baseline run with the same pair key; nullopt unless that
// is a one-to-one match on distinct, non-empty keys.
std::optional<std::vector<size_t>> match_pairs(const std::vector<RunOutcome>& arm,
                                               const std::vector<RunOutcome>& baseline) {
  std::map<std::string, size_t> base_by_key;
  for (size_t i = 0; i < baseline.size(); ++i) {
    if (baseline[i].pair_key.empty() || !base_by_key.emplace(baseline[i].pair_key, i).second)
      return std::nullopt;
  }
  std::vector<size_t> match;
  std::map<std::string, bool> seen;
  for (const RunOutcome& r : arm) {
    const auto found = base_by_key.find(r.pair_key);
    if (found == base_by_key.end() || seen[r.pair_key]) return std::nullopt;
    seen[r.pair_key] = true;
    match.push_back(found->second);
  }
  return match;
}

void bootstrap_interval(ExtraTokenCost& cost, std::vector<double> medians) {
  cost.ci_low_pct = percentile(medians, 0.025);
  cost.ci_high_pct = percentile(medians, 0.975);
}

ExtraTokenCost paired_cost(const std::vector<RunOutcome>& arm,
                           const std::vector<RunOutcome>& baseline,
                           const std::vector<size_t>& match, uint64_t bootstrap_seed,
                           int resamples) {
  ExtraTokenCost cost;
  cost.runs = static_cast<int>(arm.size());
  cost.paired = true;
  std::vector<double> pct;
  for (size_t i = 0; i < arm.size(); ++i) {
    if (arm[i].tokens_to_target) ++cost.reached;
    const RunOutcome& base = baseline[match[i]];
    if (!base.tokens_to_target) {
      ++cost.pairs_without_baseline;
      continue;
    }
    if (!arm[i].tokens_to_target) cost.lower_bound = true;
    const double needed = arm[i].tokens_to_target.value_or(arm[i].tokens_trained);
    pct.push_back(100.0 * (needed / *base.tokens_to_target - 1.0));
  }
  if (pct.empty()) return cost;
  cost.median_pct = median(pct);
  if (pct.size() < 2) return cost;
  std::mt19937_64 rng(bootstrap_seed);
  std::vector<double> medians, sample(pct.size());
  medians.reserve(static_cast<size_t>(resamples));
  for (int b = 0; b < resamples; ++b) {
    for (auto& v : sample) v = pct[draw_index(rng, pct.size())];
    medians.push_back(median(sample));
  }
  bootstrap_interval(cost, std::move(medians));
  return cost;
}

}  // namespace

ExtraTokenCost extra_token_cost(const std::vector<RunOutcome>& arm,
                                const std::vector<RunOutcome>& baseline, uint64_t bootstrap_seed,
                                int resamples) {
  if (const auto match = match_pairs(arm, baseline))
    return paired_cost(arm, baseline, *match, bootstrap_seed, resamples);
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
  bootstrap_interval(cost, std::move(medians));
  return cost;
}

}  // namespace mxablate::analysis
