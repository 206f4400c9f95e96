// Scale rule `mse` (docs/design.md §3) on hand-derived blocks: MXFP4 picks the better of
// e0 = floor(log2 amax) - 2 and e0 + 1 by squared error (ties: e0); NVFP4 "four over six" picks
// the block scale mapping the block max to 4 or to 6 (ties: 6). Plus the range edges, zero and
// non-finite blocks, and a brute-force check that the choice is the better one.
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::run_quantize;

namespace {

QuantSpec spec_of(QuantFormat format, ScaleRule rule, Rounding rounding = Rounding::kNearest) {
  QuantSpec s;
  s.format = format;
  s.scale_rule = rule;
  s.rounding = rounding;
  return s;
}

// `first`, then `rest` up to n elements.
std::vector<float> block_of(float first, float rest, int n = 32) {
  std::vector<float> x(static_cast<size_t>(n), rest);
  x[0] = first;
  return x;
}

// E2M1 round-to-nearest written independently of the kernels: the nearest grid value, ties to
// the even code (the even index in this table), saturating at 6.
double e2m1_nearest(double a) {
  static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  if (a >= 6) return 6;
  for (int i = 0; i < 7; ++i) {
    if (a > grid[i + 1]) continue;
    const double below = a - grid[i], above = grid[i + 1] - a;
    if (below < above) return grid[i];
    if (above < below) return grid[i + 1];
    return i % 2 == 0 ? grid[i] : grid[i + 1];
  }
  return 6;
}

// Sum over an MXFP4 block of err(e0)^2 - err(e0 + 1)^2, round-to-nearest, in the e0-scaled
// domain and long double: every term is 0 (an element below 1/4 flushes alike under both) or a
// multiple of 2^-50 below 2^6, so the sum is exact.
long double mx_block_sse_difference(const float* x, int n, int e0) {
  long double sum = 0;
  for (int i = 0; i < n; ++i) {
    const long double y = std::ldexp(static_cast<long double>(std::fabs(x[i])), -e0);
    const long double lo = y - e2m1_nearest(static_cast<double>(y));
    const long double hi = y - 2 * e2m1_nearest(static_cast<double>(y / 2));
    sum += lo * lo - hi * hi;
  }
  return sum;
}

constexpr uint8_t kE4M3One = 0x38;        // 1.0
constexpr uint8_t kE4M3OneAndHalf = 0x3C;  // 1.5

// A 1 x 32 NVFP4 tensor: the 16-block under test, then a block holding 2688, so that the global
// scale is 2688 / 2688 = 1 and the test block's scales are E4M3(amax / 6) and E4M3(amax / 4).
std::vector<float> nv_tensor(const std::vector<float>& block) {
  std::vector<float> x(block);
  x.resize(32, 0.0f);
  x[16] = 2688.0f;
  return x;
}

}  // namespace

