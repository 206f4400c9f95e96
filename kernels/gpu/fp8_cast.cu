// The FP8 cast at memory speed (mxablate/kernels/gpu/fp8_cast_gpu.h): an amax pass and a cast
// pass that writes both layouts, for per-tensor current or delayed scaling (docs/design.md §3).
//
// Work layout: a thread owns 16 consecutive elements of one row (two 16-byte loads of bf16, four
// of float32). The cast's thread block covers a 64 x 64 tile: 4 threads per row, so a warp reads
// whole 128-byte row segments. Codes along rows leave as one 16-byte store per thread; codes
// down columns are transposed through shared memory and leave as 16-byte stores along the
// transposed rows. Both dimensions are multiples of 16, so a thread's 16 elements are all in or
// all out of the tensor.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/gpu/fp8_cast_gpu.h"
#include "mxablate/kernels/minifloat.h"
#if !MXABLATE_GPU_HIP
#include <cuda_fp8.h>  // __nv_cvt_float2_to_fp8x2: the hardware conversion from sm_89
#endif

namespace mxablate::kernels::gpu {
namespace {

constexpr int kThreads = 256;  // a multiple of every warp width (32 NVIDIA, 64 AMD CDNA)
constexpr int kMaxWarps = kThreads / 32;
constexpr int kVec = 16;       // elements a thread owns; codes a thread stores at once
constexpr int kTile = 64;      // the cast's tile edge, rows and columns
// Row pitch of the transposed code tile in shared memory: 4-byte aligned for the word reads,
// and not a multiple of 16, so that the byte writes of a warp's four column groups spread over
// two groups of banks instead of one.
constexpr int kPitch = kTile + 4;
// The amax pass's grid: enough blocks to fill a large GPU (4 per SM on a 132-SM H100), few
// enough that each thread streams several chunks.
constexpr int64_t kMaxAmaxBlocks = 528;

// The FP8 formats as template arguments (0: axis not wanted).
constexpr int kNoCodes = 0, kE4M3Codes = 1, kE5M2Codes = 2;

MX_HD constexpr MinifloatFormat minifloat_of(int k) { return k == kE4M3Codes ? kE4M3 : kE5M2; }

// The 16 elements at p as raw 32-bit words, four 16-byte loads' worth for float32, two for bf16
// (little endian: a word holds bf16 elements 2j in its low half and 2j + 1 in its high half).
template <typename InT>
constexpr int kWords = kVec * static_cast<int>(sizeof(InT)) / 4;

template <typename InT>
__device__ __forceinline__ void load_words(const InT* p, uint32_t (&w)[kWords<InT>]) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < kWords<InT> / 4; ++i) {
    const uint4 u = q[i];
    w[4 * i] = u.x;
    w[4 * i + 1] = u.y;
    w[4 * i + 2] = u.z;
    w[4 * i + 3] = u.w;
  }
}

// The 16 elements as float32 values (bf16 widens exactly: its bits are a float's top half).
__device__ __forceinline__ void load16(const float* p, float (&v)[kVec]) {
  uint32_t w[kWords<float>];
  load_words(p, w);
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = bits_float(w[i]);
}

__device__ __forceinline__ void load16(const uint16_t* p, float (&v)[kVec]) {
  uint32_t w[kWords<uint16_t>];
  load_words(p, w);
#pragma unroll
  for (int j = 0; j < kWords<uint16_t>; ++j) {
    v[2 * j] = bits_float(w[j] << 16);
    v[2 * j + 1] = bits_float(w[j] & 0xFFFF0000u);
  }
}

// Two codes (a in the low byte), round to nearest even, saturating at the format's maximum: the
// reference's round_to_code for a finite input, which the hardware conversion is (tests/gpu).
template <int K>
__device__ __forceinline__ uint32_t code_pair(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, K == kE4M3Codes ? __NV_E4M3 : __NV_E5M2);
#else
  constexpr MinifloatFormat f = minifloat_of(K);
  return round_to_code(a, f, -1.0f).code | (round_to_code(b, f, -1.0f).code << 8);
