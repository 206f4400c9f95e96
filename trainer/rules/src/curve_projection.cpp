// The fit and the projection of a validation curve (curve_projection.h; docs/design.md §4,
// "Projected outcomes and hopeless runs").
//
// For a fixed exponent α the law is linear in (L0, A, C), so the fit profiles α over a grid and
// solves least squares for the rest, with A ≥ 0 and C ≥ 0 (a curve the law cannot bend the other
// way). The design for each α is factored once (QR by modified Gram–Schmidt) and reused by every
// bootstrap resample, which only changes the losses: a projection with 200 resamples is well
// under a millisecond for the few dozen evaluations a run has.
#include "mxablate/trainer/rules/curve_projection.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>

namespace mxablate::trainer {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kAlphaGrid = 24;
constexpr double kAlphaMin = 0.02, kAlphaMax = 3.0;

// Columns of the law besides the constant: x1 = S1n^(−α) (coefficient A), x2 = −S2n (C).
constexpr unsigned kWithX1 = 1u, kWithX2 = 2u;

// Least squares with the constant and the columns of `mask`, factored for any right-hand side.
struct Design {
  int p = 0;
  unsigned mask = 0;
  bool ok = false;
  std::vector<double> q;             // p columns of n
  std::array<double, 9> r{};         // p × p upper triangular, row-major in a 3 × 3 block
};

Design factor(const std::vector<std::vector<double>>& columns, unsigned mask, size_t n) {
  Design d;
  d.mask = mask;
  std::vector<const std::vector<double>*> cols{&columns[0]};
  if (mask & kWithX1) cols.push_back(&columns[1]);
  if (mask & kWithX2) cols.push_back(&columns[2]);
  d.p = static_cast<int>(cols.size());
  if (static_cast<size_t>(d.p) > n) return d;
  d.q.assign(static_cast<size_t>(d.p) * n, 0.0);
  for (int j = 0; j < d.p; ++j) {
    double* qj = &d.q[static_cast<size_t>(j) * n];
    double norm0 = 0;
    for (size_t i = 0; i < n; ++i) {
      qj[i] = (*cols[static_cast<size_t>(j)])[i];
      norm0 += qj[i] * qj[i];
    }
    for (int k = 0; k < j; ++k) {
      const double* qk = &d.q[static_cast<size_t>(k) * n];
      double dot = 0;
      for (size_t i = 0; i < n; ++i) dot += qk[i] * qj[i];
      d.r[static_cast<size_t>(k * 3 + j)] = dot;
      for (size_t i = 0; i < n; ++i) qj[i] -= dot * qk[i];
    }
    double norm = 0;
    for (size_t i = 0; i < n; ++i) norm += qj[i] * qj[i];
    norm = std::sqrt(norm);
    // A column the others (nearly) span: its coefficient is not determined by these points.
    if (!(norm > 1e-9 * std::sqrt(norm0)) || norm0 == 0) return d;
    d.r[static_cast<size_t>(j * 3 + j)] = norm;
    for (size_t i = 0; i < n; ++i) qj[i] /= norm;
  }
  d.ok = true;
  return d;
}

// Coefficients (L0, A, C; absent columns 0) and the residual sum of squares for `y`.
struct Solved {
  double l0 = 0, a = 0, c = 0, rss = kInf;
};

Solved solve(const Design& d, const std::vector<double>& y, double yy) {
  Solved s;
  if (!d.ok) return s;
  const size_t n = y.size();
  std::array<double, 3> z{};
  double zz = 0;
  for (int j = 0; j < d.p; ++j) {
    const double* qj = &d.q[static_cast<size_t>(j) * n];
    double dot = 0;
    for (size_t i = 0; i < n; ++i) dot += qj[i] * y[i];
    z[static_cast<size_t>(j)] = dot;
    zz += dot * dot;
  }
  std::array<double, 3> beta{};
  for (int j = d.p - 1; j >= 0; --j) {
    double v = z[static_cast<size_t>(j)];
    for (int k = j + 1; k < d.p; ++k) v -= d.r[static_cast<size_t>(j * 3 + k)] * beta[static_cast<size_t>(k)];
    beta[static_cast<size_t>(j)] = v / d.r[static_cast<size_t>(j * 3 + j)];
  }
  s.l0 = beta[0];
  int next = 1;
  if (d.mask & kWithX1) s.a = beta[static_cast<size_t>(next++)];
  if (d.mask & kWithX2) s.c = beta[static_cast<size_t>(next++)];
  s.rss = std::max(0.0, yy - zz);
  return s;
}

// The evaluations of a fit, in the fit's normalization, with each α's designs factored.
class Fitter {
 public:
  Fitter(const std::vector<CurvePoint>& points, const LrSchedule& schedule) {
    const ScheduleAreas end = schedule.areas_at(schedule.budget_tokens());
    s1_end_ = end.forward;
    s2_end_ = end.annealing;
    with_x2_ = s2_end_ > 0;
    n_ = points.size();
    for (const CurvePoint& p : points) {
      const ScheduleAreas a = schedule.areas_at(p.tokens);
      s1_.push_back(a.forward / s1_end_);
      s2_.push_back(with_x2_ ? a.annealing / s2_end_ : 0.0);
      y_.push_back(p.val_loss);
    }
    for (int g = 0; g < kAlphaGrid; ++g)
      alphas_[static_cast<size_t>(g)] =
          kAlphaMin * std::pow(kAlphaMax / kAlphaMin, static_cast<double>(g) / (kAlphaGrid - 1));
    for (int g = 0; g < kAlphaGrid; ++g) designs_[static_cast<size_t>(g)] = designs_for(alphas_[static_cast<size_t>(g)]);
  }

