// Divergence detection: non-finite loss or gradient norm (fatal), loss spikes relative to a
// running mean, gradient-norm explosions relative to the running median of recent norms,
// validation regressions. Each finding is an event for the log; the detector's state goes into
// checkpoints so a resumed run flags the same steps an uninterrupted one would.
//
// Gradient norms are not judged during the learning-rate warm-up: while the rate ramps up the
// norm legitimately moves by an order of magnitude within a few steps (a 20M-parameter GPU sweep
// logged 1–3 "explosions" per run between steps 20 and 30, all of them warm-up noise). After it,
// the reference is the median of the last kGradWindow norms, which a few outliers cannot move.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {

namespace divergence_reason {
inline constexpr const char* kNonfiniteLoss = "nonfinite_loss";
inline constexpr const char* kNonfiniteGrad = "nonfinite_grad";
inline constexpr const char* kLossSpike = "loss_spike";
inline constexpr const char* kGradNormExplosion = "grad_norm_explosion";
inline constexpr const char* kValRegression = "val_regression";
}  // namespace divergence_reason

struct DivergenceFinding {
  std::string reason;
  double value = 0;      // the offending loss / norm / validation loss
  double reference = 0;  // what it was compared with (running mean, best validation loss)
  bool fatal = false;
};

// An exponential moving average with bias correction (Adam-style), so the first observations
// are not pulled towards zero.
class RunningMean {
 public:
  explicit RunningMean(double decay = 0.9) : decay_(decay) {}
  void add(double x);
  double value() const;
  int64_t count() const { return count_; }
  nlohmann::json state() const;
  // Throws std::invalid_argument naming the field when `j` is not a state this class wrote.
  void restore(const nlohmann::json& j, const std::string& where);

 private:
  double decay_;
  double ema_ = 0;
  double weight_ = 0;
  int64_t count_ = 0;
};

class DivergenceDetector {
 public:
  // Loss spikes are only judged once the running mean has this many observations.
  static constexpr int64_t kWarmupObservations = 10;
  // Gradient norms: the median of this many recent norms is the reference, judged only with at
  // least kMinGradHistory of them and after the learning-rate warm-up.
  static constexpr size_t kGradWindow = 64;
  static constexpr int64_t kMinGradHistory = 20;

  // `warmup_steps`: the learning-rate warm-up, during which gradient norms are not judged.
  explicit DivergenceDetector(const contract::DivergenceConfig& config, int64_t warmup_steps = 0);

  // After a step's forward/backward: its loss (mean over the global batch) and gradient norm
  // (before clipping). Non-finite values are fatal; they do not enter the running means.
  std::vector<DivergenceFinding> observe_step(double loss, double grad_norm);
  std::vector<DivergenceFinding> observe_eval(double val_loss);

  double best_val_loss() const { return best_val_; }
  int64_t loss_spikes() const { return loss_spikes_; }
  double grad_norm_reference() const;  // the current median (0 before any norm)
  nlohmann::json state() const;
  // Restores a state() written by this version; throws std::invalid_argument naming the field
  // (as "divergence.<field>") when `j` is anything else. On a throw nothing has changed.
  void restore(const nlohmann::json& j);

 private:
  contract::DivergenceConfig config_;
  int64_t warmup_steps_;
  RunningMean loss_mean_;
  std::vector<double> grad_norms_;  // the last kGradWindow accepted norms, oldest first
  int64_t steps_ = 0;               // finite steps observed
  int64_t loss_spikes_ = 0;
  double best_val_;
};

}  // namespace mxablate::trainer
