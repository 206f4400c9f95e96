// The fused kernels of the trainer's common path (docs/design.md §4): RMSNorm, SwiGLU, RoPE and
// cross-entropy, forward and backward, with their host-side contract checks and launchers. The
// API and the numerics contract are in mxablate/kernels/gpu/fused_ops_gpu.h; the LibTorch
// references they are tested against in kernels/torch (fused_ops.cpp).
//
// Conventions: storage is float32 or bf16 (uint16_t bits), math is float32; every reduction has
// a fixed shape that depends on the problem's shape only (warp butterflies over the runtime
// warpSize, then warps in index order), so results are reproducible bit for bit; no atomics.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/fused_ops_gpu.h"
#include "mxablate/kernels/minifloat.h"
#include "online_lse.h"
#include "swiglu_math.h"

namespace mxablate::kernels::gpu {
namespace {

using Bf16 = uint16_t;

// Threads per block everywhere: a multiple of every warp width (32 on NVIDIA, 64 on AMD CDNA).
constexpr int kThreads = 256;
// Per-warp scratch slots a block needs at most: warps are 32 lanes or wider, never narrower.
constexpr int kMaxWarps = kThreads / 32;
// Grid-stride kernels never launch more blocks than this; the loops cover the rest.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;
// RMSNorm backward: at most this many blocks, hence dweight partials (a function of the shape
// only: the partials' summation order must not depend on the GPU).
constexpr int64_t kRmsNormPartials = 1024;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(Bf16 v) { return bf16_bits_to_float(v); }

__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(Bf16* p, int64_t i, float v) { p[i] = float_to_bf16_bits(v); }

// ---- Vectorized access ----------------------------------------------------------------------------
// The elementwise kernels move kVec elements per thread and access (16 bytes of bf16, 32 of
// float32) through 16-byte loads and stores when every pointer is 16-byte aligned (aligned16);
// otherwise, and for the last n % kVec elements, they take the scalar loop. Both loops call the
// same per-element function, so the path never changes a bit. N elements starting at a multiple
// of N elements: float32 in float4 chunks; bf16 in one 8-byte chunk (N = 4) or 16-byte chunks.
constexpr int kVec = 8;

template <int N>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float (&out)[N]) {
  static_assert(N % 4 == 0, "float32 vectors are whole float4s");
#pragma unroll
  for (int c = 0; c < N / 4; ++c) {
    const float4 f = reinterpret_cast<const float4*>(p)[c];
    out[4 * c] = f.x;
    out[4 * c + 1] = f.y;
    out[4 * c + 2] = f.z;
    out[4 * c + 3] = f.w;
  }
}

// Little-endian: the element at the lower address is the word's low half.
__device__ __forceinline__ void unpack_bf16(uint32_t word, float* out) {
  out[0] = bf16_bits_to_float(static_cast<Bf16>(word & 0xFFFFu));
  out[1] = bf16_bits_to_float(static_cast<Bf16>(word >> 16));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16_bits(lo)) | (static_cast<uint32_t>(float_to_bf16_bits(hi)) << 16);
}

template <int N>
__device__ __forceinline__ void load_vec(const Bf16* __restrict__ p, float (&out)[N]) {
  static_assert(N == 4 || N % 8 == 0, "bf16 vectors are one uint2 or whole uint4s");
  if constexpr (N == 4) {
    const uint2 r = *reinterpret_cast<const uint2*>(p);
    unpack_bf16(r.x, out);
    unpack_bf16(r.y, out + 2);
  } else {
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      const uint4 r = reinterpret_cast<const uint4*>(p)[c];
      unpack_bf16(r.x, out + 8 * c);
      unpack_bf16(r.y, out + 8 * c + 2);
      unpack_bf16(r.z, out + 8 * c + 4);
      unpack_bf16(r.w, out + 8 * c + 6);
    }
  }
}

// One 16-byte store. nvcc splits some uint4/float4 stores into 32-bit ones (seen in RoPE's PTX),
// so on CUDA the vector store is spelled out; hipcc gets the plain store.
__device__ __forceinline__ void store16(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if MXABLATE_GPU_HIP
  *reinterpret_cast<uint4*>(p) = make_uint4(a, b, c, d);
#else
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d));
#endif
}

template <int N>
__device__ __forceinline__ void store_vec(float* __restrict__ p, const float (&v)[N]) {
  static_assert(N % 4 == 0, "float32 vectors are whole float4s");
#pragma unroll
  for (int c = 0; c < N / 4; ++c)
    store16(p + 4 * c, __float_as_uint(v[4 * c]), __float_as_uint(v[4 * c + 1]), __float_as_uint(v[4 * c + 2]),
            __float_as_uint(v[4 * c + 3]));
}

template <int N>
__device__ __forceinline__ void store_vec(Bf16* __restrict__ p, const float (&v)[N]) {
  static_assert(N == 4 || N % 8 == 0, "bf16 vectors are one uint2 or whole uint4s");
  if constexpr (N == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
  } else {
#pragma unroll
    for (int c = 0; c < N / 8; ++c)
      store16(p + 8 * c, pack_bf16(v[8 * c], v[8 * c + 1]), pack_bf16(v[8 * c + 2], v[8 * c + 3]),
              pack_bf16(v[8 * c + 4], v[8 * c + 5]), pack_bf16(v[8 * c + 6], v[8 * c + 7]));
  }
}

// Sum over the block, the same value in every thread and the same bits on every call: warps
// reduce by butterfly, then each thread adds the warps' sums in warp order. `scratch` holds one
// float per warp; the leading barrier lets a caller reuse it row after row.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = static_cast<int>(threadIdx.x / warpSize), lane = static_cast<int>(threadIdx.x % warpSize);
  const int warps = static_cast<int>(blockDim.x / warpSize);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

// ---- RMSNorm ------------------------------------------------------------------------------------

// Elements of a row one lane loads before it uses any (RMSNorm's forward): enough loads in flight
// to keep memory busy with one warp per row.
constexpr int kNormForwardUnroll = 8;

