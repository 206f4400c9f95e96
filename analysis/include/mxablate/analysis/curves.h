// Validation-loss curves and the measures taken on them: tokens to a target loss, the loss at a
// given token count, and a target derived from a baseline arm (docs/design.md §6, issue "Analysis").
#pragma once

#include <optional>
#include <vector>

namespace mxablate::analysis {

struct EvalPoint {
  double tokens;
  double val_loss;
};

// Evaluations of one run, in increasing token order.
using Curve = std::vector<EvalPoint>;

// Tokens at which the curve first reaches `target` (val_loss <= target), linearly interpolated
// between the two evaluations around the crossing; the first evaluation's tokens if it already
// is at or below the target. nullopt if it never does. A non-finite loss ends the curve: a run
// that diverged before reaching the target has no tokens-to-target.
std::optional<double> tokens_to_target(const Curve& curve, double target);

// Validation loss at `tokens`, linearly interpolated; nullopt outside the evaluated range or
// past a non-finite loss.
std::optional<double> loss_at(const Curve& curve, double tokens);

// A target derived from a baseline arm: the median over its runs of the validation loss at
// `fraction` of its token budget. nullopt when no baseline run got that far.
std::optional<double> target_from_baseline(const std::vector<Curve>& baseline_runs,
                                           double token_budget, double fraction);

double median(std::vector<double> values);

}  // namespace mxablate::analysis