#endif
}

// The 16 codes of v under decode scale d, packed little-endian into four words; a non-finite
// tensor (d is NaN) is the format's NaN code everywhere, as the reference writes it.
template <int K>
__device__ __forceinline__ void encode16(const float (&v)[kVec], float d, bool nonfinite, uint32_t (&w)[4]) {
  if (nonfinite) {
    const uint32_t n = minifloat_of(K).nan_code;
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = n * 0x01010101u;
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // x / d, the reference's division (no reciprocal: d is no power of two).
    const uint32_t lo = code_pair<K>(v[4 * i] / d, v[4 * i + 1] / d);
    const uint32_t hi = code_pair<K>(v[4 * i + 2] / d, v[4 * i + 3] / d);
    w[i] = lo | (hi << 16);
  }
}

// |x| as float bits for the 16 elements at p, folded into m with an unsigned maximum. BF16 bits
// are a float's top half, so their magnitudes compare as the floats do, shifted up.
__device__ __forceinline__ unsigned int fold_abs_bits(const float* p, unsigned int m) {
  uint32_t w[kWords<float>];
  load_words(p, w);
#pragma unroll
  for (int i = 0; i < kWords<float>; ++i) m = max(m, w[i] & 0x7FFFFFFFu);
  return m;
}

__device__ __forceinline__ unsigned int fold_abs_bits(const uint16_t* p, unsigned int m) {
  uint32_t w[kWords<uint16_t>];
  load_words(p, w);
#pragma unroll
  for (int j = 0; j < kWords<uint16_t>; ++j) m = max(m, max((w[j] << 16) & 0x7FFF0000u, w[j] & 0x7FFF0000u));
  return m;
}

// Pass 1: the largest |x| as float bits into *slot (zeroed before). Non-negative floats order
// like their bits, and NaN and infinity bits lie above every finite value's, so one unsigned
// maximum answers both "amax" and "is any value non-finite". Each thread keeps four chunks'
// loads in flight (a few hundred blocks stream the tensor; one atomic per block).
template <typename InT>
__global__ void __launch_bounds__(kThreads) fp8_amax_kernel(const InT* in, int64_t chunks, unsigned int* slot) {
  constexpr int kUnroll = 4;
  unsigned int m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < chunks; i += kUnroll * stride) {
    unsigned int part[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) part[k] = fold_abs_bits(in + (i + k * stride) * kVec, 0u);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) m = max(m, part[k]);
  }
  for (; i < chunks; i += stride) m = fold_abs_bits(in + i * kVec, m);
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) m = max(m, shfl_xor(m, offset, warpSize));
  __shared__ unsigned int warp_max[kMaxWarps];
  const int warp = threadIdx.x / warpSize;
  if (threadIdx.x % warpSize == 0) warp_max[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / warpSize; ++w) m = max(m, warp_max[w]);
    atomicMax(slot, m);
  }
}

struct CastOutputs {
  uint8_t* rows_codes;
  float* rows_scale;
  uint8_t* cols_codes;
  float* cols_scale;
  Fp8DelayedScale rows_delayed;  // window null: current scaling
  Fp8DelayedScale cols_delayed;
};

// An axis's decode scale as the reference computes it (block_scaling.h): current scaling from
// the amax, delayed scaling from the axis's window (the amax still decides a non-finite tensor).
__device__ __forceinline__ float axis_scale(const Fp8DelayedScale& delayed, float amax, bool nonfinite,
                                            MinifloatFormat f) {
  if (delayed.window != nullptr) return fp8_delayed_scale(*delayed.window, amax, nonfinite, delayed.margin, f);
  return fp8_tensor_scale(nonfinite ? quiet_nan() : amax, f);
}

