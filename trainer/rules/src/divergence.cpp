#include "mxablate/trainer/rules/divergence.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "mxablate/contract/json_file.h"

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

namespace {

using nlohmann::json;

const json& field(const json& j, const std::string& where, const char* key) {
  if (!j.is_object()) throw std::invalid_argument(where + ": expected an object");
  const auto it = j.find(key);
  if (it == j.end()) throw std::invalid_argument(where + "." + key + ": missing");
  return *it;
}

// Numbers by the rules every JSON reader shares (contract/json_file.h, docs/design.md §11).
double finite_number(const json& j, const std::string& where, const char* key) {
  double d = 0;
  if (const std::string why = contract::json_to(field(j, where, key), d); !why.empty())
    throw std::invalid_argument(where + "." + key + ": " + why);
  return d;
}

int64_t count_field(const json& j, const std::string& where, const char* key) {
  const json& v = field(j, where, key);
  int64_t n = 0;
  if (const std::string why = contract::json_to(v, n); !why.empty())
    throw std::invalid_argument(where + "." + key + ": " + why);
  if (n < 0) throw std::invalid_argument(where + "." + key + ": expected an integer >= 0, got " + v.dump());
  return n;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)));
}

}  // namespace

void RunningMean::restore(const json& j, const std::string& where) {
  const double ema = finite_number(j, where, "ema");
  const double weight = finite_number(j, where, "weight");
  const int64_t count = count_field(j, where, "count");
  if (weight < 0 || weight > 1) throw std::invalid_argument(where + ".weight: expected a number in [0, 1]");
  ema_ = ema;
  weight_ = weight;
  count_ = count;
}

DivergenceDetector::DivergenceDetector(const contract::DivergenceConfig& config, int64_t warmup_steps)
    : config_(config), warmup_steps_(warmup_steps), best_val_(std::numeric_limits<double>::infinity()) {}

double DivergenceDetector::grad_norm_reference() const { return median(grad_norms_); }

std::vector<DivergenceFinding> DivergenceDetector::observe_step(double loss, double grad_norm) {
  using namespace divergence_reason;
  std::vector<DivergenceFinding> findings;
  if (!std::isfinite(loss)) findings.push_back({kNonfiniteLoss, loss, loss_mean_.value(), true});
  if (!std::isfinite(grad_norm))
    findings.push_back({kNonfiniteGrad, grad_norm, grad_norm_reference(), true});
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

  // Judged from the first step after the warm-up, with enough history for a median.
  const double grad_ref = grad_norm_reference();
  double grad_in = grad_norm;
  const bool judged = steps_ >= warmup_steps_ && static_cast<int64_t>(grad_norms_.size()) >= kMinGradHistory;
  if (judged && grad_norm > config_.grad_norm_factor * grad_ref) {
    findings.push_back({kGradNormExplosion, grad_norm, grad_ref, false});
    grad_in = config_.grad_norm_factor * grad_ref;
  }
  grad_norms_.push_back(grad_in);
  if (grad_norms_.size() > kGradWindow) grad_norms_.erase(grad_norms_.begin());
  ++steps_;
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

json DivergenceDetector::state() const {
  // JSON has no infinity: an absent best means "no evaluation yet".
  json j = {{"loss_mean", loss_mean_.state()},
            {"grad_norms", grad_norms_},
            {"steps", steps_},
            {"loss_spikes", loss_spikes_}};
  j["best_val_loss"] = std::isfinite(best_val_) ? json(best_val_) : json(nullptr);
  return j;
}

void DivergenceDetector::restore(const json& j) {
  const std::string where = "divergence";
  RunningMean loss_mean = loss_mean_;
  loss_mean.restore(field(j, where, "loss_mean"), where + ".loss_mean");
  const json& norms = field(j, where, "grad_norms");
  if (!norms.is_array() || norms.size() > kGradWindow)
    throw std::invalid_argument(where + ".grad_norms: expected a list of at most " +
                                std::to_string(kGradWindow) + " numbers");
  std::vector<double> grad_norms;
  for (const json& v : norms) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      throw std::invalid_argument(where + ".grad_norms: expected finite numbers >= 0");
    grad_norms.push_back(v.get<double>());
  }
  const int64_t steps = count_field(j, where, "steps");
  if (steps < static_cast<int64_t>(grad_norms.size()))
    throw std::invalid_argument(where + ".steps: fewer than the gradient norms kept");
  const int64_t spikes = count_field(j, where, "loss_spikes");
  const json& best = field(j, where, "best_val_loss");
  if (!best.is_null() && !(best.is_number() && std::isfinite(best.get<double>())))
    throw std::invalid_argument(where + ".best_val_loss: expected a finite number or null");
  loss_mean_ = loss_mean;
  grad_norms_ = std::move(grad_norms);
  steps_ = steps;
  loss_spikes_ = spikes;
  best_val_ = best.is_null() ? std::numeric_limits<double>::infinity() : best.get<double>();
}

}  // namespace mxablate::trainer
