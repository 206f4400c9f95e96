// Shared-scale rules (docs/design.md §3) on hand-derived blocks, including the edge cases: zero blocks,
// huge outliers, subnormals, NaN/Inf and the exponent clamp.
#include <cfloat>
#include <cmath>
#include <limits>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::run_quantize;

namespace {

int exponent(float amax, ScaleRule rule) {
  return static_cast<int>(e8m0_scale_code(amax, false, rule, kE2M1Emax)) - kE8M0Bias;
}

// One 32-element block: `first` then 31 copies of `rest`.
std::vector<float> block_of(float first, float rest) {
  std::vector<float> x(32, rest);
  x[0] = first;
  return x;
}

QuantSpec mx(ScaleRule rule) {
  QuantSpec s;
  s.format = QuantFormat::kMXFP4;
  s.scale_rule = rule;
  return s;
}

}  // namespace

TEST_CASE("floor rule: e = floor(log2 amax) - 2, values in (6, 8) * 2^e saturate") {
  CHECK(exponent(1.0f, ScaleRule::kFloor) == -2);
  CHECK(exponent(6.0f, ScaleRule::kFloor) == 0);
  CHECK(exponent(7.0f, ScaleRule::kFloor) == 0);
  CHECK(exponent(8.0f, ScaleRule::kFloor) == 1);
  CHECK(exponent(0.75f, ScaleRule::kFloor) == -3);

  const auto q = run_quantize(block_of(7.0f, 1.0f), 1, 32, Axis::kRows, mx(ScaleRule::kFloor));
  CHECK(q.scales[0] == 127);
  CHECK(q.dequant[0] == 6.0f);  // 7 saturates
  CHECK(q.dequant[1] == 1.0f);
  CHECK(q.telemetry.saturated == 1);
}

TEST_CASE("ceil rule: e = ceil(log2(amax / 6)), never saturates") {
  CHECK(exponent(6.0f, ScaleRule::kCeil) == 0);                        // 6 fits 6 * 2^0
  CHECK(exponent(std::nextafter(6.0f, 7.0f), ScaleRule::kCeil) == 1);  // just above: next binade
  CHECK(exponent(7.0f, ScaleRule::kCeil) == 1);
  CHECK(exponent(1.5f, ScaleRule::kCeil) == -2);
  CHECK(exponent(1.0f, ScaleRule::kCeil) == -2);
  // Subnormal amax, exact before the clamp to -127.
  CHECK(shared_exponent_unclamped(std::ldexp(1.5f, -140), ScaleRule::kCeil, kE2M1Emax) == -142);
  CHECK(shared_exponent_unclamped(std::ldexp(1.75f, -140), ScaleRule::kCeil, kE2M1Emax) == -141);

  std::mt19937 gen(7);
  std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(32);
    for (auto& v : x) v = std::ldexp(1.0f + std::fabs(mag(gen)) / 30.0f, static_cast<int>(mag(gen)));
    const auto q = run_quantize(x, 1, 32, Axis::kRows, mx(ScaleRule::kCeil));
    CHECK(q.telemetry.saturated == 0);
  }
  const auto q = run_quantize(block_of(7.0f, 1.0f), 1, 32, Axis::kRows, mx(ScaleRule::kCeil));
  CHECK(q.scales[0] == 128);
  CHECK(q.dequant[0] == 8.0f);  // 7 / 2 = 3.5 → 4 (tie to even) → 8
  CHECK(q.dequant[1] == 1.0f);
}

TEST_CASE("even rule: amax rounded to one mantissa bit (ties to even), then floor") {
  CHECK(exponent(6.9f, ScaleRule::kEven) == 0);   // 1.725 * 4 → 1.5 * 4: e = 0
  CHECK(exponent(7.0f, ScaleRule::kEven) == 1);   // 1.75 * 4 is a tie → 2.0 * 4: e = 1
  CHECK(exponent(7.5f, ScaleRule::kEven) == 1);
  CHECK(exponent(5.0f, ScaleRule::kEven) == 0);   // 1.25 * 4 is a tie → 1.0 * 4 (even): e = 0
  CHECK(exponent(1.0f, ScaleRule::kEven) == -2);
  const auto q = run_quantize(block_of(6.9f, 1.0f), 1, 32, Axis::kRows, mx(ScaleRule::kEven));
  CHECK(q.dequant[0] == 6.0f);
  CHECK(q.telemetry.saturated == 1);
}