// Pass 2: the codes of a 64 x 64 tile along rows (KR) and down columns (KC).
template <typename InT, int KR, int KC>
__global__ void __launch_bounds__(kThreads)
    fp8_cast_kernel(const InT* in, int64_t rows, int64_t cols, const unsigned int* slot, CastOutputs out) {
  __shared__ __align__(16) uint8_t transposed[kTile * kPitch];
  const unsigned int bits = *slot;
  const bool nonfinite = bits >= 0x7F800000u;
  const float amax = nonfinite ? 0.0f : bits_float(bits);
  // The decode scales as the reference computes them (block_scaling.h).
  const float dr = KR ? axis_scale(out.rows_delayed, amax, nonfinite, minifloat_of(KR)) : 1.0f;
  const float dc = KC ? axis_scale(out.cols_delayed, amax, nonfinite, minifloat_of(KC)) : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    if (KR) *out.rows_scale = dr;
    if (KC) *out.cols_scale = dc;
    // Delayed scaling: this tensor's amax into each axis's instance (a maximum over the step).
    const int32_t recorded = fp8_amax_record(amax, nonfinite);
    if (KR && out.rows_delayed.record != nullptr) atomicMax(out.rows_delayed.record, recorded);
    if (KC && out.cols_delayed.record != nullptr) atomicMax(out.cols_delayed.record, recorded);
  }
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int lr = threadIdx.x / (kTile / kVec);
  const int lc = (threadIdx.x % (kTile / kVec)) * kVec;
  const bool inside = r0 + lr < rows && c0 + lc < cols;
  uint32_t wr[4], wc[4];
  if (inside) {
    float v[kVec];
    load16(in + (r0 + lr) * cols + c0 + lc, v);
    if constexpr (KR != kNoCodes) {
      encode16<KR>(v, dr, nonfinite, wr);
      *reinterpret_cast<uint4*>(out.rows_codes + (r0 + lr) * cols + c0 + lc) = make_uint4(wr[0], wr[1], wr[2], wr[3]);
    }
    if constexpr (KC != kNoCodes) {
      if constexpr (KC == KR) {
#pragma unroll
        for (int i = 0; i < 4; ++i) wc[i] = wr[i];  // one format: the same codes
      } else {
        encode16<KC>(v, dc, nonfinite, wc);
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) transposed[(lc + i) * kPitch + lr] = static_cast<uint8_t>(wc[i / 4] >> (8 * (i % 4)));
    }
  }
  if constexpr (KC != kNoCodes) {
    __syncthreads();
    // Now a thread owns 16 consecutive rows of one column: a run of one transposed line.
    const int tc = threadIdx.x / (kTile / kVec);
    const int tr = (threadIdx.x % (kTile / kVec)) * kVec;
    if (c0 + tc < cols && r0 + tr < rows) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(transposed + tc * kPitch + tr);
      *reinterpret_cast<uint4*>(out.cols_codes + (c0 + tc) * rows + r0 + tr) = make_uint4(src[0], src[1], src[2], src[3]);
    }
  }
}

int kind_of(const Fp8CastAxis* a) {
  if (a == nullptr) return kNoCodes;
  return a->spec.format == QuantFormat::kFP8E4M3 ? kE4M3Codes : kE5M2Codes;
}

template <typename InT, int KR, int KC>
void launch_cast(const Fp8CastJob& job, const unsigned int* slot, gpuStream_t stream) {
  const CastOutputs out{job.along_rows ? job.along_rows->codes : nullptr,
                        job.along_rows ? job.along_rows->decode_scale : nullptr,
                        job.down_cols ? job.down_cols->codes : nullptr,
                        job.down_cols ? job.down_cols->decode_scale : nullptr,
                        job.along_rows ? job.along_rows->delayed : Fp8DelayedScale{},
                        job.down_cols ? job.down_cols->delayed : Fp8DelayedScale{}};
  const dim3 grid(static_cast<unsigned>((job.cols + kTile - 1) / kTile), static_cast<unsigned>((job.rows + kTile - 1) / kTile));
  fp8_cast_kernel<InT, KR, KC><<<grid, kThreads, 0, stream>>>(static_cast<const InT*>(job.input), job.rows, job.cols,
                                                                slot, out);
}

