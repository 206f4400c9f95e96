// Blockwise Hadamard rotation: y = H_n (d ⊙ x) on each n-element chunk along the quantization
// axis, H_n the normalized Sylvester matrix and d a ±1 diagonal (all ones when deterministic).
//
// Applied to both operands of a GEMM along its reduction dimension, the rotation cancels in
// exact arithmetic: (X D H)(W D H)^T = X Wᵀ, because H is orthonormal and symmetric and D² = I.
// That is why the sign stream is keyed without the operand (see philox.h).
//
// The butterfly order below is part of the numerics contract: the GPU kernels perform the same
// additions in the same pairing (stage h = 1, 2, 4, …; a+b to the lower index, a-b to the upper),
// then one multiplication by the normalization constant, so results match bit for bit.
#pragma once

#include "mxablate/kernels/philox.h"
#include "mxablate/kernels/portability.h"

namespace mxablate::kernels {

enum class HadamardMode : uint8_t { kNone = 0, kDeterministic = 1, kFixedRandom = 2, kPerStepRandom = 3 };

inline constexpr int kMinHadamardSize = 16;
inline constexpr int kMaxHadamardSize = 128;

MX_HD bool is_valid_hadamard_size(int n) { return n == 16 || n == 32 || n == 64 || n == 128; }

// 1/sqrt(n) rounded once to float (exact for 16 and 64).
MX_HD float hadamard_norm(int n) {
  switch (n) {
    case 16: return 0.25f;
    case 32: return 0.17677669529663688f;
    case 64: return 0.125f;
    case 128: return 0.088388347648318441f;
  }
  return 0.0f;
}

// Sign bits for the diagonal d: bit i set means d_i = -1. At most 128 bits (one Philox block).
struct HadamardSigns {
  uint32_t words[4];
  MX_HD bool negative(int i) const { return (words[i >> 5] >> (i & 31)) & 1u; }
};

MX_HD HadamardSigns hadamard_signs(HadamardMode mode, const RngKey& key) {
  if (mode != HadamardMode::kFixedRandom && mode != HadamardMode::kPerStepRandom)
    return HadamardSigns{{0, 0, 0, 0}};
  const uint32_t step = mode == HadamardMode::kFixedRandom ? kFixedStep : key.step;
  const PhiloxBlock out = philox4x32_10(
      PhiloxBlock{{0, 0, step, stream_word(key.layer, key.gemm, kHadamardStream)}},
      static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
  return HadamardSigns{{out.v[0], out.v[1], out.v[2], out.v[3]}};
}

// In-place rotation of one n-element chunk (n a valid Hadamard size).
MX_HD void hadamard_rotate_chunk(float* x, int n, const HadamardSigns& signs) {
  for (int i = 0; i < n; ++i)
    if (signs.negative(i)) x[i] = -x[i];
  for (int h = 1; h < n; h <<= 1) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float norm = hadamard_norm(n);
  for (int i = 0; i < n; ++i) x[i] = x[i] * norm;
}

}  // namespace mxablate::kernels
