// Scale computation and scaled element rounding for MXFP4, NVFP4 and per-tensor FP8.
// Host/device: the CPU reference and the GPU kernels call exactly these functions.
#pragma once

#include "mxablate/kernels/minifloat.h"

// Full unrolling of the per-element loops over a block in device code: the GPU holds a block in
// registers, and a loop indexing it at run time would move it to local memory.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MXABLATE_BLOCK_UNROLL _Pragma("unroll")
#else
#define MXABLATE_BLOCK_UNROLL
#endif

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

// E4M3 block scale mapping the block's largest magnitude to `block_max_target` on the E2M1 grid:
// E4M3((amax_b / target) / g), clamped to 448. Today's rule targets 6.
MX_HD uint8_t nvfp4_block_scale_code_mapping(float block_amax, bool block_has_nonfinite, float global,
                                             float block_max_target) {
  if (block_has_nonfinite || global != global) return kE4M3NaNCode;
  float t = (block_amax / block_max_target) / global;
  if (t > kE4M3.max_finite) t = kE4M3.max_finite;
  return static_cast<uint8_t>(encode_magnitude(t, kE4M3, -1.0f));
}

MX_HD uint8_t nvfp4_block_scale_code(float block_amax, bool block_has_nonfinite, float global) {
  return nvfp4_block_scale_code_mapping(block_amax, block_has_nonfinite, global, 6.0f);
}

MX_HD float nvfp4_block_scale(uint8_t code) { return decode_code(code, kE4M3); }

MX_HD float nvfp4_dequant(uint32_t code, uint8_t scale_code, float global) {
  return (decode_code(code, kE2M1) * nvfp4_block_scale(scale_code)) * global;
}

// ---- Scales chosen by squared error (ScaleRule::kMse, docs/design.md §3) ---------------------
//
// Both rules compare two candidate scales of one block by the sum of squared errors of its
// round-to-nearest quantization (also when the elements are then rounded stochastically: the
// choice must not depend on the random draws). `values` are the n (finite) values the block's
// elements are rounded from, `amax` their largest magnitude. The comparison is computed the
// same way on every target, so CPU and GPU choose the same scale.

// The E2M1 value nearest to a >= 0 (ties to even), saturating at 6: what round_to_code keeps.
MX_HD float e2m1_nearest_magnitude(float a) {
  return decode_magnitude(encode_magnitude(a > kE2M1.max_finite ? kE2M1.max_finite : a, kE2M1, -1.0f), kE2M1);
}

// MXFP4 under kMse: sum over the n values of err(e0)^2 - err(e0 + 1)^2, the squared errors of
// round-to-nearest with exponents e0 and e0 + 1, in units of 2^(2 e0 - 50). Exact:
// in the e0-scaled domain an element is y = |x| 2^-e0 < 8 (e0 = floor(log2 amax) - 2), candidate
// e0 rounds it to Q(y) and candidate e0 + 1 to 2 Q(y / 2). Elements with y < 1/4 round to 0
// under both, so their errors are equal and drop out. For y >= 1/4 (a normal float, so y and
// y / 2 are exact), y is a multiple of 2^-25 and so are both errors, which are exact float
// differences (each at most y in magnitude) below 2 and 1: as integers in units of 2^-25 they
// are below 2^26, their squares below 2^52, and the sum of n <= 1024 differences of squares
// fits int64 exactly. Being exact, partial sums over parts of a block (a 2-D tile split across
// threads, say) add up to the same total in any order.
MX_HD long long mx_mse_error_difference(const float* values, int n, int e0) {
  const float inverse = pow2f(-e0);
  constexpr float kUnits = 33554432.0f;  // 2^25
  long long lo_minus_hi = 0;
MXABLATE_BLOCK_UNROLL
  for (int i = 0; i < n; ++i) {
    const float y = fabsf(values[i]) * inverse;
    if (!(y >= 0.25f)) continue;
    const float err_lo = y - e2m1_nearest_magnitude(y);
    const float err_hi = y - 2.0f * e2m1_nearest_magnitude(y * 0.5f);
    const long long a = static_cast<long long>(err_lo * kUnits);
    const long long b = static_cast<long long>(err_hi * kUnits);
    lo_minus_hi += a * a - b * b;
  }
  return lo_minus_hi;
}

// MXFP4: the E8M0 code of the exponent among e0 = floor(log2 amax) - 2 and e0 + 1 with the
// smaller squared error (mx_mse_error_difference); ties go to e0. A candidate outside
// [-127, 127] is not one (e0 < -127 leaves the clamp's -127, e0 = 127 leaves 127); all-zero
// blocks get code 0 and non-finite ones the NaN code, as under the other rules.
MX_HD uint8_t mx_mse_scale_code(const float* values, int n, float amax, bool block_has_nonfinite) {
  if (block_has_nonfinite) return kE8M0NaN;
  if (amax == 0.0f) return 0;
  const int e0 = floor_log2(amax) - kE2M1Emax;
  if (e0 < kScaleExpMin) return static_cast<uint8_t>(kScaleExpMin + kE8M0Bias);
  if (e0 >= kScaleExpMax) return static_cast<uint8_t>(kScaleExpMax + kE8M0Bias);  // e0 + 1 is out
  const bool upper = mx_mse_error_difference(values, n, e0) > 0;
  return static_cast<uint8_t>((upper ? e0 + 1 : e0) + kE8M0Bias);
}

