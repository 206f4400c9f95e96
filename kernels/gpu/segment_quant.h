// The per-thread work of the fused quantizer, as host/device functions.
//
// A GPU thread owns a *segment*: 32 consecutive elements of one line (a row, or a column) of the
// input. Four consecutive threads own the four segments of a 128-element chunk of the line, and
// exchange values only at the points named below (Hadamard stages longer than 32, the FP8 chunk
// scale). Everything else — signs, butterflies, block scales, rounding, codes, telemetry — is in
// this file, written once for the GPU kernel and for the host simulation in tests/gpu, and
// built from the same scalar functions as the CPU reference (minifloat.h, block_scaling.h,
// hadamard.h, philox.h). quantize_cpu.cpp is the specification: block_params and round_element
// below restate its logic line for line.
#pragma once

#include <cfloat>

#if defined(__CUDACC__) && !defined(__HIPCC__)
#include <cuda_fp8.h>  // __nv_cvt_float_to_fp8 (E4M3 conversion in hardware from sm_89)
#endif

#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/gpu/mx_to_fp8.h"
#include "mxablate/kernels/hadamard.h"
#include "mxablate/kernels/philox.h"
#include "mxablate/kernels/quant_spec.h"

// Loop-unrolling hints for the device passes only (host compilers warn about the pragma).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MXABLATE_UNROLL _Pragma("unroll")
#define MXABLATE_NO_UNROLL _Pragma("unroll 1")
#else
#define MXABLATE_UNROLL
#define MXABLATE_NO_UNROLL
#endif

namespace mxablate::kernels::gpu::detail {

inline constexpr int kSegment = 32;
inline constexpr int kSegmentsPerChunk = 4;  // 128 / 32: the threads that exchange values

// ---- Hadamard ---------------------------------------------------------------------------------

// The 32 sign bits for the segment at `part` (0..3) of its 128-chunk: bit j negates element j.
MX_HD uint32_t segment_sign_word(const HadamardSigns& signs, int n, int part) {
  if (n == 16) {
    const uint32_t lo = signs.words[0] & 0xFFFFu;  // two 16-chunks per segment, same signs
    return lo | (lo << 16);
  }
  const int w = ((part * kSegment) & (n - 1)) >> 5;
  return w == 0 ? signs.words[0] : w == 1 ? signs.words[1] : w == 2 ? signs.words[2] : signs.words[3];
}

// One butterfly stage inside a segment: pairs (j, j + H) within blocks of 2H. H is a template
// parameter so that every index is a compile-time constant and v[] stays in registers.
template <int H>
MX_HD void butterfly_stage(float (&v)[kSegment]) {
MXABLATE_UNROLL
  for (int i = 0; i < kSegment; i += 2 * H) {
MXABLATE_UNROLL
    for (int j = i; j < i + H; ++j) {
      const float a = v[j], b = v[j + H];
      v[j] = a + b;
      v[j + H] = a - b;
    }
  }
}

// Signs, then the butterfly stages h = 1 … min(n, 32)/2, in hadamard_rotate_chunk's order.
// A segment without negative signs (every deterministic rotation) skips the negations: compiled,
// they are a bit test and a select per element (two of the column pass's ~20 instructions per
// element), and negating nothing changes no bit.
MX_HD void rotate_within_segment(float (&v)[kSegment], int n, uint32_t sign_word) {
  if (sign_word != 0) {
MXABLATE_UNROLL
    for (int j = 0; j < kSegment; ++j)
      if ((sign_word >> j) & 1u) v[j] = -v[j];
  }
  butterfly_stage<1>(v);
  butterfly_stage<2>(v);
  butterfly_stage<4>(v);
  butterfly_stage<8>(v);
  if (n > 16) butterfly_stage<16>(v);
}

// Stage h = 32 * partner_distance across segments: the lower segment keeps a + b, the upper a - b.
MX_HD float cross_butterfly(float own, float partner, bool upper) {
  return upper ? partner - own : own + partner;
}

// Number of cross-segment stages for size n: 0 for 16/32, 1 for 64, 2 for 128.
MX_HD int cross_stages(int n) { return n == 128 ? 2 : n == 64 ? 1 : 0; }

MX_HD void normalize(float (&v)[kSegment], int n) {
  const float norm = hadamard_norm(n);
MXABLATE_UNROLL
  for (int j = 0; j < kSegment; ++j) v[j] = v[j] * norm;
}

// ---- Per-tensor statistics ----------------------------------------------------------------

struct Amax {
  float amax;
  bool nonfinite;
};

// Largest |value| bits among the first `count` of n values: non-negative floats order like their
// bit patterns, and a NaN or Inf is any pattern from 0x7F800000 up, so one integer max per
// element gives both the amax of a finite block and whether the block holds a non-finite value.
MX_HD uint32_t max_abs_bits(const float* v, int n, int count) {
  uint32_t m = 0;
MXABLATE_UNROLL
  for (int j = 0; j < n; ++j) {
    const uint32_t b = float_bits(v[j]) & 0x7FFFFFFFu;
    if (j < count) m = b > m ? b : m;
  }
  return m;
}

MX_HD Amax amax_of_bits(uint32_t max_bits) {
  const bool nonfinite = max_bits >= 0x7F800000u;
  return {nonfinite ? 0.0f : bits_float(max_bits), nonfinite};
}

MX_HD Amax segment_amax(const float (&v)[kSegment], int count) {
  return amax_of_bits(max_abs_bits(v, kSegment, count));
}

// amax_of_bits(max_abs_bits(v, n, n)): the Amax of a whole block. On CUDA (sm_80 and later) a
// NaN-propagating float maximum of |v| takes one instruction per element where the integer form
// takes two (mask, then max), and gives the same Amax: for finite values the largest |v| (float
// order is the bits' order, subnormals included: nothing flushes them); with an Inf and no NaN,
// Inf; with a NaN, a NaN; non-finite either way, and then amax_of_bits sets amax to 0 as it does
// for the bits. Only the NaN's payload may differ, and Amax does not keep it. Four running maxima
// (elements j mod 4), then theirs: a chain of n / 4 + 2 dependent instructions instead of n, with
// the same n instructions and three more registers (a full tree needs n / 2 more, and made the
// quantize kernels spill). The maximum does not depend on the order it is taken in.
MX_HD Amax block_amax(const float* v, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP_DEVICE_COMPILE__)
  float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
MXABLATE_UNROLL
  for (int j = 0; j < n; ++j) asm("max.NaN.f32 %0, %1, %2;" : "=f"(m[j & 3]) : "f"(m[j & 3]), "f"(fabsf(v[j])));
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m[0]) : "f"(m[0]), "f"(m[1]));
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m[2]) : "f"(m[2]), "f"(m[3]));
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m[0]) : "f"(m[0]), "f"(m[2]));
  return amax_of_bits(float_bits(m[0]) & 0x7FFFFFFFu);
