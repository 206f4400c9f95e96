// Stochastic rounding: reproducible bits, keyed streams, unbiased on average, thread-invariant.
#include <cmath>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::run_quantize;
using mxablate::test::same_bits;

namespace {
QuantSpec sr_spec(QuantFormat f = QuantFormat::kMXFP4) {
  QuantSpec s;
  s.format = f;
  s.rounding = Rounding::kStochastic;
  return s;
}
}  // namespace

TEST_CASE("the same key gives identical bits, another step or operand gives other bits") {
  const auto x = activation_like(64, 256, 1);
  const RngKey key{9, 100, 2, GemmKind::kWgrad, Operand::kA};
  const auto a = run_quantize(x, 64, 256, Axis::kCols, sr_spec(), key);
  const auto b = run_quantize(x, 64, 256, Axis::kCols, sr_spec(), key);
  CHECK(same_bits(a.dequant, b.dequant));
  CHECK(a.packed == b.packed);

  RngKey other_step = key;
  other_step.step = 101;
  RngKey other_operand = key;
  other_operand.operand = Operand::kB;
  for (const RngKey& k : {other_step, other_operand}) {
    const auto c = run_quantize(x, 64, 256, Axis::kCols, sr_spec(), k);
    CHECK_FALSE(same_bits(a.dequant, c.dequant));
    CHECK(a.scales == c.scales);  // scales do not depend on the rounding draws
  }
}

TEST_CASE("stochastic rounding is unbiased: the mean of many draws converges to the input") {
  // Each 32-block holds one 6.0 (scale 2^0) and 31 copies of v; every copy gets its own draw.
  // v = 0.3 lies between 0 and 0.5: P(0.5) = 0.6, so the mean is 0.3 with standard deviation
  // 0.5 * sqrt(0.6 * 0.4 / n). With n = 31 * 4096 draws, 5 sigma is 0.0035.
  const int64_t rows = 4096;
  for (float v : {0.3f, 1.2f, 2.7f, 4.9f, -3.3f}) {
    std::vector<float> x(static_cast<size_t>(rows * 32), v);
    for (int64_t r = 0; r < rows; ++r) x[static_cast<size_t>(r * 32)] = 6.0f;
    const auto q = run_quantize(x, rows, 32, Axis::kRows, sr_spec(), RngKey{5, 1, 0, {}, {}});
    double sum = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int c = 1; c < 32; ++c, ++n) sum += q.dequant[static_cast<size_t>(r * 32 + c)];
    const double gap = std::fabs(v) < 2 ? 0.5 : (std::fabs(v) < 4 ? 1.0 : 2.0);
    const double tolerance = 5 * gap * 0.5 / std::sqrt(static_cast<double>(n));
    INFO("v = " << v);
    CHECK(std::fabs(sum / n - v) < tolerance);
    // Round-to-nearest, by contrast, is biased for these values.
    QuantSpec nearest;
    const auto r = run_quantize(x, rows, 32, Axis::kRows, nearest);
    CHECK(std::fabs(r.dequant[1] - v) > tolerance);
  }
}

TEST_CASE("values already on the grid never move under stochastic rounding") {
  std::vector<float> x{6, 4, 3, 2, 1.5f, 1, 0.5f, 0, -6, -4, -3, -2, -1.5f, -1, -0.5f, 0};
  x.resize(32, 1.0f);
  const auto q = run_quantize(x, 1, 32, Axis::kRows, sr_spec(), RngKey{1, 2, 3, {}, {}});
  for (size_t i = 0; i < x.size(); ++i) CHECK(q.dequant[i] == x[i]);
}

TEST_CASE("results do not depend on the number of threads") {
  const auto x = activation_like(512, 512, 3);
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4, QuantFormat::kFP8E5M2}) {
    QuantSpec spec = sr_spec(f);
    spec.hadamard = HadamardMode::kPerStepRandom;
    const RngKey key{11, 5, 1, GemmKind::kDgrad, Operand::kA};
    set_cpu_threads(1);
    const auto one = run_quantize(x, 512, 512, Axis::kCols, spec, key);
    set_cpu_threads(2);
    const auto two = run_quantize(x, 512, 512, Axis::kCols, spec, key);
    set_cpu_threads(5);
    const auto five = run_quantize(x, 512, 512, Axis::kCols, spec, key);
    CHECK(same_bits(one.dequant, two.dequant));
    CHECK(same_bits(one.dequant, five.dequant));
    CHECK(one.packed == two.packed);
    CHECK(one.scales == five.scales);
    CHECK(one.telemetry.sum_sq_error == two.telemetry.sum_sq_error);
    CHECK(one.telemetry.sum_error == five.telemetry.sum_error);
  }
  set_cpu_threads(2);
}
