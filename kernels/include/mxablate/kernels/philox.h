// Counter-based random bits for stochastic rounding and random Hadamard signs.
//
// Philox-4x32-10 (Salmon et al., SC'11) is a pure function of (counter, key), so every element's
// random number depends only on *which* element it is and *which* quantization it belongs to,
// never on thread layout or call order. That is what lets the CPU reference and the GPU kernels
// agree bit for bit with stochastic rounding switched on.
#pragma once

#include "mxablate/kernels/gemm_kind.h"
#include "mxablate/kernels/portability.h"

namespace mxablate::kernels {

struct PhiloxBlock {
  uint32_t v[4];
};

MX_HD PhiloxBlock philox4x32_10(PhiloxBlock ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = PhiloxBlock{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// Identifies one quantization event: the random stream is a function of these and nothing else.
struct RngKey {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t layer = 0;
  GemmKind gemm = GemmKind::kFprop;
  Operand operand = Operand::kA;
  // Where a GPU kernel launched inside a captured CUDA graph reads `step` at each replay: the
  // device address of the current step, or null to use `step` (docs/design.md §4, "Graphed
  // steps"). The trainer keeps both equal; only the GPU kernels read this, the CPU reference
  // and every launch outside a graph use `step`.
  const uint32_t* step_source = nullptr;
};

// The `operand` byte reserved for the Hadamard sign stream, so that both operands of a GEMM
// draw the same signs (the rotation must cancel) while SR streams stay per operand.
inline constexpr uint32_t kHadamardStream = 0xFF;
// The `step` word used by fixed-random Hadamard: one diagonal for the whole run.
inline constexpr uint32_t kFixedStep = 0xFFFFFFFFu;

MX_HD uint32_t stream_word(uint32_t layer, GemmKind gemm, uint32_t operand_byte) {
  return ((layer & 0xFFFFFu) << 12) | ((static_cast<uint32_t>(gemm) & 0xFu) << 8) |
         (operand_byte & 0xFFu);
}

// Uniform number in [0, 1) from 24 random bits: exactly representable in float32, so the
// comparison `u < frac` in stochastic rounding is the same on every device. (The probability of
// rounding up is therefore ceil(frac * 2^24) / 2^24: a bias below 2^-24 of one grid gap.)
MX_HD float uniform24(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// The stochastic-rounding uniform for element `index` (its row-major logical index in the
// tensor being quantized).
MX_HD float sr_uniform(const RngKey& key, uint64_t index) {
  const uint64_t group = index >> 2;
  const PhiloxBlock out = philox4x32_10(
      PhiloxBlock{{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), key.step,
                   stream_word(key.layer, key.gemm, static_cast<uint32_t>(key.operand))}},
      static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
  return uniform24(out.v[index & 3]);
}

}  // namespace mxablate::kernels