#else
  return amax_of_bits(max_abs_bits(v, n, n));
#endif
}

MX_HD constexpr bool is_per_tensor(QuantFormat f) {
  return f == QuantFormat::kNVFP4 || f == QuantFormat::kFP8E4M3 || f == QuantFormat::kFP8E5M2;
}

MX_HD constexpr MinifloatFormat element_format_of(QuantFormat f) {
  return f == QuantFormat::kFP8E4M3 ? kE4M3 : f == QuantFormat::kFP8E5M2 ? kE5M2 : kE2M1;
}

MX_HD constexpr int block_size_of(QuantFormat f) {
  return f == QuantFormat::kMXFP4 ? kMXBlockSize : f == QuantFormat::kNVFP4 ? kNVBlockSize : 0;
}

// The per-tensor scale from the tensor's amax (NaN when it held a NaN/Inf), as the CPU reference
// computes it; 1 for formats without one.
template <QuantFormat F>
MX_HD float tensor_global(float amax, bool nonfinite) {
  const float a = nonfinite ? quiet_nan() : amax;
  if constexpr (F == QuantFormat::kNVFP4) return nvfp4_global_scale(a);
  if constexpr (F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2)
    return fp8_tensor_scale(a, element_format_of(F));
  return 1.0f;
}

// ---- Block scales and element rounding (quantize_cpu.cpp's BlockParams / round_element) -------

struct BlockParams {
  uint8_t scale_code = 0;
  bool nonfinite = false;
  float inverse = 1.0f;
  float divisor = 1.0f;
  float scale = 1.0f;  // decoded scale: 2^e (MXFP4) or the E4M3 block scale (NVFP4)
  // MXFP4, for mx_rne_scaled (meaningful when mx_rne_scaled_applies(scale_code)): 6 * 2^e, and
  // the bits of 2^(e + 22), the smallest rounding constant.
  float max_scaled = 0.0f;
  uint32_t constant_floor = 0;
};

// The parameters a block's scale code gives, however the code was chosen (below).
template <QuantFormat F>
MX_HD BlockParams params_of_scale_code(uint8_t code, float global) {
  BlockParams p;
  p.scale_code = code;
  if constexpr (F == QuantFormat::kMXFP4) {
    p.nonfinite = code == kE8M0NaN;
    if (!p.nonfinite) {
      p.inverse = mx_inverse_scale(code);
      p.scale = pow2f(static_cast<int>(code) - kE8M0Bias);
      // 6 * 2^e = 1.5 * 2^(e + 2) and 2^(e + 22), as bits (exponent field code + 2, code + 22);
      // garbage outside mx_rne_scaled's range, where nothing reads them.
      p.max_scaled = bits_float(((static_cast<uint32_t>(code) + 2u) << 23) | 0x00400000u);
      p.constant_floor = (static_cast<uint32_t>(code) + 22u) << 23;
    }
  } else if constexpr (F == QuantFormat::kNVFP4) {
    p.nonfinite = code == kE4M3NaNCode;
    if (!p.nonfinite) {
      p.scale = nvfp4_block_scale(code);
      p.divisor = p.scale * global;
    }
  }
  return p;
}

