#include "mxablate/analysis/extra_tokens.h"

#include <map>

#include "mxablate/analysis/curves.h"

namespace mxablate::analysis {
namespace {

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

SeedCost cost_of(const RunOutcome& run, double baseline_tokens, std::string key) {
  const auto pct = [&](double tokens) { return 100.0 * (tokens / baseline_tokens - 1.0); };
  SeedCost c;
  c.pair_key = std::move(key);
  c.pct = pct(run.tokens_to_target.value_or(run.tokens_trained));
  c.at_least = !run.tokens_to_target;
  if (c.at_least && run.projection && run.projection->tokens_to_target) {
    const RunProjection& p = *run.projection;
    c.projected_pct = pct(*p.tokens_to_target);
    if (p.tokens_to_target_lo) c.projected_low_pct = pct(*p.tokens_to_target_lo);
    if (p.tokens_to_target_hi) c.projected_high_pct = pct(*p.tokens_to_target_hi);
  } else if (c.at_least) {
    c.no_projection_reason = run.no_projection_reason.empty()
                                 ? (run.projection ? "the target is beyond the projection's horizon"
                                                   : "no projection was recorded")
                                 : run.no_projection_reason;
  }
  return c;
}

void set_median(ExtraTokenCost& cost) {
  if (const auto m = censored_median(seed_values(cost.per_seed))) {
    cost.median_pct = m->value;
    cost.lower_bound = m->at_least;
  }
}

ExtraTokenCost paired_cost(const std::vector<RunOutcome>& arm,
                           const std::vector<RunOutcome>& baseline,
                           const std::vector<size_t>& match) {
  ExtraTokenCost cost;
  cost.runs = static_cast<int>(arm.size());
  cost.paired = true;
  for (size_t i = 0; i < arm.size(); ++i) {
    if (arm[i].tokens_to_target) ++cost.reached;
    const RunOutcome& base = baseline[match[i]];
    if (!base.tokens_to_target) {
      ++cost.pairs_without_baseline;
      continue;
    }
    cost.per_seed.push_back(cost_of(arm[i], *base.tokens_to_target, arm[i].pair_key));
  }
  set_median(cost);
  const std::vector<SeedValue> values = seed_values(cost.per_seed);
  cost.interval = median_interval(values);
  cost.test = sign_flip_test(values);
  return cost;
}

}  // namespace

std::vector<SeedValue> seed_values(const std::vector<SeedCost>& costs) {
  std::vector<SeedValue> v;
  for (const SeedCost& c : costs) v.push_back({c.pct, c.at_least});
  return v;
}

ExtraTokenCost extra_token_cost(const std::vector<RunOutcome>& arm,
                                const std::vector<RunOutcome>& baseline) {
  if (const auto match = match_pairs(arm, baseline)) return paired_cost(arm, baseline, *match);
  ExtraTokenCost cost;
  cost.runs = static_cast<int>(arm.size());
  std::vector<double> base;
  for (const RunOutcome& r : baseline)
    if (r.tokens_to_target) base.push_back(*r.tokens_to_target);
  for (const RunOutcome& r : arm) {
    if (r.tokens_to_target) ++cost.reached;
    if (!base.empty()) cost.per_seed.push_back(cost_of(r, median(base), {}));
  }
  set_median(cost);
  cost.interval = value_range(seed_values(cost.per_seed));
  return cost;
}

}  // namespace mxablate::analysis