// One warp per row (grid-stride over rows): sum of squares by lane-strided partials and a
// butterfly, then y = (x * rstd) * w, the unfused formula's order. Lane l adds the squares of its
// columns l, l + warpSize, ... in that order, whatever the unrolling (which only batches the
// loads). With a branch (x float32), the row normalized is h = x + branch, which the first pass
// writes and the second reads back (the same lane's own stores).
template <typename XT, typename YT, typename BT>
__global__ void rmsnorm_forward_kernel(const XT* __restrict__ x, const BT* __restrict__ branch,
                                       const float* __restrict__ w, int64_t rows, int64_t cols, float eps,
                                       YT* __restrict__ y, float* __restrict__ rstd, float* __restrict__ h) {
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  const int64_t warps_per_block = blockDim.x / warpSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  const int64_t chunk = static_cast<int64_t>(kNormForwardUnroll) * warpSize;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / warpSize; r < rows; r += stride) {
    const XT* xr = x + r * cols;
    const BT* br = branch == nullptr ? nullptr : branch + r * cols;
    float* hr = branch == nullptr ? nullptr : h + r * cols;
    float ss = 0.0f;
    for (int64_t j0 = lane; j0 < cols; j0 += chunk) {
      float v[kNormForwardUnroll];
#pragma unroll
      for (int u = 0; u < kNormForwardUnroll; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(u) * warpSize;
        v[u] = j < cols ? to_float(xr[j]) : 0.0f;
      }
      if (br != nullptr) {
#pragma unroll
        for (int u = 0; u < kNormForwardUnroll; ++u) {
          const int64_t j = j0 + static_cast<int64_t>(u) * warpSize;
          if (j < cols) {
            v[u] = v[u] + to_float(br[j]);
            hr[j] = v[u];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kNormForwardUnroll; ++u)
        if (j0 + static_cast<int64_t>(u) * warpSize < cols) ss += v[u] * v[u];
    }
    ss = warp_sum(ss);
    const float rs = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
    if (lane == 0) rstd[r] = rs;
    for (int64_t j0 = lane; j0 < cols; j0 += chunk) {
      float v[kNormForwardUnroll], wv[kNormForwardUnroll];
#pragma unroll
      for (int u = 0; u < kNormForwardUnroll; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(u) * warpSize;
        v[u] = j >= cols ? 0.0f : hr != nullptr ? hr[j] : to_float(xr[j]);
        wv[u] = j < cols ? w[j] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kNormForwardUnroll; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(u) * warpSize;
        if (j < cols) store(y, r * cols + j, (v[u] * rs) * wv[u]);
      }
    }
  }
}

// rmsnorm_forward_kernel with 16-byte accesses, bit for bit. Lane l loads the kNormFwdVec
// consecutive columns of its vector in each chunk of warpSize vectors, but the sum of squares must
// stay lane-strided (lane l adds columns l, l + warpSize, ... in order), so each chunk passes
// through the warp's slice of shared memory, from which lane l reads its strided columns back. The
// second pass is elementwise, so it keeps the vectors. Needs cols % kNormFwdVec == 0 and every
// pointer 16-byte aligned; shared memory: kNormFwdVec floats a thread.
constexpr int kNormFwdVec = 8;
// Chunks a lane loads before it uses any: 2 x 48 bytes in flight a lane with a bf16 branch.
constexpr int kNormFwdBatch = 2;
// Blocks a multiprocessor should hold at once (registers capped to fit; ptxas spills nothing).
constexpr int kNormFwdBlocksPerSM = 4;

// Where column i of a chunk sits in the warp's slice: bit 2 flipped by bit 5, so that the
// 16-byte writes of eight consecutive lanes and the 4-byte reads of a warp's strided columns
// both meet 32 distinct banks (a bijection on every aligned 64 columns).
__device__ __forceinline__ int norm_stage_slot(int i) { return i ^ (((i >> 5) & 1) << 2); }

template <typename XT, typename YT, typename BT>
__global__ void __launch_bounds__(kThreads, kNormFwdBlocksPerSM)
    rmsnorm_forward_vec_kernel(const XT* __restrict__ x, const BT* __restrict__ branch, const float* __restrict__ w,
                               int64_t rows, int64_t cols, float eps, YT* __restrict__ y, float* __restrict__ rstd,
                               float* __restrict__ h) {
  extern __shared__ float4 norm_stage_mem[];
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  const int chunk = warpSize * kNormFwdVec;
  float* stage = reinterpret_cast<float*>(norm_stage_mem) + static_cast<int64_t>(threadIdx.x / warpSize) * chunk;
  const int64_t warps_per_block = blockDim.x / warpSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / warpSize; r < rows; r += stride) {
    const XT* xr = x + r * cols;
    const BT* br = branch == nullptr ? nullptr : branch + r * cols;
    float* hr = branch == nullptr ? nullptr : h + r * cols;
    float ss = 0.0f;
    for (int64_t c0 = 0; c0 < cols; c0 += static_cast<int64_t>(kNormFwdBatch) * chunk) {
      float v[kNormFwdBatch][kNormFwdVec];
#pragma unroll
      for (int b = 0; b < kNormFwdBatch; ++b) {
        const int64_t j = c0 + b * chunk + lane * kNormFwdVec;
        if (j < cols) {
          load_vec(xr + j, v[b]);
        } else {
#pragma unroll
          for (int e = 0; e < kNormFwdVec; ++e) v[b][e] = 0.0f;
        }
      }
      if (br != nullptr) {
#pragma unroll
        for (int b = 0; b < kNormFwdBatch; ++b) {
          const int64_t j = c0 + b * chunk + lane * kNormFwdVec;
          if (j < cols) {
            float bv[kNormFwdVec];
            load_vec(br + j, bv);
#pragma unroll
            for (int e = 0; e < kNormFwdVec; ++e) v[b][e] = v[b][e] + bv[e];
            store_vec(hr + j, v[b]);
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kNormFwdBatch; ++b) {
        const int i0 = lane * kNormFwdVec;
        warp_barrier();  // the lanes' reads of the last chunk are done
        *reinterpret_cast<float4*>(stage + norm_stage_slot(i0)) = make_float4(v[b][0], v[b][1], v[b][2], v[b][3]);
        *reinterpret_cast<float4*>(stage + norm_stage_slot(i0 + 4)) = make_float4(v[b][4], v[b][5], v[b][6], v[b][7]);
        warp_barrier();
        const int64_t base = c0 + b * chunk;
#pragma unroll
        for (int u = 0; u < kNormFwdVec; ++u) {
          const int i = lane + u * warpSize;
          if (base + i < cols) {
            const float t = stage[norm_stage_slot(i)];
            ss += t * t;
          }
        }
      }
    }
    ss = warp_sum(ss);
    const float rs = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
    if (lane == 0) rstd[r] = rs;
    for (int64_t j = static_cast<int64_t>(lane) * kNormFwdVec; j < cols; j += chunk) {
      float v[kNormFwdVec], wv[kNormFwdVec];
      if (hr != nullptr) {
        load_vec(hr + j, v);
      } else {
        load_vec(xr + j, v);
      }
      load_vec(w + j, wv);
#pragma unroll
      for (int e = 0; e < kNormFwdVec; ++e) v[e] = (v[e] * rs) * wv[e];
      store_vec(y + r * cols + j, v);
    }
  }
}

// The residual stream's gradient at one element of the norm's input: the norm's own dx plus dres
// (the other readers' gradient, when given; one float32 add, autograd's sum), stored as dx and,
// when asked, as dbranch in its storage type.
template <typename BT>
__device__ __forceinline__ float residual_grad(float own, const float* __restrict__ dres, int64_t i,
                                               BT* __restrict__ dbranch) {
  const float total = dres == nullptr ? own : dres[i] + own;
  if (dbranch != nullptr) store(dbranch, i, total);
  return total;
}

// One block per chunk of rows; thread t owns the columns j = t (mod blockDim) and accumulates
// their dweight in shared memory, so no two threads ever add into one place. Per row:
//   g = dy * w,  dot = sum(g * x),  dx = rstd * g - x * (rstd^3 * dot / cols)
// and the block's dweight partial += dy * x * rstd, written out at the end.
template <typename DT, typename XT, typename BT>
__global__ void rmsnorm_backward_kernel(const DT* __restrict__ dy, const XT* __restrict__ x,
                                        const float* __restrict__ w, const float* __restrict__ rstd,
                                        int64_t rows, int64_t cols, int64_t rows_per_block,
                                        float* __restrict__ dx, float* __restrict__ partial,
                                        const float* __restrict__ dres, BT* __restrict__ dbranch) {
  extern __shared__ float acc[];  // cols
  __shared__ float scratch[kMaxWarps];
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc[j] = 0.0f;
  const int64_t begin = blockIdx.x * rows_per_block;
  const int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
  for (int64_t r = begin; r < end; ++r) {
    const DT* dyr = dy + r * cols;
    const XT* xr = x + r * cols;
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += (to_float(dyr[j]) * w[j]) * to_float(xr[j]);
    dot = block_sum(dot, scratch);
    const float coef = ((rs * rs) * rs) * (dot / static_cast<float>(cols));
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float d = to_float(dyr[j]), v = to_float(xr[j]);
      dx[r * cols + j] = residual_grad(rs * (d * w[j]) - v * coef, dres, r * cols + j, dbranch);
      acc[j] += (d * v) * rs;
    }
  }
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) partial[blockIdx.x * cols + j] = acc[j];
}