// e8m0_scale_code(a.amax, a.nonfinite, kFloor, kE2M1Emax), from amax's exponent field E alone:
// for a normal amax e = floor(log2 amax) - 2 = E - 129, which the clamp at -127 raises to code 0
// for E <= 2 and which never exceeds 125 (E <= 254); a subnormal or zero amax (E = 0) gets code 0
// too. So the code is max(E - 2, 0): a subtraction and a maximum where the general function
// branches over significands and rules (tests/gpu/segment_rounding_test.cpp compares the two for
// every exponent field and every bf16 amax).
MX_HD uint8_t mx_floor_scale_code(const Amax& a) {
  const int field = static_cast<int>(float_bits(a.amax) >> 23);  // amax >= 0: no sign bit
  return a.nonfinite ? kE8M0NaN : static_cast<uint8_t>(field > 2 ? field - 2 : 0);
}

// The E8M0 code of a block with amax `a` under `rule`, for the rules that read only the amax
// (every rule but kMse, which also reads the values): e8m0_scale_code, the floor rule the short way.
MX_HD uint8_t mx_amax_scale_code(const Amax& a, ScaleRule rule) {
  return rule == ScaleRule::kFloor ? mx_floor_scale_code(a) : e8m0_scale_code(a.amax, a.nonfinite, rule, kE2M1Emax);
}

template <QuantFormat F>
MX_HD BlockParams block_params(float global, const float* values, int n, ScaleRule rule) {
  const Amax a = block_amax(values, n);
  // kMse reads the values (mx_block_scale_code); the other rules only the amax.
  if constexpr (F == QuantFormat::kMXFP4)
    return params_of_scale_code<F>(rule == ScaleRule::kMse ? mx_block_scale_code(values, n, a.amax, a.nonfinite, rule)
                                                           : mx_amax_scale_code(a, rule),
                                   global);
  return params_of_scale_code<F>(
      nvfp4_block_scale_code_for(values, n, a.amax, a.nonfinite, global, rule), global);
}

// The block parameters from a given amax (a 2-D tile's, docs/design.md §3), as block_params
// computes them from a block's own values. `max_bits`: max_abs_bits over the tile (NaN/Inf
// included, so it also says whether the tile holds one).
template <QuantFormat F>
MX_HD BlockParams block_params_of_amax_bits(float global, uint32_t max_bits, ScaleRule rule) {
  const Amax a = amax_of_bits(max_bits);
  if constexpr (F == QuantFormat::kMXFP4)
    return params_of_scale_code<F>(mx_amax_scale_code(a, rule), global);
  if constexpr (F == QuantFormat::kNVFP4)
    return params_of_scale_code<F>(nvfp4_block_scale_code(a.amax, a.nonfinite, global), global);
  return BlockParams{};
}

// 2-D blocks: max_abs_bits of each block of the segment that lies inside the tensor
// (a segment of `count` elements holds count / block of them): what the tile pass reduces per
// tile. Blocks past `count` get 0, which no max changes.
template <QuantFormat F>
MX_HD void segment_block_max_bits(const float (&v)[kSegment], int count, uint32_t (&bits)[2]) {
  constexpr int kBlock = block_size_of(F);
  bits[0] = bits[1] = 0;
  if constexpr (kBlock != 0) {
MXABLATE_UNROLL
    for (int b = 0; b < kSegment / kBlock; ++b)
      if (b * kBlock < count) bits[b] = max_abs_bits(v + b * kBlock, kBlock, kBlock);
  }
}

// The FP8 formats' single "block": the whole tensor.
template <QuantFormat F>
MX_HD BlockParams tensor_block_params(float global) {
  BlockParams p;
  if constexpr (F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2) {
    p.nonfinite = global != global;
    p.divisor = global;
  }
  return p;
}

// ---- E2M1 round-to-nearest-even, the short way --------------------------------------------
//
// encode_magnitude followed by decode_magnitude, specialized to E2M1: the rounded magnitude is
// the E2M1 value itself, so the dequantized value needs no decode, and the code is only
// computed where codes are written. Bit-exactness with the generic path is checked by the
// kernel model test over every rounding case.

// `a` in [0, 6] (already saturated). Adding C = 1.5 * 2^22 * step, where step is the grid step
// at a (0.5 below 2; 2^(floor(log2 a) - 1) above), leaves a + C with exactly that step as its
// last bit, so the hardware's round-to-nearest-even rounds a onto the grid; subtracting C is
// exact. C comes from a's exponent, floored at that of 1.0 (below 1 the step stays 0.5).
MX_HD float e2m1_rne_magnitude(float a) {
  const uint32_t b = float_bits(a);
  const uint32_t e = (b > 0x3F800000u ? b : 0x3F800000u) & 0x7F800000u;
  const float c = bits_float((e + (22u << 23)) | 0x00400000u);
  return (a + c) - c;
}

