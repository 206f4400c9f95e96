// Hadamard rotation: orthonormal, cancels inside a dot product, signs keyed as docs/design.md §3 says.
#include <cmath>
#include <random>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/hadamard.h"
#include "mxablate/kernels/quantize.h"
#include "quant_test_util.h"

using namespace mxablate::kernels;

TEST_CASE("H * H^T = I to rounding, for every size and sign pattern") {
  for (int n : {16, 32, 64, 128}) {
    for (HadamardMode mode : {HadamardMode::kDeterministic, HadamardMode::kFixedRandom}) {
      const HadamardSigns signs = hadamard_signs(mode, RngKey{77, 0, 1, GemmKind::kWgrad, {}});
      // Column i of the rotation is the image of the unit vector e_i.
      std::vector<std::vector<float>> cols(n, std::vector<float>(n, 0.0f));
      for (int i = 0; i < n; ++i) {
        cols[i][i] = 1.0f;
        hadamard_rotate_chunk(cols[i].data(), n, signs);
      }
      double worst = 0;
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int k = 0; k < n; ++k) dot += static_cast<double>(cols[i][k]) * cols[j][k];
          worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
        }
      }
      INFO("n = " << n);
      CHECK(worst < 1e-6);
    }
  }
}

TEST_CASE("H16 entries are exactly +-1/4 (Sylvester construction)") {
  std::vector<float> e(16, 0.0f);
  e[5] = 1.0f;
  hadamard_rotate_chunk(e.data(), 16, HadamardSigns{{0, 0, 0, 0}});
  for (int k = 0; k < 16; ++k) {
    // Sylvester: H[k][5] = (-1)^popcount(k & 5) / 4.
    const float expected = (__builtin_popcount(k & 5) % 2 ? -0.25f : 0.25f);
    CHECK(e[k] == expected);
  }
}

TEST_CASE("rotating both operands of a dot product preserves it") {
  std::mt19937 gen(4);
  std::normal_distribution<float> normal;
  for (HadamardMode mode : {HadamardMode::kDeterministic, HadamardMode::kFixedRandom,
                            HadamardMode::kPerStepRandom}) {
    const HadamardSigns signs = hadamard_signs(mode, RngKey{1, 9, 0, GemmKind::kFprop, {}});
    std::vector<float> a(128), b(128);
    for (auto& v : a) v = normal(gen);
    for (auto& v : b) v = normal(gen);
    double before = 0;
    for (int i = 0; i < 128; ++i) before += static_cast<double>(a[i]) * b[i];
    for (int c = 0; c < 128; c += 32) {
      hadamard_rotate_chunk(a.data() + c, 32, signs);
      hadamard_rotate_chunk(b.data() + c, 32, signs);
    }
    double after = 0;
    for (int i = 0; i < 128; ++i) after += static_cast<double>(a[i]) * b[i];
    CHECK(after == Approx(before).epsilon(1e-5).margin(1e-5));
  }
}

TEST_CASE("sign streams: deterministic has none, fixed-random is per run, per-step-random per step") {
  const RngKey step1{123, 1, 4, GemmKind::kWgrad, Operand::kA};
  RngKey step2 = step1;
  step2.step = 2;
  RngKey other_operand = step1;
  other_operand.operand = Operand::kB;
  RngKey other_layer = step1;
  other_layer.layer = 5;

  const auto none = hadamard_signs(HadamardMode::kDeterministic, step1);
  for (uint32_t w : none.words) CHECK(w == 0u);

  const auto fixed1 = hadamard_signs(HadamardMode::kFixedRandom, step1);
  const auto fixed2 = hadamard_signs(HadamardMode::kFixedRandom, step2);
  for (int i = 0; i < 4; ++i) CHECK(fixed1.words[i] == fixed2.words[i]);

  const auto per1 = hadamard_signs(HadamardMode::kPerStepRandom, step1);
  const auto per2 = hadamard_signs(HadamardMode::kPerStepRandom, step2);
  bool differs = false;
  for (int i = 0; i < 4; ++i) differs |= per1.words[i] != per2.words[i];
  CHECK(differs);

  // Both operands of a GEMM must draw the same signs, or the rotation would not cancel.
  const auto per_b = hadamard_signs(HadamardMode::kPerStepRandom, other_operand);
  for (int i = 0; i < 4; ++i) CHECK(per1.words[i] == per_b.words[i]);
  const auto layer5 = hadamard_signs(HadamardMode::kFixedRandom, other_layer);
  bool layer_differs = false;
  for (int i = 0; i < 4; ++i) layer_differs |= layer5.words[i] != fixed1.words[i];
  CHECK(layer_differs);

  int negatives = 0;  // a fair coin per sign: about half of 128
  for (int i = 0; i < 128; ++i) negatives += per1.negative(i);
  CHECK(negatives > 40);
  CHECK(negatives < 88);
}

TEST_CASE("quantize() rotates each chunk along the quantization axis before rounding") {
  // With the identity format, the output is exactly the rotated input.
  const auto x = mxablate::test::activation_like(32, 64, 8);
  QuantSpec spec;
  spec.format = QuantFormat::kFP32;
  spec.hadamard = HadamardMode::kFixedRandom;
  spec.hadamard_size = 32;
  const RngKey key{3, 0, 0, GemmKind::kWgrad, {}};
  const auto q = mxablate::test::run_quantize(x, 32, 64, Axis::kCols, spec, key);
  const HadamardSigns signs = hadamard_signs(spec.hadamard, key);
  for (int col = 0; col < 64; ++col) {
    std::vector<float> line(32);
    for (int r = 0; r < 32; ++r) line[r] = x[r * 64 + col];
    hadamard_rotate_chunk(line.data(), 32, signs);
    for (int r = 0; r < 32; ++r) CHECK(q.dequant[r * 64 + col] == line[r]);
  }
}
