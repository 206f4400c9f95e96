// Divergence detection (DESIGN §4): non-finite loss or gradient norm (fatal), loss spikes and
// gradient-norm explosions relative to a running mean, validation regressions. Each finding is
// an event for the log; the detector's state goes into checkpoints so a resumed run flags the
// same steps an uninterrupted one would.
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
  void restore(const nlohmann::json& j);

 private:
  double decay_;
  double ema_ = 0;
  double weight_ = 0;
  int64_t count_ = 0;
};

class DivergenceDetector {
 public:
  // Spikes are only judged once the running means have this many observations.
  static constexpr int64_t kWarmupObservations = 10;

  explicit DivergenceDetector(const contract::DivergenceConfig& config);

  // After a step's forward/backward: its loss (mean over the global batch) and gradient norm
  // (before clipping). Non-finite values are fatal; they do not enter the running means.
  std::vector<DivergenceFinding> observe_step(double loss, double grad_norm);
  std::vector<DivergenceFinding> observe_eval(double val_loss);

  double best_val_loss() const { return best_val_; }
  int64_t loss_spikes() const { return loss_spikes_; }
  nlohmann::json state() const;
  void restore(const nlohmann::json& j);

 private:
  contract::DivergenceConfig config_;
  RunningMean loss_mean_;
  RunningMean grad_mean_;
  int64_t loss_spikes_ = 0;
  double best_val_;
};

}  // namespace mxablate::trainer