TEST_CASE("an all-zero block gets the smallest scale and stays zero") {
  for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven}) {
    const auto q = run_quantize(std::vector<float>(32, 0.0f), 1, 32, Axis::kRows, mx(rule));
    CHECK(q.scales[0] == 0);
    for (float v : q.dequant) CHECK(v == 0.0f);
    CHECK(q.telemetry.flushed == 0);
    CHECK(q.telemetry.nonzero_inputs == 0);
  }
}

TEST_CASE("a single huge outlier sets the scale and flushes the rest of its block") {
  const auto q = run_quantize(block_of(1.0e6f, 1.0f), 1, 32, Axis::kRows, mx(ScaleRule::kFloor));
  CHECK(q.scales[0] == 127 + 17);  // floor(log2 1e6) = 19
  CHECK(q.dequant[0] == 6.0f * 131072.0f);
  for (int i = 1; i < 32; ++i) CHECK(q.dequant[i] == 0.0f);
  CHECK(q.telemetry.flushed == 31);
  CHECK(q.telemetry.fraction_flushed() == Approx(31.0 / 32.0));
}

TEST_CASE("subnormal inputs: exact at the bottom of the scale range, flushed below it") {
  // amax = 2^-125: e = -127 exactly, the element 4 * 2^-127 is a float32 subnormal.
  const auto exact = run_quantize(block_of(std::ldexp(1.0f, -125), std::ldexp(1.0f, -126)), 1, 32,
                                  Axis::kRows, mx(ScaleRule::kFloor));
  CHECK(exact.scales[0] == 0);
  CHECK(exact.dequant[0] == std::ldexp(1.0f, -125));
  CHECK(exact.dequant[1] == std::ldexp(1.0f, -126));
  CHECK(exact.telemetry.relative_error() == 0.0);
  // amax = 2^-140: e would be -142, clamps to -127, and 2^-140 / 2^-127 = 2^-13 rounds to 0.
  const auto tiny = run_quantize(std::vector<float>(32, std::ldexp(1.0f, -140)), 1, 32,
                                 Axis::kRows, mx(ScaleRule::kFloor));
  CHECK(tiny.scales[0] == 0);
  CHECK(tiny.dequant[0] == 0.0f);
  CHECK(tiny.telemetry.flushed == 32);
  CHECK(exponent(std::numeric_limits<float>::denorm_min(), ScaleRule::kFloor) == -127);
}

TEST_CASE("NaN and Inf give the block a NaN scale and propagate, other blocks are untouched") {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(64, 1.0f);
    x[3] = bad;
    const auto q = run_quantize(x, 1, 64, Axis::kRows, mx(ScaleRule::kFloor));
    CHECK(q.scales[0] == kE8M0NaN);
    for (int i = 0; i < 32; ++i) CHECK(std::isnan(q.dequant[i]));
    CHECK(q.scales[1] == 125);
    for (int i = 32; i < 64; ++i) CHECK(q.dequant[i] == 1.0f);
    CHECK(q.telemetry.nonfinite_blocks == 1);
    CHECK(q.telemetry.relative_error() == 0.0);  // finite blocks only
  }
}

TEST_CASE("scales at the clamp limits") {
  // Largest float: floor gives e = 125, far from the clamp; ceil and even reach e = 126, where
  // 4 * 2^126 = 2^128 does not fit float32: the dequantized value clamps to FLT_MAX (counted).
  CHECK(exponent(FLT_MAX, ScaleRule::kFloor) == 125);
  CHECK(exponent(FLT_MAX, ScaleRule::kCeil) == 126);
  CHECK(exponent(FLT_MAX, ScaleRule::kEven) == 126);
  const auto q = run_quantize(block_of(FLT_MAX, 1.0f), 1, 32, Axis::kRows, mx(ScaleRule::kCeil));
  CHECK(q.scales[0] == 127 + 126);
  CHECK(q.dequant[0] == FLT_MAX);
  CHECK(mxablate::kernels::bf16_bits_to_float(q.dequant_bf16[0]) == kBF16MaxFinite);
  CHECK(q.telemetry.dequant_clamped == 1);
  const auto f = run_quantize(block_of(FLT_MAX, 1.0f), 1, 32, Axis::kRows, mx(ScaleRule::kFloor));
  CHECK(f.dequant[0] == 6.0f * std::ldexp(1.0f, 125));
  CHECK(f.telemetry.dequant_clamped == 0);
  // Bottom of the range: e8m0 code 0 decodes to 2^-127 (a float32 subnormal).
  CHECK(mx_dequant(0x2, 0) == std::ldexp(1.0f, -127));
  CHECK(mx_dequant(0x7, 254) == std::numeric_limits<float>::infinity());  // 6 * 2^127 (raw)
}