// Columns per vector of rmsnorm_backward_vec_kernel: 16 bytes of float32 x and dx, 8 of bf16 dy.
constexpr int kNormVec = 4;
// The most column vectors one thread holds in registers; longer rows take the scalar kernel.
constexpr int kNormMaxSlots = 4;

// Blocks of rmsnorm_backward_vec_kernel a multiprocessor should hold at once. The grid is
// rmsnorm_parts(rows) blocks (1,024 at a training step's shapes), so at three blocks a
// multiprocessor 132 multiprocessors run it in three waves, at four in two; the registers are
// capped to fit (ptxas spills nothing). The weight is read from L1 each row, not held.
template <int kSlots>
inline constexpr int kNormBackBlocksPerSM = kSlots <= 2 ? 4 : 2;

// One column vector of rmsnorm_backward_vec_kernel as loaded, unconverted (bf16 stays packed, so
// the rows held for the next iteration take half the registers).
template <typename T>
struct NormRawVec;
template <>
struct NormRawVec<float> {
  float4 v;
  __device__ __forceinline__ void load(const float* __restrict__ p) { v = *reinterpret_cast<const float4*>(p); }
  __device__ __forceinline__ void unpack(float (&out)[kNormVec]) const {
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  }
};
template <>
struct NormRawVec<Bf16> {
  uint2 v;
  __device__ __forceinline__ void load(const Bf16* __restrict__ p) { v = *reinterpret_cast<const uint2*>(p); }
  __device__ __forceinline__ void unpack(float (&out)[kNormVec]) const {
    unpack_bf16(v.x, out);
    unpack_bf16(v.y, out + 2);
  }
};

// Loads the thread's column vectors sv = threadIdx.x + k * blockDim.x of one row.
template <typename T, int kSlots>
__device__ __forceinline__ void load_row_slots(const T* __restrict__ row, int nvec, NormRawVec<T> (&out)[kSlots]) {
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int sv = static_cast<int>(threadIdx.x + k * blockDim.x);
    if (sv < nvec) out[k].load(row + sv * kNormVec);
  }
}