// Stochastic rounding of `a` in [0, 6] onto the E2M1 grid with uniform `u` in [0, 1):
// encode_magnitude's "lower + (u < frac)", with the fraction compared after scaling both sides
// by the grid step (a power of two, so exactly): u * gap < a - lower.
MX_HD float e2m1_sr_magnitude(float a, float u) {
  if (a < 1.0f) {
    const float units = a * 2.0f;
    const float lower = floorf(units);
    return (lower + (u < units - lower ? 1.0f : 0.0f)) * 0.5f;
  }
  const uint32_t b = float_bits(a);
  const float lower = bits_float(b & ~0x3FFFFFu);                    // one mantissa bit kept
  const float gap = bits_float((b & 0x7F800000u) - 0x00800000u);     // 2^(floor(log2 a) - 1)
  return u * gap < a - lower ? lower + gap : lower;
}

// Magnitude code of an E2M1 magnitude (0, 0.5, 1, 1.5, 2, 3, 4 or 6).
MX_HD uint32_t e2m1_code_of(float m) {
  if (m < 1.0f) return static_cast<uint32_t>(m * 2.0f);
  const uint32_t b = float_bits(m);
  return (((b >> 23) - 126u) << 1) | ((b >> 22) & 1u);
}

// ---- MXFP4 round-to-nearest-even in the input's own scale --------------------------------
//
// round_element's MXFP4 round-to-nearest maps x to y = x * 2^-e, rounds min(|y|, 6) onto the
// E2M1 grid (e2m1_rne_magnitude) and multiplies back by 2^e: two multiplications per element.
// For e in [-125, 103] (E8M0 codes 2 to 230: every block that is not all zero, unless its amax is
// below 2^-123 or above 2^105) rounding |x| onto the grid scaled by 2^e gives the same bits
// without either multiplication (docs/design.md §3, "Element rounding": only how it is computed
// changes):
// - y = x * 2^-e is exact unless y is subnormal, and then |x| < 2^(e - 126) rounds to zero both
//   ways, with x's sign (which y keeps, zero or not);
// - otherwise min(|x|, 6 * 2^e) = min(|y|, 6) * 2^e exactly (6 * 2^e is finite for e <= 125), and
//   the saturation test |x| > 6 * 2^e is |y| > 6;
// - adding C = 2^(22 + e + E), E = floor(log2 max(|y|, 1)) in {0, 1, 2}, rounds a = min(|x|, 6 * 2^e)
//   to a multiple of ulp(C) = 2^(e + E - 1), the grid step at |y| scaled by 2^e, to nearest and
//   ties to even (C's significand is even, and a + C < 2C); subtracting C is exact. (1.0 in place
//   of e2m1_rne_magnitude's 1.5 significand: a >= 0 never leaves C's binade.) C <= 2^(24 + e) is
//   finite for e <= 103; its exponent is that of max(a, 2^e) plus 22, taken on the bits (a
//   subnormal a stays below 2^e's bits);
// - a nonzero result, at least 2^(e - 1), is normal for e >= -125, as is m * 2^e: the same value.
// tests/gpu/segment_rounding_test.cpp compares it with round_element's general path over every
// bf16 input and every such scale, and over every float32 of the binades that round.
inline constexpr uint8_t kMxScaledMinCode = 2;    // e = -125
inline constexpr uint8_t kMxScaledMaxCode = 230;  // e = 103

MX_HD bool mx_rne_scaled_applies(uint8_t scale_code) {
  return scale_code >= kMxScaledMinCode && scale_code <= kMxScaledMaxCode;
}

// The dequantized value of finite x (before any range clamp, which it never needs), given the
// block's max_scaled and constant_floor.
MX_HD float mx_rne_scaled(float x, float max_scaled, uint32_t constant_floor) {
  const float a = fminf(fabsf(x), max_scaled);
  const uint32_t shifted = float_bits(a) + (22u << 23);  // 2^22 * a, to the exponent
  const float c = bits_float((shifted > constant_floor ? shifted : constant_floor) & 0x7F800000u);
  const float m = (a + c) - c;
  return bits_float(float_bits(m) | (float_bits(x) & 0x80000000u));
}

struct ElementResult {
  uint32_t code = 0;
  float value = 0.0f;  // dequantized, before the float32/bf16 range clamp
  bool saturated = false;
};

