// MXFP4 as E4M3 with one scale per line, and MXFP4's values (mxablate/kernels/gpu/mx_as_fp8_gpu.h;
// docs/design.md §3, "mxfp4-as-fp8").
//
// Work layout: kernel 1 gives a warp one line's scale bytes (coalesced byte reads, a warp
// maximum, one atomic per line for the tensor's maximum); kernel 2 gives a thread one 32-block:
// 16 bytes of packed nibbles in, 32 code bytes out, both as 16-byte accesses. The table holds the
// E4M3 code of each E2M1 magnitude at the block's shift, computed by the reference's own
// e2m1_as_e4m3, so the codes and the exactness test are the reference's by construction. The
// dequantization kernel has kernel 2's layout and writes mx_dequant's values.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/mx_as_fp8_gpu.h"
#include "segment_quant.h"  // dequant_bf16_bits, dequant_f32: the quantizer's own output rules

namespace mxablate::kernels::gpu {
namespace {

constexpr int kThreads = 256;  // a multiple of every warp width (32 NVIDIA, 64 AMD CDNA)

// E2M1 magnitude k (1..7: 0.5, 1, 1.5, 2, 3, 4, 6) is 1.0 or 1.5 times 2^(-1, 0, 0, 1, 1, 2, 2),
// whose E4M3 code is (exponent + 7) << 3, plus 4 for 1.5: byte k of kCodesAtShift0 (byte 0, the
// zero, stays 0). At shift d the exponent grows by d, so the code by 8 d, while the smallest,
// 0.5 * 2^d, is still normal (d >= -5); e2m1_as_e4m3 gives the same bytes (tests/gpu).
constexpr uint64_t kCodesAtShift0 = 0x4C4844403C383000ull;
constexpr uint64_t kExponentStep = 0x0808080808080800ull;  // 8 in every byte but the zero's
constexpr int kFastShiftMin = -5;

// Kernel 1: line_max[l] = line l's largest scale code; status->max_scale_code = the tensor's
// (status zeroed before).
__global__ void __launch_bounds__(kThreads)
    line_max_kernel(const uint8_t* scales, int64_t lines, int64_t per_line, uint32_t* line_max,
                    uint8_t* line_inexact, Fp8LineStatus* status) {
  const int warps = kThreads / warpSize;
  const int lane = threadIdx.x % warpSize;
  // Whole warps take whole lines (the shuffles stay converged); the stride covers every warp
  // width whatever the grid was sized for.
  for (int64_t line = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / warpSize; line < lines;
       line += static_cast<int64_t>(gridDim.x) * warps) {
    uint32_t m = 0;
    for (int64_t j = lane; j < per_line; j += warpSize) m = max(m, static_cast<uint32_t>(scales[line * per_line + j]));
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) m = max(m, shfl_xor(m, offset, warpSize));
    if (lane == 0) {
      line_max[line] = m;
      line_inexact[line] = 0;
      atomicMax(&status->max_scale_code, m);
    }
  }
}

// Kernel 2: the codes of block b = blockIdx.x * kThreads + threadIdx.x.
__global__ void __launch_bounds__(kThreads)
    as_e4m3_kernel(const uint8_t* packed, const uint8_t* scales, int64_t blocks, int64_t per_line,
                   const uint32_t* line_max, uint8_t* codes, float* line_scales, uint8_t* line_inexact,
                   Fp8LineStatus* status) {
  const uint32_t tensor_max = status->max_scale_code;
  const bool nan = tensor_max == kE8M0NaN;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  bool inexact = false;
  if (b < blocks) {
    const int64_t line = b / per_line;
    const uint8_t line_code = nan ? kE8M0NaN : fp8_line_code(line_max[line], tensor_max);
    if (b % per_line == 0) {
      line_scales[line] = fp8_chunk_scale(line_code);
      atomicMin(&status->min_line_code, static_cast<uint32_t>(line_code));
    }
    const uint4 in = reinterpret_cast<const uint4*>(packed)[b];
    const uint32_t nibbles[4] = {in.x, in.y, in.z, in.w};
    uint32_t out[8];
    if (nan) {
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = kE4M3NaN * 0x01010101u;
    } else {
      // table byte k: the code of magnitude k; exact_bits bit k: whether it is exact.
      const uint8_t scale_code = scales[b];
      const int shift = static_cast<int>(scale_code) - static_cast<int>(line_code) + kFp8ChunkHeadroom;
      uint64_t table = 0;
      uint32_t exact_bits = 0xFFu;
      if (shift >= kFastShiftMin) {
        // Every magnitude lands on an E4M3 normal: its code at shift 0 plus the shift in the
        // exponent field (no byte leaves [0x08, 0x7C], so the per-byte additions never carry).
        table = kCodesAtShift0 + static_cast<uint64_t>(shift + 5) * kExponentStep - 5 * kExponentStep;
      } else {
        exact_bits = 1u;  // magnitude 0 is always exact
#pragma unroll
        for (uint32_t mag = 1; mag < 8; ++mag) {
          const Fp8Element e = e2m1_as_e4m3(mag, scale_code, line_code);
          table |= static_cast<uint64_t>(e.code) << (8 * mag);
          exact_bits |= (e.exact ? 1u : 0u) << mag;
        }
      }
      uint32_t present = 0;  // bit k: magnitude k occurs in the block
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t word = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t e2m1 = (nibbles[i / 2] >> (4 * ((i % 2) * 4 + j))) & 0xFu;
          const uint32_t mag = e2m1 & 7u;
          present |= 1u << mag;
          word |= (((e2m1 >> 3) << 7) | static_cast<uint32_t>((table >> (8 * mag)) & 0xFFu)) << (8 * j);
        }
        out[i] = word;
      }
      inexact = (present & ~exact_bits) != 0;
    }
    // Every inexact block of a line stores the same 1 (kernel 1 wrote the 0s); a NaN tensor's
    // lines are all marked, by their first block.
    if (inexact || (nan && b % per_line == 0)) line_inexact[b / per_line] = 1;
    uint4* dst = reinterpret_cast<uint4*>(codes) + 2 * b;
    dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
    dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
  const int count = __syncthreads_count(inexact);
  if (threadIdx.x == 0 && count > 0) atomicAdd(&status->inexact_blocks, static_cast<uint32_t>(count));
}