// rmsnorm_backward_kernel's arithmetic, bit for bit, with 16-byte accesses: thread s owns the
// column vectors s, s + blockDim, ... (kSlots of them cover the row), loads dy and x once per row
// (the next row's while the block reduces this one) and stores dx as vectors. The dot product
// keeps the scalar kernel's order exactly: every column's product goes to shared memory, then
// thread t adds those of its scalar columns t, t + blockDim, ... in that order and calls the same
// block_sum. dweight: each column's partial adds its rows in row order, as in the scalar kernel
// (which thread owns a column does not change a bit). Needs cols % kNormVec == 0 and 16-byte
// aligned dy, x, weight, dx and (where given) dres and dbranch.
template <typename DT, typename XT, typename BT, int kSlots>
__global__ void __launch_bounds__(kThreads, kNormBackBlocksPerSM<kSlots>)
    rmsnorm_backward_vec_kernel(const DT* __restrict__ dy, const XT* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ rstd, int64_t rows, int64_t cols, int64_t rows_per_block,
                                float* __restrict__ dx, float* __restrict__ partial, const float* __restrict__ dres,
                                BT* __restrict__ dbranch) {
  extern __shared__ float smem[];  // acc[cols], then prod[cols]
  float* acc = smem;
  float* prod = smem + cols;
  __shared__ float scratch[kMaxWarps];
  const int nvec = static_cast<int>(cols / kNormVec);  // cols <= kRmsNormMaxCols: int indices
  NormRawVec<DT> dv[kSlots], dn[kSlots];  // this row's and the next row's (dn unread after the last)
  NormRawVec<XT> xv[kSlots], xn[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int sv = static_cast<int>(threadIdx.x + k * blockDim.x);
    if (sv < nvec) {
#pragma unroll
      for (int e = 0; e < kNormVec; ++e) acc[sv * kNormVec + e] = 0.0f;
    }
  }
  const int64_t begin = blockIdx.x * rows_per_block;
  const int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
  if (begin < end) {
    load_row_slots(dy + begin * cols, nvec, dv);
    load_row_slots(x + begin * cols, nvec, xv);
  }
  for (int64_t r = begin; r < end; ++r) {
    const float rs = rstd[r];
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int sv = static_cast<int>(threadIdx.x + k * blockDim.x);
      if (sv < nvec) {
        float wv[kNormVec], d[kNormVec], v[kNormVec];
        load_vec(w + sv * kNormVec, wv);
        dv[k].unpack(d);
        xv[k].unpack(v);
#pragma unroll
        for (int e = 0; e < kNormVec; ++e) prod[sv * kNormVec + e] = (d[e] * wv[e]) * v[e];
      }
    }
    __syncthreads();
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += prod[j];
    if (r + 1 < end) {
      load_row_slots(dy + (r + 1) * cols, nvec, dn);
      load_row_slots(x + (r + 1) * cols, nvec, xn);
    }
    dot = block_sum(dot, scratch);  // its barriers also end this row's reads of prod
    const float coef = ((rs * rs) * rs) * (dot / static_cast<float>(cols));
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int sv = static_cast<int>(threadIdx.x + k * blockDim.x);
      if (sv < nvec) {
        float out[kNormVec], wv[kNormVec], dk[kNormVec], xk[kNormVec];
        load_vec(w + sv * kNormVec, wv);
        dv[k].unpack(dk);
        xv[k].unpack(xk);
#pragma unroll
        for (int e = 0; e < kNormVec; ++e) {
          const float d = dk[e], v = xk[e];
          out[e] = rs * (d * wv[e]) - v * coef;
          acc[sv * kNormVec + e] += (d * v) * rs;
        }
        const int64_t at = r * cols + sv * kNormVec;
        if (dres != nullptr) {
          float other[kNormVec];
          load_vec(dres + at, other);
#pragma unroll
          for (int e = 0; e < kNormVec; ++e) out[e] = other[e] + out[e];
        }
        store_vec(dx + at, out);
        if (dbranch != nullptr) store_vec(dbranch + at, out);
      }
      dv[k] = dn[k];
      xv[k] = xn[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int sv = static_cast<int>(threadIdx.x + k * blockDim.x);
    if (sv < nvec) {
#pragma unroll
      for (int e = 0; e < kNormVec; ++e) partial[blockIdx.x * cols + sv * kNormVec + e] = acc[sv * kNormVec + e];
    }
  }
}

// out = float32(in) over n elements: kVec per thread through 16-byte accesses when aligned, the
// scalar loop for the rest.
__global__ void widen_bf16_kernel(const Bf16* __restrict__ in, int64_t n, int64_t vec_n, float* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float f[kVec];
    load_vec(in + v * kVec, f);
    store_vec(out + v * kVec, f);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) out[i] = to_float(in[i]);
}

// out = x + branch over n elements: kVec per thread through 16-byte accesses when aligned, the
// scalar loop for the rest (the same per-element add either way).
template <typename BT>
__global__ void residual_add_kernel(const float* __restrict__ x, const BT* __restrict__ branch, int64_t n,
                                    int64_t vec_n, float* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float xv[kVec], bv[kVec];
    load_vec(x + v * kVec, xv);
    load_vec(branch + v * kVec, bv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) xv[k] = xv[k] + bv[k];
    store_vec(out + v * kVec, xv);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) out[i] = x[i] + to_float(branch[i]);
}

// dweight[j] = the sum of column j's partials, in a fixed order: a block covers kSumCols columns
// with kSumGroups groups of threads; group k adds partials k, k + kSumGroups, ... (coalesced rows,
// independent loads), then thread k = 0 adds the groups' sums in group order.
constexpr int kSumCols = 32;
constexpr int kSumGroups = kThreads / kSumCols;

__global__ void sum_partials_kernel(const float* __restrict__ partial, int64_t parts, int64_t cols,
                                    float* __restrict__ out) {
  __shared__ float group_sum[kSumGroups][kSumCols];
  const int c = static_cast<int>(threadIdx.x % kSumCols), k = static_cast<int>(threadIdx.x / kSumCols);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSumCols + c;
  float total = 0.0f;
  if (j < cols) {
#pragma unroll 4
    for (int64_t b = k; b < parts; b += kSumGroups) total += partial[b * cols + j];
  }
  group_sum[k][c] = total;
  __syncthreads();
  if (k == 0 && j < cols) {
    float sum = 0.0f;
    for (int g = 0; g < kSumGroups; ++g) sum += group_sum[g][c];
    out[j] = sum;
  }
}

