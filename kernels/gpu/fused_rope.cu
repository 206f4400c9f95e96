// The fused RoPE (rotate-half) of the trainer's common path (docs/design.md §4), by +angle and by
// -angle (the backward), from any (batch, heads, seq) strides, with its host-side contract checks
// and launcher. API and numerics contract: mxablate/kernels/gpu/fused_ops_gpu.h; shared helpers
// and conventions: fused_common.cuh.
#include <cstdint>
#include <string>
#include <type_traits>

#include "fused_common.cuh"

namespace mxablate::kernels::gpu {
namespace {

using namespace fused;  // fused_common.cuh

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

}  // namespace

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

}  // namespace mxablate::kernels::gpu
