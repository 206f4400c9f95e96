// The SR pre-scale (docs/design.md §3): under stochastic rounding each element is multiplied by
// p before rounding while scales still come from the values, so outputs hold Q(p x); with the
// floor rule and p = 3/4 nothing saturates, and Q(p x) / p is an unbiased estimate of x.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::run_quantize;
using mxablate::test::same_bits;

namespace {

QuantSpec prescaled(float p, QuantFormat format = QuantFormat::kMXFP4, Rounding rounding = Rounding::kStochastic) {
  QuantSpec s;
  s.format = format;
  s.rounding = rounding;
  s.sr_prescale = p;
  return s;
}

// The E2M1 grid neighbours of a in [0, 6]: (lower, upper).
std::pair<double, double> e2m1_neighbours(double a) {
  static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int i = 0; i < 7; ++i)
    if (a <= grid[i + 1]) return a == grid[i + 1] ? std::pair{a, a} : std::pair{grid[i], grid[i + 1]};
  return {6, 6};
}

}  // namespace

TEST_CASE("SR pre-scale: outputs hold Q(p x) on the scale chosen from x", "[sr-prescale]") {
  // amax 4 gives e = 0 whatever p is; 3/4 of 4, 2, -4, 0 is 3, 1.5, -3, 0: all on the E2M1 grid,
  // so stochastic rounding keeps them exactly and the error against p x is zero.
  std::vector<float> x(32, 0.0f);
  x[0] = 4.0f;
  x[1] = 2.0f;
  x[2] = -4.0f;
  const auto q = run_quantize(x, 1, 32, Axis::kRows, prescaled(0.75f), RngKey{3, 1, 0, {}, {}});
  CHECK(q.scales[0] == 127);
  CHECK(q.dequant[0] == 3.0f);
  CHECK(q.dequant[1] == 1.5f);
  CHECK(q.dequant[2] == -3.0f);
  CHECK(q.dequant[3] == 0.0f);
  CHECK((q.packed[0] & 0xF) == 5);  // E2M1 code of 3
  CHECK(q.telemetry.sum_sq_error == 0.0);
  CHECK(q.telemetry.sum_sq_input == 9.0 + 2.25 + 9.0);  // measured against p x
  CHECK(q.telemetry.relative_error() == 0.0);
  // Under round-to-nearest the pre-scale is ignored.
  const auto rtn = run_quantize(x, 1, 32, Axis::kRows, prescaled(0.75f, QuantFormat::kMXFP4, Rounding::kNearest));
  CHECK(rtn.dequant[0] == 4.0f);
  CHECK(same_bits(rtn.dequant, run_quantize(x, 1, 32, Axis::kRows, QuantSpec{}).dequant));
  CHECK(effective_sr_prescale(prescaled(0.75f, QuantFormat::kMXFP4, Rounding::kNearest)) == 1.0f);
  CHECK(effective_sr_prescale(prescaled(0.75f)) == 0.75f);
}

TEST_CASE("SR pre-scale 3/4 with the floor rule never saturates", "[sr-prescale]") {
  // Activation-like data with outliers, across binades: without the pre-scale, values in (6, 8)
  // * 2^e saturate; with it the block maximum lands in [3, 6).
  std::vector<float> x = activation_like(128, 256, 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(i % 7) * 9 - 30);
  for (Axis axis : {Axis::kRows, Axis::kCols}) {
    const RngKey key{7, 2, 1, GemmKind::kDgrad, Operand::kA};
    const auto plain = run_quantize(x, 128, 256, axis, prescaled(1.0f), key);
    const auto pre = run_quantize(x, 128, 256, axis, prescaled(0.75f), key);
    CHECK(plain.telemetry.saturated > 0);
    CHECK(pre.telemetry.saturated == 0);
    CHECK(pre.scales == plain.scales);  // scales come from x, not from p x
    for (QuantFormat f : {QuantFormat::kNVFP4, QuantFormat::kFP8E4M3, QuantFormat::kFP8E5M2}) {
      INFO(to_string(f));
      CHECK(run_quantize(x, 128, 256, axis, prescaled(0.75f, f), key).telemetry.saturated == 0);
    }
  }
}

