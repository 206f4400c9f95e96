#include "mxablate/trainer/divergence.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mxablate::trainer {

void RunningMean::add(double x) {
  ema_ = decay_ * ema_ + (1 - decay_) * x;
  weight_ = decay_ * weight_ + (1 - decay_);
  ++count_;
}

double RunningMean::value() const { return weight_ > 0 ? ema_ / weight_ : 0.0; }

nlohmann::json RunningMean::state() const {
  return {{"ema", ema_}, {"weight", weight_}, {"count", count_}};
}

void RunningMean::restore(const nlohmann::json& j) {
  ema_ = j.at("ema").get<double>();
  weight_ = j.at("weight").get<double>();
  count_ = j.at("count").get<int64_t>();
}

DivergenceDetector::DivergenceDetector(const contract::DivergenceConfig& config)
    : config_(config), best_val_(std::numeric_limits<double>::infinity()) {}

std::vector<DivergenceFinding> DivergenceDetector::observe_step(double loss, double grad_norm) {
  using namespace divergence_reason;
  std::vector<DivergenceFinding> findings;
  if (!std::isfinite(loss)) findings.push_back({kNonfiniteLoss, loss, loss_mean_.value(), true});
  if (!std::isfinite(grad_norm))
    findings.push_back({kNonfiniteGrad, grad_norm, grad_mean_.value(), true});
  if (!findings.empty()) return findings;

  // A spiking value enters the running mean clamped to the threshold, so one outlier does not
  // raise the bar for the next.
  const double loss_ref = loss_mean_.value();
  double loss_in = loss;
  if (loss_mean_.count() >= kWarmupObservations && loss > config_.loss_spike_factor * loss_ref) {
    ++loss_spikes_;
    const bool fatal = config_.fatal_after_spikes > 0 && loss_spikes_ >= config_.fatal_after_spikes;
    findings.push_back({kLossSpike, loss, loss_ref, fatal});
    loss_in = config_.loss_spike_factor * loss_ref;
  }
  loss_mean_.add(loss_in);

  const double grad_ref = grad_mean_.value();
  double grad_in = grad_norm;
  if (grad_mean_.count() >= kWarmupObservations && grad_norm > config_.grad_norm_factor * grad_ref) {
    findings.push_back({kGradNormExplosion, grad_norm, grad_ref, false});
    grad_in = config_.grad_norm_factor * grad_ref;
  }
  grad_mean_.add(grad_in);
  return findings;
}

std::vector<DivergenceFinding> DivergenceDetector::observe_eval(double val_loss) {
  using namespace divergence_reason;
  if (!std::isfinite(val_loss)) return {{kNonfiniteLoss, val_loss, best_val_, true}};
  std::vector<DivergenceFinding> findings;
  if (val_loss > best_val_ + config_.val_regression)
    findings.push_back({kValRegression, val_loss, best_val_, false});
  best_val_ = std::min(best_val_, val_loss);
  return findings;
}

nlohmann::json DivergenceDetector::state() const {
  // JSON has no infinity: an absent best means "no evaluation yet".
  nlohmann::json j = {{"loss_mean", loss_mean_.state()},
                      {"grad_mean", grad_mean_.state()},
                      {"loss_spikes", loss_spikes_}};
  j["best_val_loss"] = std::isfinite(best_val_) ? nlohmann::json(best_val_) : nlohmann::json(nullptr);
  return j;
}

void DivergenceDetector::restore(const nlohmann::json& j) {
  loss_mean_.restore(j.at("loss_mean"));
  grad_mean_.restore(j.at("grad_mean"));
  loss_spikes_ = j.at("loss_spikes").get<int64_t>();
  const auto& best = j.at("best_val_loss");
  best_val_ = best.is_null() ? std::numeric_limits<double>::infinity() : best.get<double>();
}

}  // namespace mxablate::trainer
