// Projected outcomes (docs/design.md §4, "Projected outcomes and hopeless runs"): a run's
// validation curve, fitted as it grows against the learning-rate schedule the run follows, says
// where the run is heading — the loss it will have at the end of its budget and the tokens at
// which it would reach the target, each with an interval — and a rule decides, from that, when a
// run is projected not to reach its target at all and may end early.
//
// The model is the scaling law with learning-rate annealing (Tissue et al. 2024, arXiv
// 2408.11029): L = L0 + A·S1^(−α) − C·S2, with S1 the schedule's forward area (the sum of the
// learning rates so far) and S2 its annealing area (the drops of the learning rate, each decaying
// by kAnnealingDecay per step). A power law in tokens is the special case of a constant rate; under
// warm-up and cosine decay it would miss the fall the annealing brings and stop runs that would
// have made it. Torch-free: the trainer calls it at each evaluation and its tests run in seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mxablate::trainer {

// Per step, each learning-rate drop is carried on with this decay (Tissue et al.'s λ).
inline constexpr double kAnnealingDecay = 0.999;

// S1 and S2 of a schedule, in tokens at the peak rate: a constant rate gives S1 = tokens, S2 = 0.
struct ScheduleAreas {
  double forward = 0;    // S1
  double annealing = 0;  // S2
};

// A run's learning-rate schedule as the fit sees it: the rate of every optimizer step of the
// budget, known before the run starts. Past the budget the last rate is kept (what "the run went
// on" would mean), so tokens to a target beyond the budget can still be projected.
class LrSchedule {
 public:
  // `lr`: the rate of each step (0-based), all of the budget; `tokens_per_step` > 0.
  LrSchedule(std::vector<double> lr, int64_t tokens_per_step);
  // The areas after the steps that took the run to `tokens` (rounded to whole steps).
  ScheduleAreas areas_at(double tokens) const;
  double budget_tokens() const { return static_cast<double>(budget_steps_) * tokens_per_step_; }
  bool anneals() const { return after_step_.back().annealing > 0; }
  int64_t budget_steps() const { return budget_steps_; }
  double tokens_per_step() const { return tokens_per_step_; }

 private:
  std::vector<ScheduleAreas> after_step_;  // [s]: after s steps; [0] = {0, 0}
  double last_rate_ = 0;                   // normalized by the peak
  double last_momentum_ = 0;               // the annealing term's carried drop after the budget
  int64_t budget_steps_ = 0;
  double tokens_per_step_ = 0;
};

struct CurvePoint {
  double tokens = 0;
  double val_loss = 0;
};

// The fitted law, in the fit's normalization: S1 / S1(budget) and S2 / S2(budget).
struct CurveFit {
  double l0 = 0, a = 0, alpha = 0, c = 0;
  double rss = 0;
  double predict(double s1_norm, double s2_norm) const;
};

// What the rule may decide from, and how sure it must be. The defaults are the trainer's
// (docs/design.md §4 gives the reasons and the figures they were checked with).
struct ProjectionSettings {
  double confidence = 0.95;      // the intervals' two-sided level
  int min_points = 6;            // evaluations in the fit window before any projection
  double min_budget_share = 0.3; // share of the budget trained before any projection
  double fit_from_share = 0.1;   // evaluations before this share of the budget (and warm-up) are not fitted
  // An annealing schedule: the share of S2(budget) the curve must have seen, or C is not known.
  double min_annealing_share = 0.02;
  int consecutive = 3;           // verdicts in a row before a run is stopped
  int bootstrap = 200;           // resamples of the residuals
  double horizon = 100;          // tokens to target searched up to this many budgets
  uint64_t seed = 0x5eedc0ffee;  // the bootstrap's; the same on every rank
};

struct Projection {
  double confidence = 0;
  int points = 0;  // evaluations fitted
  CurveFit fit;
  double loss_at_budget = 0, loss_at_budget_lo = 0, loss_at_budget_hi = 0;
  // Tokens at which the projection reaches the target; unset: not within `horizon` budgets.
  std::optional<double> tokens_to_target, tokens_to_target_lo, tokens_to_target_hi;
  // This evaluation's verdict: even the optimistic end of the interval of the loss at the end of
  // the budget stays above the target.
  bool not_reaching = false;
};

// Either a projection or why there is none (one line: too few evaluations, too early, …).
struct ProjectionResult {
  std::optional<Projection> projection;
  std::string no_projection_reason;
};

// Fits `curve` (the run's evaluations so far, in token order) and projects it to `target`.
ProjectionResult project_curve(const std::vector<CurvePoint>& curve, const LrSchedule& schedule,
                               int64_t warmup_tokens, std::optional<double> target,
                               const ProjectionSettings& settings);

// The least-squares fit of the law alone (no interval): what the bootstrap resamples around.
std::optional<CurveFit> fit_curve(const std::vector<CurvePoint>& curve, const LrSchedule& schedule);

// The decision over a run's evaluations: stop once `consecutive` verdicts in a row say the run is
// projected not to reach; an evaluation without a projection breaks the streak.
class HopelessRule {
 public:
  explicit HopelessRule(int consecutive) : consecutive_(consecutive) {}
  // Returns whether the run is to stop now.
  bool observe(const ProjectionResult& r);
  int streak() const { return streak_; }
  void restore(int streak) { streak_ = streak; }

 private:
  int consecutive_;
  int streak_ = 0;
};

}  // namespace mxablate::trainer