  size_t size() const { return n_; }
  const std::vector<double>& losses() const { return y_; }
  double s1_end() const { return s1_end_; }
  double s2_end() const { return s2_end_; }

  // The best fit to `y` over the α grid (`refine`: then polished between the grid's neighbours).
  std::optional<CurveFit> fit(const std::vector<double>& y, bool refine) const {
    double yy = 0;
    for (double v : y) yy += v * v;
    CurveFit best;
    best.rss = kInf;
    int best_g = -1;
    for (int g = 0; g < kAlphaGrid; ++g) {
      const CurveFit f = best_at(designs_[static_cast<size_t>(g)], alphas_[static_cast<size_t>(g)], y, yy);
      if (f.rss < best.rss) {
        best = f;
        best_g = g;
      }
    }
    if (best_g < 0) return std::nullopt;
    if (best.a <= 0) return best;  // no power term: α plays no part
    if (!refine) {
      // One parabolic step on log α through the best grid point and its neighbours: the grid
      // alone would quantize α, and with it (A and L0 trade against α) the projection.
      if (best_g == 0 || best_g == kAlphaGrid - 1) return best;
      const double x0 = std::log(alphas_[static_cast<size_t>(best_g - 1)]), x1 = std::log(alphas_[static_cast<size_t>(best_g)]),
                   x2 = std::log(alphas_[static_cast<size_t>(best_g + 1)]);
      const double f0 = best_at(designs_[static_cast<size_t>(best_g - 1)], alphas_[static_cast<size_t>(best_g - 1)], y, yy).rss;
      const double f2 = best_at(designs_[static_cast<size_t>(best_g + 1)], alphas_[static_cast<size_t>(best_g + 1)], y, yy).rss;
      const double f1 = best.rss;
      const double den = (x1 - x0) * (f1 - f2) - (x1 - x2) * (f1 - f0);
      if (!(std::fabs(den) > 0)) return best;
      const double x = x1 - 0.5 * ((x1 - x0) * (x1 - x0) * (f1 - f2) - (x1 - x2) * (x1 - x2) * (f1 - f0)) / den;
      if (!(x > x0 && x < x2)) return best;
      const CurveFit f = best_at(designs_for(std::exp(x)), std::exp(x), y, yy);
      if (f.rss < best.rss) best = f;
      return best;
    }
    {
      // Golden section on log α between the neighbours of the best grid point.
      double lo = std::log(alphas_[static_cast<size_t>(std::max(0, best_g - 1))]);
      double hi = std::log(alphas_[static_cast<size_t>(std::min(kAlphaGrid - 1, best_g + 1))]);
      const double phi = (std::sqrt(5.0) - 1) / 2;
      for (int it = 0; it < 30; ++it) {
        const double m1 = hi - phi * (hi - lo), m2 = lo + phi * (hi - lo);
        const CurveFit f1 = best_at(designs_for(std::exp(m1)), std::exp(m1), y, yy);
        const CurveFit f2 = best_at(designs_for(std::exp(m2)), std::exp(m2), y, yy);
        if (f1.rss < best.rss) best = f1;
        if (f2.rss < best.rss) best = f2;
        if (f1.rss < f2.rss) hi = m2; else lo = m1;
      }
    }
    return best;
  }

