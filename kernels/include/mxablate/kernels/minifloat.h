// Minifloat element formats (E2M1, E4M3, E5M2) and the E8M0 scale: exact encode/decode.
//
// Everything here is integer and power-of-two arithmetic on IEEE float32, so the host compiler,
// nvcc and hipcc produce the same bits. Two rules keep it that way: no operation whose result
// depends on fused multiply-add (we only add, subtract, and multiply or divide by powers of two),
// and no reliance on denormal flushing (kernels are built without -ftz / fast-math).
#pragma once

#include "mxablate/kernels/portability.h"

namespace mxablate::kernels {

// One OCP minifloat element format. `code` values are the magnitude bits; the sign is the bit
// just above them (bit exp_bits + man_bits). Functions take it by value: nvcc cannot bind a
// reference to a namespace-scope constexpr object (kE2M1 …) in device code, but copies it.
struct MinifloatFormat {
  int exp_bits;
  int man_bits;
  int bias;
  float max_finite;
  uint8_t nan_code;  // magnitude code used for NaN; 0 when the format has no NaN (E2M1)
  bool has_inf;      // E5M2 only: IEEE-style infinities and NaNs in the top binade
};

inline constexpr MinifloatFormat kE2M1{2, 1, 1, 6.0f, 0, false};
inline constexpr MinifloatFormat kE4M3{4, 3, 7, 448.0f, 0x7F, false};
inline constexpr MinifloatFormat kE5M2{5, 2, 15, 57344.0f, 0x7F, true};

MX_HD int sign_shift(MinifloatFormat f) { return f.exp_bits + f.man_bits; }

// 2^e as a float, exact for e in [-149, 127] (subnormal powers included).
MX_HD float pow2f(int e) {
  return e >= -126 ? bits_float(static_cast<uint32_t>(e + 127) << 23)
                   : bits_float(1u << (e + 149));
}

MX_HD bool is_finite_bits(float x) { return (float_bits(x) & 0x7F800000u) != 0x7F800000u; }

// Integer significand of a positive finite float and the position of its leading one, so that
// x = sig * 2^(exponent_of_lsb) with sig's top bit at `lead`. Works for subnormals.
struct Significand {
  uint32_t sig;
  int lead;
  int floor_log2;
};

MX_HD Significand significand_of(float x) {
  const uint32_t b = float_bits(x) & 0x7FFFFFFFu;
  const uint32_t exp_field = b >> 23;
  if (exp_field != 0) return {(b & 0x7FFFFFu) | 0x800000u, 23, static_cast<int>(exp_field) - 127};
  const int lead = 31 - count_leading_zeros32(b);
  return {b, lead, lead - 149};
}

// floor(log2(x)) for positive finite x, exact (subnormals included).
MX_HD int floor_log2(float x) { return significand_of(x).floor_log2; }

// Rounds a non-negative finite magnitude onto the format's grid and returns its magnitude code.
// The caller has already clamped `a` to max_finite, so the result never overflows.
// `stochastic_u` < 0 selects round-to-nearest-even; otherwise it is a uniform number in [0, 1)
// and the magnitude rounds up with probability (a - lower) / gap.
MX_HD uint32_t encode_magnitude(float a, MinifloatFormat f, float stochastic_u) {
  if (a == 0.0f) return 0;
  const int emin = 1 - f.bias;
  int ex = floor_log2(a);
  if (ex < emin) ex = emin;
  const int quantum_exp = ex - f.man_bits;
  // Exact: scaling by a power of two; the result is at most 2^(man_bits+1), far from underflow.
  const float units = a * pow2f(-quantum_exp);
  float r;
  if (stochastic_u < 0.0f) {
    r = rintf(units);  // current rounding mode: nearest-even on every target we build for
  } else {
    const float lower = floorf(units);
    const float frac = units - lower;  // exact (Sterbenz, or lower == 0)
    r = lower + (stochastic_u < frac ? 1.0f : 0.0f);
  }
  // code = ((ex - emin) << man_bits) + r covers normals, subnormals and the carry into the next
  // binade when r reaches 2^(man_bits+1).
  return (static_cast<uint32_t>(ex - emin) << f.man_bits) + static_cast<uint32_t>(r);
}

// Magnitude of a magnitude code (no NaN/Inf handling; see decode_code).
MX_HD float decode_magnitude(uint32_t code, MinifloatFormat f) {
  const uint32_t man_mask = (1u << f.man_bits) - 1u;
  const int e_field = static_cast<int>(code >> f.man_bits);
  const uint32_t m = code & man_mask;
  const int emin = 1 - f.bias;
  if (e_field == 0) return static_cast<float>(m) * pow2f(emin - f.man_bits);
  return static_cast<float>((1u << f.man_bits) + m) * pow2f(e_field - f.bias - f.man_bits);
}

// Full decode of a signed code, with the format's NaN/Inf codes.
MX_HD float decode_code(uint32_t code, MinifloatFormat f) {
  const uint32_t mag_mask = (1u << sign_shift(f)) - 1u;
  const uint32_t mag = code & mag_mask;
  const bool negative = (code >> sign_shift(f)) & 1u;
  const uint32_t exp_all_ones = ((1u << f.exp_bits) - 1u) << f.man_bits;
  float v;
  if (f.has_inf && (mag & exp_all_ones) == exp_all_ones) {
    // IEEE-style specials (E5M2): all-ones exponent is infinity or NaN.
    v = bits_float(mag == exp_all_ones ? 0x7F800000u : 0x7FC00000u);
  } else if (f.nan_code != 0 && mag == f.nan_code) {  // E4M3 (FN): only S.1111.111 is NaN
    v = bits_float(0x7FC00000u);
  } else {
    v = decode_magnitude(mag, f);
  }
  return negative ? -v : v;
}

// Result of rounding one (already scaled) element.
struct ElementRounding {
  uint32_t code;   // signed code
  bool saturated;  // |x| exceeded max_finite and was clamped
};

// Rounds a finite scaled value to a signed code, saturating at ±max_finite.
MX_HD ElementRounding round_to_code(float x, MinifloatFormat f, float stochastic_u) {
  const uint32_t sign = float_bits(x) >> 31;
  float a = fabsf(x);
  const bool saturated = a > f.max_finite;
  if (saturated) a = f.max_finite;
  const uint32_t mag = encode_magnitude(a, f, stochastic_u);
  return {(sign << sign_shift(f)) | mag, saturated};
}

// ---- E8M0 shared scales ---------------------------------------------------------------------

inline constexpr uint8_t kE8M0NaN = 0xFF;
inline constexpr int kE8M0Bias = 127;
inline constexpr int kScaleExpMin = -127;
inline constexpr int kScaleExpMax = 127;

// kMse picks, per block, the better of two candidate scales by squared error (docs/design.md §3):
// for MXFP4 the exponents floor(log2 amax) - 2 and - 1, for NVFP4 "four over six" (the block
// maximum mapped to 4 or to 6). It is not a closed-form exponent, so shared_exponent_unclamped
// does not take it: the quantizers choose between candidates themselves.
enum class ScaleRule : uint8_t { kFloor = 0, kCeil = 1, kEven = 2, kMse = 3 };

// Shared exponent for a block with finite amax under one of the three rules (docs/design.md §3), before
// the clamp. `elem_emax` is floor(log2(max_finite)) of the element format (2 for E2M1).
MX_HD int shared_exponent_unclamped(float amax, ScaleRule rule, int elem_emax) {
  const Significand s = significand_of(amax);
  switch (rule) {
    case ScaleRule::kFloor:
      return s.floor_log2 - elem_emax;
    case ScaleRule::kCeil: {
      // Smallest e with amax <= 6 * 2^e: amax/2^k in [1, 2); it fits 1.5 * 2^(k) iff the
      // significand is at most 1.5 (checked on integers, exact for subnormals too).
      const bool above = 2ull * s.sig > (3ull << s.lead);
      return s.floor_log2 - elem_emax + (above ? 1 : 0);
    }
    case ScaleRule::kEven: {
      // Round amax to one mantissa bit (nearest, ties to even) and take floor(log2) of that.
      if (s.lead < 2) return s.floor_log2 - elem_emax;  // at most two significant bits: exact
      const uint32_t kept = s.sig >> (s.lead - 1);      // 2 or 3
      const uint32_t rem = s.sig & ((1u << (s.lead - 1)) - 1u);
      const uint32_t half = 1u << (s.lead - 2);
      const bool up = rem > half || (rem == half && (kept & 1u));
      const bool carries = up && kept == 3u;
      return s.floor_log2 - elem_emax + (carries ? 1 : 0);
    }
    case ScaleRule::kMse:  // the first candidate; the quantizer compares it with the next one
      return s.floor_log2 - elem_emax;
  }
  return 0;
}

// E8M0 code for a block: NaN if the block held a non-finite value, the smallest scale for an
// all-zero block, otherwise the rule's exponent clamped to [-127, 127].
MX_HD uint8_t e8m0_scale_code(float amax, bool block_has_nonfinite, ScaleRule rule, int elem_emax) {
  if (block_has_nonfinite) return kE8M0NaN;
  if (amax == 0.0f) return 0;
  int e = shared_exponent_unclamped(amax, rule, elem_emax);
  if (e < kScaleExpMin) e = kScaleExpMin;
  if (e > kScaleExpMax) e = kScaleExpMax;
  return static_cast<uint8_t>(e + kE8M0Bias);
}

// ---- BF16 ---------------------------------------------------------------------------------

// float32 -> bf16 bits, round-to-nearest-even; NaN stays a quiet NaN.
MX_HD uint16_t float_to_bf16_bits(float x) {
  const uint32_t b = float_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding_bias) >> 16);
}

MX_HD float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline constexpr float kBF16MaxFinite = 3.38953139e38f;  // 0x7F7F

}  // namespace mxablate::kernels