// ---- SwiGLU (swiglu_math.h: ATen's silu and silu_backward formulas) ----------------------------

using detail::swiglu_grads;
using detail::swiglu_h;

// Elements [0, vec_n) in kVec-element vectors (vec_n a multiple of kVec, 0 when a pointer is not
// 16-byte aligned), then [vec_n, n) one at a time; both grid-stride.
template <typename IT, typename HT>
__global__ void swiglu_forward_kernel(const IT* __restrict__ g, const IT* __restrict__ u, int64_t n, int64_t vec_n,
                                      HT* __restrict__ h) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float gv[kVec], uv[kVec], hv[kVec];
    load_vec(g + v * kVec, gv);
    load_vec(u + v * kVec, uv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) hv[k] = swiglu_h(gv[k], uv[k]);
    store_vec(h + v * kVec, hv);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) store(h, i, swiglu_h(to_float(g[i]), to_float(u[i])));
}

template <typename DT, typename IT, typename GT>
__global__ void swiglu_backward_kernel(const DT* __restrict__ dh, const IT* __restrict__ g,
                                       const IT* __restrict__ u, int64_t n, int64_t vec_n, GT* __restrict__ dg,
                                       GT* __restrict__ du) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float d[kVec], gv[kVec], uv[kVec], dgv[kVec], duv[kVec];
    load_vec(dh + v * kVec, d);
    load_vec(g + v * kVec, gv);
    load_vec(u + v * kVec, uv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) swiglu_grads(d[k], gv[k], uv[k], dgv[k], duv[k]);
    store_vec(dg + v * kVec, dgv);
    store_vec(du + v * kVec, duv);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) {
    float dgi, dui;
    swiglu_grads(to_float(dh[i]), to_float(g[i]), to_float(u[i]), dgi, dui);
    store(dg, i, dgi);
    store(du, i, dui);
  }
}

// ---- RoPE ---------------------------------------------------------------------------------------

struct RopeShape {
  int64_t xs[3], ys[3];
  int64_t heads, seq, half;
};

// The rotation of one pair, shared by the vector and the scalar kernels.
template <bool kInverse>
__device__ __forceinline__ void rope_pair(float x1, float x2, float c, float sn, float& y1, float& y2) {
  if (kInverse) {
    y1 = x1 * c + x2 * sn;
    y2 = x2 * c - x1 * sn;
  } else {
    y1 = x1 * c - x2 * sn;
    y2 = x1 * sn + x2 * c;
  }
}

// One thread per (b, h, t, i < half) pair, i fastest: a warp reads and writes runs of `half`
// consecutive elements in both layouts. The pair index is split with IndexT arithmetic: 32-bit
// division is several times cheaper than 64-bit, and every realistic tensor has < 2^32 pairs.
// The fallback of rope_vec_kernel (half % kVec != 0, or unaligned pointers or strides).
template <typename XT, typename YT, bool kInverse, typename IndexT>
__global__ void rope_kernel(const XT* __restrict__ x, YT* __restrict__ y, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, RopeShape s, int64_t pairs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto half = static_cast<IndexT>(s.half), seq = static_cast<IndexT>(s.seq), heads = static_cast<IndexT>(s.heads);
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    IndexT q = static_cast<IndexT>(p);
    const int64_t i = q % half;
    q /= half;
    const int64_t t = q % seq;
    q /= seq;
    const int64_t h = q % heads;
    const int64_t b = q / heads;
    const int64_t xo = b * s.xs[0] + h * s.xs[1] + t * s.xs[2] + i;
    const int64_t yo = b * s.ys[0] + h * s.ys[1] + t * s.ys[2] + i;
    float y1, y2;
    rope_pair<kInverse>(to_float(x[xo]), to_float(x[xo + s.half]), cos_t[t * s.half + i], sin_t[t * s.half + i], y1, y2);
    store(y, yo, y1);
    store(y, yo + s.half, y2);
  }
}

// One thread per kVec consecutive pairs (i = kVec*k .. kVec*k + kVec-1 of one (b, h, t)): the
// half / kVec threads of a (b, h, t) are neighbours, and the index split is done once per vector
// instead of once per pair. Requires half % kVec == 0, 16-byte aligned x, y, cos and sin, and
// (b, h, t) strides that are multiples of kVec elements (so every vector starts 16-byte aligned).
template <typename XT, typename YT, bool kInverse, typename IndexT>
__global__ void rope_vec_kernel(const XT* __restrict__ x, YT* __restrict__ y, const float* __restrict__ cos_t,
                                const float* __restrict__ sin_t, RopeShape s, int64_t vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto groups = static_cast<IndexT>(s.half / kVec), seq = static_cast<IndexT>(s.seq),
             heads = static_cast<IndexT>(s.heads);
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < vectors; p += stride) {
    IndexT q = static_cast<IndexT>(p);
    const int64_t i = static_cast<int64_t>(q % groups) * kVec;
    q /= groups;
    const int64_t t = q % seq;
    q /= seq;
    const int64_t h = q % heads;
    const int64_t b = q / heads;
    const int64_t xo = b * s.xs[0] + h * s.xs[1] + t * s.xs[2] + i;
    const int64_t yo = b * s.ys[0] + h * s.ys[1] + t * s.ys[2] + i;
    float x1[kVec], x2[kVec], c[kVec], sn[kVec], y1[kVec], y2[kVec];
    load_vec(x + xo, x1);
    load_vec(x + xo + s.half, x2);
    load_vec(cos_t + t * s.half + i, c);
    load_vec(sin_t + t * s.half + i, sn);
#pragma unroll
    for (int k = 0; k < kVec; ++k) rope_pair<kInverse>(x1[k], x2[k], c[k], sn[k], y1[k], y2[k]);
    store_vec(y + yo, y1);
    store_vec(y + yo + s.half, y2);
  }
}

// ---- Cross-entropy ------------------------------------------------------------------------------