// The dequantization: block b's 32 values as the quantizer writes them (segment_quant.h): bf16
// bits (exact: an MXFP4 value has two significant bits and an exponent within bf16's range) or
// float32, an overflow to infinity clamped to the largest finite value, NaN canonical.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* packed, const uint8_t* scales, int64_t blocks, OutT* out) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= blocks) return;
  const uint4 in = reinterpret_cast<const uint4*>(packed)[b];
  const uint32_t nibbles[4] = {in.x, in.y, in.z, in.w};
  const uint8_t scale_code = scales[b];
  constexpr int kPerStore = 16 / static_cast<int>(sizeof(OutT));
  uint4* dst = reinterpret_cast<uint4*>(out + b * kMXBlockSize);
#pragma unroll
  for (int s = 0; s < kMXBlockSize / kPerStore; ++s) {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < kPerStore; ++k) {
      const int i = s * kPerStore + k;
      const float v = kernels::mx_dequant((nibbles[i / 8] >> (4 * (i % 8))) & 0xFu, scale_code);
      if constexpr (sizeof(OutT) == 2) {
        w[k / 2] |= static_cast<uint32_t>(detail::dequant_bf16_bits<QuantFormat::kMXFP4>(v)) << (16 * (k % 2));
      } else {
        w[k] = float_bits(detail::dequant_f32(v));
      }
    }
    dst[s] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string blocks_problem(const char* what, const uint8_t* packed, const uint8_t* scales, int64_t blocks) {
  const std::string w(what);
  if (blocks <= 0) return w + " needs at least one block, got " + std::to_string(blocks);
  if (packed == nullptr || !aligned16(packed)) return w + " needs 16-byte-aligned packed codes";
  if (scales == nullptr) return w + " needs the block scales";
  if ((blocks + kThreads - 1) / kThreads > 0x7FFFFFFF) return w + " takes at most 2^31 - 1 thread blocks";
  return {};
}

}  // namespace