// One element. kStochastic is the rounding mode, known at compile time so that each kernel
// variant contains one rounding path only; `u` is used when it is set.
// kFast: the caller has checked that the block (tensor, for FP8) holds no NaN/Inf, so the
// per-element test is compiled out, and, for MXFP4 under round-to-nearest, that the block's scale
// code passes mx_rne_scaled_applies, so the element is rounded in its own scale.
template <QuantFormat F, bool kStochastic, bool kFast = false>
MX_HD ElementResult round_element(float global, const BlockParams& block, float x, float u) {
  ElementResult r;
  if constexpr (F == QuantFormat::kFP32) {
    r.value = x == x ? x : quiet_nan();  // canonical NaN, as the reference
  } else if constexpr (F == QuantFormat::kBF16) {
    r.value = x == x ? bf16_bits_to_float(float_to_bf16_bits(x)) : quiet_nan();
  } else if constexpr (F == QuantFormat::kMXFP4) {
    if (!kFast && block.nonfinite) {
      r.value = quiet_nan();
      return r;
    }
    if constexpr (kFast && !kStochastic) {
      r.value = mx_rne_scaled(x, block.max_scaled, block.constant_floor);
      r.saturated = fabsf(x) > block.max_scaled;
      // Codes (only computed where they are written): the E2M1 magnitude is |value| * 2^-e, exact.
      r.code = ((float_bits(x) & 0x80000000u) >> 28) | e2m1_code_of(fabsf(r.value) * block.inverse);
      return r;
    }
    const float y = x * block.inverse;
    const uint32_t sign = float_bits(y) & 0x80000000u;
    const float a = fabsf(y);
    constexpr float kMax = kE2M1.max_finite;
    r.saturated = a > kMax;
    const float clamped = fminf(a, kMax);  // a is finite here: = (a > 6 ? 6 : a)
    const float m = kStochastic ? e2m1_sr_magnitude(clamped, u) : e2m1_rne_magnitude(clamped);
    r.code = (sign >> 28) | e2m1_code_of(m);
    r.value = bits_float(float_bits(m) | sign) * block.scale;  // = mx_dequant(code, scale_code)
  } else if constexpr (F == QuantFormat::kNVFP4) {
    if (!kFast && block.nonfinite) {
      r.value = quiet_nan();
      return r;
    }
    if (block.divisor == 0.0f) {  // block scale rounded to zero: the whole block flushes
      r.code = (float_bits(x) >> 31) << 3;
      r.value = nvfp4_dequant(r.code, block.scale_code, global);
      return r;
    }
    const float y = x / block.divisor;
    const uint32_t sign = float_bits(y) & 0x80000000u;
    const float a = fabsf(y);
    constexpr float kMax = kE2M1.max_finite;
    r.saturated = a > kMax;
    const float clamped = r.saturated ? kMax : a;
    const float m = kStochastic ? e2m1_sr_magnitude(clamped, u) : e2m1_rne_magnitude(clamped);
    r.code = (sign >> 28) | e2m1_code_of(m);
    r.value = (bits_float(float_bits(m) | sign) * block.scale) * global;  // = nvfp4_dequant(…)
  } else {  // FP8 E4M3 / E5M2, per-tensor scale
    constexpr MinifloatFormat f = element_format_of(F);
    if (!kFast && block.nonfinite) {
      r.code = f.nan_code;
      r.value = quiet_nan();
      return r;
    }
    const ElementRounding e = round_to_code(x / block.divisor, f, kStochastic ? u : -1.0f);
    r.code = e.code;
    r.saturated = e.saturated;
    r.value = decode_code(e.code, f) * block.divisor;
  }
  return r;
}

// ---- Output conversions ---------------------------------------------------------------

// The float32 output: values beyond float32 range clamped (clamp_to_finite), as the reference.
MX_HD float dequant_f32(float v) { return clamp_to_finite(v, FLT_MAX).value; }

// The bf16 output bits, as float_to_bf16_bits(clamp_to_finite(v, bf16 max)). An MXFP4 value
// (two significant bits times a power of two from 2^-127 up) is exactly a bf16 value, or an
// infinity when it overflows float32, or the canonical NaN: its bf16 is its top half, the
// clamp only touching infinities.
template <QuantFormat F>
MX_HD uint16_t dequant_bf16_bits(float v) {
  if constexpr (F == QuantFormat::kMXFP4) {
    const uint32_t b = float_bits(v);
    return (b & 0x7FFFFFFFu) == 0x7F800000u ? static_cast<uint16_t>((b >> 16) - 1u)  // ±inf -> ±max
                                             : static_cast<uint16_t>(b >> 16);
  }
  return float_to_bf16_bits(clamp_to_finite(v, kBF16MaxFinite).value);
}

// ---- Stochastic-rounding numbers ----------------------------------------------------------

// The four uniforms of Philox group `group` (elements 4*group … 4*group+3), the numbers
// sr_uniform(key, 4*group + k) returns, from one Philox evaluation instead of four.
MX_HD void sr_uniforms4(const RngKey& key, uint64_t group, float (&u)[4]) {
  const PhiloxBlock out = philox4x32_10(
      PhiloxBlock{{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), key.step,
                   stream_word(key.layer, key.gemm, static_cast<uint32_t>(key.operand))}},
      static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
MXABLATE_UNROLL
  for (int k = 0; k < 4; ++k) u[k] = uniform24(out.v[k]);
}

// sr_uniform(key, index), with the word picked by selects rather than a run-time array index
// (which would send the Philox block through local memory on the GPU).
MX_HD float sr_uniform_at(const RngKey& key, uint64_t index) {
  float u[4];
  sr_uniforms4(key, index >> 2, u);
  const uint64_t k = index & 3;
  return k == 0 ? u[0] : k == 1 ? u[1] : k == 2 ? u[2] : u[3];
}

// ---- Telemetry ----------------------------------------------------------------------------

struct ThreadTelemetry {
  unsigned long long elements = 0, nonzero_inputs = 0, saturated = 0, flushed = 0;
  unsigned long long nonfinite_blocks = 0, dequant_clamped = 0;
  double sum_sq_error = 0, sum_sq_input = 0, sum_error = 0;

