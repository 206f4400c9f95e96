// MXFP4 re-expressed as E4M3 codes with one decode scale per line, for the row-wise scaled FP8
// GEMM (the mxfp4-as-fp8 route, docs/design.md §3): the GPU side of mx_to_fp8_rowwise_reference
// (mx_to_fp8.h), which it equals bit for bit (tests/gpu); and the MXFP4 values of the same
// packed codes, the route's operand where E4M3 cannot hold them (mx_dequant's, bit for bit).
//
// Two kernels over a quantizer's packed output (quantize_gpu.h: packed E2M1 and E8M0 scales):
//   1. one warp per line: the line's largest E8M0 code, and the tensor's (a NaN block's 0xFF is
//      the largest there is);
//   2. one thread per 32-block: its eight possible E4M3 codes (e2m1_as_e4m3 at the shift
//      e_b - E_l + 6) looked up by each nibble, 32 codes out; blocks with an element E4M3 cannot
//      hold are counted (one atomic per thread block) and their line marked, the line's scale
//      written once.
// Status, scales and line marks stay on the device, and nothing is read back: the FP8 GEMM
// multiplies the codes whatever they hold, and the fix-up below, launched after it, recomputes
// from the packed MXFP4 the output tiles whose lines E4M3 did not hold (mx_to_fp8.h's rule). So
// the route decides on the device, without a host synchronization, and a CUDA graph can hold it.
// Single source for CUDA and HIP.
#pragma once

#include <cstdint>
#include <string>

#include "mxablate/kernels/gpu/mx_to_fp8.h"

namespace mxablate::kernels::gpu {

struct MxAsFp8Job {
  const uint8_t* packed = nullptr;  // lines x length/2 (element 2i in the low nibble), 16-byte aligned
  const uint8_t* scales = nullptr;  // lines x length/32 E8M0 codes
  int64_t lines = 0;
  int64_t length = 0;               // a positive multiple of 32
  uint8_t* codes = nullptr;         // lines x length E4M3 codes, 16-byte aligned
  float* line_scales = nullptr;     // lines floats: fp8_chunk_scale(E_l), NaN for a NaN tensor
  // Device scratch of lines uint32 (the lines' largest codes); its contents on entry do not matter.
  uint32_t* line_max = nullptr;
  Fp8LineStatus* status = nullptr;  // device; written by the call
  uint8_t* line_inexact = nullptr;  // lines bytes: 1 where the line is not exact (the reference's)
};

// Empty when mx_as_fp8 can run `job`, else one sentence saying why not.
std::string mx_as_fp8_unsupported_reason(const MxAsFp8Job& job);

// Enqueues the two kernels on `stream` and returns without waiting. Throws std::invalid_argument
// with mx_as_fp8_unsupported_reason's sentence, std::runtime_error on a GPU runtime error.
void mx_as_fp8(const MxAsFp8Job& job, void* stream);

// The fix-up after the row-wise scaled FP8 GEMM c = a · bᵀ (a m x k, b n x k, both MXFP4 as
// mx_as_fp8 left them): every kFixupTile² tile of c that mx_rowwise_fixup_reference recomputes is
// recomputed with its bits (k in order, float32, fold, one rounding to BF16); the others are
// left as the GEMM wrote them. Statuses and line marks are read on the device.
struct MxRowwiseFixupJob {
  const uint8_t* a_packed = nullptr;  // m x k/2, 4-byte aligned
  const uint8_t* a_scales = nullptr;  // m x k/32
  const uint8_t* a_inexact = nullptr;  // m
  const Fp8LineStatus* a_status = nullptr;
  const uint8_t* b_packed = nullptr;
  const uint8_t* b_scales = nullptr;
  const uint8_t* b_inexact = nullptr;
  const Fp8LineStatus* b_status = nullptr;
  int64_t m = 0, n = 0, k = 0;  // k a positive multiple of 32
  float fold = 1.0f;
  double fold_log2 = 0.0;       // log2(fold), as the host rule computes it
  uint16_t* c = nullptr;        // bf16 bits, row-major, leading dimension ldc >= n
  int64_t ldc = 0;
  // Optional device counters, added to: [0] tiles kept, [1] tiles recomputed.
  unsigned long long* tiles = nullptr;
};
std::string mx_rowwise_fixup_unsupported_reason(const MxRowwiseFixupJob& job);
void mx_rowwise_fixup(const MxRowwiseFixupJob& job, void* stream);

// The MXFP4 values of `blocks` 32-blocks (packed as above, contiguous), as bf16 bits or float32
// (exactly one of the outputs set, 16-byte aligned): mx_dequant(code, scale) element by element.
struct MxDequantizeJob {
  const uint8_t* packed = nullptr;
  const uint8_t* scales = nullptr;
  int64_t blocks = 0;
  uint16_t* bf16 = nullptr;
  float* f32 = nullptr;
};
std::string mx_dequantize_unsupported_reason(const MxDequantizeJob& job);
void mx_dequantize(const MxDequantizeJob& job, void* stream);

}  // namespace mxablate::kernels::gpu
