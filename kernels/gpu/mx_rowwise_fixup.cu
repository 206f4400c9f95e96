// The mxfp4-as-fp8 route's fix-up (mxablate/kernels/gpu/mx_as_fp8_gpu.h; docs/design.md §3,
// "mxfp4-as-fp8"): after the row-wise scaled FP8 GEMM has written every output, the tiles whose
// lines E4M3 did not hold are recomputed from the packed MXFP4, bit for bit as
// mx_rowwise_fixup_reference (mx_to_fp8.h) computes them.
//
// Work layout: one thread block per kFixupTile x kFixupTile tile of C. Its first step reads the
// two statuses and the tile's 2 x kFixupTile line marks; a tile the FP8 GEMM got right (almost
// all of them) returns there, so the launch costs about one pass over the marks. A tile to redo
// walks K one 32-block at a time: each thread decodes 8 elements of one line of a and of b into
// shared memory (k-major), then every thread sums its 4 x 4 outputs over the block's 32 k in
// order, in float32 (the products of two MXFP4 values are exact, so the sums round as the
// reference's). CUDA cores, not tensor cores: the fix-up is the exception, and its bits must be
// the reference's. No warp-level operation, so any wave width.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/mx_as_fp8_gpu.h"

namespace mxablate::kernels::gpu {
namespace {

constexpr int kTile = kFixupTile;                   // 64
constexpr int kPerThread = 4;                       // outputs per thread along each side
constexpr int kSide = kTile / kPerThread;           // 16 threads along each side
constexpr int kThreads = kSide * kSide;             // 256
constexpr int kLoaders = kThreads / kTile;          // 4 threads share one line's 32-block
constexpr int kPerLoader = kMXBlockSize / kLoaders;  // 8 elements: one 32-bit word of nibbles
static_assert(kPerLoader == 8, "a loader decodes one 32-bit word of packed nibbles");

__device__ void decode_block(const uint8_t* packed, const uint8_t* scales, int64_t lines, int64_t k,
                             int64_t first_line, int64_t kb, float (*out)[kTile + 1]) {
  const int line = threadIdx.x / kLoaders;
  const int part = threadIdx.x % kLoaders;
  const int64_t l = first_line + line;
  if (l < lines) {
    const uint32_t word = *reinterpret_cast<const uint32_t*>(packed + l * (k / 2) + kb * (kMXBlockSize / 2) + part * 4);
    const uint8_t scale = scales[l * (k / kMXBlockSize) + kb];
#pragma unroll
    for (int e = 0; e < kPerLoader; ++e) out[part * kPerLoader + e][line] = mx_gemm_operand_value((word >> (4 * e)) & 0xFu, scale);
  } else {
#pragma unroll
    for (int e = 0; e < kPerLoader; ++e) out[part * kPerLoader + e][line] = 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads) fixup_kernel(MxRowwiseFixupJob job) {
  __shared__ float a_tile[kMXBlockSize][kTile + 1];
  __shared__ float b_tile[kMXBlockSize][kTile + 1];
  __shared__ int redo;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const bool every_tile = !fp8_line_scales_normal(*job.a_status, *job.b_status, job.fold_log2);
  if (threadIdx.x == 0) redo = every_tile ? 1 : 0;
  __syncthreads();
  if (!every_tile && threadIdx.x < 2 * kTile) {
    const bool of_a = threadIdx.x < kTile;
    const int64_t line = (of_a ? m0 : n0) + threadIdx.x % kTile;
    if (line < (of_a ? job.m : job.n) && (of_a ? job.a_inexact : job.b_inexact)[line] != 0) redo = 1;  // one value: no race
  }
  __syncthreads();
  if (threadIdx.x == 0 && job.tiles) atomicAdd(job.tiles + (redo ? 1 : 0), 1ull);
  if (!redo) return;

  const int row = threadIdx.x / kSide, col = threadIdx.x % kSide;
  float acc[kPerThread][kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) acc[i][j] = 0.0f;
  for (int64_t kb = 0; kb < job.k / kMXBlockSize; ++kb) {
    decode_block(job.a_packed, job.a_scales, job.m, job.k, m0, kb, a_tile);
    decode_block(job.b_packed, job.b_scales, job.n, job.k, n0, kb, b_tile);
    __syncthreads();
    for (int x = 0; x < kMXBlockSize; ++x) {
      float a[kPerThread], b[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) a[i] = a_tile[x][row * kPerThread + i];
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) b[j] = b_tile[x][col * kPerThread + j];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) acc[i][j] += a[i] * b[j];  // exact product, one rounding
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t r = m0 + row * kPerThread + i;
    if (r >= job.m) continue;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t c = n0 + col * kPerThread + j;
      if (c < job.n) job.c[r * job.ldc + c] = float_to_bf16_bits(job.fold == 1.0f ? acc[i][j] : acc[i][j] * job.fold);
    }
  }
}

bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

}  // namespace

std::string mx_rowwise_fixup_unsupported_reason(const MxRowwiseFixupJob& job) {
  if (job.m <= 0 || job.n <= 0 || job.k <= 0 || job.k % kMXBlockSize != 0)
    return "the MXFP4 fix-up needs positive m and n and k a positive multiple of 32, got " + std::to_string(job.m) +
           " x " + std::to_string(job.n) + " x " + std::to_string(job.k);
  if ((job.m + kTile - 1) / kTile > 65535 || (job.n + kTile - 1) / kTile > 0x7FFFFFFF)
    return "the MXFP4 fix-up takes at most 65535 x 64 rows, got " + std::to_string(job.m);
  if (!job.a_packed || !job.b_packed || !aligned4(job.a_packed) || !aligned4(job.b_packed))
    return "the MXFP4 fix-up needs 4-byte-aligned packed codes of both operands";
  if (!job.a_scales || !job.b_scales || !job.a_inexact || !job.b_inexact || !job.a_status || !job.b_status)
    return "the MXFP4 fix-up needs both operands' block scales, line marks and statuses";
  if (!job.c || job.ldc < job.n) return "the MXFP4 fix-up needs an output with a leading dimension of at least n";
  return {};
}

void mx_rowwise_fixup(const MxRowwiseFixupJob& job, void* stream_handle) {
  const std::string problem = mx_rowwise_fixup_unsupported_reason(job);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const dim3 grid(static_cast<unsigned>((job.n + kTile - 1) / kTile), static_cast<unsigned>((job.m + kTile - 1) / kTile));
  fixup_kernel<<<grid, kThreads, 0, static_cast<gpuStream_t>(stream_handle)>>>(job);
  check(gpuGetLastError(), "launching the MXFP4 fix-up");
}

}  // namespace mxablate::kernels::gpu