TEST_CASE("SR pre-scale: Q(p x) / p is unbiased, averaged over many seeds", "[sr-prescale]") {
  // One 32-block per row: 7.9 (the maximum, e = 0; 3/4 of it is 5.925) and values whose p x lie
  // between grid points or on one. For element v, p v rounds to its neighbours lo < hi with
  // P(hi) = f = (p v - lo) / gap, so Q(p v) / p has standard deviation sigma = gap sqrt(f (1 - f)) / p
  // and the mean of n independent draws lies within 5 sigma / sqrt(n) of v (plus the rounding
  // of p v to float and the 2^-24 probability quantum, both far below it).
  const float p = 0.75f;
  const std::vector<float> values{7.9f, 0.3f, 1.1f, 2.5f, 3.3f, 5.0f, -6.1f, 4.0f, 0.01f, 7.0f};
  const int64_t rows = 256;
  std::vector<float> x(static_cast<size_t>(rows * 32), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < values.size(); ++j) x[static_cast<size_t>(r * 32) + j] = values[j];
  std::vector<double> sum(values.size(), 0.0);
  int64_t n = 0;
  for (uint64_t seed = 1; seed <= 64; ++seed) {
    const auto q = run_quantize(x, rows, 32, Axis::kRows, prescaled(p), RngKey{seed, 9, 4, GemmKind::kWgrad, Operand::kA});
    REQUIRE(q.telemetry.saturated == 0);
    for (int64_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < values.size(); ++j) sum[j] += q.dequant[static_cast<size_t>(r * 32) + j] / p;
    n += rows;
  }
  for (size_t j = 0; j < values.size(); ++j) {
    const double v = values[j], pv = static_cast<double>(p * values[j]);
    const auto [lo, hi] = e2m1_neighbours(std::fabs(pv));
    const double f = hi == lo ? 0.0 : (std::fabs(pv) - lo) / (hi - lo);
    const double sigma = (hi - lo) * std::sqrt(f * (1 - f)) / p;
    const double tolerance = 5 * sigma / std::sqrt(static_cast<double>(n)) + 1e-6 * std::fabs(v);
    INFO("v = " << v << ", mean " << sum[j] / n << ", tolerance " << tolerance);
    CHECK(std::fabs(sum[j] / n - v) <= tolerance);
  }
  // Without the pre-scale, 7.9, 7 and -6.1 saturate under floor: 7.9 always comes out as 6.
  const auto plain = run_quantize(x, rows, 32, Axis::kRows, prescaled(1.0f), RngKey{1, 9, 4, GemmKind::kWgrad, Operand::kA});
  CHECK(plain.dequant[0] == 6.0f);
  CHECK(plain.telemetry.saturated == static_cast<uint64_t>(3 * rows));
}

TEST_CASE("SR pre-scale applies to every format under stochastic rounding", "[sr-prescale]") {
  const std::vector<float> x = activation_like(32, 64, 6);
  for (QuantFormat f : {QuantFormat::kFP32, QuantFormat::kBF16}) {
    const auto q = run_quantize(x, 32, 64, Axis::kRows, prescaled(0.5f, f));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = f == QuantFormat::kFP32 ? 0.5f * x[i] : bf16_bits_to_float(float_to_bf16_bits(0.5f * x[i]));
      CHECK(q.dequant[i] == want);
    }
  }
  // NVFP4: the global scale comes from x.
  const auto nv = run_quantize(x, 32, 64, Axis::kRows, prescaled(0.5f, QuantFormat::kNVFP4));
  const auto nv_plain = run_quantize(x, 32, 64, Axis::kRows, prescaled(1.0f, QuantFormat::kNVFP4));
  CHECK(nv.tensor_scale == nv_plain.tensor_scale);
  CHECK(nv.scales == nv_plain.scales);
}

TEST_CASE("SR pre-scale out of range is refused in one sentence", "[sr-prescale]") {
  for (float bad : {0.0f, -0.75f, 1.5f, 1e-9f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    INFO(bad);
    const std::string why = check_sr_prescale(bad);
    CHECK(why.find("sr_prescale") != std::string::npos);
    CHECK(why.find("[2^-24, 1]") != std::string::npos);
    // Checked with the shape, whatever the rounding: a bad spec is a bad spec.
    CHECK(check_shape(prescaled(bad, QuantFormat::kMXFP4, Rounding::kNearest), 1, 32, Axis::kRows) == why);
    std::vector<float> x(32, 1.0f), out(32);
    QuantOutputs o;
    o.dequant = out.data();
    CHECK_THROWS_AS(quantize(x.data(), 1, 32, Axis::kRows, prescaled(bad), {}, o), std::invalid_argument);
  }
  CHECK(check_sr_prescale(1.5f) == "sr_prescale 1.5 is not a finite number in [2^-24, 1]");
  for (float good : {1.0f, 0.75f, kMinSrPrescale}) CHECK(check_sr_prescale(good).empty());
}
