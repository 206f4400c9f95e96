// Torch-free inputs for the GPU kernel tests: Gaussian values with outlier columns, plus every
// special the quantizers must handle (all-zero blocks, NaN, Inf, huge values, subnormals).
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mxablate/kernels/quantize.h"

namespace mxablate::test {

enum class Specials { kNone, kFiniteOnly, kAll };

inline std::vector<float> test_matrix(int64_t rows, int64_t cols, uint32_t seed, Specials specials) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[static_cast<size_t>(r * cols + c)] = normal(gen) * (c % 37 == 3 ? 300.0f : 1.0f);
  if (specials == Specials::kNone) return x;
  auto at = [&](int64_t r, int64_t c) -> float& { return x[static_cast<size_t>(r * cols + c)]; };
  for (int64_t c = 0; c < std::min<int64_t>(cols, 32); ++c) at(0, c) = 0.0f;  // a zero row-block
  for (int64_t r = 0; r < std::min<int64_t>(rows, 32); ++r) at(r, cols - 1) = 0.0f;  // a zero column-block
  at(rows - 1, cols - 2) = 3.0e38f;
  at(rows / 2, 0) = 1.0e-42f;
  at(rows / 2, 1) = -std::numeric_limits<float>::denorm_min();
  at(rows / 3, cols / 3) = 1.0e-39f;  // a block whose largest value is subnormal needs the row
  for (int64_t c = cols / 2; c < std::min<int64_t>(cols, cols / 2 + 8); ++c) at(rows / 4, c) *= 1e-30f;
  if (specials == Specials::kAll) {
    at(1, cols / 2) = std::numeric_limits<float>::quiet_NaN();
    at(rows - 1, 0) = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// bf16 (round to nearest even) of each value, as bits, and the same values as float32.
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = kernels::float_to_bf16_bits(x[i]);
  return out;
}
inline std::vector<float> bf16_values(const std::vector<uint16_t>& b) {
  std::vector<float> out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = kernels::bf16_bits_to_float(b[i]);
  return out;
}

// The specs the bit-exactness tests sweep: every MXFP4 rule x rounding x Hadamard mode and size,
// and for the other formats both roundings with a representative set of rotations; and 2-D
// blocks (shapes whose dimensions are not multiples of the tile are skipped by check_shape).
inline std::vector<kernels::QuantSpec> specs_to_sweep() {
  using namespace kernels;
  std::vector<QuantSpec> specs;
  const std::vector<std::pair<HadamardMode, int>> all_rotations = [] {
    std::vector<std::pair<HadamardMode, int>> r{{HadamardMode::kNone, 16}};
    for (HadamardMode m : {HadamardMode::kDeterministic, HadamardMode::kFixedRandom, HadamardMode::kPerStepRandom})
      for (int n : {16, 32, 64, 128}) r.push_back({m, n});
    return r;
  }();
  const std::vector<std::pair<HadamardMode, int>> some_rotations{
      {HadamardMode::kNone, 16}, {HadamardMode::kDeterministic, 16},
      {HadamardMode::kFixedRandom, 64}, {HadamardMode::kPerStepRandom, 128}};
  for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven})
    for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic})
      for (auto [mode, n] : all_rotations) specs.push_back({QuantFormat::kMXFP4, rule, rounding, mode, n});
  // 2-D blocks (docs/design.md §3; never rotated): each rule and rounding; FP8 ignores the shape.
  for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kCeil, ScaleRule::kEven})
    for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic})
      specs.push_back({QuantFormat::kMXFP4, rule, rounding, HadamardMode::kNone, 16, BlockShape::k2D});
  for (QuantFormat f : {QuantFormat::kNVFP4, QuantFormat::kFP8E4M3})
    for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic})
      specs.push_back({f, ScaleRule::kFloor, rounding, HadamardMode::kNone, 16, BlockShape::k2D});
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4})  // with the SR pre-scale
    specs.push_back({f, ScaleRule::kFloor, Rounding::kStochastic, HadamardMode::kNone, 16, BlockShape::k2D, 0.75f});
  for (QuantFormat f : {QuantFormat::kNVFP4, QuantFormat::kFP8E4M3, QuantFormat::kFP8E5M2,
                        QuantFormat::kBF16, QuantFormat::kFP32})
    for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic})
      for (auto [mode, n] : some_rotations) specs.push_back({f, ScaleRule::kFloor, rounding, mode, n});
  // Scale rule mse (MXFP4's two exponents, NVFP4's four over six), and the SR pre-scale on every
  // format (docs/design.md §3).
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4})
    for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic})
      for (auto [mode, n] : some_rotations) specs.push_back({f, ScaleRule::kMse, rounding, mode, n});
  for (QuantFormat f : {QuantFormat::kMXFP4, QuantFormat::kNVFP4, QuantFormat::kFP8E4M3, QuantFormat::kFP8E5M2,
                        QuantFormat::kBF16, QuantFormat::kFP32})
    for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kMse}) {
      if (rule == ScaleRule::kMse && !(f == QuantFormat::kMXFP4 || f == QuantFormat::kNVFP4)) continue;
      for (auto [mode, n] : {some_rotations[0], some_rotations[3]}) {
        QuantSpec s{f, rule, Rounding::kStochastic, mode, n};
        s.sr_prescale = 0.75f;
        specs.push_back(s);
      }
    }
  return specs;
}

}  // namespace mxablate::test
