#include "mxablate/analysis/seed_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

namespace mxablate::analysis {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> sorted_bounds(const std::vector<SeedValue>& values) {
  std::vector<double> v;
  for (const SeedValue& s : values) v.push_back(s.value);
  std::sort(v.begin(), v.end());
  return v;
}

// The same values with every censored one raised to +infinity: the other extreme of the truth.
std::vector<double> sorted_raised(const std::vector<SeedValue>& values) {
  std::vector<double> v;
  for (const SeedValue& s : values) v.push_back(s.at_least ? kInf : s.value);
  std::sort(v.begin(), v.end());
  return v;
}

// Order statistics are monotone in every value: the truth lies between these two.
CensoredFigure order_statistic(const std::vector<double>& bounds, const std::vector<double>& raised,
                               size_t index) {
  return {bounds[index], raised[index] != bounds[index]};
}

// Two-sided sign-flip p of plain values: enumerated (Gray code, one sign flipped per step, the
// first sign held: a pattern and its negation have the same |sum|) or drawn.
struct FlipCount {
  double p;
  bool exact;
};

FlipCount sign_flip_p(const std::vector<double>& v) {
  const size_t n = v.size();
  double observed = 0, scale = 0;
  for (double x : v) {
    observed += x;
    scale += std::fabs(x);
  }
  // Sums equal in exact arithmetic may differ by rounding after many updates.
  const double tol = 1e-9 * scale * (1.0 + static_cast<double>(n));
  const double threshold = std::fabs(observed) - tol;
  if (n <= static_cast<size_t>(kExactSignFlipMax)) {
    std::vector<int> sign(n, 1);
    double sum = observed;
    uint64_t hits = 1;  // the observed pattern
    const uint64_t patterns = n == 0 ? 1 : uint64_t{1} << (n - 1);
    for (uint64_t i = 1; i < patterns; ++i) {
      const size_t j = static_cast<size_t>(std::countr_zero(i)) + 1;
      sum -= 2.0 * sign[j] * v[j];
      sign[j] = -sign[j];
      if (std::fabs(sum) >= threshold) ++hits;
    }
    return {static_cast<double>(hits) / static_cast<double>(patterns), true};
  }
  std::mt19937_64 rng(20260522);
  constexpr uint64_t kDraws = uint64_t{1} << 20;
  uint64_t hits = 0;
  for (uint64_t d = 0; d < kDraws; ++d) {
    double sum = 0;
    uint64_t bits = 0;
    for (size_t j = 0; j < n; ++j) {
      if (j % 64 == 0) bits = rng();
      sum += (bits & 1) ? v[j] : -v[j];
      bits >>= 1;
    }
    if (std::fabs(sum) >= threshold) ++hits;
  }
  return {static_cast<double>(hits + 1) / static_cast<double>(kDraws + 1), false};
}

}  // namespace

double binomial_half_cdf(int k, int n) {
  if (k < 0) return 0;
  if (k >= n) return 1;
  double sum = 0;
  for (int i = 0; i <= k; ++i)
    sum += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) -
                    n * std::log(2.0));
  return std::min(sum, 1.0);
}

std::optional<CensoredFigure> censored_median(const std::vector<SeedValue>& values) {
  if (values.empty()) return std::nullopt;
  const auto b = sorted_bounds(values), r = sorted_raised(values);
  const size_t n = values.size();
  const CensoredFigure hi = order_statistic(b, r, n / 2);
  if (n % 2 == 1) return hi;
  const CensoredFigure lo = order_statistic(b, r, n / 2 - 1);
  return CensoredFigure{(lo.value + hi.value) / 2, lo.at_least || hi.at_least};
}

int order_statistic_rank(int n, double confidence) {
  int rank = 0;
  for (int k = 1; 2 * k <= n + 1; ++k)
    if (1.0 - 2.0 * binomial_half_cdf(k - 1, n) >= confidence) rank = k;
  return rank;
}

int min_values_for_interval(double confidence) {
  int n = 2;
  while (order_statistic_rank(n, confidence) == 0) ++n;
  return n;
}

