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
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/fused_ops_gpu.h"
#include "mxablate/kernels/minifloat.h"
#include "online_lse.h"

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

// One warp per row (grid-stride over rows): sum of squares by lane-strided partials and a
// butterfly, then y = (x * rstd) * w, the unfused formula's order.
template <typename XT, typename YT>
__global__ void rmsnorm_forward_kernel(const XT* __restrict__ x, const float* __restrict__ w, int64_t rows,
                                       int64_t cols, float eps, YT* __restrict__ y, float* __restrict__ rstd) {
  const int lane = static_cast<int>(threadIdx.x % warpSize);
  const int64_t warps_per_block = blockDim.x / warpSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / warpSize; r < rows; r += stride) {
    const XT* xr = x + r * cols;
    float ss = 0.0f;
    for (int64_t j = lane; j < cols; j += warpSize) {
      const float v = to_float(xr[j]);
      ss += v * v;
    }
    ss = warp_sum(ss);
    const float rs = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
    if (lane == 0) rstd[r] = rs;
    for (int64_t j = lane; j < cols; j += warpSize) store(y, r * cols + j, (to_float(xr[j]) * rs) * w[j]);
  }
}

// One block per chunk of rows; thread t owns the columns j = t (mod blockDim) and accumulates
// their dweight in shared memory, so no two threads ever add into one place. Per row:
//   g = dy * w,  dot = sum(g * x),  dx = rstd * g - x * (rstd^3 * dot / cols)
// and the block's dweight partial += dy * x * rstd, written out at the end.
template <typename DT, typename XT>
__global__ void rmsnorm_backward_kernel(const DT* __restrict__ dy, const XT* __restrict__ x,
                                        const float* __restrict__ w, const float* __restrict__ rstd,
                                        int64_t rows, int64_t cols, int64_t rows_per_block,
                                        float* __restrict__ dx, float* __restrict__ partial) {
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
      dx[r * cols + j] = rs * (d * w[j]) - v * coef;
      acc[j] += (d * v) * rs;
    }
  }
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) partial[blockIdx.x * cols + j] = acc[j];
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

// ---- SwiGLU (ATen's silu and silu_backward formulas, operation for operation) -----------------

template <typename IT, typename HT>
__global__ void swiglu_forward_kernel(const IT* __restrict__ g, const IT* __restrict__ u, int64_t n,
                                      HT* __restrict__ h) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gv = to_float(g[i]);
    store(h, i, (gv / (1.0f + expf(-gv))) * to_float(u[i]));
  }
}

template <typename DT, typename IT, typename GT>
__global__ void swiglu_backward_kernel(const DT* __restrict__ dh, const IT* __restrict__ g,
                                       const IT* __restrict__ u, int64_t n, GT* __restrict__ dg,
                                       GT* __restrict__ du) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float d = to_float(dh[i]), gv = to_float(g[i]), uv = to_float(u[i]);
    const float e = 1.0f + expf(-gv);
    const float sig = 1.0f / e;
    store(dg, i, ((d * uv) * sig) * (1.0f + gv * (1.0f - sig)));
    store(du, i, d * (gv / e));
  }
}

// ---- RoPE ---------------------------------------------------------------------------------------

struct RopeShape {
  int64_t xs[3], ys[3];
  int64_t heads, seq, half;
};

// One thread per (b, h, t, i < half) pair, i fastest: a warp reads and writes runs of `half`
// consecutive elements in both layouts. The pair index is split with IndexT arithmetic: 32-bit
// division is several times cheaper than 64-bit, and every realistic tensor has < 2^32 pairs.
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
    const float c = cos_t[t * s.half + i], sn = sin_t[t * s.half + i];
    const float x1 = to_float(x[xo]), x2 = to_float(x[xo + s.half]);
    if (kInverse) {
      store(y, yo, x1 * c + x2 * sn);
      store(y, yo + s.half, x2 * c - x1 * sn);
    } else {
      store(y, yo, x1 * c - x2 * sn);
      store(y, yo + s.half, x1 * sn + x2 * c);
    }
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

}  // namespace