  // One element, as the CPU reference's inner loop counts it.
  MX_HD void add(const ElementResult& r, bool block_nonfinite, float input, bool bf16_written) {
    const Dequantized f32 = clamp_to_finite(r.value, FLT_MAX);
    const Dequantized b16 = clamp_to_finite(r.value, kBF16MaxFinite);
    ++elements;
    saturated += r.saturated ? 1 : 0;
    dequant_clamped += (f32.clamped || (bf16_written && b16.clamped)) ? 1 : 0;
    if (block_nonfinite || !is_finite_bits(input)) return;
    if (input != 0.0f) {
      ++nonzero_inputs;
      flushed += f32.value == 0.0f ? 1 : 0;
    }
    const double err = static_cast<double>(f32.value) - static_cast<double>(input);
    sum_sq_error += err * err;
    sum_sq_input += static_cast<double>(input) * static_cast<double>(input);
    sum_error += err;
  }
};

// ---- One segment ------------------------------------------------------------------------

// Where a segment's elements sit in the logical (row-major) tensor: element j has index
// first_index + j * index_stride (stride 1 along a row, cols down a column).
struct SegmentContext {
  QuantSpec spec;
  RngKey key;
  float global = 1.0f;     // per-tensor scale (NVFP4, FP8)
  int64_t first_index = 0;
  int64_t index_stride = 1;
  bool bf16_written = false;  // telemetry counts bf16 clamps only when bf16 is an output
  int count = kSegment;       // elements of the segment inside the tensor (the rest are padding)
  // 2-D blocks (docs/design.md §3): the scales come from the amax of the square tiles holding
  // the segment's blocks (max_abs_bits over each tile, one per block of the segment), computed
  // by a pass over the whole tile first, not from the segment's own values.
  bool tile_amax = false;
  uint32_t tile_max_bits[2] = {0, 0};
};

struct SegmentResult {
  // Codes: FP4 nibbles (element 2i low, 2i+1 high) in words 0..3; FP8 bytes in words 0..7,
  // element j in byte j (little-endian), i.e. the packed layout of quantize.h.
  uint32_t code_words[8];
  uint8_t scale_codes[2];  // MXFP4: [0]; NVFP4: the segment's two 16-blocks
  // MXFP4 only: no value overflowed float32 (E8M0 code <= 252, or a NaN block), so each
  // dequantized value's bf16 is exactly its top 16 bits (dequant_bf16_bits without the clamp).
  bool bf16_is_top_half = false;
};

// Quantizes the (rotated) segment `v` in place: on return v[j] holds the dequantized value of
// element j before the float32/bf16 range clamp. Telemetry is accumulated when kTelemetry.
// kCodes: fill out.code_words (packed or FP8 outputs); without it the compiler drops the code
// arithmetic altogether.
// The stochastic-rounding numbers of a segment, four at a time: uniforms(ctx, g, u) fills u with
// those of elements 4g … 4g+3. This one evaluates Philox per group of four along a row, per
// element otherwise; the GPU's column pass can share evaluations between threads instead.
struct DirectUniforms {
  MX_HD void operator()(const SegmentContext& ctx, int g, float (&u)[4]) const {
    // Along a row the indices are consecutive and start at a multiple of 4 (cols % 32 == 0).
    if (ctx.index_stride == 1 && (ctx.first_index & 3) == 0) {
      sr_uniforms4(ctx.key, static_cast<uint64_t>(ctx.first_index >> 2) + g, u);
      return;
    }
MXABLATE_UNROLL
    for (int k = 0; k < 4; ++k)
      u[k] = sr_uniform_at(ctx.key, static_cast<uint64_t>(ctx.first_index + (4 * g + k) * ctx.index_stride));
  }
};

// A vote that needs no partner: for callers that run one thread per segment.
struct NoVote {
  MX_HD bool operator()(bool b) const { return b; }
};

// The element loop of quantize_segment.
template <QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes, bool kFast, typename Uniforms>
MX_HD void round_elements(float (&v)[kSegment], const SegmentContext& ctx, const BlockParams (&params)[2],
                          SegmentResult& out, ThreadTelemetry& tel, const Uniforms& uniforms) {
  constexpr int kBlock = block_size_of(F);
  constexpr bool kFp4 = F == QuantFormat::kMXFP4 || F == QuantFormat::kNVFP4;
  // The SR pre-scale (quantize_cpu.cpp): scales came from v, the elements rounded are p * v.
  const float prescale = kStochastic ? effective_sr_prescale(ctx.spec) : 1.0f;
  // Groups of four elements: the unit of stochastic-rounding numbers, and small enough for the
  // fully unrolled loop to stay unrolled (a rolled loop would move v[] to local memory).
MXABLATE_UNROLL
  for (int g = 0; g < kSegment / 4; ++g) {
    float u[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
    if constexpr (kStochastic) uniforms(ctx, g, u);
MXABLATE_UNROLL
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * g + k;
      const float x = kStochastic ? v[j] * prescale : v[j];
      const BlockParams& p = params[kBlock == kNVBlockSize ? (j >> 4) : 0];
      const ElementResult r = round_element<F, kStochastic, kFast>(ctx.global, p, x, u[k]);
      if constexpr (kCodes && kFp4) {
        out.code_words[j >> 3] |= (r.code & 0xFu) << ((j & 7) * 4);
      } else if constexpr (kCodes) {
        out.code_words[j >> 2] |= (r.code & 0xFFu) << ((j & 3) * 8);
      }
      if constexpr (kTelemetry) {
        if (j < ctx.count) tel.add(r, p.nonfinite, x, ctx.bf16_written);
      }
      v[j] = r.value;
    }
  }
}