std::string mx_as_fp8_unsupported_reason(const MxAsFp8Job& job) {
  if (job.lines <= 0 || job.length <= 0 || job.length % kMXBlockSize != 0)
    return "MXFP4 as E4M3 needs a positive line count and a length that is a positive multiple of 32, got " +
           std::to_string(job.lines) + " x " + std::to_string(job.length);
  const std::string blocks =
      blocks_problem("MXFP4 as E4M3", job.packed, job.scales, job.lines * (job.length / kMXBlockSize));
  if (!blocks.empty()) return blocks;
  if (job.codes == nullptr || !aligned16(job.codes)) return "MXFP4 as E4M3 needs a 16-byte-aligned code buffer";
  if (job.line_scales == nullptr || job.line_max == nullptr || job.status == nullptr || job.line_inexact == nullptr)
    return "MXFP4 as E4M3 needs its line-scale, line-maximum, status and line-mark pointers";
  return {};
}

void mx_as_fp8(const MxAsFp8Job& job, void* stream_handle) {
  const std::string problem = mx_as_fp8_unsupported_reason(job);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const auto stream = static_cast<gpuStream_t>(stream_handle);
  const int64_t per_line = job.length / kMXBlockSize;
  const int64_t blocks = job.lines * per_line;
  // max_scale_code and inexact_blocks start at 0, min_line_code at its largest (atomicMin).
  check(gpuMemsetAsync(job.status, 0, sizeof(Fp8LineStatus), stream), "clearing the MXFP4-as-E4M3 status");
  check(gpuMemsetAsync(&job.status->min_line_code, 0xFF, sizeof(uint32_t), stream), "clearing the MXFP4-as-E4M3 status");
  // A line per 32 threads (a 64-lane warp strides over the rest).
  const int64_t lines_per_block = kThreads / 32;
  line_max_kernel<<<static_cast<unsigned>((job.lines + lines_per_block - 1) / lines_per_block), kThreads, 0, stream>>>(
      job.scales, job.lines, per_line, job.line_max, job.line_inexact, job.status);
  as_e4m3_kernel<<<static_cast<unsigned>((blocks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      job.packed, job.scales, blocks, per_line, job.line_max, job.codes, job.line_scales, job.line_inexact,
      job.status);
  check(gpuGetLastError(), "launching MXFP4 as E4M3");
}

std::string mx_dequantize_unsupported_reason(const MxDequantizeJob& job) {
  const std::string blocks = blocks_problem("MXFP4 dequantization", job.packed, job.scales, job.blocks);
  if (!blocks.empty()) return blocks;
  if ((job.bf16 == nullptr) == (job.f32 == nullptr)) return "MXFP4 dequantization needs exactly one output";
  if (!aligned16(job.bf16 ? static_cast<const void*>(job.bf16) : static_cast<const void*>(job.f32)))
    return "MXFP4 dequantization needs a 16-byte-aligned output";
  return {};
}

void mx_dequantize(const MxDequantizeJob& job, void* stream_handle) {
  const std::string problem = mx_dequantize_unsupported_reason(job);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const auto stream = static_cast<gpuStream_t>(stream_handle);
  const auto grid = static_cast<unsigned>((job.blocks + kThreads - 1) / kThreads);
  if (job.bf16) {
    dequant_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(job.packed, job.scales, job.blocks, job.bf16);
  } else {
    dequant_kernel<float><<<grid, kThreads, 0, stream>>>(job.packed, job.scales, job.blocks, job.f32);
  }
  check(gpuGetLastError(), "launching MXFP4 dequantization");
}

}  // namespace mxablate::kernels::gpu
