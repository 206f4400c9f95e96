// Scale computation and scaled element rounding for MXFP4, NVFP4 and per-tensor FP8.
// Host/device: the CPU reference and the GPU kernels call exactly these functions.
#pragma once

#include "mxablate/kernels/minifloat.h"

namespace mxablate::kernels {

inline constexpr int kMXBlockSize = 32;
inline constexpr int kNVBlockSize = 16;
inline constexpr int kE2M1Emax = 2;  // floor(log2(6))

MX_HD float quiet_nan() { return bits_float(0x7FC00000u); }

// A dequantized value outside float32 range (possible only at the top of the E8M0 range, e.g.
// 4 * 2^126 under the `ceil` rule) is clamped to the largest finite float: a finite input must
// stay finite, and the clamp is counted in the telemetry.
struct Dequantized {
  float value;
  bool clamped;
};

MX_HD Dequantized clamp_to_finite(float v, float max_finite) {
  if (fabsf(v) > max_finite && v == v) return {v < 0 ? -max_finite : max_finite, true};
  return {v, false};
}

// ---- MXFP4 ----------------------------------------------------------------------------------

// Multiplier that maps a block's values onto the E2M1 range: 2^-e (exact power of two).
MX_HD float mx_inverse_scale(uint8_t scale_code) { return pow2f(kE8M0Bias - scale_code); }

MX_HD float mx_dequant(uint32_t code, uint8_t scale_code) {
  if (scale_code == kE8M0NaN) return quiet_nan();
  return decode_code(code, kE2M1) * pow2f(static_cast<int>(scale_code) - kE8M0Bias);
}

// ---- NVFP4 ----------------------------------------------------------------------------------

inline constexpr float kNVFP4GlobalDivisor = 2688.0f;  // 6 (E2M1 max) * 448 (E4M3 max)
inline constexpr uint8_t kE4M3NaNCode = 0x7F;

// Per-tensor FP32 decode scale g = amax / 2688, so block scales (amax_b / 6) / g land in E4M3's
// range. NaN when the tensor holds a non-finite value (propagates to every element).
MX_HD float nvfp4_global_scale(float tensor_amax) {
  if (!is_finite_bits(tensor_amax)) return quiet_nan();
  if (tensor_amax == 0.0f) return 1.0f;
  const float g = tensor_amax / kNVFP4GlobalDivisor;
  return g == 0.0f ? pow2f(-149) : g;
}

MX_HD uint8_t nvfp4_block_scale_code(float block_amax, bool block_has_nonfinite, float global) {
  if (block_has_nonfinite || global != global) return kE4M3NaNCode;
  float t = (block_amax / 6.0f) / global;
  if (t > kE4M3.max_finite) t = kE4M3.max_finite;
  return static_cast<uint8_t>(encode_magnitude(t, kE4M3, -1.0f));
}

MX_HD float nvfp4_block_scale(uint8_t code) { return decode_code(code, kE4M3); }

MX_HD float nvfp4_dequant(uint32_t code, uint8_t scale_code, float global) {
  return (decode_code(code, kE2M1) * nvfp4_block_scale(scale_code)) * global;
}

// ---- FP8 with per-tensor current scaling ----------------------------------------------------

// Decode scale d = amax / max_finite: codes hold x / d, values are code * d.
MX_HD float fp8_tensor_scale(float tensor_amax, MinifloatFormat f) {
  if (!is_finite_bits(tensor_amax)) return quiet_nan();
  if (tensor_amax == 0.0f) return 1.0f;
  const float d = tensor_amax / f.max_finite;
  return d == 0.0f ? pow2f(-149) : d;
}

}  // namespace mxablate::kernels