  // The fitted law at `tokens`.
  double predict(const CurveFit& f, const LrSchedule& schedule, double tokens) const {
    const ScheduleAreas a = schedule.areas_at(tokens);
    return f.predict(a.forward / s1_end_, with_x2_ ? a.annealing / s2_end_ : 0.0);
  }

  double predicted(const CurveFit& f, size_t i) const { return f.predict(s1_[i], s2_[i]); }

 private:
  std::array<Design, 4> designs_for(double alpha) const {
    std::vector<std::vector<double>> cols(3, std::vector<double>(n_));
    for (size_t i = 0; i < n_; ++i) {
      cols[0][i] = 1.0;
      cols[1][i] = std::pow(s1_[i], -alpha);
      cols[2][i] = -s2_[i];
    }
    std::array<Design, 4> out;
    for (unsigned mask = 0; mask < 4; ++mask)
      if (with_x2_ || !(mask & kWithX2)) out[mask] = factor(cols, mask, n_);
    return out;
  }

  // The least-squares fit at one α with A ≥ 0, C ≥ 0: the unconstrained one when it keeps them,
  // else the best of the fits with the offending columns left out.
  static CurveFit best_at(const std::array<Design, 4>& d, double alpha, const std::vector<double>& y, double yy) {
    CurveFit best;
    best.rss = kInf;
    for (unsigned mask : {3u, 1u, 2u, 0u}) {
      const Solved s = solve(d[mask], y, yy);
      if (!(s.rss < kInf) || s.a < 0 || s.c < 0) continue;
      if (s.rss < best.rss) {
        best.l0 = s.l0;
        best.a = s.a;
        best.c = s.c;
        best.alpha = (mask & kWithX1) ? alpha : 0.0;
        best.rss = s.rss;
      }
      if (mask == 3u) break;  // the unconstrained fit is feasible: the best there is
    }
    return best;
  }

  size_t n_ = 0;
  double s1_end_ = 1, s2_end_ = 0;
  bool with_x2_ = false;
  std::vector<double> s1_, s2_, y_;
  std::array<double, kAlphaGrid> alphas_{};
  std::array<std::array<Design, 4>, kAlphaGrid> designs_{};
};

// Tokens at which the law reaches `target`, searched in whole steps up to `horizon` budgets: the
// law never rises (A, C ≥ 0 and the areas only grow), so a bisection finds the first step.
std::optional<double> tokens_to_reach(const Fitter& fitter, const CurveFit& f, const LrSchedule& schedule,
                                      double target, double horizon) {
  const double tokens_per_step = schedule.tokens_per_step();
  int64_t hi = static_cast<int64_t>(std::ceil(static_cast<double>(schedule.budget_steps()) * horizon));
  if (fitter.predict(f, schedule, static_cast<double>(hi) * tokens_per_step) > target) return std::nullopt;
  int64_t lo = 0;  // the law above the target at lo (or lo is the start)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fitter.predict(f, schedule, static_cast<double>(mid) * tokens_per_step) <= target) hi = mid; else lo = mid;
  }
  return static_cast<double>(hi) * tokens_per_step;
}

// Linear interpolation between order statistics (type 7); +inf entries stay +inf.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double h = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(h));
  if (i + 1 >= v.size()) return v.back();
  if (std::isinf(v[i + 1]) || std::isinf(v[i])) return h - static_cast<double>(i) > 0 ? v[i + 1] : v[i];
  return v[i] + (h - static_cast<double>(i)) * (v[i + 1] - v[i]);
}

