// The statistics of a few paired seeds (analysis/seed_stats.h, docs/design.md §6 "Intervals and
// the paired test"): order-statistic ranks against the published table, the interval's coverage
// simulated on costs whose true median is known (lognormal, Student t with 2 degrees of freedom,
// Pareto), the exact sign-flip test against brute force, and the seeds a difference needs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numbers>
#include <random>

#include "catch.h"
#include "mxablate/analysis/seed_stats.h"

using namespace mxablate::analysis;

namespace {

std::vector<SeedValue> plain(const std::vector<double>& v) {
  std::vector<SeedValue> out;
  for (double x : v) out.push_back({x, false});
  return out;
}

// Deterministic draws (std distributions are implementation-defined).
struct Draws {
  std::mt19937_64 rng{20261207};
  double uniform() { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }
};

struct Distribution {
  const char* name;
  double median;
  std::function<double(Draws&)> draw;
};

const std::vector<Distribution>& distributions() {
  static const std::vector<Distribution> d = {
      // Costs in percent: a lognormal tokens ratio, median +10 %.
      {"lognormal", 10.0, [](Draws& g) { return 100 * (1.1 * std::exp(0.1 * g.normal()) - 1); }},
      // Student t, 2 degrees of freedom (infinite variance): Z / sqrt(chi2_2 / 2), chi2_2 = -2 ln U.
      {"student-t2", 5.0,
       [](Draws& g) { return 5.0 + 3.0 * g.normal() / std::sqrt(-std::log(g.uniform())); }},
      // Pareto, x_m = 1, alpha = 1.5 (infinite variance): U^(-1/alpha); median 2^(1/alpha).
      {"pareto-1.5", std::pow(2.0, 1 / 1.5), [](Draws& g) { return std::pow(g.uniform(), -1 / 1.5); }},
  };
  return d;
}

// The old method, for the table: percentile bootstrap of the median (4000 resamples there).
std::pair<double, double> bootstrap(const std::vector<double>& v, Draws& g, int resamples) {
  std::vector<double> medians, s(v.size());
  for (int b = 0; b < resamples; ++b) {
    for (double& x : s) x = v[g.rng() % v.size()];
    std::sort(s.begin(), s.end());
    const size_t n = s.size();
    medians.push_back(n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2);
  }
  std::sort(medians.begin(), medians.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(medians.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, medians.size() - 1);
    return medians[lo] + (pos - static_cast<double>(lo)) * (medians[hi] - medians[lo]);
  };
  return {at(0.025), at(0.975)};
}

// Brute force over all 2^n patterns, written independently of the Gray-code enumeration.
double brute_force_p(const std::vector<double>& v) {
  double observed = 0;
  for (double x : v) observed += x;
  int hits = 0;
  const int patterns = 1 << v.size();
  for (int m = 0; m < patterns; ++m) {
    double s = 0;
    for (size_t j = 0; j < v.size(); ++j) s += (m >> j & 1) ? -v[j] : v[j];
    if (std::fabs(s) >= std::fabs(observed) - 1e-9) ++hits;
  }
  return static_cast<double>(hits) / patterns;
}

}  // namespace

TEST_CASE("binomial tail and the order-statistic ranks of the published table") {
  CHECK(binomial_half_cdf(0, 3) == Approx(1.0 / 8));
  CHECK(binomial_half_cdf(1, 9) == Approx(10.0 / 512));
  CHECK(binomial_half_cdf(2, 12) == Approx(79.0 / 4096));
  CHECK(binomial_half_cdf(-1, 5) == 0);
  CHECK(binomial_half_cdf(5, 5) == 1);
  // Nonparametric 95 % interval of the median: [x_(k), x_(n+1-k)] (e.g. Conover, Practical
  // Nonparametric Statistics, table A3; Hollander & Wolfe): k = 1 for n = 6..8, 2 for 9..11,
  // 3 for 12..14, 4 for 15..16, 5 for 17..19, 6 for 20..22.
  const int expected[] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 5, 5, 6, 6, 6};
  for (int n = 2; n <= 22; ++n) {
    INFO("n = " << n);
    CHECK(order_statistic_rank(n) == expected[n - 2]);
  }
  CHECK(min_values_for_interval() == 6);
  CHECK(min_values_for_interval(0.99) == 8);  // 1 - 2/128 < 0.99 <= 1 - 2/256
}