// One block per row (grid-stride over rows): one read of the row, online max and sum.
template <typename LT>
__global__ void cross_entropy_forward_kernel(const LT* __restrict__ logits, const int64_t* __restrict__ targets,
                                             int64_t rows, int64_t vocab, float* __restrict__ loss,
                                             float* __restrict__ lse) {
  __shared__ float sm[kMaxWarps], ss[kMaxWarps];
  const int warp = static_cast<int>(threadIdx.x / warpSize), lane = static_cast<int>(threadIdx.x % warpSize);
  const int warps = static_cast<int>(blockDim.x / warpSize);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const LT* row = logits + r * vocab;
    OnlineLse acc;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) acc.add(to_float(row[j]));
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
      const float m2 = shfl_xor(acc.m, offset, warpSize), s2 = shfl_xor(acc.s, offset, warpSize);
      acc.merge(m2, s2);
    }
    __syncthreads();  // the previous row's readers are done with sm/ss
    if (lane == 0) {
      sm[warp] = acc.m;
      ss[warp] = acc.s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      OnlineLse total;
      for (int w = 0; w < warps; ++w) total.merge(sm[w], ss[w]);
      const float l = total.value();
      const int64_t t = targets[r];
      lse[r] = l;
      loss[r] = (t >= 0 && t < vocab) ? l - to_float(row[t]) : NAN;
    }
  }
}

// One block per row: dlogits = (exp(v - lse) - onehot) * (grad / rows), one read and one write.
template <typename LT>
__global__ void cross_entropy_backward_kernel(const LT* __restrict__ logits, const int64_t* __restrict__ targets,
                                              const float* __restrict__ lse, const float* __restrict__ grad,
                                              int64_t rows, int64_t vocab, LT* __restrict__ dlogits) {
  const float scale = grad[0] / static_cast<float>(rows);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const LT* row = logits + r * vocab;
    const int64_t t = targets[r];
    const bool valid = t >= 0 && t < vocab;
    const float l = lse[r];
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float p = expf(to_float(row[j]) - l);
      const float d = valid ? (j == t ? p - 1.0f : p) * scale : NAN;
      store(dlogits, r * vocab + j, d);
    }
  }
}

// ---- Host side ----------------------------------------------------------------------------------

// Calls f with a value of the storage type `t` names (float or Bf16), so a launcher picks the
// kernel instance without spelling out every combination.
template <typename F>
void with_type(FloatType t, F&& f) {
  if (t == FloatType::kFloat32) {
    f(float{});
  } else {
    f(Bf16{});
  }
}

void require(bool ok, const std::string& where, const std::string& what) {
  if (!ok) throw std::invalid_argument(where + ": " + what);
}

void require_type(FloatType t, const std::string& where, const char* name) {
  require(t == FloatType::kFloat32 || t == FloatType::kBFloat16, where,
          std::string(name) + " has an unknown storage type");
}

unsigned blocks_for(int64_t work_items, int64_t per_block) {
  return static_cast<unsigned>(std::min(kMaxBlocks, std::max<int64_t>(1, (work_items + per_block - 1) / per_block)));
}

void check_launch(const char* what) { check(gpuGetLastError(), what); }

int64_t rmsnorm_parts(int64_t rows) { return std::min(rows, kRmsNormPartials); }

// 16-byte vector loads and stores need 16-byte aligned addresses; callers fall back to the
// scalar code otherwise (a narrowed or offset view, a custom allocator).
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// An elementwise job's split: the first vec_n elements kVec per thread through 16-byte accesses
// when every pointer is aligned (none otherwise), the rest by the scalar loop; and its grid.
struct ElementwiseSplit {
  int64_t vec_n;
  unsigned grid;
};

ElementwiseSplit elementwise_split(int64_t n, std::initializer_list<const void*> pointers) {
  bool vectorized = true;
  for (const void* p : pointers) vectorized = vectorized && aligned16(p);
  const int64_t vec_n = vectorized ? n / kVec * kVec : 0;
  return {vec_n, blocks_for(vec_n / kVec + (n - vec_n), kThreads)};
}

}  // namespace

void rmsnorm_forward(const RmsNormForwardJob& job, void* stream) {
  const std::string where = "rmsnorm_forward";
  require(job.x && job.weight && job.y && job.rstd, where, "a pointer is null");
  require(job.rows > 0 && job.cols > 0, where,
          "the input is empty (" + std::to_string(job.rows) + " x " + std::to_string(job.cols) + ")");
  require_type(job.x_type, where, "x");
  require_type(job.y_type, where, "y");
  require((job.branch == nullptr) == (job.h == nullptr), where, "a fused residual add needs both branch and h");
  const bool residual = job.branch != nullptr;
  if (residual) {
    require(job.x_type == FloatType::kFloat32, where, "a fused residual add needs a float32 x");
    require_type(job.branch_type, where, "branch");
  }
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.rows, kThreads / 32);
  // The vector kernel where every row splits into 16-byte accesses; both give the same bits.
  const bool vectorized = job.cols % kNormFwdVec == 0 && aligned16(job.x) && aligned16(job.branch) &&
                          aligned16(job.weight) && aligned16(job.y) && aligned16(job.h);
  const size_t stage_bytes = static_cast<size_t>(kThreads) * kNormFwdVec * sizeof(float);
  with_type(job.x_type, [&](auto xt) {
    using XT = decltype(xt);
    with_type(job.y_type, [&](auto yt) {
      using YT = decltype(yt);
      const auto launch = [&](auto bt) {
        using BT = decltype(bt);
        if (vectorized) {
          rmsnorm_forward_vec_kernel<XT, YT, BT><<<grid, kThreads, stage_bytes, s>>>(
              static_cast<const XT*>(job.x), static_cast<const BT*>(job.branch), job.weight, job.rows, job.cols,
              job.eps, static_cast<YT*>(job.y), job.rstd, job.h);
        } else {
          rmsnorm_forward_kernel<XT, YT, BT><<<grid, kThreads, 0, s>>>(
              static_cast<const XT*>(job.x), static_cast<const BT*>(job.branch), job.weight, job.rows, job.cols,
              job.eps, static_cast<YT*>(job.y), job.rstd, job.h);
        }
      };
      // A bf16 x never has a branch (refused above): one instantiation for it.
      if constexpr (std::is_same_v<XT, float>) {
        with_type(job.branch_type, launch);
      } else {
        launch(float{});
      }
    });
  });
  check_launch("rmsnorm_forward");
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<size_t>(rmsnorm_parts(rows)) * static_cast<size_t>(cols) * sizeof(float);
}

