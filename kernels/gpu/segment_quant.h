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
MX_HD void rotate_within_segment(float (&v)[kSegment], int n, uint32_t sign_word) {
MXABLATE_UNROLL
  for (int j = 0; j < kSegment; ++j)
    if ((sign_word >> j) & 1u) v[j] = -v[j];
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

MX_HD Amax segment_amax(const float (&v)[kSegment], int count) {
  Amax a{0.0f, false};
MXABLATE_UNROLL
  for (int j = 0; j < kSegment; ++j) {
    if (j >= count) continue;
    if (!is_finite_bits(v[j])) {
      a.nonfinite = true;
    } else {
      a.amax = fmaxf(a.amax, fabsf(v[j]));
    }
  }
  return a;
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
};

template <QuantFormat F>
MX_HD BlockParams block_params(float global, const float* values, int n, ScaleRule rule) {
  BlockParams p;
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (!is_finite_bits(values[i])) {
      p.nonfinite = true;
    } else {
      amax = fmaxf(amax, fabsf(values[i]));
    }
  }
  if constexpr (F == QuantFormat::kMXFP4) {
    p.scale_code = e8m0_scale_code(amax, p.nonfinite, rule, kE2M1Emax);
    p.nonfinite = p.scale_code == kE8M0NaN;
    if (!p.nonfinite) {
      p.inverse = mx_inverse_scale(p.scale_code);
      p.scale = pow2f(static_cast<int>(p.scale_code) - kE8M0Bias);
    }
  } else {  // NVFP4
    p.scale_code = nvfp4_block_scale_code(amax, p.nonfinite, global);
    p.nonfinite = p.scale_code == kE4M3NaNCode;
    if (!p.nonfinite) {
      p.scale = nvfp4_block_scale(p.scale_code);
      p.divisor = p.scale * global;
    }
  }
  return p;
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
// encode_magnitude followed by decode_magnitude, specialized to E2M1 and nearest-even: the
// rounded magnitude is the E2M1 value itself, so the dequantized value needs no decode. Below 1
// the grid step is 0.5 (rint(2a)/2, exact); from 1 up, E2M1 keeps one mantissa bit, which is
// rounding the float's bits at bit 22 to nearest-even (a carry moves into the exponent, e.g.
// 1.75 -> 2). Stochastic rounding gets the same treatment. Bit-exactness with the generic path
// is checked by the kernel model test.

// `a` in [0, 6] (already saturated).
MX_HD float e2m1_rne_magnitude(float a) {
  if (a < 1.0f) return rintf(a * 2.0f) * 0.5f;
  const uint32_t b = float_bits(a);
  return bits_float((b + 0x1FFFFFu + ((b >> 22) & 1u)) & ~0x3FFFFFu);
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

struct ElementResult {
  uint32_t code = 0;
  float value = 0.0f;  // dequantized, before the float32/bf16 range clamp
  bool saturated = false;
};

// One element. kStochastic is the rounding mode, known at compile time so that each kernel
// variant contains one rounding path only; `u` is used when it is set.
template <QuantFormat F, bool kStochastic>
MX_HD ElementResult round_element(float global, const BlockParams& block, float x, float u) {
  ElementResult r;
  if constexpr (F == QuantFormat::kFP32) {
    r.value = x == x ? x : quiet_nan();  // canonical NaN, as the reference
  } else if constexpr (F == QuantFormat::kBF16) {
    r.value = x == x ? bf16_bits_to_float(float_to_bf16_bits(x)) : quiet_nan();
  } else if constexpr (F == QuantFormat::kMXFP4) {
    if (block.nonfinite) {
      r.value = quiet_nan();
      return r;
    }
    const float y = x * block.inverse;
    const uint32_t sign = float_bits(y) & 0x80000000u;
    const float a = fabsf(y);
    constexpr float kMax = kE2M1.max_finite;
    r.saturated = a > kMax;
    const float clamped = r.saturated ? kMax : a;
    const float m = kStochastic ? e2m1_sr_magnitude(clamped, u) : e2m1_rne_magnitude(clamped);
    r.code = (sign >> 28) | e2m1_code_of(m);
    r.value = bits_float(float_bits(m) | sign) * block.scale;  // = mx_dequant(code, scale_code)
  } else if constexpr (F == QuantFormat::kNVFP4) {
    if (block.nonfinite) {
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
    if (block.nonfinite) {
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
};

struct SegmentResult {
  // Codes: FP4 nibbles (element 2i low, 2i+1 high) in words 0..3; FP8 bytes in words 0..7,
  // element j in byte j (little-endian), i.e. the packed layout of quantize.h.
  uint32_t code_words[8];
  uint8_t scale_codes[2];  // MXFP4: [0]; NVFP4: the segment's two 16-blocks
};

// Quantizes the (rotated) segment `v` in place: on return v[j] holds the dequantized value of
// element j before the float32/bf16 range clamp. Telemetry is accumulated when kTelemetry.
template <QuantFormat F, bool kTelemetry, bool kStochastic>
MX_HD void quantize_segment(float (&v)[kSegment], const SegmentContext& ctx, SegmentResult& out,
                            ThreadTelemetry& tel) {
  constexpr int kBlock = block_size_of(F);
  constexpr bool kFp4 = F == QuantFormat::kMXFP4 || F == QuantFormat::kNVFP4;
MXABLATE_UNROLL
  for (int w = 0; w < 8; ++w) out.code_words[w] = 0;
  out.scale_codes[0] = out.scale_codes[1] = 0;

  BlockParams params[2];
  if constexpr (kBlock != 0) {
MXABLATE_UNROLL
    for (int b = 0; b < kSegment / kBlock; ++b) {
      params[b] = block_params<F>(ctx.global, v + b * kBlock, kBlock, ctx.spec.scale_rule);
      out.scale_codes[b] = params[b].scale_code;
      if constexpr (kTelemetry) tel.nonfinite_blocks += params[b].nonfinite && b * kBlock < ctx.count ? 1 : 0;
    }
  } else {
    params[0] = tensor_block_params<F>(ctx.global);
  }

  constexpr bool stochastic = kStochastic;
  // Along a row the 32 indices are consecutive and start at a multiple of 4 (cols % 32 == 0),
  // so one Philox evaluation serves a group of four elements; down a column each element needs
  // its own. Groups of four also keep the fully unrolled loop small enough to stay unrolled
  // (a rolled loop would move v[] to local memory).
  const bool grouped = ctx.index_stride == 1 && (ctx.first_index & 3) == 0;
MXABLATE_UNROLL
  for (int g = 0; g < kSegment / 4; ++g) {
    float u[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
    if constexpr (stochastic) {
      if (grouped) {
        sr_uniforms4(ctx.key, static_cast<uint64_t>(ctx.first_index >> 2) + g, u);
      } else {
MXABLATE_UNROLL
        for (int k = 0; k < 4; ++k)
          u[k] = sr_uniform_at(ctx.key, static_cast<uint64_t>(ctx.first_index + (4 * g + k) * ctx.index_stride));
      }
    }
MXABLATE_UNROLL
    for (int k = 0; k < 4; ++k) {
      const int j = 4 * g + k;
      const float x = v[j];
      const BlockParams& p = params[kBlock == kNVBlockSize ? (j >> 4) : 0];
      const ElementResult r = round_element<F, kStochastic>(ctx.global, p, x, u[k]);
      if constexpr (kFp4) {
        out.code_words[j >> 3] |= (r.code & 0xFu) << ((j & 7) * 4);
      } else {
        out.code_words[j >> 2] |= (r.code & 0xFFu) << ((j & 3) * 8);
      }
      if constexpr (kTelemetry) {
        if (j < ctx.count) tel.add(r, p.nonfinite, x, ctx.bf16_written);
      }
      v[j] = r.value;
    }
  }
}

// E4M3 re-expression of an MXFP4 segment (code_words as quantize_segment leaves them) given the
// largest E8M0 code of its 128-chunk. Writes 32 E4M3 bytes into fp8_words; returns whether every
// element was exact.
MX_HD bool segment_as_e4m3(const uint32_t (&code_words)[8], uint8_t scale_code, uint8_t max_code,
                           uint32_t (&fp8_words)[8]) {
  bool exact = true;
MXABLATE_UNROLL
  for (int w = 0; w < 8; ++w) fp8_words[w] = 0;
MXABLATE_UNROLL
  for (int j = 0; j < kSegment; ++j) {
    uint32_t code = kE4M3NaN;
    if (max_code != kE8M0NaN) {
      const Fp8Element e = e2m1_as_e4m3((code_words[j >> 3] >> ((j & 7) * 4)) & 0xFu, scale_code, max_code);
      code = e.code;
      exact = exact && e.exact;
    }
    fp8_words[j >> 2] |= code << ((j & 3) * 8);
  }
  return exact;
}

// ---- The whole per-thread pipeline --------------------------------------------------------

// The values the four threads of a chunk swap. `Exchange` supplies, for the calling thread,
// partner = the thread whose part is `part ^ mask`:
//   void xor_floats(const float (&own)[32], int mask, float (&partner)[32]);
//   uint32_t xor_u32(uint32_t own, int mask);
// The GPU kernel implements it with warp shuffles among groups of 4 lanes; the host simulation in
// tests/gpu with four threads and a barrier. Every thread of a chunk must make the same calls.

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
// re-expression of the chunk into `fp8`. kStochastic must equal spec.rounding == kStochastic. On return v holds the dequantized values before the range
// clamp; `res` the codes and scales.
template <QuantFormat F, bool kTelemetry, bool kStochastic, typename Exchange>
MX_HD void process_segment(float (&v)[kSegment], int part, const SegmentContext& ctx,
                           uint32_t sign_word, Exchange& ex, SegmentResult& res,
                           ThreadTelemetry& tel, bool want_fp8, Fp8Segment& fp8) {
  if (ctx.spec.hadamard != HadamardMode::kNone) rotate_segment(v, part, ctx.spec, sign_word, ex);
  quantize_segment<F, kTelemetry, kStochastic>(v, ctx, res, tel);
  if constexpr (F == QuantFormat::kMXFP4) {
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