TEST_CASE("the interval's coverage of the true median, simulated (lognormal and heavy-tailed)") {
  // 20000 samples per cell: a coverage's standard error is at most 0.0035, so a tolerance of
  // 0.012 (3.4 standard errors) fails a wrong rule, not a lucky draw. Every cell must match the
  // exact coverage 1 - 2 P(B <= k-1) the interval reports; the 95 % intervals must cover at least
  // 95 % - 0.012, and the ranges below 6 seeds must fall short of 95 %, as the table says.
  constexpr int kSamples = 20000;
  constexpr double kTolerance = 0.012;
  Draws g;
  std::printf("%-4s %-12s %-36s %8s %10s\n", "n", "costs", "method", "exact", "simulated");
  for (const Distribution& d : distributions()) {
    for (const int n : {2, 3, 4, 5, 6, 8, 9, 12, 20}) {
      int covered = 0;
      MedianInterval last;
      std::vector<double> v(static_cast<size_t>(n));
      for (int s = 0; s < kSamples; ++s) {
        for (double& x : v) x = d.draw(g);
        const auto iv = median_interval(plain(v));
        if (!iv) FAIL("no interval for " << n << " values");
        last = *iv;
        if (iv->low <= d.median && d.median <= iv->high) ++covered;
      }
      const double simulated = static_cast<double>(covered) / kSamples;
      std::printf("%-4d %-12s %-36s %8.4f %10.4f\n", n, d.name, interval_kind_text(last).c_str(),
                  last.coverage, simulated);
      INFO(d.name << ", n = " << n << ": simulated " << simulated << ", exact " << last.coverage);
      CHECK(std::fabs(simulated - last.coverage) <= kTolerance);
      if (n < 6) {
        CHECK(last.kind == IntervalKind::kRange);
        CHECK(last.coverage == Approx(1 - std::ldexp(1.0, 1 - n)));
        CHECK(simulated < kIntervalConfidence);
      } else {
        CHECK(last.kind == IntervalKind::kOrderStatistics);
        CHECK(simulated >= kIntervalConfidence - kTolerance);
      }
    }
  }
  // What the table printed before: the percentile bootstrap of the median, "95 %" by name.
  // With 3 or 5 seeds it is the range in all but name (the resampled medians' 2.5 % and 97.5 %
  // points are the extremes), so it covers about 75 % and 94 %.
  for (const int n : {3, 5}) {
    int covered = 0;
    constexpr int kBootSamples = 2000;
    std::vector<double> v(static_cast<size_t>(n));
    for (int s = 0; s < kBootSamples; ++s) {
      for (double& x : v) x = distributions()[0].draw(g);
      const auto [lo, hi] = bootstrap(v, g, 400);
      if (lo <= 10.0 && 10.0 <= hi) ++covered;
    }
    const double simulated = static_cast<double>(covered) / kBootSamples;
    std::printf("%-4d %-12s %-36s %8s %10.4f\n", n, "lognormal", "bootstrap percentile \"95 %\"",
                "-", simulated);
    if (n == 3) CHECK(simulated < 0.85);
  }
}

TEST_CASE("the exact sign-flip test: hand-computed and brute-force p-values") {
  // +-1 +-2 +-3: |sum| >= 6 only for all-plus and all-minus.
  CHECK(sign_flip_test(plain({1, 2, 3}))->p_value == Approx(0.25));
  // 1 + 2 + 3 - 0.5 = 5.5: also 6.5 (-0.5 flipped), and both negated: 4 of 16.
  CHECK(sign_flip_test(plain({1, 2, 3, -0.5}))->p_value == Approx(0.25));
  CHECK(sign_flip_test(plain({5, -5}))->p_value == Approx(1.0));
  CHECK(sign_flip_test(plain({0, 0, 0}))->p_value == Approx(1.0));
  CHECK_FALSE(sign_flip_test({}).has_value());
  Draws g;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<double> v(static_cast<size_t>(1 + trial % 12));
    for (double& x : v) x = 0.7 + g.normal();
    const auto t = sign_flip_test(plain(v));
    REQUIRE(t);
    CHECK(t->exact);
    CHECK(t->p_value == Approx(brute_force_p(v)));
  }
  // Smallest p: 2 / 2^n; p < 0.05 needs 6 seeds.
  CHECK(min_sign_flip_p(5) == Approx(0.0625));
  CHECK(min_sign_flip_p(6) == Approx(0.03125));
  CHECK(min_values_for_significance() == 6);
  CHECK(sign_flip_test(plain({1, 2, 3, 4, 5}))->p_value == Approx(0.0625));
  CHECK(sign_flip_test(plain({1, 2, 3, 4, 5, 6}))->p_value == Approx(0.03125));
  // Beyond kExactSignFlipMax: 2^20 drawn patterns, p = (hits + 1) / (draws + 1).
  const auto many = sign_flip_test(plain(std::vector<double>(30, 1.0)));
  REQUIRE(many);
  CHECK_FALSE(many->exact);
  CHECK(many->p_value == Approx(1.0 / (1048576 + 1)));
  std::vector<double> alternating;
  for (int i = 0; i < 30; ++i) alternating.push_back(i % 2 ? 1.0 : -1.0);
  CHECK(sign_flip_test(plain(alternating))->p_value == Approx(1.0));
}