// The E8M0 code of an MXFP4 block under `rule`.
MX_HD uint8_t mx_block_scale_code(const float* values, int n, float amax, bool block_has_nonfinite,
                                  ScaleRule rule) {
  if (rule == ScaleRule::kMse) return mx_mse_scale_code(values, n, amax, block_has_nonfinite);
  return e8m0_scale_code(amax, block_has_nonfinite, rule, kE2M1Emax);
}

// Sum of squared errors of an NVFP4 block quantized (round-to-nearest) with block scale `code`,
// element by element as the quantizers compute the dequantized value. In float64, in index
// order and without fused multiply-add, so the sum is the same on every target; it is not exact.
MX_HD double nvfp4_block_sq_error(const float* values, int n, uint8_t code, float global) {
  const float divisor = nvfp4_block_scale(code) * global;
  double sum = 0.0;
MXABLATE_BLOCK_UNROLL
  for (int i = 0; i < n; ++i) {
    const float x = values[i];
    float v = 0.0f;  // a zero divisor flushes the block
    if (divisor != 0.0f) v = nvfp4_dequant(round_to_code(x / divisor, kE2M1, -1.0f).code, code, global);
    const double d = static_cast<double>(v) - static_cast<double>(x);
    sum += d * d;
  }
  return sum;
}

// NVFP4 "four over six" (arXiv 2512.02010): the block scale mapping the block maximum to 6
// (today's rule) or to 4, whichever gives the smaller squared error; ties go to 6.
MX_HD uint8_t nvfp4_four_over_six_scale_code(const float* values, int n, float block_amax,
                                             bool block_has_nonfinite, float global) {
  const uint8_t six = nvfp4_block_scale_code(block_amax, block_has_nonfinite, global);
  if (six == kE4M3NaNCode) return six;
  const uint8_t four = nvfp4_block_scale_code_mapping(block_amax, false, global, 4.0f);
  if (four == six) return six;
  return nvfp4_block_sq_error(values, n, four, global) < nvfp4_block_sq_error(values, n, six, global) ? four : six;
}

// The E4M3 block scale code of an NVFP4 block: four over six under kMse, otherwise today's rule
// (the E8M0 rules do not apply to NVFP4).
MX_HD uint8_t nvfp4_block_scale_code_for(const float* values, int n, float block_amax,
                                         bool block_has_nonfinite, float global, ScaleRule rule) {
  if (rule == ScaleRule::kMse)
    return nvfp4_four_over_six_scale_code(values, n, block_amax, block_has_nonfinite, global);
  return nvfp4_block_scale_code(block_amax, block_has_nonfinite, global);
}

// ---- FP8 with per-tensor current scaling ----------------------------------------------------

// Decode scale d = amax / max_finite: codes hold x / d, values are code * d.
MX_HD float fp8_tensor_scale(float tensor_amax, MinifloatFormat f) {
  if (!is_finite_bits(tensor_amax)) return quiet_nan();
  if (tensor_amax == 0.0f) return 1.0f;
  const float d = tensor_amax / f.max_finite;
  return d == 0.0f ? pow2f(-149) : d;
}

// ---- FP8 with per-tensor delayed scaling (docs/design.md §3) ----------------------------------

// An amax as a delayed-scaling history holds it: the bits of the tensor's largest finite |x|
// (non-negative floats order like their bits, so an int32 maximum is the float maximum: exact, in
// any order, on any device and in any collective), or kNonfiniteAmax for a tensor that held a NaN
// or an infinity (above every finite amax, so a window that holds it is non-finite too).
// kNoAmax, below every recorded value, marks what no step has written.
inline constexpr int32_t kNoAmax = -1;
inline constexpr int32_t kNonfiniteAmax = 0x7FC00000;
// The largest margin: amax / max_finite * 2^8 stays finite for every finite amax (FLT_MAX / 448
// * 256 < FLT_MAX), so a margin never turns a decode scale into infinity.
inline constexpr int kMaxFp8Margin = 8;

MX_HD int32_t fp8_amax_record(float finite_amax, bool nonfinite) {
  return nonfinite ? kNonfiniteAmax : static_cast<int32_t>(float_bits(finite_amax) & 0x7FFFFFFFu);
}

// The decode scale of a tensor under delayed scaling: d = fp8_tensor_scale(a) * 2^margin, with a
// the window's largest recorded amax, or the tensor's own amax while the window is empty
// (kNoAmax: the first step scales as current scaling does). A non-finite tensor gets NaN, as
// under current scaling, whatever the window says: its NaN must reach the loss; so does a
// non-finite window's (a finite tensor under it gets NaN too: nothing repairs it). Values beyond
// max_finite * d saturate (the codes' rounding clamps them). 2^margin is exact.
MX_HD float fp8_delayed_scale(int32_t window, float finite_amax, bool nonfinite, int margin, MinifloatFormat f) {
  // The canonical NaN, spelled out: arithmetic on a NaN keeps its payload on a CPU but not on a
  // GPU, and the scale's bits must agree.
  if (nonfinite || window >= static_cast<int32_t>(0x7F800000u)) return quiet_nan();
  const float a = window < 0 ? finite_amax : bits_float(static_cast<uint32_t>(window));
  return fp8_tensor_scale(a, f) * pow2f(margin);
}

}  // namespace mxablate::kernels