std::optional<double> finite(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }

std::string percent(double share) {
  std::ostringstream s;
  s << std::round(share * 1000) / 10 << " %";
  return s.str();
}

}  // namespace

LrSchedule::LrSchedule(std::vector<double> lr, int64_t tokens_per_step)
    : budget_steps_(static_cast<int64_t>(lr.size())), tokens_per_step_(static_cast<double>(tokens_per_step)) {
  if (lr.empty() || tokens_per_step <= 0) throw std::invalid_argument("LrSchedule: an empty schedule");
  const double peak = *std::max_element(lr.begin(), lr.end());
  if (!(peak > 0)) throw std::invalid_argument("LrSchedule: no positive learning rate");
  after_step_.reserve(lr.size() + 1);
  after_step_.push_back({});
  double momentum = 0, s1 = 0, s2 = 0;
  for (size_t i = 0; i < lr.size(); ++i) {
    const double rate = lr[i] / peak;
    // Only drops anneal: the warm-up's rises are not an annealing (Tissue et al. §3).
    if (i > 0) momentum = kAnnealingDecay * momentum + std::max(0.0, lr[i - 1] / peak - rate);
    s1 += rate;
    s2 += momentum;
    after_step_.push_back({s1 * tokens_per_step_, s2 * tokens_per_step_});
  }
  last_rate_ = lr.back() / peak;
  last_momentum_ = momentum;
}

ScheduleAreas LrSchedule::areas_at(double tokens) const {
  const double steps = std::max(0.0, std::round(tokens / tokens_per_step_));
  if (steps <= static_cast<double>(budget_steps_)) return after_step_[static_cast<size_t>(steps)];
  // Past the budget the last rate is kept: S1 grows linearly, the carried drop decays away.
  const ScheduleAreas end = after_step_.back();
  const double k = steps - static_cast<double>(budget_steps_);
  const double decayed = kAnnealingDecay * (1 - std::pow(kAnnealingDecay, k)) / (1 - kAnnealingDecay);
  return {end.forward + k * last_rate_ * tokens_per_step_,
          end.annealing + last_momentum_ * decayed * tokens_per_step_};
}

double CurveFit::predict(double s1_norm, double s2_norm) const {
  const double power = alpha > 0 && s1_norm > 0 ? std::pow(s1_norm, -alpha) : (alpha > 0 ? kInf : 1.0);
  return l0 + a * (a > 0 ? power : 0.0) - c * s2_norm;
}

std::optional<CurveFit> fit_curve(const std::vector<CurvePoint>& curve, const LrSchedule& schedule) {
  std::vector<CurvePoint> points;
  for (const CurvePoint& p : curve)
    if (p.tokens > 0) points.push_back(p);
  if (points.size() < 4) return std::nullopt;
  const Fitter fitter(points, schedule);
  return fitter.fit(fitter.losses(), true);
}

