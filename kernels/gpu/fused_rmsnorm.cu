// The fused RMSNorm of the trainer's common path (docs/design.md §4), forward and backward, with
// the residual add (forward) and the residual stream's gradient sum (backward) fused in when the
// job asks; the kernels, their host-side contract checks and launchers. API and numerics contract:
// mxablate/kernels/gpu/fused_ops_gpu.h; shared helpers and conventions: fused_common.cuh.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "fused_common.cuh"

namespace mxablate::kernels::gpu {
namespace {

using namespace fused;  // fused_common.cuh

// RMSNorm backward: at most this many blocks, hence dweight partials (a function of the shape
// only: the partials' summation order must not depend on the GPU).
constexpr int64_t kRmsNormPartials = 1024;

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

int64_t rmsnorm_parts(int64_t rows) { return std::min(rows, kRmsNormPartials); }

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

}  // namespace mxablate::kernels::gpu