template <typename InT, int KR>
void launch_cast_cols(const Fp8CastJob& job, const unsigned int* slot, gpuStream_t stream) {
  switch (kind_of(job.down_cols)) {
    case kNoCodes: return launch_cast<InT, KR, kNoCodes>(job, slot, stream);
    case kE4M3Codes: return launch_cast<InT, KR, kE4M3Codes>(job, slot, stream);
    default: return launch_cast<InT, KR, kE5M2Codes>(job, slot, stream);
  }
}

template <typename InT>
void run(const Fp8CastJob& job, gpuStream_t stream) {
  auto* slot = static_cast<unsigned int*>(job.workspace);
  check(gpuMemsetAsync(slot, 0, sizeof(unsigned int), stream), "clearing the FP8 amax");
  const int64_t chunks = job.rows * job.cols / kVec;
  const int64_t blocks = std::min<int64_t>((chunks + kThreads - 1) / kThreads, kMaxAmaxBlocks);
  fp8_amax_kernel<InT><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<const InT*>(job.input), chunks,
                                                                               slot);
  switch (kind_of(job.along_rows)) {
    case kNoCodes: launch_cast_cols<InT, kNoCodes>(job, slot, stream); break;
    case kE4M3Codes: launch_cast_cols<InT, kE4M3Codes>(job, slot, stream); break;
    default: launch_cast_cols<InT, kE5M2Codes>(job, slot, stream); break;
  }
  check(gpuGetLastError(), "launching the FP8 cast");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string axis_problem(const Fp8CastAxis& a, const char* where) {
  const std::string w = std::string("the fast FP8 cast ") + where + ": ";
  if (a.spec.format != QuantFormat::kFP8E4M3 && a.spec.format != QuantFormat::kFP8E5M2)
    return w + "needs fp8-e4m3 or fp8-e5m2, got " + std::string(to_string(a.spec.format));
  if (a.spec.rounding != Rounding::kNearest) return w + "rounds to nearest only (stochastic rounding asked for)";
  if (a.spec.hadamard != HadamardMode::kNone) return w + "takes no rotation";
  if (a.codes == nullptr || !aligned16(a.codes)) return w + "needs a 16-byte-aligned code buffer";
  if (a.decode_scale == nullptr) return w + "needs a decode-scale pointer";
  const std::string delayed = fp8_delayed_problem(a.delayed, a.spec.format);
  if (!delayed.empty()) return w + delayed;
  return {};
}

}  // namespace

std::string fp8_cast_unsupported_reason(const Fp8CastJob& job) {
  if (job.along_rows == nullptr && job.down_cols == nullptr) return "the fast FP8 cast: no axis asked for";
  if (job.input == nullptr || !aligned16(job.input)) return "the fast FP8 cast needs a 16-byte-aligned input";
  if (job.workspace == nullptr) return "the fast FP8 cast needs its workspace";
  if (job.rows <= 0 || job.cols <= 0 || job.rows % kVec != 0 || job.cols % kVec != 0)
    return "the fast FP8 cast needs both dimensions to be positive multiples of 16, got " + std::to_string(job.rows) +
           " x " + std::to_string(job.cols);
  if ((job.rows + kTile - 1) / kTile > 65535) return "the fast FP8 cast takes at most 65535 * 64 rows";
  if (job.along_rows) {
    const std::string p = axis_problem(*job.along_rows, "along rows");
    if (!p.empty()) return p;
  }
  if (job.down_cols) {
    const std::string p = axis_problem(*job.down_cols, "down columns");
    if (!p.empty()) return p;
  }
  return {};
}

void fp8_cast(const Fp8CastJob& job, void* stream_handle) {
  const std::string problem = fp8_cast_unsupported_reason(job);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const auto stream = static_cast<gpuStream_t>(stream_handle);
  if (job.input_type == InputType::kBFloat16) {
    run<uint16_t>(job, stream);
  } else {
    run<float>(job, stream);
  }
}

}  // namespace mxablate::kernels::gpu
