// quantize(): NVFP4, FP8 and BF16 on hand-derived cases, axis handling, and bad requests.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::run_quantize;
using mxablate::test::same_bits;

namespace {
QuantSpec spec_of(QuantFormat f) {
  QuantSpec s;
  s.format = f;
  return s;
}
}  // namespace

TEST_CASE("NVFP4: global scale amax / 2688, E4M3 block scales, E2M1 elements") {
  // Tensor amax 2688 makes the global decode scale exactly 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 2688.0f;               // block 0: amax / 6 = 448 → block scale 448
  x[16] = 5.0f;                 // block 1: 5 / 6 = 0.8333 → E4M3 0.8125
  x[17] = 1.0f;                 //          1 / 0.8125 = 1.23 → 1.0 → 0.8125
  const auto q = run_quantize(x, 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4));
  CHECK(q.tensor_scale == 1.0f);
  CHECK(decode_code(q.scales[0], kE4M3) == 448.0f);
  CHECK(decode_code(q.scales[1], kE4M3) == 0.8125f);
  CHECK(q.dequant[0] == 2688.0f);
  CHECK(q.dequant[16] == 6.0f * 0.8125f);  // 5 / 0.8125 = 6.15 saturates to 6
  CHECK(q.dequant[17] == 0.8125f);
  CHECK(q.telemetry.saturated == 1);
  CHECK(q.scales.size() == 2);
}

TEST_CASE("NVFP4 propagates a non-finite tensor to every element") {
  std::vector<float> x(32, 1.0f);
  x[20] = std::numeric_limits<float>::infinity();
  const auto q = run_quantize(x, 1, 32, Axis::kRows, spec_of(QuantFormat::kNVFP4));
  CHECK(std::isnan(q.tensor_scale));
  for (float v : q.dequant) CHECK(std::isnan(v));
}

TEST_CASE("FP8 per-tensor current scaling: d = amax / max, the amax maps to the largest code") {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = (i - 20) * 0.37f;
  x[7] = -896.0f;
  const auto e4 = run_quantize(x, 8, 8, Axis::kRows, spec_of(QuantFormat::kFP8E4M3));
  CHECK(e4.tensor_scale == 2.0f);
  CHECK(e4.dequant[7] == -896.0f);
  CHECK(e4.packed[7] == (0x80 | 0x7E));  // -448 in E4M3
  for (int i = 0; i < 64; ++i) {
    // Every value is code * 2 with the code the nearest E4M3 value to x / 2.
    const float code_value = decode_code(round_to_code(x[i] / 2.0f, kE4M3, -1.0f).code, kE4M3);
    CHECK(e4.dequant[i] == code_value * 2.0f);
  }
  const auto e5 = run_quantize(x, 8, 8, Axis::kRows, spec_of(QuantFormat::kFP8E5M2));
  CHECK(e5.tensor_scale == 896.0f / 57344.0f);
  CHECK(e5.dequant[7] == -896.0f);
  // All zeros: scale 1, all zero codes.
  const auto zero = run_quantize(std::vector<float>(16, 0.0f), 4, 4, Axis::kRows,
                                 spec_of(QuantFormat::kFP8E4M3));
  CHECK(zero.tensor_scale == 1.0f);
  for (float v : zero.dequant) CHECK(v == 0.0f);
}

TEST_CASE("BF16 and FP32 formats: rounding to bf16 and the identity") {
  const auto x = activation_like(4, 32, 2);
  const auto b = run_quantize(x, 4, 32, Axis::kRows, spec_of(QuantFormat::kBF16));
  const auto f = run_quantize(x, 4, 32, Axis::kRows, spec_of(QuantFormat::kFP32));
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(b.dequant[i] == bf16_bits_to_float(float_to_bf16_bits(x[i])));
    CHECK(f.dequant[i] == x[i]);
  }
  CHECK(f.telemetry.relative_error() == 0.0);
  CHECK(b.telemetry.relative_error() > 0.0);
  CHECK(b.telemetry.relative_error() < 0.004);  // 8 significant bits
}

TEST_CASE("quantizing along columns equals quantizing the transpose along rows") {
  const int64_t rows = 64, cols = 96;
  const auto x = activation_like(rows, cols, 5);
  std::vector<float> xt(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4, QuantFormat::kFP8E4M3}) {
    QuantSpec spec = spec_of(f);
    spec.hadamard = HadamardMode::kFixedRandom;
    spec.hadamard_size = 32;
    const auto by_cols = run_quantize(x, rows, cols, Axis::kCols, spec);
    const auto by_rows_t = run_quantize(xt, cols, rows, Axis::kRows, spec);
    // Packed data of a column-wise quantization is stored line-major: the transposed operand.
    CHECK(by_cols.packed == by_rows_t.packed);
    CHECK(by_cols.scales == by_rows_t.scales);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        CHECK(by_cols.dequant[r * cols + c] == by_rows_t.dequant[c * rows + r]);
  }
}

TEST_CASE("every output element is written, and blocks run along the requested axis") {
  const auto x = activation_like(32, 64, 6);
  const auto rows = run_quantize(x, 32, 64, Axis::kRows, spec_of(QuantFormat::kMXFP4));
  const auto cols = run_quantize(x, 32, 64, Axis::kCols, spec_of(QuantFormat::kMXFP4));
  for (float v : rows.dequant) CHECK(v != -12345.0f);
  CHECK(rows.scales.size() == 64);
  CHECK(cols.scales.size() == 64);
  CHECK_FALSE(same_bits(rows.dequant, cols.dequant));
  // Row-wise scale of row 0, block 0 comes from x[0][0..31].
  float amax = 0;
  for (int c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(x[c]));
  CHECK(rows.scales[0] == e8m0_scale_code(amax, false, ScaleRule::kFloor, kE2M1Emax));
  // Column-wise scale of column 0, block 0 comes from x[0..31][0].
  amax = 0;
  for (int r = 0; r < 32; ++r) amax = std::max(amax, std::fabs(x[r * 64]));
  CHECK(cols.scales[0] == e8m0_scale_code(amax, false, ScaleRule::kFloor, kE2M1Emax));
}

TEST_CASE("impossible requests are refused with a message naming the problem") {
  const std::vector<float> x(48 * 40, 1.0f);
  QuantOutputs out;
  std::vector<float> d(x.size());
  out.dequant = d.data();
  auto message_of = [&](int64_t rows, int64_t cols, Axis axis, QuantSpec spec) {
    try {
      quantize(x.data(), rows, cols, axis, spec, {}, out);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message_of(48, 40, Axis::kRows, spec_of(QuantFormat::kMXFP4)) ==
        "the number of columns (40) is not a multiple of the mxfp4 block size 32");
  CHECK(message_of(40, 48, Axis::kCols, spec_of(QuantFormat::kNVFP4)) ==
        "the number of rows (40) is not a multiple of the nvfp4 block size 16");
  QuantSpec h = spec_of(QuantFormat::kBF16);
  h.hadamard = HadamardMode::kDeterministic;
  h.hadamard_size = 8;
  CHECK(message_of(48, 40, Axis::kRows, h) == "Hadamard size 8 is not one of 16, 32, 64, 128");
  h.hadamard_size = 32;
  CHECK(message_of(48, 40, Axis::kRows, h) ==
        "the number of columns (40) is not a multiple of the Hadamard size 32");
  uint8_t byte = 0;
  out.packed = &byte;
  CHECK(message_of(48, 40, Axis::kRows, spec_of(QuantFormat::kBF16)) == "bf16 has no packed codes");
}
