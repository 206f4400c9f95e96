#include "mxablate/analysis/curves.h"

#include <algorithm>
#include <cmath>

namespace mxablate::analysis {

std::optional<double> tokens_to_target(const Curve& curve, double target) {
  for (size_t i = 0; i < curve.size(); ++i) {
    const EvalPoint& p = curve[i];
    if (!std::isfinite(p.val_loss)) return std::nullopt;
    if (p.val_loss > target) continue;
    if (i == 0) return p.tokens;
    const EvalPoint& prev = curve[i - 1];
    // prev.val_loss > target >= p.val_loss, so the denominator is positive.
    const double fraction = (prev.val_loss - target) / (prev.val_loss - p.val_loss);
    return prev.tokens + fraction * (p.tokens - prev.tokens);
  }
  return std::nullopt;
}

std::optional<double> loss_at(const Curve& curve, double tokens) {
  for (size_t i = 0; i < curve.size(); ++i) {
    if (!std::isfinite(curve[i].val_loss)) return std::nullopt;
    if (curve[i].tokens < tokens) continue;
    if (curve[i].tokens == tokens) return curve[i].val_loss;
    if (i == 0) return std::nullopt;
    const EvalPoint& a = curve[i - 1];
    const EvalPoint& b = curve[i];
    const double f = (tokens - a.tokens) / (b.tokens - a.tokens);
    return a.val_loss + f * (b.val_loss - a.val_loss);
  }
  return std::nullopt;
}

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::optional<double> target_from_baseline(const std::vector<Curve>& baseline_runs,
                                           double token_budget, double fraction) {
  std::vector<double> losses;
  for (const Curve& c : baseline_runs)
    if (const auto l = loss_at(c, fraction * token_budget)) losses.push_back(*l);
  if (losses.empty()) return std::nullopt;
  return median(losses);
}

}  // namespace mxablate::analysis