void rmsnorm_backward(const RmsNormBackwardJob& job, void* stream) {
  const std::string where = "rmsnorm_backward";
  require(job.dy && job.x && job.weight && job.rstd && job.dx && job.dweight && job.workspace, where,
          "a pointer is null");
  require(job.rows > 0 && job.cols > 0, where,
          "the input is empty (" + std::to_string(job.rows) + " x " + std::to_string(job.cols) + ")");
  require(job.cols <= kRmsNormMaxCols, where,
          "rows longer than " + std::to_string(kRmsNormMaxCols) + " are not supported, got " + std::to_string(job.cols));
  require_type(job.dy_type, where, "dy");
  require_type(job.x_type, where, "x");
  if (job.dres != nullptr || job.dbranch != nullptr) {
    require(job.x_type == FloatType::kFloat32, where, "a fused residual gradient needs a float32 x");
    require_type(job.dbranch_type, where, "dbranch");
  }
  const auto s = static_cast<gpuStream_t>(stream);
  const int64_t parts = rmsnorm_parts(job.rows);
  const int64_t rows_per_block = (job.rows + parts - 1) / parts;
  // Threads: enough for one column each up to kThreads, in whole 64-lane units (any warp width).
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (job.cols + 63) / 64 * 64));
  const size_t shared = static_cast<size_t>(job.cols) * sizeof(float);
  float* partial = static_cast<float*>(job.workspace);
  // The vector kernel when the row splits into 16-byte vectors that at most kNormMaxSlots per
  // thread cover (cols <= 4096 at 256 threads); both kernels give the same bits.
  const int64_t slots = (job.cols / kNormVec + threads - 1) / threads;
  const bool vectorized = job.cols % kNormVec == 0 && slots <= kNormMaxSlots && aligned16(job.dy) &&
                          aligned16(job.x) && aligned16(job.weight) && aligned16(job.dx) && aligned16(job.dres) &&
                          aligned16(job.dbranch);
  with_type(job.dy_type, [&](auto dt) {
    using DT = decltype(dt);
    with_type(job.x_type, [&](auto xt) {
      using XT = decltype(xt);
      const auto launch = [&](auto bt) {
        using BT = decltype(bt);
        const auto* dy = static_cast<const DT*>(job.dy);
        const auto* x = static_cast<const XT*>(job.x);
        auto* dbranch = static_cast<BT*>(job.dbranch);
        const auto grid = static_cast<unsigned>(parts);
        if (!vectorized) {
          rmsnorm_backward_kernel<DT, XT, BT><<<grid, threads, shared, s>>>(
              dy, x, job.weight, job.rstd, job.rows, job.cols, rows_per_block, job.dx, partial, job.dres, dbranch);
        } else if (slots == 1) {
          rmsnorm_backward_vec_kernel<DT, XT, BT, 1><<<grid, threads, 2 * shared, s>>>(
              dy, x, job.weight, job.rstd, job.rows, job.cols, rows_per_block, job.dx, partial, job.dres, dbranch);
        } else if (slots == 2) {
          rmsnorm_backward_vec_kernel<DT, XT, BT, 2><<<grid, threads, 2 * shared, s>>>(
              dy, x, job.weight, job.rstd, job.rows, job.cols, rows_per_block, job.dx, partial, job.dres, dbranch);
        } else {
          rmsnorm_backward_vec_kernel<DT, XT, BT, kNormMaxSlots><<<grid, threads, 2 * shared, s>>>(
              dy, x, job.weight, job.rstd, job.rows, job.cols, rows_per_block, job.dx, partial, job.dres, dbranch);
        }
      };
      // A bf16 x never has a residual gradient (refused above): one instantiation for it.
      if constexpr (std::is_same_v<XT, float>) {
        with_type(job.dbranch_type, launch);
      } else {
        launch(float{});
      }
    });
  });
  check_launch("rmsnorm_backward");
  sum_partials_kernel<<<blocks_for(job.cols, kSumCols), kThreads, 0, s>>>(partial, parts, job.cols, job.dweight);
  check_launch("rmsnorm_backward (dweight)");
}

void residual_add(const ResidualAddJob& job, void* stream) {
  const std::string where = "residual_add";
  require(job.x && job.branch && job.out, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.branch_type, where, "branch");
  const auto s = static_cast<gpuStream_t>(stream);
  const ElementwiseSplit split = elementwise_split(job.n, {job.x, job.branch, job.out});
  with_type(job.branch_type, [&](auto bt) {
    using BT = decltype(bt);
    residual_add_kernel<BT><<<split.grid, kThreads, 0, s>>>(job.x, static_cast<const BT*>(job.branch), job.n,
                                                            split.vec_n, job.out);
  });
  check_launch("residual_add");
}