// `vote(b)` must return b ANDed over every thread that shares uniform-source shuffles with this
// one (the warp on the GPU), called by all of them.
template <QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes = true,
          typename Uniforms = DirectUniforms, typename Vote = NoVote>
MX_HD void quantize_segment(float (&v)[kSegment], const SegmentContext& ctx, SegmentResult& out,
                            ThreadTelemetry& tel, const Uniforms& uniforms = Uniforms{},
                            const Vote& vote = Vote{}) {
  constexpr int kBlock = block_size_of(F);
MXABLATE_UNROLL
  for (int w = 0; w < 8; ++w) out.code_words[w] = 0;
  out.scale_codes[0] = out.scale_codes[1] = 0;

  BlockParams params[2];
  if constexpr (kBlock != 0) {
MXABLATE_UNROLL
    for (int b = 0; b < kSegment / kBlock; ++b) {
      params[b] = ctx.tile_amax
                      ? block_params_of_amax_bits<F>(ctx.global, ctx.tile_max_bits[b], ctx.spec.scale_rule)
                      : block_params<F>(ctx.global, v + b * kBlock, kBlock, ctx.spec.scale_rule);
      out.scale_codes[b] = params[b].scale_code;
      if constexpr (F == QuantFormat::kMXFP4)
        out.bf16_is_top_half = params[b].scale_code <= 252 || params[b].scale_code == kE8M0NaN;
      if constexpr (kTelemetry) tel.nonfinite_blocks += params[b].nonfinite && b * kBlock < ctx.count ? 1 : 0;
    }
  } else {
    params[0] = tensor_block_params<F>(ctx.global);
  }

  // Blocks holding a NaN/Inf are rare: when the whole warp has none (`vote`, so that the warp
  // stays converged for the shuffles some uniform sources make), the element loop runs without
  // per-element tests. MXFP4 round-to-nearest also needs the warp's scales in mx_rne_scaled's
  // range for it (all-zero blocks and the extremes of the range take the general loop).
  bool fast = !params[0].nonfinite && !(kBlock == kNVBlockSize && params[1].nonfinite);
  if constexpr (F == QuantFormat::kMXFP4 && !kStochastic) fast = fast && mx_rne_scaled_applies(params[0].scale_code);
  fast = vote(fast);
  if (fast) {
    round_elements<F, kTelemetry, kStochastic, kCodes, true>(v, ctx, params, out, tel, uniforms);
  } else {
    round_elements<F, kTelemetry, kStochastic, kCodes, false>(v, ctx, params, out, tel, uniforms);
  }
}

// ---- E4M3 re-expression (mx_to_fp8.h), the short way ---------------------------------------

// The E2M1 magnitude of a magnitude code (e2m1_code_of's inverse).
MX_HD float e2m1_magnitude_of(uint32_t mag) {
  return mag < 2u ? static_cast<float>(mag) * 0.5f : bits_float(0x3F800000u + ((mag - 2u) << 22));
}

// E4M3 magnitude code of f in [0, 448], round to nearest even: the hardware conversion where
// there is one (sm_89 and later), encode_magnitude elsewhere; the GPU tests compare the two.
MX_HD uint32_t e4m3_rne_code(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
#else
  return encode_magnitude(f, kE4M3, -1.0f);
#endif
}

// E4M3 re-expression of an MXFP4 segment (code_words as quantize_segment leaves them) given the
// largest E8M0 code of its 128-chunk: e2m1_as_e4m3 element by element. An element k * 2^(d-1)
// (k = 1, 2, 3, 4, 6, 8, 12 for magnitude codes 1..7, d the shift) is an E4M3 value exactly when
// it is a multiple of 2^-9, i.e. d + 8 + trailing_zeros(k) >= 0 (above 2^-6 that always holds).
// Writes 32 E4M3 bytes into fp8_words; returns whether every element was exact.
MX_HD bool segment_as_e4m3(const uint32_t (&code_words)[8], uint8_t scale_code, uint8_t max_code,
                           uint32_t (&fp8_words)[8]) {
MXABLATE_UNROLL
  for (int w = 0; w < 8; ++w) fp8_words[w] = 0;
  if (max_code == kE8M0NaN) {
MXABLATE_UNROLL
    for (int w = 0; w < 8; ++w) fp8_words[w] = 0x7F7F7F7Fu;  // kE4M3NaN in every byte
    return true;
  }
  int shift = static_cast<int>(scale_code) - static_cast<int>(max_code) + kFp8ChunkHeadroom;
  if (shift < -30) shift = -30;  // as e2m1_as_e4m3: every magnitude is E4M3 zero down there
  const float step = pow2f(shift);
  constexpr uint32_t kTrailingZeros = (0u << 2) | (1u << 4) | (0u << 6) | (2u << 8) | (1u << 10) | (3u << 12) | (2u << 14);
  bool exact = true;
MXABLATE_UNROLL
  for (int j = 0; j < kSegment; ++j) {
    const uint32_t e2m1 = (code_words[j >> 3] >> ((j & 7) * 4)) & 0xFu;
    const uint32_t mag = e2m1 & 7u;
    const uint32_t code = ((e2m1 >> 3) << 7) | e4m3_rne_code(e2m1_magnitude_of(mag) * step);
    exact = exact && (mag == 0u || shift + 8 + static_cast<int>((kTrailingZeros >> (2 * mag)) & 3u) >= 0);
    fp8_words[j >> 2] |= code << ((j & 3) * 8);
  }
  return exact;
}

