// Lossless re-expression of MXFP4 as E4M3 with one FP32 scale per 128 elements, so MXFP4
// GEMMs can run on Hopper's FP8 tensor cores (docs/design.md §3, GEMM path 2).
//
// A 128-chunk holds four 32-blocks with E8M0 exponents e_b. Its scale is 2^(E - 6), E = max e_b,
// and element v * 2^e_b becomes v * 2^(e_b - E + 6) in E4M3. E2M1 magnitudes are k * 2^-1 with
// k in {1, 2, 3, 4, 6, 8, 12}; E4M3 holds every such value times 2^d for d in [-8, 6] (the top,
// 12 * 2^5 = 384, stays under 448; the bottom, 0.5 * 2^-8 = 2^-9, is its smallest subnormal).
// So the chunk is exact when all its blocks lie within 14 binades of the largest; otherwise
// small elements of the low blocks round (to nearest, ties to even) and the chunk is reported
// as inexact. A chunk with a NaN block (E8M0 0xFF) gets a NaN scale and NaN codes: the NaN
// propagates through the GEMM as it does through the exact emulation.
//
// Host/device: the GPU kernel and the host reference below share these functions.
#pragma once

#include "mxablate/kernels/block_scaling.h"

namespace mxablate::kernels {

inline constexpr int kFp8ChunkSize = 128;
inline constexpr int kFp8ChunkHeadroom = 6;  // binades between the chunk's largest block and 1

// Scale of a chunk whose largest E8M0 code is `max_scale_code` (NaN for 0xFF).
MX_HD float fp8_chunk_scale(uint8_t max_scale_code) {
  if (max_scale_code == kE8M0NaN) return quiet_nan();
  return pow2f(static_cast<int>(max_scale_code) - kE8M0Bias - kFp8ChunkHeadroom);
}

struct Fp8Element {
  uint8_t code;
  bool exact;
};

// E4M3 code of the E2M1 code `e2m1` of a block with E8M0 code `scale_code`, in a chunk whose
// largest E8M0 code is `max_scale_code` (neither NaN).
MX_HD Fp8Element e2m1_as_e4m3(uint32_t e2m1, uint8_t scale_code, uint8_t max_scale_code) {
  const uint32_t sign = (e2m1 >> 3) & 1u;
  const uint32_t mag = e2m1 & 7u;
  if (mag == 0) return {static_cast<uint8_t>(sign << 7), true};
  int shift = static_cast<int>(scale_code) - static_cast<int>(max_scale_code) + kFp8ChunkHeadroom;
  // Below 2^-30 every E2M1 magnitude rounds to E4M3 zero; clamping keeps the product exact in
  // float32 without changing the code.
  if (shift < -30) shift = -30;
  const float v = decode_magnitude(mag, kE2M1) * pow2f(shift);  // exact
  const uint32_t m = encode_magnitude(v, kE4M3, -1.0f);         // v <= 384: never saturates
  return {static_cast<uint8_t>((sign << 7) | m), decode_magnitude(m, kE4M3) == v};
}

inline constexpr uint8_t kE4M3NaN = 0x7F;

// Host reference over packed MXFP4 (quantize.h layout): `lines` lines of `length` elements
// (length % 128 == 0). Writes E4M3 codes (lines x length) and chunk scales in the chunk-major
// layout of the GPU API (scales[chunk * lines + line]); returns the number of inexact chunks.
inline int64_t mx_to_fp8_reference(const uint8_t* packed, const uint8_t* scales, int64_t lines,
                                   int64_t length, uint8_t* codes, float* chunk_scales) {
  const int64_t chunks = length / kFp8ChunkSize;
  const int64_t blocks_per_line = length / kMXBlockSize;
  int64_t inexact = 0;
  for (int64_t line = 0; line < lines; ++line) {
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const uint8_t* block_scales = scales + line * blocks_per_line + chunk * 4;
      uint8_t max_code = 0;
      bool nan = false;
      for (int b = 0; b < 4; ++b) {
        nan = nan || block_scales[b] == kE8M0NaN;
        if (block_scales[b] > max_code) max_code = block_scales[b];
      }
      chunk_scales[chunk * lines + line] = nan ? quiet_nan() : fp8_chunk_scale(max_code);
      bool exact = true;
      for (int64_t j = 0; j < kFp8ChunkSize; ++j) {
        const int64_t col = chunk * kFp8ChunkSize + j;
        const uint8_t byte = packed[line * (length / 2) + col / 2];
        const uint32_t e2m1 = (col % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
        uint8_t& out = codes[line * length + col];
        if (nan) {
          out = kE4M3NaN;
          continue;
        }
        const Fp8Element e = e2m1_as_e4m3(e2m1, block_scales[j / kMXBlockSize], max_code);
        out = e.code;
        exact = exact && e.exact;
      }
      inexact += exact ? 0 : 1;
    }
  }
  return inexact;
}

// ---- One scale per line (the mxfp4-as-fp8 route, docs/design.md §3) ------------------------
//
// The same re-expression with a whole line (a GEMM operand's row: (M or N) x K) as one chunk,
// for the row-wise scaled FP8 GEMM: line l's scale is 2^(E_l - 133) and element v * 2^e_b becomes
// v * 2^(e_b - E_l + 6), where E_l is the line's largest E8M0 code, raised to at least
// E - kFp8LineFloor (E the tensor's largest). The floor keeps every line's scale within
// kFp8LineFloor binades of the tensor's, so that the GEMM's scale products stay normal floats
// (an all-zero line's code 0 would not); a line whose blocks all lie below it holds values 14
// binades under the floor exactly, as any line under a per-tensor scale would. Exact where every
// block lies within 14 binades of its line's E_l (element by element: e2m1_as_e4m3's test);
// where it is not, the caller multiplies the MXFP4 values instead.

inline constexpr int kFp8LineFloor = 28;

struct Fp8LineStatus {
  uint32_t max_scale_code = 0;  // E, the tensor's largest block code (kE8M0NaN: a block is NaN)
  uint32_t inexact_blocks = 0;  // 32-blocks with an element E4M3 cannot hold at its line's scale
  uint32_t min_line_code = 0;   // the smallest E_l (E_l's largest is E)
  uint32_t unused = 0;
  // Whether the codes times their line's scale are the MXFP4 values, every element.
  MX_HD bool exact() const { return max_scale_code != kE8M0NaN && inexact_blocks == 0; }
};

// E_l from the line's largest code and the tensor's (neither NaN).
MX_HD uint8_t fp8_line_code(uint32_t line_max, uint32_t tensor_max) {
  const uint32_t floor = tensor_max > kFp8LineFloor ? tensor_max - kFp8LineFloor : 0u;
  return static_cast<uint8_t>(line_max > floor ? line_max : floor);
}

// Host reference over packed MXFP4 (quantize.h layout: `lines` lines of `length` elements,
// length % 32 == 0): writes E4M3 codes (lines x length; kE4M3NaN everywhere for a tensor with a
// NaN block) and line_scales[l] = fp8_chunk_scale(E_l) (NaN for such a tensor); returns the status.
// line_inexact (optional, `lines` bytes): 1 where the line has a block E4M3 cannot hold, or
// the tensor has a NaN block; else 0.
inline Fp8LineStatus mx_to_fp8_rowwise_reference(const uint8_t* packed, const uint8_t* scales, int64_t lines,
                                                  int64_t length, uint8_t* codes, float* line_scales,
                                                  uint8_t* line_inexact = nullptr) {
  const int64_t per_line = length / kMXBlockSize;
  Fp8LineStatus status;
  for (int64_t b = 0; b < lines * per_line; ++b)
    if (scales[b] > status.max_scale_code) status.max_scale_code = scales[b];
  status.min_line_code = status.max_scale_code;
  const bool nan = status.max_scale_code == kE8M0NaN;
  for (int64_t l = 0; l < lines; ++l) {
    uint32_t line_max = 0;
    for (int64_t j = 0; j < per_line; ++j) line_max = scales[l * per_line + j] > line_max ? scales[l * per_line + j] : line_max;
    const uint8_t line_code = nan ? kE8M0NaN : fp8_line_code(line_max, status.max_scale_code);
    if (line_code < status.min_line_code) status.min_line_code = line_code;
    line_scales[l] = fp8_chunk_scale(line_code);
    if (line_inexact) line_inexact[l] = nan ? 1 : 0;
    for (int64_t j = 0; j < per_line; ++j) {
      const int64_t b = l * per_line + j;
      bool exact = true;
      for (int k = 0; k < kMXBlockSize; ++k) {
        const int64_t i = b * kMXBlockSize + k;  // element index: blocks are contiguous along lines
        const uint8_t byte = packed[i / 2];
        const uint32_t e2m1 = (i % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
        if (nan) {
          codes[i] = kE4M3NaN;
          continue;
        }
        const Fp8Element e = e2m1_as_e4m3(e2m1, scales[b], line_code);
        codes[i] = e.code;
        exact = exact && e.exact;
      }
      status.inexact_blocks += exact ? 0u : 1u;
      if (line_inexact && !exact) line_inexact[l] = 1;
    }
  }
  return status;
}

// ---- Which outputs the FP8 GEMM got right, decided on the device --------------------------
//
// The row-wise scaled FP8 GEMM writes C[i][j] = Σ code_a·code_b · (s_a[i]·fold)·s_b[j], one
// rounding to BF16. That is the emulation's product up to summation order exactly where line i
// of a and line j of b are exact and every scale product is a normal float32 (a power-of-two
// scale times a fold keeps its significand only while normal). The first two are per line
// (line_inexact); the last is per tensor pair, from the extremes of the line scales:
// E_l = min_line_code … max_scale_code, each 2^(E - 133), times the fold 2^fold_log2.
MX_HD bool fp8_line_scales_normal(const Fp8LineStatus& a, const Fp8LineStatus& b, double fold_log2) {
  if (a.max_scale_code == kE8M0NaN || b.max_scale_code == kE8M0NaN) return false;
  const auto log2_of = [](uint32_t code) { return static_cast<double>(code) - kE8M0Bias - kFp8ChunkHeadroom; };
  const auto normal = [](double e) { return e >= -126.0 && e < 128.0; };
  const double a_min = log2_of(a.min_line_code), a_max = log2_of(a.max_scale_code);
  const double b_min = log2_of(b.min_line_code), b_max = log2_of(b.max_scale_code);
  return normal(a_min) && normal(b_min) && normal(a_max) && normal(b_max) && normal(a_min + fold_log2) &&
         normal(a_max + fold_log2) && normal(a_min + b_min + fold_log2) && normal(a_max + b_max + fold_log2);
}

// The value an MXFP4 element has as the emulated GEMM's BF16 operand (mx_dequant, an overflow to
// infinity clamped to BF16's largest finite value, as the quantizer's BF16 output: exact in
// float32 and in BF16).
MX_HD float mx_gemm_operand_value(uint32_t e2m1, uint8_t scale_code) {
  const float v = mx_dequant(e2m1, scale_code);
  const uint32_t bits = float_bits(v);
  if ((bits & 0x7FFFFFFFu) == 0x7F800000u) return (bits >> 31) ? -kBF16MaxFinite : kBF16MaxFinite;
  return v;
}

// The output tiles the fix-up recomputes (mx_as_fp8_gpu.h, mx_rowwise_fixup): kFixupTile x
// kFixupTile blocks of C; a tile is recomputed where any of its lines of a or b is inexact, or
// every tile where the scale products are not all normal.
inline constexpr int kFixupTile = 64;

// Host reference of the fix-up over packed MXFP4 operands a (m x k) and b (n x k), k % 32 == 0:
// each recomputed output is Σ over k in order of value_a · value_b in float32 (exact products),
// times fold when fold != 1, rounded to BF16 (c row-major with leading dimension ldc); outputs
// of other tiles are left as they are. tiles[0] / tiles[1] count the tiles kept / recomputed.
inline void mx_rowwise_fixup_reference(const uint8_t* a_packed, const uint8_t* a_scales, const uint8_t* a_inexact,
                                       const Fp8LineStatus& a_status, const uint8_t* b_packed,
                                       const uint8_t* b_scales, const uint8_t* b_inexact,
                                       const Fp8LineStatus& b_status, int64_t m, int64_t n, int64_t k, float fold,
                                       double fold_log2, uint16_t* c, int64_t ldc, uint64_t tiles[2]) {
  const bool every_tile = !fp8_line_scales_normal(a_status, b_status, fold_log2);
  const auto value = [k](const uint8_t* packed, const uint8_t* scales, int64_t line, int64_t i) {
    const uint8_t byte = packed[line * (k / 2) + i / 2];
    return mx_gemm_operand_value(i % 2 == 0 ? (byte & 0xFu) : (byte >> 4), scales[line * (k / kMXBlockSize) + i / kMXBlockSize]);
  };
  for (int64_t tm = 0; tm < m; tm += kFixupTile) {
    for (int64_t tn = 0; tn < n; tn += kFixupTile) {
      const int64_t m_end = tm + kFixupTile < m ? tm + kFixupTile : m;
      const int64_t n_end = tn + kFixupTile < n ? tn + kFixupTile : n;
      bool redo = every_tile;
      for (int64_t i = tm; i < m_end && !redo; ++i) redo = a_inexact[i] != 0;
      for (int64_t j = tn; j < n_end && !redo; ++j) redo = b_inexact[j] != 0;
      ++tiles[redo ? 1 : 0];
      if (!redo) continue;
      for (int64_t i = tm; i < m_end; ++i)
        for (int64_t j = tn; j < n_end; ++j) {
          float acc = 0.0f;
          for (int64_t x = 0; x < k; ++x) acc += value(a_packed, a_scales, i, x) * value(b_packed, b_scales, j, x);
          c[i * ldc + j] = float_to_bf16_bits(fold == 1.0f ? acc : acc * fold);
        }
    }
  }
}

}  // namespace mxablate::kernels
