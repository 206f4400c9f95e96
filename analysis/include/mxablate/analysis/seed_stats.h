// Statistics of a handful of paired per-seed values (docs/design.md §6, "Intervals and the paired
// test"): the median, an interval for it that says what it is, an exact paired test against zero,
// and how many seeds a difference needs. Values may be censored (a run that never reached the
// target: its cost is only known to be at least the value); every result says which of its
// figures are then only lower bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mxablate::analysis {

// One per-seed value; `at_least`: censored, the true value is this or more.
struct SeedValue {
  double value = 0;
  bool at_least = false;
};

inline constexpr double kIntervalConfidence = 0.95;  // nominal coverage of the interval
inline constexpr double kTestAlpha = 0.05;           // the paired test's level (plan --seeds)

// P(B <= k) for B ~ Binomial(n, 1/2), exact (n up to a few hundred).
double binomial_half_cdf(int k, int n);

// The median of n values, and whether it is only a lower bound: it is when raising every censored
// value to +infinity would change it.
struct CensoredFigure {
  double value = 0;
  bool at_least = false;
};
std::optional<CensoredFigure> censored_median(const std::vector<SeedValue>& values);

enum class IntervalKind {
  kRange,           // [min, max] of fewer values than a 95 % interval needs: not a 95 % interval
  kOrderStatistics  // distribution-free confidence interval of the median: [x_(k), x_(n+1-k)]
};

// An interval for the median from the order statistics x_(rank) and x_(n+1-rank). Its coverage of
// the true median is exact for any continuous distribution: 1 - 2 P(B <= rank - 1), B ~ Bin(n, ½)
// (the range, rank 1, covers with 1 - 2^(1-n): 50 % for 2 values, 75 % for 3). An end computed
// from a censored value is only a lower bound of where that end lies (`*_at_least`); the
// statement that keeps its coverage is then "the median is at least `low`", open above.
struct MedianInterval {
  IntervalKind kind = IntervalKind::kRange;
  int n = 0;
  int rank = 1;
  double coverage = 0;
  double low = 0;
  double high = 0;
  bool low_at_least = false;
  bool high_at_least = false;
};

// The largest rank whose interval covers with at least `confidence`; 0 when even the range does
// not (fewer than min_values_for_interval values).
int order_statistic_rank(int n, double confidence = kIntervalConfidence);
// The fewest values with an order-statistic interval at `confidence`: 6 at 95 % (the range of 6
// covers with 96.9 %; of 5 with 93.75 %).
int min_values_for_interval(double confidence = kIntervalConfidence);

// Below min_values_for_interval(confidence) the range (kRange); from there the order-statistic
// interval at `confidence`. nullopt for fewer than 2 values.
std::optional<MedianInterval> median_interval(const std::vector<SeedValue>& values,
                                              double confidence = kIntervalConfidence);

// The range [min, max] whatever n (kRange, rank 1): for values whose intervals cannot be trusted
// (costs against the median of the baseline runs, whose own spread it leaves out).
std::optional<MedianInterval> value_range(const std::vector<SeedValue>& values);

// "range, 3 seeds", "95 % CI (order statistics), 8 seeds": what an interval is, for tables;
// `unit` names what n counts ("seeds", "runs").
std::string interval_kind_text(const MedianInterval& interval, const std::string& unit = "seeds");

// The exact two-sided sign-flip permutation test (Fisher-Pitman) of "the paired values are
// symmetric about 0": p = share of the 2^n sign patterns whose |sum| is at least the observed
// |sum|, every pattern enumerated up to kExactSignFlipMax values (beyond, 2^20 patterns drawn with
// a fixed seed, p = (hits + 1) / (draws + 1)). Censored values enter at their lower bound: when the
// observed sum is positive that p is an upper bound of the exact one (raising a value in the
// direction of the sum never adds a pattern), `p_at_most`; when it is not, no p (nullopt).
inline constexpr int kExactSignFlipMax = 26;
struct SignFlipTest {
  double p_value = 1;
  bool p_at_most = false;  // censored values: the exact p is this or less
  bool exact = true;       // every pattern enumerated
  int n = 0;
};
std::optional<SignFlipTest> sign_flip_test(const std::vector<SeedValue>& values);

// The smallest p the exact test can give with n values: 2 / 2^n (every value of one sign).
double min_sign_flip_p(int n);
// The fewest values for which the exact test can give p < alpha at all: 6 at 0.05.
int min_values_for_significance(double alpha = kTestAlpha);

// Standard normal quantile (inverse CDF), by bisection on erfc: exact to 1e-12.
double normal_quantile(double p);

// Sample standard deviation of the values, censored ones left out; nullopt below 2 values.
std::optional<double> sample_sd(const std::vector<SeedValue>& values);

// The power of the exact sign-flip test at `alpha` for n normal values of mean `effect` (in units
// of their standard deviation): the share of `draws` simulated samples (fixed seed, so the figure
// is the same every time) whose p is below alpha.
double sign_flip_power(int n, double effect, double alpha = kTestAlpha, int draws = 4000,
                       uint64_t seed = 20261207);

// Paired values with standard deviation `sd` whose mean is `difference` away from 0: the fewest
// pairs with which the two-sided sign-flip test at `alpha` reaches `power`. Up to
// kSimulatedPowerMax pairs by sign_flip_power (the exact test is discrete: at 6 pairs only "all
// six of one sign" gives p < 0.05, so the t-test's formula promises too much there); beyond, the
// normal approximation with Guenther's correction for the t distribution,
// n = ((z_{1-a/2} + z_power) sd / d)^2 + z_{1-a/2}^2 / 2 rounded up, which the permutation test
// matches for larger n. Never below min_values_for_significance(alpha).
inline constexpr int kSimulatedPowerMax = 12;
int pairs_needed(double sd, double difference, double alpha = kTestAlpha, double power = 0.8);

}  // namespace mxablate::analysis