TEST_CASE("mse (MXFP4): e0 wins when it has the smaller squared error", "[mse]") {
  const QuantSpec mse = spec_of(QuantFormat::kMXFP4, ScaleRule::kMse);
  // amax 4 (e0 = 0) and 1.5s: exact under e0; under e0 + 1 each 0.75 is a tie that goes to 1,
  // i.e. 2, an error of 0.5 per element. e0 wins.
  auto q = run_quantize(block_of(4.0f, 1.5f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 127);
  CHECK(q.dequant[0] == 4.0f);
  CHECK(q.dequant[1] == 1.5f);
  CHECK(q.telemetry.sum_sq_error == 0.0);
  // amax 7 and 1.5s: e0 saturates 7 to 6 (error 1); e0 + 1 rounds 3.5 to 4 (8, error 1) and
  // costs 0.5 on every 1.5. e0 wins although it saturates.
  q = run_quantize(block_of(7.0f, 1.5f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 127);
  CHECK(q.dequant[0] == 6.0f);
  CHECK(q.telemetry.saturated == 1);
}

TEST_CASE("mse (MXFP4): e0 + 1 wins when it has the smaller squared error", "[mse]") {
  const QuantSpec mse = spec_of(QuantFormat::kMXFP4, ScaleRule::kMse);
  // amax 7.5 (e0 = 0) and 2s: e0 saturates 7.5 to 6 (error 1.5); e0 + 1 rounds 3.75 to 4, i.e.
  // 8 (error 0.5), and 2 stays exact (1 * 2). floor would give scale 127.
  const auto q = run_quantize(block_of(7.5f, 2.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 128);
  CHECK(q.dequant[0] == 8.0f);
  CHECK(q.dequant[1] == 2.0f);
  CHECK(q.telemetry.saturated == 0);
  CHECK(q.telemetry.sum_sq_error == 0.25);
  const auto floor = run_quantize(block_of(7.5f, 2.0f), 1, 32, Axis::kRows, spec_of(QuantFormat::kMXFP4, ScaleRule::kFloor));
  CHECK(floor.scales[0] == 127);
  CHECK(floor.telemetry.sum_sq_error == 2.25);
  // Negative values choose by magnitude alike.
  const auto neg = run_quantize(block_of(-7.5f, -2.0f), 1, 32, Axis::kRows, mse);
  CHECK(neg.scales[0] == 128);
  CHECK(neg.dequant[0] == -8.0f);
}

TEST_CASE("mse (MXFP4): the error difference is exact and adds up over parts of a block", "[mse]") {
  // 7.5 and 2s at e0 = 0: (1.5^2 - 0.5^2) in units of 2^-50, the 2s contributing 0.
  const std::vector<float> x = block_of(7.5f, 2.0f);
  CHECK(mx_mse_error_difference(x.data(), 32, 0) == (2LL << 50));
  const std::vector<float> y = activation_like(1, 64, 3);
  const long long whole = mx_mse_error_difference(y.data(), 64, 1);
  CHECK(whole == mx_mse_error_difference(y.data(), 40, 1) + mx_mse_error_difference(y.data() + 40, 24, 1));
}

TEST_CASE("mse (MXFP4): an exact tie goes to the smaller exponent", "[mse]") {
  const QuantSpec mse = spec_of(QuantFormat::kMXFP4, ScaleRule::kMse);
  // 4 and 1s: exact under both exponents (4 = 4 * 2^0 = 2 * 2^1, 1 = 1 * 2^0 = 0.5 * 2^1).
  auto q = run_quantize(block_of(4.0f, 1.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 127);
  // 7 and zeros: error 1 under both (7 -> 6, or 3.5 -> 4 -> 8).
  q = run_quantize(block_of(7.0f, 0.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 127);
  CHECK(q.dequant[0] == 6.0f);
  // 0.2s below 0.25 * 2^e0 flush under both: equal errors, dropped from the comparison.
  q = run_quantize(block_of(4.0f, 0.2f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 127);
}

TEST_CASE("mse (MXFP4): zero and non-finite blocks as the other rules", "[mse]") {
  const QuantSpec mse = spec_of(QuantFormat::kMXFP4, ScaleRule::kMse);
  const auto zero = run_quantize(std::vector<float>(32, 0.0f), 1, 32, Axis::kRows, mse);
  CHECK(zero.scales[0] == 0);
  for (float v : zero.dequant) CHECK(v == 0.0f);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(64, 7.5f);
    x[5] = bad;
    const auto q = run_quantize(x, 1, 64, Axis::kRows, mse);
    CHECK(q.scales[0] == kE8M0NaN);
    for (int i = 0; i < 32; ++i) CHECK(std::isnan(q.dequant[i]));
    CHECK(q.scales[1] == 128);  // the finite block still chooses
    CHECK(q.telemetry.nonfinite_blocks == 1);
  }
  CHECK(mx_mse_scale_code(nullptr, 0, 1.0f, true) == kE8M0NaN);
}

TEST_CASE("mse (MXFP4): the top and the bottom of the E8M0 range", "[mse]") {
  const QuantSpec mse = spec_of(QuantFormat::kMXFP4, ScaleRule::kMse);
  // FLT_MAX: e0 = 125 saturates 8(1 - 2^-24) to 6; e0 + 1 = 126 rounds it to 4, error 2^-22
  // (scaled). 126 wins, and 4 * 2^126 = 2^128 is clamped to FLT_MAX in the output (counted).
  auto q = run_quantize(block_of(FLT_MAX, 1.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 127 + 126);
  CHECK(q.dequant[0] == FLT_MAX);
  CHECK(q.telemetry.dequant_clamped == 1);
  // 7.5 * 2^-127 (a normal float): e0 = -127, e0 + 1 = -126 wins as for 7.5.
  q = run_quantize(block_of(std::ldexp(7.5f, -127), 0.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 1);
  CHECK(q.dequant[0] == std::ldexp(1.0f, -124));  // 3.75 -> 4, times 2^-126
  // amax 2^-126: e0 = -128 is out of range, so -127 (code 0) is the only candidate.
  q = run_quantize(block_of(std::ldexp(1.0f, -126), 0.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 0);
  // A subnormal amax far below: the clamp's -127.
  q = run_quantize(block_of(std::numeric_limits<float>::denorm_min(), 0.0f), 1, 32, Axis::kRows, mse);
  CHECK(q.scales[0] == 0);
}

TEST_CASE("mse (MXFP4): every block gets the exponent of the smaller squared error", "[mse]") {
  // Brute force over activation-like blocks (and their scaled copies across binades): the
  // chosen exponent is e0 or e0 + 1 and its error is the smaller, ties to e0; in total mse errs
  // less than floor and picks e0 + 1 for some blocks.
  const int64_t rows = 64, cols = 256;
  std::vector<float> x = activation_like(rows, cols, 21);
  for (int64_t i = 0; i < rows * cols; ++i) x[static_cast<size_t>(i)] *= std::ldexp(1.0f, static_cast<int>(i / cols) - 32);
  const auto q = run_quantize(x, rows, cols, Axis::kRows, spec_of(QuantFormat::kMXFP4, ScaleRule::kMse));
  int chose_upper = 0;
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const float* block = x.data() + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(block[i]));
    const int e0 = static_cast<int>(std::floor(std::log2(static_cast<double>(amax)))) - 2;
    const long double lo_minus_hi = mx_block_sse_difference(block, 32, e0);
    const int want = lo_minus_hi > 0 ? e0 + 1 : e0;
    INFO("block " << b << " sse(e0) - sse(e0+1) = " << static_cast<double>(lo_minus_hi));
    CHECK(static_cast<int>(q.scales[static_cast<size_t>(b)]) - 127 == want);
    chose_upper += want == e0 + 1;
  }
  CHECK(chose_upper > 0);
  CHECK(chose_upper < rows * cols / 32);
  const auto floor = run_quantize(x, rows, cols, Axis::kRows, spec_of(QuantFormat::kMXFP4, ScaleRule::kFloor));
  CHECK(q.telemetry.sum_sq_error < floor.telemetry.sum_sq_error);
}

TEST_CASE("mse (MXFP4): the choice uses round-to-nearest errors also under stochastic rounding", "[mse]") {
  const int64_t rows = 32, cols = 128;
  const std::vector<float> x = activation_like(rows, cols, 4);
  const auto nearest = run_quantize(x, rows, cols, Axis::kCols, spec_of(QuantFormat::kMXFP4, ScaleRule::kMse));
  for (uint64_t seed : {1ull, 2ull}) {
    const auto sr = run_quantize(x, rows, cols, Axis::kCols,
                                 spec_of(QuantFormat::kMXFP4, ScaleRule::kMse, Rounding::kStochastic),
                                 RngKey{seed, 3, 0, GemmKind::kWgrad, Operand::kA});
    CHECK(sr.scales == nearest.scales);
  }
}

TEST_CASE("four over six (NVFP4): the block max goes to 4 when that errs less", "[mse][nvfp4]") {
  // amax 4, the rest 3 (g = 1): scale for 6 is E4M3(2/3) = 0.6875, giving 4.125 and 2.75;
  // scale for 4 is E4M3(1) = 1, exact.
  std::vector<float> block(16, 3.0f);
  block[0] = 4.0f;
  const auto q = run_quantize(nv_tensor(block), 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kMse));
  CHECK(q.tensor_scale == 1.0f);
  CHECK(q.scales[0] == kE4M3One);
  CHECK(q.dequant[0] == 4.0f);
  CHECK(q.dequant[1] == 3.0f);
  CHECK(q.telemetry.sum_sq_error == 0.0);
  const auto six = run_quantize(nv_tensor(block), 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kFloor));
  CHECK(decode_code(six.scales[0], kE4M3) == 0.6875f);
  CHECK(six.dequant[0] == 4.125f);
  CHECK(six.dequant[1] == 2.75f);
  // The block holding 2688 maps it to 6 either way (the scale for 4, 672, clamps to 448).
  CHECK(q.scales[1] == six.scales[1]);
}

TEST_CASE("four over six (NVFP4): the block max goes to 6 when that errs less", "[mse][nvfp4]") {
  // amax 6, the rest 1: scale 1 is exact; scale 1.5 makes 1 -> 0.667 -> 0.5 -> 0.75.
  std::vector<float> block(16, 1.0f);
  block[0] = 6.0f;
  const auto q = run_quantize(nv_tensor(block), 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kMse));
  CHECK(q.scales[0] == kE4M3One);
  CHECK(q.dequant[1] == 1.0f);
}

TEST_CASE("four over six (NVFP4): a tie goes to 6", "[mse][nvfp4]") {
  // amax 6, the rest 3: exact under scale 1 (6, 3) and under scale 1.5 (4, 2).
  std::vector<float> block(16, 3.0f);
  block[0] = 6.0f;
  auto q = run_quantize(nv_tensor(block), 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kMse));
  CHECK(q.scales[0] == kE4M3One);
  CHECK(nvfp4_block_sq_error(block.data(), 16, kE4M3OneAndHalf, 1.0f) == 0.0);
  CHECK(nvfp4_block_sq_error(block.data(), 16, kE4M3One, 1.0f) == 0.0);
  // All-zero block: both candidates are code 0.
  q = run_quantize(nv_tensor(std::vector<float>(16, 0.0f)), 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kMse));
  CHECK(q.scales[0] == 0);
  for (int i = 0; i < 16; ++i) CHECK(q.dequant[static_cast<size_t>(i)] == 0.0f);
}

TEST_CASE("four over six (NVFP4): NaN gives NaN scales", "[mse][nvfp4]") {
  std::vector<float> block(16, 3.0f);
  block[2] = std::numeric_limits<float>::quiet_NaN();
  const auto q = run_quantize(nv_tensor(block), 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kMse));
  CHECK(q.scales[0] == kE4M3NaNCode);
  CHECK(q.scales[1] == kE4M3NaNCode);  // a non-finite tensor has a NaN global scale
  for (float v : q.dequant) CHECK(std::isnan(v));
  CHECK(nvfp4_four_over_six_scale_code(block.data(), 16, 3.0f, true, 1.0f) == kE4M3NaNCode);
}

TEST_CASE("four over six (NVFP4): never errs more than mapping to 6", "[mse][nvfp4]") {
  const int64_t rows = 64, cols = 256;
  const std::vector<float> x = activation_like(rows, cols, 8);
  const auto mse = run_quantize(x, rows, cols, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kMse));
  const auto six = run_quantize(x, rows, cols, Axis::kRows, spec_of(QuantFormat::kNVFP4, ScaleRule::kFloor));
  CHECK(mse.tensor_scale == six.tensor_scale);
  int changed = 0;
  for (size_t b = 0; b < mse.scales.size(); ++b) changed += mse.scales[b] != six.scales[b];
  CHECK(changed > 0);
  CHECK(mse.telemetry.sum_sq_error < six.telemetry.sum_sq_error);
}