void rmsnorm_forward(const RmsNormForwardJob& job, void* stream) {
  const std::string where = "rmsnorm_forward";
  require(job.x && job.weight && job.y && job.rstd, where, "a pointer is null");
  require(job.rows > 0 && job.cols > 0, where,
          "the input is empty (" + std::to_string(job.rows) + " x " + std::to_string(job.cols) + ")");
  require_type(job.x_type, where, "x");
  require_type(job.y_type, where, "y");
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.rows, kThreads / 32);
  with_type(job.x_type, [&](auto xt) {
    using XT = decltype(xt);
    with_type(job.y_type, [&](auto yt) {
      using YT = decltype(yt);
      rmsnorm_forward_kernel<XT, YT><<<grid, kThreads, 0, s>>>(
          static_cast<const XT*>(job.x), job.weight, job.rows, job.cols, job.eps, static_cast<YT*>(job.y), job.rstd);
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
  const auto s = static_cast<gpuStream_t>(stream);
  const int64_t parts = rmsnorm_parts(job.rows);
  const int64_t rows_per_block = (job.rows + parts - 1) / parts;
  // Threads: enough for one column each up to kThreads, in whole 64-lane units (any warp width).
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (job.cols + 63) / 64 * 64));
  const size_t shared = static_cast<size_t>(job.cols) * sizeof(float);
  float* partial = static_cast<float*>(job.workspace);
  with_type(job.dy_type, [&](auto dt) {
    using DT = decltype(dt);
    with_type(job.x_type, [&](auto xt) {
      using XT = decltype(xt);
      rmsnorm_backward_kernel<DT, XT><<<static_cast<unsigned>(parts), threads, shared, s>>>(
          static_cast<const DT*>(job.dy), static_cast<const XT*>(job.x), job.weight, job.rstd, job.rows, job.cols,
          rows_per_block, job.dx, partial);
    });
  });
  check_launch("rmsnorm_backward");
  sum_partials_kernel<<<blocks_for(job.cols, kSumCols), kThreads, 0, s>>>(partial, parts, job.cols, job.dweight);
  check_launch("rmsnorm_backward (dweight)");
}

void swiglu_forward(const SwiGluForwardJob& job, void* stream) {
  const std::string where = "swiglu_forward";
  require(job.g && job.u && job.h, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.in_type, where, "g/u");
  require_type(job.h_type, where, "h");
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.n, kThreads);
  with_type(job.in_type, [&](auto it) {
    using IT = decltype(it);
    with_type(job.h_type, [&](auto ht) {
      using HT = decltype(ht);
      swiglu_forward_kernel<IT, HT><<<grid, kThreads, 0, s>>>(static_cast<const IT*>(job.g),
                                                              static_cast<const IT*>(job.u), job.n,
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
  const unsigned grid = blocks_for(job.n, kThreads);
  with_type(job.dh_type, [&](auto dt) {
    using DT = decltype(dt);
    with_type(job.in_type, [&](auto it) {
      using IT = decltype(it);
      with_type(job.grad_type, [&](auto gt) {
        using GT = decltype(gt);
        swiglu_backward_kernel<DT, IT, GT><<<grid, kThreads, 0, s>>>(
            static_cast<const DT*>(job.dh), static_cast<const IT*>(job.g), static_cast<const IT*>(job.u), job.n,
            static_cast<GT*>(job.dg), static_cast<GT*>(job.du));
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
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(pairs, kThreads);
  with_type(job.x_type, [&](auto xt) {
    using XT = decltype(xt);
    with_type(job.y_type, [&](auto yt) {
      using YT = decltype(yt);
      const auto* x = static_cast<const XT*>(job.x);
      auto* y = static_cast<YT*>(job.y);
      const bool narrow = pairs <= static_cast<int64_t>(UINT32_MAX);
      if (job.inverse && narrow) {
        rope_kernel<XT, YT, true, uint32_t><<<grid, kThreads, 0, s>>>(x, y, job.cos, job.sin, shape, pairs);
      } else if (job.inverse) {
        rope_kernel<XT, YT, true, uint64_t><<<grid, kThreads, 0, s>>>(x, y, job.cos, job.sin, shape, pairs);
      } else if (narrow) {
        rope_kernel<XT, YT, false, uint32_t><<<grid, kThreads, 0, s>>>(x, y, job.cos, job.sin, shape, pairs);
      } else {
        rope_kernel<XT, YT, false, uint64_t><<<grid, kThreads, 0, s>>>(x, y, job.cos, job.sin, shape, pairs);
      }
    });
  });
  check_launch("rope");
}

void cross_entropy_forward(const CrossEntropyForwardJob& job, void* stream) {
  const std::string where = "cross_entropy_forward";
  require(job.logits && job.targets && job.loss && job.lse, where, "a pointer is null");
  require(job.rows > 0 && job.vocab > 0, where,
          "the logits are empty (" + std::to_string(job.rows) + " x " + std::to_string(job.vocab) + ")");
  require_type(job.logits_type, where, "logits");
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
  require(job.rows > 0 && job.vocab > 0, where,
          "the logits are empty (" + std::to_string(job.rows) + " x " + std::to_string(job.vocab) + ")");
  require_type(job.logits_type, where, "logits");
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