void widen_bf16(const WidenJob& job, void* stream) {
  const std::string where = "widen_bf16";
  require(job.in && job.out, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  const ElementwiseSplit split = elementwise_split(job.n, {job.in, job.out});
  widen_bf16_kernel<<<split.grid, kThreads, 0, static_cast<gpuStream_t>(stream)>>>(job.in, job.n, split.vec_n, job.out);
  check_launch("widen_bf16");
}

void swiglu_forward(const SwiGluForwardJob& job, void* stream) {
  const std::string where = "swiglu_forward";
  require(job.g && job.u && job.h, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.in_type, where, "g/u");
  require_type(job.h_type, where, "h");
  const auto s = static_cast<gpuStream_t>(stream);
  const ElementwiseSplit split = elementwise_split(job.n, {job.g, job.u, job.h});
  with_type(job.in_type, [&](auto it) {
    using IT = decltype(it);
    with_type(job.h_type, [&](auto ht) {
      using HT = decltype(ht);
      swiglu_forward_kernel<IT, HT><<<split.grid, kThreads, 0, s>>>(static_cast<const IT*>(job.g),
                                                                    static_cast<const IT*>(job.u), job.n, split.vec_n,
                                                              static_cast<HT*>(job.h));
    });
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(const SwiGluBackwardJob& job, void* stream) {
  const std::string where = "swiglu_backward";
  require(job.dh && job.g && job.u && job.dg && job.du, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.dh_type, where, "dh");
  require_type(job.in_type, where, "g/u");
  require_type(job.grad_type, where, "dg/du");
  const auto s = static_cast<gpuStream_t>(stream);
  const ElementwiseSplit split = elementwise_split(job.n, {job.dh, job.g, job.u, job.dg, job.du});
  with_type(job.dh_type, [&](auto dt) {
    using DT = decltype(dt);
    with_type(job.in_type, [&](auto it) {
      using IT = decltype(it);
      with_type(job.grad_type, [&](auto gt) {
        using GT = decltype(gt);
        swiglu_backward_kernel<DT, IT, GT><<<split.grid, kThreads, 0, s>>>(
            static_cast<const DT*>(job.dh), static_cast<const IT*>(job.g), static_cast<const IT*>(job.u), job.n,
            split.vec_n, static_cast<GT*>(job.dg), static_cast<GT*>(job.du));
      });
    });
  });
  check_launch("swiglu_backward");
}

void rope(const RopeJob& job, void* stream) {
  const std::string where = "rope";
  require(job.x && job.y && job.cos && job.sin, where, "a pointer is null");
  require(job.batch > 0 && job.heads > 0 && job.seq > 0 && job.head_dim > 0, where, "the input is empty");
  require(job.head_dim % 2 == 0, where, "head_dim must be even, got " + std::to_string(job.head_dim));
  require_type(job.x_type, where, "x");
  require_type(job.y_type, where, "y");
  RopeShape shape;
  for (int k = 0; k < 3; ++k) {
    shape.xs[k] = job.x_strides[k];
    shape.ys[k] = job.y_strides[k];
  }
  shape.heads = job.heads;
  shape.seq = job.seq;
  shape.half = job.head_dim / 2;
  const int64_t pairs = job.batch * job.heads * job.seq * shape.half;
  // The vector kernel when every vector starts 16-byte aligned: half a multiple of kVec, aligned
  // pointers, and (batch, heads, seq) strides in whole vectors (a dimension of extent 1 never
  // moves, so its stride does not matter).
  const int64_t extents[3] = {job.batch, job.heads, job.seq};
  bool vectorized = shape.half % kVec == 0 && aligned16(job.x) && aligned16(job.y) && aligned16(job.cos) &&
                    aligned16(job.sin);
  for (int k = 0; k < 3; ++k)
    vectorized = vectorized && (extents[k] == 1 || (shape.xs[k] % kVec == 0 && shape.ys[k] % kVec == 0));
  const int64_t items = vectorized ? pairs / kVec : pairs;
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(items, kThreads);
  const bool narrow = items <= static_cast<int64_t>(UINT32_MAX);
  with_type(job.x_type, [&](auto xt) {
    using XT = decltype(xt);
    with_type(job.y_type, [&](auto yt) {
      using YT = decltype(yt);
      const auto* x = static_cast<const XT*>(job.x);
      auto* y = static_cast<YT*>(job.y);
      // Every (direction, index width, path) instance, picked at run time.
      const auto launch = [&](auto inverse, auto index) {
        constexpr bool kInverse = decltype(inverse)::value;
        using IndexT = decltype(index);
        if (vectorized) {
          rope_vec_kernel<XT, YT, kInverse, IndexT><<<grid, kThreads, 0, s>>>(x, y, job.cos, job.sin, shape, items);
        } else {
          rope_kernel<XT, YT, kInverse, IndexT><<<grid, kThreads, 0, s>>>(x, y, job.cos, job.sin, shape, items);
        }
      };
      if (job.inverse && narrow) {
        launch(std::true_type{}, uint32_t{});
      } else if (job.inverse) {
        launch(std::true_type{}, uint64_t{});
      } else if (narrow) {
        launch(std::false_type{}, uint32_t{});
      } else {
        launch(std::false_type{}, uint64_t{});
      }
    });
  });
  check_launch("rope");
}

namespace {

// The shape and dtype checks both cross-entropy launchers make.
void require_logits(int64_t rows, int64_t vocab, FloatType type, const std::string& where) {
  require(rows > 0 && vocab > 0, where,
          "the logits are empty (" + std::to_string(rows) + " x " + std::to_string(vocab) + ")");
  require_type(type, where, "logits");
}

}  // namespace

void cross_entropy_forward(const CrossEntropyForwardJob& job, void* stream) {
  const std::string where = "cross_entropy_forward";
  require(job.logits && job.targets && job.loss && job.lse, where, "a pointer is null");
  require_logits(job.rows, job.vocab, job.logits_type, where);
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.rows, 1);
  with_type(job.logits_type, [&](auto lt) {
    using LT = decltype(lt);
    cross_entropy_forward_kernel<LT><<<grid, kThreads, 0, s>>>(static_cast<const LT*>(job.logits), job.targets,
                                                               job.rows, job.vocab, job.loss, job.lse);
  });
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(const CrossEntropyBackwardJob& job, void* stream) {
  const std::string where = "cross_entropy_backward";
  require(job.logits && job.targets && job.lse && job.grad && job.dlogits, where, "a pointer is null");
  require_logits(job.rows, job.vocab, job.logits_type, where);
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.rows, 1);
  with_type(job.logits_type, [&](auto lt) {
    using LT = decltype(lt);
    cross_entropy_backward_kernel<LT><<<grid, kThreads, 0, s>>>(static_cast<const LT*>(job.logits), job.targets,
                                                                job.lse, job.grad, job.rows, job.vocab,
                                                                static_cast<LT*>(job.dlogits));
  });
  check_launch("cross_entropy_backward");
}

}  // namespace mxablate::kernels::gpu
