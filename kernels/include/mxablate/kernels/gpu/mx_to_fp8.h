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

}  // namespace mxablate::kernels
