// Packed codes + scales, dequantized, equal the fake-quant output bit for bit: for every format
// with codes, both axes, every Hadamard mode, both roundings, and inputs with NaN/Inf/zeros.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "catch.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;
using mxablate::test::activation_like;
using mxablate::test::run_quantize;

namespace {

std::vector<float> adversarial(int64_t rows, int64_t cols) {
  auto x = activation_like(rows, cols, 17);
  const float inf = std::numeric_limits<float>::infinity();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[static_cast<size_t>(3 * cols + 40)] = inf;
  x[static_cast<size_t>(7 * cols + 2)] = -inf;
  for (int64_t c = 64; c < 96 && c < cols; ++c) x[static_cast<size_t>(9 * cols + c)] = 0.0f;
  x[static_cast<size_t>(11 * cols + 1)] = 3.0e38f;
  x[static_cast<size_t>(12 * cols + 9)] = std::ldexp(1.0f, -140);
  return x;
}

}  // namespace

TEST_CASE("dequantize_packed reproduces the fake-quant output bit for bit") {
  const int64_t rows = 64, cols = 128;
  const auto clean = activation_like(rows, cols, 21);
  const auto dirty = adversarial(rows, cols);
  int cases = 0;
  for (const auto* x : {&clean, &dirty}) {
    for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4, QuantFormat::kFP8E4M3,
                          QuantFormat::kFP8E5M2}) {
      for (Axis axis : {Axis::kRows, Axis::kCols}) {
        for (HadamardMode h : {HadamardMode::kNone, HadamardMode::kDeterministic,
                               HadamardMode::kFixedRandom, HadamardMode::kPerStepRandom}) {
          for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic}) {
            for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven, ScaleRule::kMse}) {
              if (!(f == QuantFormat::kMXFP4 || (f == QuantFormat::kNVFP4 && rule == ScaleRule::kMse)) &&
                  rule != ScaleRule::kFloor)
                continue;
              QuantSpec spec;
              spec.format = f;
              spec.scale_rule = rule;
              spec.rounding = rounding;
              spec.hadamard = h;
              spec.hadamard_size = 64;
              spec.sr_prescale = 0.75f;  // codes hold Q(0.75 x) under SR; ignored otherwise
              const auto q = run_quantize(*x, rows, cols, axis, spec,
                                          RngKey{8, 3, 2, GemmKind::kWgrad, Operand::kB});
              std::vector<float> back(x->size());
              dequantize_packed(q.packed.data(), q.scales.empty() ? nullptr : q.scales.data(),
                                q.tensor_scale, rows, cols, axis, f, back.data());
              INFO(to_string(f) << " " << to_string(axis) << " " << to_string(h) << " "
                                << to_string(rounding) << " " << to_string(rule));
              CHECK(std::memcmp(back.data(), q.dequant.data(), back.size() * sizeof(float)) == 0);
              // The bf16 output is the float32 output rounded (exact for MXFP4).
              for (size_t i = 0; i < back.size(); ++i) {
                if (std::isnan(q.dequant[i])) {
                  CHECK(std::isnan(bf16_bits_to_float(q.dequant_bf16[i])));
                } else if (f == QuantFormat::kMXFP4 && std::fabs(q.dequant[i]) < FLT_MAX) {
                  // Exact except where both outputs clamp at their own largest finite value.
                  CHECK(bf16_bits_to_float(q.dequant_bf16[i]) == q.dequant[i]);
                }
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases == 2 * (4 + 2 + 1 + 1) * 2 * 4 * 2);
}

TEST_CASE("FP4 nibble order: element 2i in the low nibble, 2i+1 in the high nibble") {
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;   // code 0x7
  x[1] = -1.0f;  // code 0xA
  x[2] = 0.5f;   // code 0x1
  x[3] = -6.0f;  // code 0xF
  QuantSpec spec;
  const auto q = run_quantize(x, 1, 32, Axis::kRows, spec);
  CHECK(q.scales[0] == 127);
  CHECK(q.packed[0] == 0xA7);
  CHECK(q.packed[1] == 0xF1);
}