ProjectionResult project_curve(const std::vector<CurvePoint>& curve, const LrSchedule& schedule,
                               int64_t warmup_tokens, std::optional<double> target,
                               const ProjectionSettings& settings) {
  ProjectionResult out;
  if (!target) {
    out.no_projection_reason = "no target is known yet";
    return out;
  }
  const double budget = schedule.budget_tokens();
  const double latest = curve.empty() ? 0.0 : curve.back().tokens;
  if (latest < settings.min_budget_share * budget) {
    out.no_projection_reason = "before " + percent(settings.min_budget_share) + " of the budget (at " +
                               percent(latest / budget) + ")";
    return out;
  }
  const double fit_from = std::max(static_cast<double>(warmup_tokens), settings.fit_from_share * budget);
  std::vector<CurvePoint> points;
  for (const CurvePoint& p : curve)
    if (p.tokens > 0 && p.tokens >= fit_from && std::isfinite(p.val_loss)) points.push_back(p);
  if (static_cast<int>(points.size()) < settings.min_points) {
    out.no_projection_reason = std::to_string(points.size()) + " evaluations after warm-up and " +
                               percent(settings.fit_from_share) + " of the budget, " +
                               std::to_string(settings.min_points) + " needed to fit";
    return out;
  }
  if (schedule.anneals()) {
    // Before the rate has fallen, nothing in the curve says how much the annealing will bring:
    // C would be fitted as 0 and the projection would be the pessimistic one.
    const double seen = schedule.areas_at(latest).annealing / schedule.areas_at(budget).annealing;
    if (seen < settings.min_annealing_share) {
      out.no_projection_reason = "the schedule has barely begun to anneal (" + percent(seen) +
                                 " of its annealing area), so the fall it brings cannot be fitted yet";
      return out;
    }
  }
  const Fitter fitter(points, schedule);
  const std::optional<CurveFit> fit = fitter.fit(fitter.losses(), true);
  if (!fit) {
    out.no_projection_reason = "the law could not be fitted to these evaluations";
    return out;
  }
  Projection pr;
  pr.confidence = settings.confidence;
  pr.points = static_cast<int>(points.size());
  pr.fit = *fit;
  pr.loss_at_budget = fitter.predict(*fit, schedule, budget);
  pr.tokens_to_target = tokens_to_reach(fitter, *fit, schedule, *target, settings.horizon);

  // The residual bootstrap: the fitted values plus the residuals resampled in blocks (the
  // residuals of a curve run together: a plateau leaves a run of one sign), widened by
  // sqrt(n/(n−p)) for the parameters the fit spent; each resample refitted and projected.
  const size_t n = points.size();
  std::vector<double> fitted(n), residual(n);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) {
    fitted[i] = fitter.predicted(*fit, i);
    residual[i] = points[i].val_loss - fitted[i];
    mean += residual[i];
  }
  mean /= static_cast<double>(n);
  const double params = 1.0 + (fit->a > 0 ? 2.0 : 0.0) + (schedule.anneals() ? 1.0 : 0.0);
  const double dn = static_cast<double>(n);
  const double widen = dn > params + 1 ? std::sqrt(dn / (dn - params)) : 2.0;
  for (double& r : residual) r = (r - mean) * widen;
  const size_t block = std::max<size_t>(1, static_cast<size_t>(std::lround(std::cbrt(dn))));
  std::mt19937_64 rng(settings.seed ^ (static_cast<uint64_t>(n) * 0x9e3779b97f4a7c15ull));
  std::vector<double> ends, crossings, y(n);
  for (int b = 0; b < settings.bootstrap; ++b) {
    for (size_t i = 0; i < n;) {
      const size_t start = static_cast<size_t>(rng() % (n - block + 1));
      for (size_t j = 0; j < block && i < n; ++j, ++i) y[i] = fitted[i] + residual[start + j];
    }
    const std::optional<CurveFit> f = fitter.fit(y, false);
    if (!f) continue;
    // The evaluation at the budget's end, not the law alone: what decides whether a run reaches
    // its target is a measured loss, scatter included.
    ends.push_back(fitter.predict(*f, schedule, budget) + residual[static_cast<size_t>(rng() % n)]);
    crossings.push_back(tokens_to_reach(fitter, *f, schedule, *target, settings.horizon).value_or(kInf));
  }
  if (ends.size() < 2) {
    out.no_projection_reason = "the law could not be fitted to the resampled evaluations";
    return out;
  }
  const double lo_q = (1 - settings.confidence) / 2, hi_q = (1 + settings.confidence) / 2;
  pr.loss_at_budget_lo = quantile(ends, lo_q);
  pr.loss_at_budget_hi = quantile(ends, hi_q);
  pr.tokens_to_target_lo = finite(quantile(crossings, lo_q));
  pr.tokens_to_target_hi = finite(quantile(crossings, hi_q));
  pr.not_reaching = pr.loss_at_budget_lo > *target;
  out.projection = pr;
  return out;
}

bool HopelessRule::observe(const ProjectionResult& r) {
  if (r.projection && r.projection->not_reaching) {
    ++streak_;
  } else {
    streak_ = 0;
  }
  return streak_ >= consecutive_;
}

}  // namespace mxablate::trainer