namespace {

std::optional<MedianInterval> interval_of_rank(const std::vector<SeedValue>& values, int rank) {
  const int n = static_cast<int>(values.size());
  if (n < 2) return std::nullopt;
  MedianInterval m;
  m.n = n;
  m.kind = rank == 0 ? IntervalKind::kRange : IntervalKind::kOrderStatistics;
  m.rank = std::max(rank, 1);
  m.coverage = 1.0 - 2.0 * binomial_half_cdf(m.rank - 1, n);
  const auto b = sorted_bounds(values), r = sorted_raised(values);
  const CensoredFigure lo = order_statistic(b, r, static_cast<size_t>(m.rank - 1));
  const CensoredFigure hi = order_statistic(b, r, static_cast<size_t>(n - m.rank));
  m.low = lo.value;
  m.low_at_least = lo.at_least;
  m.high = hi.value;
  m.high_at_least = hi.at_least;
  return m;
}

}  // namespace

std::optional<MedianInterval> median_interval(const std::vector<SeedValue>& values,
                                              double confidence) {
  const int n = static_cast<int>(values.size());
  return interval_of_rank(values, order_statistic_rank(n, confidence));
}

std::optional<MedianInterval> value_range(const std::vector<SeedValue>& values) {
  return interval_of_rank(values, 0);
}

std::string interval_kind_text(const MedianInterval& interval, const std::string& unit) {
  if (interval.kind == IntervalKind::kRange) return fmt::format("range, {} {}", interval.n, unit);
  return fmt::format("{:g} % CI (order statistics), {} {}", 100 * kIntervalConfidence, interval.n,
                     unit);
}

std::optional<SignFlipTest> sign_flip_test(const std::vector<SeedValue>& values) {
  if (values.empty()) return std::nullopt;
  std::vector<double> v;
  double sum = 0;
  bool censored = false;
  for (const SeedValue& s : values) {
    v.push_back(s.value);
    sum += s.value;
    censored |= s.at_least;
  }
  // A censored value may lie anywhere above its bound: only a positive sum keeps p bounded.
  if (censored && !(sum > 0)) return std::nullopt;
  const FlipCount c = sign_flip_p(v);
  SignFlipTest t;
  t.n = static_cast<int>(v.size());
  t.p_value = c.p;
  t.exact = c.exact;
  t.p_at_most = censored;
  return t;
}

double min_sign_flip_p(int n) { return n < 1 ? 1.0 : std::ldexp(1.0, 1 - n); }

int min_values_for_significance(double alpha) {
  int n = 1;
  while (min_sign_flip_p(n) >= alpha) ++n;
  return n;
}

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) return std::nan("");
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-13; ++i) {
    const double mid = (lo + hi) / 2;
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

std::optional<double> sample_sd(const std::vector<SeedValue>& values) {
  std::vector<double> v;
  for (const SeedValue& s : values)
    if (!s.at_least) v.push_back(s.value);
  if (v.size() < 2) return std::nullopt;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double sign_flip_power(int n, double effect, double alpha, int draws, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Box-Muller on the generator's bits: std::normal_distribution is implementation-defined, and
  // `plan --seeds` must print the same figure with every standard library.
  const auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  const auto normal = [&] {
    const double u1 = uniform(), u2 = uniform();  // in this order on every compiler
    return effect + std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  };
  int rejected = 0;
  std::vector<double> v(static_cast<size_t>(n));
  for (int d = 0; d < draws; ++d) {
    for (double& x : v) x = normal();
    if (sign_flip_p(v).p < alpha) ++rejected;
  }
  return static_cast<double>(rejected) / draws;
}

int pairs_needed(double sd, double difference, double alpha, double power) {
  const int least = min_values_for_significance(alpha);
  if (!(sd > 0)) return least;  // every pair equals the difference: all of one sign
  const double za = normal_quantile(1 - alpha / 2), zb = normal_quantile(power);
  const double ratio = sd / difference;
  const double approx = (za + zb) * (za + zb) * ratio * ratio + za * za / 2;
  const int formula = std::max(least, static_cast<int>(std::ceil(approx - 1e-9)));
  if (formula > kSimulatedPowerMax) return formula;
  for (int n = least; n <= kSimulatedPowerMax; ++n)
    if (sign_flip_power(n, difference / sd, alpha) >= power) return n;
  return std::max(formula, kSimulatedPowerMax + 1);
}

}  // namespace mxablate::analysis
