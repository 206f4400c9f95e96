// What the fused common-path kernels share (fused_rmsnorm.cu, fused_elementwise.cu,
// fused_swiglu.cu, fused_rope.cu, fused_cross_entropy.cu; docs/design.md §4): the block size and
// grid limits, the storage types' conversions, the 16-byte vector access every vector path takes,
// and the host-side contract checks and launch helpers. The API and the numerics contract are in
// mxablate/kernels/gpu/fused_ops_gpu.h; the LibTorch references they are tested against in
// kernels/torch (fused_ops.cpp).
//
// Conventions: storage is float32 or bf16 (uint16_t bits), math is float32; every reduction has
// a fixed shape that depends on the problem's shape only (warp butterflies over the runtime
// warpSize, then warps in index order), so results are reproducible bit for bit; no atomics.
//
// Device code only (nvcc/hipcc): included by the fused_*.cu units, never by host C++.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/fused_ops_gpu.h"
#include "mxablate/kernels/minifloat.h"

namespace mxablate::kernels::gpu::fused {

using Bf16 = uint16_t;

// Threads per block everywhere: a multiple of every warp width (32 on NVIDIA, 64 on AMD CDNA).
constexpr int kThreads = 256;
// Per-warp scratch slots a block needs at most: warps are 32 lanes or wider, never narrower.
constexpr int kMaxWarps = kThreads / 32;
// Grid-stride kernels never launch more blocks than this; the loops cover the rest.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

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

inline void require(bool ok, const std::string& where, const std::string& what) {
  if (!ok) throw std::invalid_argument(where + ": " + what);
}

inline void require_type(FloatType t, const std::string& where, const char* name) {
  require(t == FloatType::kFloat32 || t == FloatType::kBFloat16, where,
          std::string(name) + " has an unknown storage type");
}

inline unsigned blocks_for(int64_t work_items, int64_t per_block) {
  return static_cast<unsigned>(std::min(kMaxBlocks, std::max<int64_t>(1, (work_items + per_block - 1) / per_block)));
}

inline void check_launch(const char* what) { check(gpuGetLastError(), what); }

// 16-byte vector loads and stores need 16-byte aligned addresses; callers fall back to the
// scalar code otherwise (a narrowed or offset view, a custom allocator).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// An elementwise job's split: the first vec_n elements kVec per thread through 16-byte accesses
// when every pointer is aligned (none otherwise), the rest by the scalar loop; and its grid.
struct ElementwiseSplit {
  int64_t vec_n;
  unsigned grid;
};

inline ElementwiseSplit elementwise_split(int64_t n, std::initializer_list<const void*> pointers) {
  bool vectorized = true;
  for (const void* p : pointers) vectorized = vectorized && aligned16(p);
  const int64_t vec_n = vectorized ? n / kVec * kVec : 0;
  return {vec_n, blocks_for(vec_n / kVec + (n - vec_n), kThreads)};
}

}  // namespace mxablate::kernels::gpu::fused