// ---- The whole per-thread pipeline --------------------------------------------------------

// The values the four threads of a chunk swap. `Exchange` supplies, for the calling thread,
// partner = the thread whose part is `part ^ mask`:
//   void xor_floats(const float (&own)[32], int mask, float (&partner)[32]);
//   uint32_t xor_u32(uint32_t own, int mask);
//   bool all(bool b);  // b ANDed over the threads that must stay converged
// The GPU kernel implements it with warp shuffles among groups of 4 lanes; the host simulation in
// tests/gpu with four threads and a barrier. Every thread of a chunk must make the same calls.

// Exchange's vote: `bool all(bool)` over the threads that must stay converged (the GPU's warp;
// the host model's four threads).
template <typename Exchange>
struct ExchangeVote {
  Exchange& ex;
  MX_HD bool operator()(bool b) const { return ex.all(b); }
};

// Rotates the segment at `part` of its chunk (spec.hadamard must not be kNone).
template <typename Exchange>
MX_HD void rotate_segment(float (&v)[kSegment], int part, const QuantSpec& spec, uint32_t sign_word,
                          Exchange& ex) {
  const int n = spec.hadamard_size;
  rotate_within_segment(v, n, sign_word);
  for (int stage = 0; stage < cross_stages(n); ++stage) {
    const int mask = 1 << stage;
    const bool upper = (part & mask) != 0;
    float partner[kSegment];
    ex.xor_floats(v, mask, partner);
MXABLATE_UNROLL
    for (int j = 0; j < kSegment; ++j) v[j] = cross_butterfly(v[j], partner[j], upper);
  }
  normalize(v, n);
}

struct Fp8Segment {
  uint32_t words[8] = {};  // 32 E4M3 codes, element j in byte j
  float scale = 1.0f;      // the chunk's scale (same in all four threads)
  bool chunk_exact = true;  // every element of the chunk was exact (same in all four threads)
};

// Rotation (if any), block scales, rounding, codes and, when `want_fp8` (MXFP4 only), the E4M3
// re-expression of the chunk into `fp8`. kStochastic must equal spec.rounding == kStochastic;
// kCodes must be set when res.code_words or fp8 are used. On return v holds the dequantized values before the range
// clamp; `res` the codes and scales.
template <QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes, typename Exchange,
          typename Uniforms = DirectUniforms>
MX_HD void process_segment(float (&v)[kSegment], int part, const SegmentContext& ctx,
                           uint32_t sign_word, Exchange& ex, SegmentResult& res,
                           ThreadTelemetry& tel, bool want_fp8, Fp8Segment& fp8,
                           const Uniforms& uniforms = Uniforms{}) {
  if (ctx.spec.hadamard != HadamardMode::kNone) rotate_segment(v, part, ctx.spec, sign_word, ex);
  quantize_segment<F, kTelemetry, kStochastic, kCodes>(v, ctx, res, tel, uniforms, ExchangeVote<Exchange>{ex});
  if constexpr (F == QuantFormat::kMXFP4 && kCodes) {
    if (want_fp8) {
      // The largest E8M0 code of the chunk; 0xFF (NaN) is the largest code, so a NaN block wins.
      uint32_t max_code = res.scale_codes[0];
      for (int mask = 1; mask < kSegmentsPerChunk; mask <<= 1) {
        const uint32_t other = ex.xor_u32(max_code, mask);
        max_code = other > max_code ? other : max_code;
      }
      const bool exact = segment_as_e4m3(res.code_words, res.scale_codes[0],
                                         static_cast<uint8_t>(max_code), fp8.words);
      uint32_t all_exact = exact ? 1u : 0u;
      for (int mask = 1; mask < kSegmentsPerChunk; mask <<= 1) all_exact &= ex.xor_u32(all_exact, mask);
      fp8.scale = fp8_chunk_scale(static_cast<uint8_t>(max_code));
      fp8.chunk_exact = all_exact != 0;
    }
  }
}

}  // namespace mxablate::kernels::gpu::detail