TEST_CASE("censored values: the median, the interval's ends and p say what they bound") {
  // 8, 9, 10, 11 and a run that never reached the target, at >= 40.
  const std::vector<SeedValue> v{{8, false}, {11, false}, {9, false}, {10, false}, {40, true}};
  const auto m = censored_median(v);
  CHECK(m->value == 10);
  CHECK_FALSE(m->at_least);
  const auto iv = median_interval(v);
  CHECK(iv->low == 8);
  CHECK_FALSE(iv->low_at_least);
  CHECK(iv->high == 40);
  CHECK(iv->high_at_least);
  const auto t = sign_flip_test(v);
  REQUIRE(t);
  CHECK(t->p_at_most);
  CHECK(t->p_value == Approx(2.0 / 32));
  // Three of five censored: the median rests on a bound.
  const std::vector<SeedValue> w{{8, false}, {30, true}, {9, false}, {25, true}, {28, true}};
  CHECK(censored_median(w)->at_least);
  CHECK(censored_median(w)->value == 25);
  // A censored value against a negative sum: the truth may flip the sign, no p.
  CHECK_FALSE(sign_flip_test({{-8, false}, {-9, false}, {2, true}}).has_value());
  // The standard deviation leaves censored values out.
  CHECK(*sample_sd(v) == Approx(std::sqrt(5.0 / 3)));
  CHECK_FALSE(sample_sd({{1, false}, {5, true}}).has_value());
}

TEST_CASE("how many seeds a difference needs: simulated power of the exact test, then the formula") {
  CHECK(normal_quantile(0.975) == Approx(1.959963985).epsilon(1e-9));
  CHECK(normal_quantile(0.8) == Approx(0.841621234).epsilon(1e-9));
  // Below 6 pairs p < 0.05 is out of reach: a huge effect still needs 6.
  CHECK(pairs_needed(0.1, 100) == 6);
  CHECK(pairs_needed(0, 5) == 6);
  CHECK(sign_flip_power(5, 50) == 0);
  // One standard deviation: the t-test's textbook answer is 10 pairs (power 0.80 at n = 10,
  // 0.75 at 9); the exact sign-flip test is discrete and needs its own count.
  const int n1 = pairs_needed(1.0, 1.0);
  std::printf("difference = 1 SD: %d pairs (power %.3f; %.3f with one fewer)\n", n1,
              sign_flip_power(n1, 1.0), sign_flip_power(n1 - 1, 1.0));
  CHECK(n1 >= 10);
  CHECK(n1 <= 12);
  CHECK(sign_flip_power(n1, 1.0) >= 0.8);
  CHECK(sign_flip_power(n1 - 1, 1.0) < 0.8);
  // Above kSimulatedPowerMax pairs the formula: an SD / difference ratio for which it gives 14,
  // where the exact test's simulated power is within 0.05 of 0.8.
  const double ratio = std::sqrt((13.6 - 1.959964 * 1.959964 / 2) / std::pow(1.959964 + 0.841621, 2));
  const int n2 = pairs_needed(ratio, 1.0);
  CHECK(n2 == 14);
  const double power = sign_flip_power(n2, 1 / ratio, kTestAlpha, 2000);
  std::printf("difference = %.3f SD: %d pairs by the formula, simulated power %.3f\n", 1 / ratio,
              n2, power);
  CHECK(std::fabs(power - 0.8) <= 0.05);
}
