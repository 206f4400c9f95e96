// The fused quantization kernels: one thread block per 128 x 128 tile, read from global memory
// once, staged in shared memory, then quantized along rows and/or down columns, each thread
// running segment_quant.h's pipeline on 32 elements and writing every requested output.
#pragma once

#include <cfloat>
#include <cstdint>

#include "gpu_runtime.h"
#include "kernel_params.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "segment_quant.h"
#include "tile_layout.h"

namespace mxablate::kernels::gpu::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(Bf16Bits v) { return bf16_bits_to_float(v); }

struct ShuffleExchange {
  __device__ __forceinline__ void xor_floats(const float (&own)[kSegment], int mask,
                                             float (&partner)[kSegment]) const {
MXABLATE_UNROLL
    for (int j = 0; j < kSegment; ++j) partner[j] = shfl_xor(own[j], mask, kSegmentsPerChunk);
  }
  __device__ __forceinline__ uint32_t xor_u32(uint32_t own, int mask) const {
    return shfl_xor(own, mask, kSegmentsPerChunk);
  }
  __device__ __forceinline__ bool all(bool b) const { return warp_all(b); }
};

// Stochastic-rounding numbers down a column, shared by the threads of four neighbouring
// columns. When cols % 4 == 0 the logical indices (row, 4m) … (row, 4m+3) form one Philox
// group, and the four threads owning those columns (same part, lanes 4 apart) need the group's
// four words for each row. Each of them evaluates Philox for one row of every 4-row step and the
// four words travel in four rotating shuffles: one Philox and four shuffles per four elements,
// instead of four Philox evaluations.
struct QuadShuffleUniforms {
  int t;  // this thread's column within its quad of columns, 0..3 (lanes 4 * t apart)

  __device__ __forceinline__ static float pick(const float (&w)[4], int i) {
    return i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
  }

  __device__ __forceinline__ void operator()(const SegmentContext& ctx, int g, float (&u)[4]) const {
    // Row 4g + t of the segment, at the quad's first column.
    const int64_t first = ctx.first_index + (4 * g + t) * ctx.index_stride - t;
    float mine[4];
    sr_uniforms4(ctx.key, static_cast<uint64_t>(first) >> 2, mine);
    const int lane = static_cast<int>(threadIdx.x % warpSize);
MXABLATE_UNROLL
    for (int rot = 0; rot < 4; ++rot) {
      // Thread with row offset r sends word (r + rot) & 3; this thread needs word t, so it
      // listens to row offset (t - rot) & 3.
      const int from = (t - rot) & 3;
      const float got = shfl_from(pick(mine, (t + rot) & 3), lane + 4 * (from - t));
MXABLATE_UNROLL
      for (int i = 0; i < 4; ++i) u[i] = i == from ? got : u[i];
    }
  }
};

// ---- Tile staging ---------------------------------------------------------------------------

// `n` as a value the compiler cannot see through. Without it nvcc re-derives each step's global
// address of a tile copy from the tile indices, a 64-bit multiplication per 16-byte vector (more
// instructions than the copy); with each step's element offset opaque, it is the previous one plus
// the stride. (An opaque pointer would also hide that it points to global memory.)
__device__ __forceinline__ int64_t opaque(int64_t n) {
#if defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
  asm("" : "+l"(n));
#endif
  return n;
}

// Copies the tile at (r0, c0) into shared memory (zeros outside the tensor). The vector path
// issues all of a thread's 16-byte loads before its first store, so many are in flight; its
// addressing is TileVectors' (one global address a thread, advanced by a row stride).
template <typename InT>
__device__ void load_tile(const KernelParams& p, int64_t r0, int64_t c0, InT* tile) {
  const InT* __restrict__ x = static_cast<const InT*>(p.input);
  const int valid_rows = static_cast<int>(p.rows - r0 < kTile ? p.rows - r0 : kTile);
  const int valid_cols = static_cast<int>(p.cols - c0 < kTile ? p.cols - c0 : kTile);
  if (p.vector_loads) {
    using V = TileVectors<16 / sizeof(InT)>;
    const V t(threadIdx.x);
    const bool col_inside = t.col < valid_cols;
    const InT* src = x + (r0 + t.row) * p.cols + c0 + t.col;
    const int64_t stride = V::kRowsPerStep * p.cols;
    int64_t at = 0;  // the step's offset from src
    constexpr int kBatch = 8;
MXABLATE_UNROLL
    for (int b = 0; b < V::kSteps; b += kBatch) {
      uint4 buf[kBatch];
MXABLATE_UNROLL
      for (int i = 0; i < kBatch; ++i) {
        buf[i] = make_uint4(0, 0, 0, 0);
        if (col_inside && t.row + (b + i) * V::kRowsPerStep < valid_rows)
          buf[i] = *reinterpret_cast<const uint4*>(src + at);
        at = opaque(at + stride);
      }
MXABLATE_UNROLL
      for (int i = 0; i < kBatch; ++i) *reinterpret_cast<uint4*>(tile + t.offset(b + i)) = buf[i];
    }
  } else {
    for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
      const int r = e / kTile, c = e % kTile;
      tile[tile_offset(r, c)] = (r < valid_rows && c < valid_cols) ? x[(r0 + r) * p.cols + c0 + c] : InT(0);
    }
  }
}

// Down a column, element j of a segment is at tile row part * 32 + j, whose swizzle depends on
// the row only through `part` and j's parity: the element sits at base(j & 1) + j * kTile, so
// with these two bases every access has a compile-time offset.
__device__ __forceinline__ int column_segment_base(const SegmentPlace& s, int parity) {
  return tile_offset(s.part * kSegment + parity, s.line_in_tile) - parity * kTile;
}

// The thread's segment as float32. Along a row the 32 elements are four (bf16) or eight (f32)
// contiguous 16-byte vectors in shared memory; down a column they are read one by one.
template <Axis kAxis, typename InT>
__device__ void gather_segment(const InT* tile, const SegmentPlace& s, float (&v)[kSegment]) {
  if constexpr (kAxis == Axis::kRows) {
    constexpr int kVec = 16 / sizeof(InT);
MXABLATE_UNROLL
    for (int k = 0; k < kSegment / kVec; ++k) {
      const uint4 q = *reinterpret_cast<const uint4*>(
          tile + tile_offset(s.line_in_tile, s.part * kSegment + k * kVec));
      if constexpr (sizeof(InT) == 2) {
        // A word holds elements 2i (low half) and 2i + 1 (high half); a bf16's float32 is its
        // bits in the high half, so the second needs only a mask (one instruction, where
        // extracting it and shifting it back took two).
        const uint32_t words[4] = {q.x, q.y, q.z, q.w};
MXABLATE_UNROLL
        for (int i = 0; i < 4; ++i) {
          v[k * kVec + 2 * i] = bits_float(words[i] << 16);
          v[k * kVec + 2 * i + 1] = bits_float(words[i] & 0xFFFF0000u);
        }
      } else {
        const InT* e = reinterpret_cast<const InT*>(&q);
MXABLATE_UNROLL
        for (int i = 0; i < kVec; ++i) v[k * kVec + i] = to_float(e[i]);
      }
    }
  } else {
    const int even = column_segment_base(s, 0), odd = column_segment_base(s, 1);
MXABLATE_UNROLL
    for (int j = 0; j < kSegment; ++j) v[j] = to_float(tile[(j & 1 ? odd : even) + j * kTile]);
  }
}

// ---- Block-wide reductions (for telemetry and counters; all threads must call) -------------

template <typename T>
__device__ T block_sum(T v, T* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int warps = blockDim.x / warpSize;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = T(0);
  if (threadIdx.x == 0)
    for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;  // valid in thread 0
}

__device__ inline float block_max(float v, float* scratch) {
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) v = fmaxf(v, shfl_xor(v, offset, warpSize));
  const int warp = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;
  const int warps = blockDim.x / warpSize;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < warps; ++w) m = fmaxf(m, scratch[w]);
  return m;  // valid in thread 0
}

inline constexpr int kMaxWarps = kThreads / 32;  // the most warps a block can have (32-lane warps)

struct ReductionScratch {
  double d[kMaxWarps];
  unsigned long long u[kMaxWarps];
  float f[kMaxWarps];
};

__device__ inline void flush_telemetry(const ThreadTelemetry& t, DeviceTelemetry* out, ReductionScratch& s) {
  const unsigned long long elements = block_sum(t.elements, s.u);
  if (threadIdx.x == 0) atomicAdd(&out->elements, elements);
  const unsigned long long nonzero = block_sum(t.nonzero_inputs, s.u);
  if (threadIdx.x == 0) atomicAdd(&out->nonzero_inputs, nonzero);
  const unsigned long long saturated = block_sum(t.saturated, s.u);
  if (threadIdx.x == 0) atomicAdd(&out->saturated, saturated);
  const unsigned long long flushed = block_sum(t.flushed, s.u);
  if (threadIdx.x == 0) atomicAdd(&out->flushed, flushed);
  const unsigned long long nonfinite = block_sum(t.nonfinite_blocks, s.u);
  if (threadIdx.x == 0) atomicAdd(&out->nonfinite_blocks, nonfinite);
  const unsigned long long clamped = block_sum(t.dequant_clamped, s.u);
  if (threadIdx.x == 0) atomicAdd(&out->dequant_clamped, clamped);
  const double sq_err = block_sum(t.sum_sq_error, s.d);
  if (threadIdx.x == 0) atomicAdd(&out->sum_sq_error, sq_err);
  const double sq_in = block_sum(t.sum_sq_input, s.d);
  if (threadIdx.x == 0) atomicAdd(&out->sum_sq_input, sq_in);
  const double err = block_sum(t.sum_error, s.d);
  if (threadIdx.x == 0) atomicAdd(&out->sum_error, err);
}

MX_HD void merge(ThreadTelemetry& into, const ThreadTelemetry& t) {
  into.elements += t.elements;
  into.nonzero_inputs += t.nonzero_inputs;
  into.saturated += t.saturated;
  into.flushed += t.flushed;
  into.nonfinite_blocks += t.nonfinite_blocks;
  into.dequant_clamped += t.dequant_clamped;
  into.sum_sq_error += t.sum_sq_error;
  into.sum_sq_input += t.sum_sq_input;
  into.sum_error += t.sum_error;
}

// ---- Outputs ----------------------------------------------------------------------------

// Line starts are 16-byte aligned for every output when the line length is a multiple of 32
// (always so for MXFP4); then a full segment is written with 16-byte stores. Otherwise (formats
// without 32-blocks on ragged lines) the `count` valid elements are written one by one.
//
// The dequantized output of the input's own type is *staged*: written into a shared-memory tile
// at the element's tile position, then copied to global memory by the whole block with
// coalesced 16-byte stores (store_tile). Written straight from each thread, a column pass would
// scatter 2-byte stores and a row pass half-sector ones.

// bf16 bits of a pair of dequantized values, packed (element 2i low).
template <QuantFormat F>
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi, bool top_half) {
  if (top_half) return __byte_perm(float_bits(lo), float_bits(hi), 0x7632);
  return static_cast<uint32_t>(dequant_bf16_bits<F>(lo)) | (static_cast<uint32_t>(dequant_bf16_bits<F>(hi)) << 16);
}

// A row segment's 32 bf16 values as four 16-byte stores: to its place in the staging tile, or
// to `dst` (the segment's first element in global memory).
template <QuantFormat F, bool kTopHalf>
__device__ __forceinline__ void store_bf16_row(uint16_t* dst, bool staged, const SegmentPlace& s,
                                               const float (&value)[kSegment]) {
MXABLATE_UNROLL
  for (int k = 0; k < kSegment / 8; ++k) {
    const uint4 q = make_uint4(bf16_pair<F>(value[8 * k + 0], value[8 * k + 1], kTopHalf),
                               bf16_pair<F>(value[8 * k + 2], value[8 * k + 3], kTopHalf),
                               bf16_pair<F>(value[8 * k + 4], value[8 * k + 5], kTopHalf),
                               bf16_pair<F>(value[8 * k + 6], value[8 * k + 7], kTopHalf));
    if (staged) {
      *reinterpret_cast<uint4*>(dst + tile_offset(s.line_in_tile, s.part * kSegment + 8 * k)) = q;
    } else {
      reinterpret_cast<uint4*>(dst)[k] = q;
    }
  }
}

template <Axis kAxis, QuantFormat F, typename InT>
__device__ void write_dequant(const AxisParams& a, const KernelParams& p, const SegmentPlace& s,
                              bool vector_stores, const float (&value)[kSegment],
                              const SegmentResult& res, InT* stage) {
  constexpr bool kBf16In = sizeof(InT) == 2;
  float* const f32_out = kBf16In || stage == nullptr ? a.out.dequant : nullptr;
  uint16_t* const bf16_out = !kBf16In || stage == nullptr ? a.out.dequant_bf16 : nullptr;
  const bool stage_f32 = !kBf16In && stage != nullptr;
  const bool stage_bf16 = kBf16In && stage != nullptr;
  const bool top_half = F == QuantFormat::kMXFP4 && res.bf16_is_top_half;
  if (f32_out != nullptr || stage_f32) {
    if (kAxis == Axis::kRows && (vector_stores || stage_f32)) {
      float4* dst = stage_f32 ? nullptr : reinterpret_cast<float4*>(f32_out + s.line * p.cols + s.start);
MXABLATE_UNROLL
      for (int k = 0; k < kSegment / 4; ++k) {
        const float4 q = make_float4(dequant_f32(value[4 * k]), dequant_f32(value[4 * k + 1]),
                                     dequant_f32(value[4 * k + 2]), dequant_f32(value[4 * k + 3]));
        if (stage_f32) {
          *reinterpret_cast<float4*>(reinterpret_cast<float*>(stage) +
                                     tile_offset(s.line_in_tile, s.part * kSegment + 4 * k)) = q;
        } else {
          dst[k] = q;
        }
      }
    } else if (stage_f32) {  // down a column (the staging tile takes the whole segment)
      const int even = column_segment_base(s, 0), odd = column_segment_base(s, 1);
MXABLATE_UNROLL
      for (int j = 0; j < kSegment; ++j)
        reinterpret_cast<float*>(stage)[(j & 1 ? odd : even) + j * kTile] = dequant_f32(value[j]);
    } else {
MXABLATE_UNROLL
      for (int j = 0; j < kSegment; ++j) {
        if (j >= s.count) continue;
        const int64_t i = kAxis == Axis::kRows ? s.line * p.cols + s.start + j : (s.start + j) * p.cols + s.line;
        f32_out[i] = dequant_f32(value[j]);
      }
    }
  }
  if (bf16_out != nullptr || stage_bf16) {
    if (kAxis == Axis::kRows && (vector_stores || stage_bf16)) {
      uint16_t* dst = stage_bf16 ? reinterpret_cast<uint16_t*>(stage) : bf16_out + s.line * p.cols + s.start;
      // A uniform branch per segment, so that each loop holds one conversion.
      if (top_half) {
        store_bf16_row<F, true>(dst, stage_bf16, s, value);
      } else {
        store_bf16_row<F, false>(dst, stage_bf16, s, value);
      }
    } else if (stage_bf16) {  // down a column
      const int even = column_segment_base(s, 0), odd = column_segment_base(s, 1);
      uint16_t* st = reinterpret_cast<uint16_t*>(stage);
      if (top_half) {
MXABLATE_UNROLL
        for (int j = 0; j < kSegment; ++j) st[(j & 1 ? odd : even) + j * kTile] = float_bits(value[j]) >> 16;
      } else {
MXABLATE_UNROLL
        for (int j = 0; j < kSegment; ++j) st[(j & 1 ? odd : even) + j * kTile] = dequant_bf16_bits<F>(value[j]);
      }
    } else {
MXABLATE_UNROLL
      for (int j = 0; j < kSegment; ++j) {
        if (j >= s.count) continue;
        const int64_t i = kAxis == Axis::kRows ? s.line * p.cols + s.start + j : (s.start + j) * p.cols + s.line;
        bf16_out[i] = dequant_bf16_bits<F>(value[j]);
      }
    }
  }
}

// Copies a staged output tile to global memory: the mirror of load_tile.
template <typename T>
__device__ void store_tile(const KernelParams& p, int64_t r0, int64_t c0, const T* tile, T* out) {
  const int valid_rows = static_cast<int>(p.rows - r0 < kTile ? p.rows - r0 : kTile);
  const int valid_cols = static_cast<int>(p.cols - c0 < kTile ? p.cols - c0 : kTile);
  if (p.vector_loads) {  // same condition: cols * sizeof(T) % 16 == 0 (T is the input type)
    using V = TileVectors<16 / sizeof(T)>;
    const V t(threadIdx.x);
    const bool col_inside = t.col < valid_cols;
    T* dst = out + (r0 + t.row) * p.cols + c0 + t.col;
    const int64_t stride = V::kRowsPerStep * p.cols;
    int64_t at = 0;  // the step's offset from dst
MXABLATE_UNROLL
    for (int i = 0; i < V::kSteps; ++i) {
      if (col_inside && t.row + i * V::kRowsPerStep < valid_rows)
        *reinterpret_cast<uint4*>(dst + at) = *reinterpret_cast<const uint4*>(tile + t.offset(i));
      at = opaque(at + stride);
    }
  } else {
    for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
      const int r = e / kTile, c = e % kTile;
      if (r < valid_rows && c < valid_cols) out[(r0 + r) * p.cols + c0 + c] = tile[tile_offset(r, c)];
    }
  }
}

template <QuantFormat F>
__device__ void write_codes(const AxisParams& a, int64_t length, const SegmentPlace& s,
                            bool vector_stores, const SegmentResult& res) {
  constexpr bool kFp4 = F == QuantFormat::kMXFP4 || F == QuantFormat::kNVFP4;
  constexpr bool kFp8 = F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2;
  if (a.out.packed != nullptr) {
    if constexpr (kFp4) {
      uint8_t* dst = a.out.packed + s.line * (length / 2) + s.start / 2;
      if (vector_stores) {
        *reinterpret_cast<uint4*>(dst) =
            make_uint4(res.code_words[0], res.code_words[1], res.code_words[2], res.code_words[3]);
      } else {
MXABLATE_UNROLL
        for (int b = 0; b < kSegment / 2; ++b)  // FP4 lines hold whole 16-blocks: count is even
          if (2 * b < s.count) dst[b] = static_cast<uint8_t>(res.code_words[b >> 2] >> ((b & 3) * 8));
      }
    } else if constexpr (kFp8) {
      uint8_t* dst = a.out.packed + s.line * length + s.start;
      if (vector_stores) {
        reinterpret_cast<uint4*>(dst)[0] =
            make_uint4(res.code_words[0], res.code_words[1], res.code_words[2], res.code_words[3]);
        reinterpret_cast<uint4*>(dst)[1] =
            make_uint4(res.code_words[4], res.code_words[5], res.code_words[6], res.code_words[7]);
      } else {
MXABLATE_UNROLL
        for (int j = 0; j < kSegment; ++j)
          if (j < s.count) dst[j] = static_cast<uint8_t>(res.code_words[j >> 2] >> ((j & 3) * 8));
      }
    }
  }
  if (a.out.scales != nullptr) {
    if constexpr (F == QuantFormat::kMXFP4) {
      a.out.scales[s.line * (length / kMXBlockSize) + s.start / kMXBlockSize] = res.scale_codes[0];
    } else if constexpr (F == QuantFormat::kNVFP4) {
      uint8_t* dst = a.out.scales + s.line * (length / kNVBlockSize) + s.start / kNVBlockSize;
      dst[0] = res.scale_codes[0];
      if (s.count > kNVBlockSize) dst[1] = res.scale_codes[1];
    }
  }
}

// ---- Kernels --------------------------------------------------------------------------------

template <QuantFormat F>
__device__ float axis_global(const AxisParams& a) {
  if constexpr (F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2) {
    // Delayed scaling (docs/design.md §3): the window's scale; the amax decides non-finiteness.
    if (a.delayed.window != nullptr)
      return fp8_delayed_scale(*a.delayed.window, bits_float(a.amax_slot[0]), a.amax_slot[1] != 0u, a.delayed.margin,
                               element_format_of(F));
  }
  if constexpr (is_per_tensor(F)) {
    return tensor_global<F>(bits_float(a.amax_slot[0]), a.amax_slot[1] != 0u);
  }
  return 1.0f;
}

// 2-D blocks (docs/design.md §3): the amax of every square scale tile of this thread block's
// tile, as max_abs_bits in `slots` (tile_2d_slot numbering). A scale tile lies inside one thread
// block's tile (the tensor's dimensions are multiples of its side, which divides kTile), so a
// block-local reduction in shared memory finds it, once for both axes: 2-D blocks never rotate
// (check_shape), so both passes quantize the staged values themselves. Read along rows, the
// cheaper order. All threads must call it (it synchronizes the block).
template <typename InT, QuantFormat F>
__device__ void tile_amax_pass(const KernelParams& p, const InT* tile, int64_t r0, int64_t c0,
                               unsigned int* slots) {
  constexpr int kBlock = block_size_of(F);
  for (int i = threadIdx.x; i < kMaxTileSlots; i += blockDim.x) slots[i] = 0u;
  __syncthreads();
MXABLATE_NO_UNROLL
  for (int sweep = 0; sweep < kSweeps; ++sweep) {
    const SegmentPlace s = place_segment(Axis::kRows, threadIdx.x, sweep, r0, c0, p.rows, p.cols);
    if (!s.valid) continue;
    float v[kSegment];
    gather_segment<Axis::kRows>(tile, s, v);
    uint32_t bits[2];
    segment_block_max_bits<F>(v, s.count, bits);
MXABLATE_UNROLL
    for (int b = 0; b < kSegment / kBlock; ++b)
      if (b * kBlock < s.count) atomicMax(&slots[tile_2d_slot(Axis::kRows, s, b, kBlock)], bits[b]);
  }
  __syncthreads();
}

// An axis's random key and Hadamard signs as of this launch. A launch recorded in a CUDA graph
// reads its step from device memory (RngKey::step_source), so that each replay draws the
// stochastic-rounding and random-Hadamard streams of the step it replays for; the signs are then
// derived here by the same function the launcher uses on the host.
struct AxisRandomness {
  RngKey key;
  HadamardSigns signs;
};

__device__ inline AxisRandomness axis_randomness(const AxisParams& a) {
  AxisRandomness r{a.key, a.signs};
  if (a.key.step_source != nullptr) {
    r.key.step = *a.key.step_source;
    r.signs = hadamard_signs(a.spec.hadamard, r.key);
  }
  return r;
}

// One pass over the staged tile along kAxis (the axis is a template parameter so that each
// pass's addressing compiles to straight-line code).
template <Axis kAxis, typename InT, QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes>
__device__ void quantize_pass(const KernelParams& p, const AxisParams& a, const InT* tile, InT* stage,
                              int64_t r0, int64_t c0, ThreadTelemetry& tel,
                              unsigned long long& inexact_chunks, const unsigned int* tile_max) {
  const int64_t length = kAxis == Axis::kRows ? p.cols : p.rows;
  const int64_t lines = kAxis == Axis::kRows ? p.rows : p.cols;
  const AxisRandomness random = axis_randomness(a);
  SegmentContext ctx;
  ctx.spec = a.spec;
  ctx.key = random.key;
  ctx.global = axis_global<F>(a);
  ctx.index_stride = segment_index_stride(kAxis, p.cols);
  ctx.bf16_written = a.out.dequant_bf16 != nullptr;
  const bool want_fp8 = F == QuantFormat::kMXFP4 && a.out.fp8_codes != nullptr;
  const bool vector_stores = length % kSegment == 0;
  const bool quad_uniforms = p.cols % 4 == 0;  // column quads are Philox groups
  ShuffleExchange ex;
MXABLATE_NO_UNROLL
  for (int sweep = 0; sweep < kSweeps; ++sweep) {
    const SegmentPlace s = place_segment(kAxis, threadIdx.x, sweep, r0, c0, p.rows, p.cols);
    float v[kSegment];
    gather_segment<kAxis>(tile, s, v);
    ctx.first_index = segment_first_index(kAxis, s, p.cols);
    ctx.count = s.count;
    if constexpr (block_size_of(F) != 0) {
      if (tile_max != nullptr) {  // 2-D blocks: the scales of the tiles the segment crosses
        ctx.tile_amax = true;
MXABLATE_UNROLL
        for (int b = 0; b < kSegment / block_size_of(F); ++b)
          ctx.tile_max_bits[b] = tile_max[tile_2d_slot(kAxis, s, b, block_size_of(F))];
      }
    }
    SegmentResult res;
    Fp8Segment fp8;
    ThreadTelemetry seg_tel;
    const uint32_t signs = segment_sign_word(random.signs, a.spec.hadamard_size, s.part);
    bool done = false;
    if constexpr (kAxis == Axis::kCols && kStochastic) {
      if (quad_uniforms) {
        process_segment<F, kTelemetry, kStochastic, kCodes>(v, s.part, ctx, signs, ex, res, seg_tel, want_fp8,
                                                            fp8, QuadShuffleUniforms{s.line_in_tile & 3});
        done = true;
      }
    }
    if (!done) process_segment<F, kTelemetry, kStochastic, kCodes>(v, s.part, ctx, signs, ex, res, seg_tel, want_fp8, fp8);
    if (!s.valid) continue;
    if constexpr (kTelemetry) merge(tel, seg_tel);
    write_dequant<kAxis, F>(a, p, s, vector_stores, v, res, stage);
    if constexpr (kCodes) {
      write_codes<F>(a, length, s, vector_stores, res);
    } else if constexpr (block_size_of(F) != 0) {
      if (a.out.scales != nullptr) write_codes<F>(a, length, s, vector_stores, res);  // scales only
    }
    if (want_fp8) {
      uint4* dst = reinterpret_cast<uint4*>(a.out.fp8_codes + s.line * length + s.start);
      dst[0] = make_uint4(fp8.words[0], fp8.words[1], fp8.words[2], fp8.words[3]);
      dst[1] = make_uint4(fp8.words[4], fp8.words[5], fp8.words[6], fp8.words[7]);
      if (s.part == 0) {
        a.out.fp8_scales[(s.start / kFp8ChunkSize) * lines + s.line] = fp8.scale;
        inexact_chunks += fp8.chunk_exact ? 0 : 1;
      }
    }
  }
}

// One axis of a tile: the pass, then the block's share of the tensor scale, telemetry and
// inexact-chunk counter.
template <Axis kAxis, typename InT, QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes>
__device__ void finish_axis(const KernelParams& p, const AxisParams& a, const InT* tile, InT* stage,
                            int64_t r0, int64_t c0, ReductionScratch& scratch, const unsigned int* tile_slots) {
  const bool first_block = blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0;
  ThreadTelemetry tel;
  unsigned long long inexact = 0;
  // 2-D blocks: the scales come from the tile pass (quantize_kernel).
  const unsigned int* tile_max = block_size_of(F) != 0 && a.spec.blocks == BlockShape::k2D ? tile_slots : nullptr;
  quantize_pass<kAxis, InT, F, kTelemetry, kStochastic, kCodes>(p, a, tile, stage, r0, c0, tel, inexact, tile_max);
  if constexpr (is_per_tensor(F)) {
    if (first_block && a.out.tensor_scale != nullptr) *a.out.tensor_scale = axis_global<F>(a);
    // Delayed scaling: the tensor's amax into its instance's record, once per call.
    if (first_block && a.delayed.record != nullptr)
      atomicMax(a.delayed.record, fp8_amax_record(bits_float(a.amax_slot[0]), a.amax_slot[1] != 0u));
  }
  if constexpr (kTelemetry) {
    // The FP8 formats count a non-finite tensor once, as the CPU reference does.
    constexpr bool kTensorBlock = F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2;
    if (kTensorBlock && first_block) {
      const float g = axis_global<F>(a);
      tel.nonfinite_blocks += g != g ? 1 : 0;
    }
    if (a.out.telemetry != nullptr) flush_telemetry(tel, a.out.telemetry, scratch);
  }
  if (a.out.fp8_inexact_chunks != nullptr) {
    const unsigned long long n = block_sum(inexact, scratch.u);
    if (threadIdx.x == 0 && n != 0) atomicAdd(a.out.fp8_inexact_chunks, n);
  }
}

// The fused kernel. Each (telemetry, rounding, codes) variant is its own kernel, so that each
// gets the registers its own code needs (the plain round-to-nearest fake quantization fits in 64,
// leaving room for four blocks per multiprocessor; stochastic rounding needs twice that). Both
// enabled axes must share the variant.
// Blocks per multiprocessor each variant is compiled for (a register budget of 65536 / (256 *
// blocks), 80 registers for three): the round-to-nearest variants fit three blocks without
// spilling, which hide more memory latency; stochastic rounding needs twice the registers.
constexpr int min_blocks(bool telemetry, bool stochastic) { return telemetry ? 1 : stochastic ? 2 : 3; }

// Quantizes the tile at (r0, c0), already staged in shared memory (`tile`, with room for a
// second tile after it) and synchronized, along the enabled axes of `p`, writing every requested
// output. Shared by the quantizer, which reads its tile from `p.input`, and the fused producers,
// which compute it (produce_kernels.cuh). The caller synchronizes before reusing `tile`.
template <typename InT, QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes>
__device__ void quantize_staged_tile(const KernelParams& p, InT* tile, int64_t r0, int64_t c0,
                                     ReductionScratch& scratch, unsigned int* tile_slots) {
  if constexpr (block_size_of(F) != 0) {
    // Uniform over the block (kernel parameters). Both axes share F, hence the tile side.
    if ((p.axes[0].enabled && p.axes[0].spec.blocks == BlockShape::k2D) ||
        (p.axes[1].enabled && p.axes[1].spec.blocks == BlockShape::k2D))
      tile_amax_pass<InT, F>(p, tile, r0, c0, tile_slots);
  }
  // Staged outputs (see write_dequant): the last pass writes over the input tile, each thread
  // over its own segments only; with two passes the first one stages into a second tile.
  const bool both = p.axes[0].enabled && p.axes[1].enabled;
  InT* rows_stage = p.axes[0].staged ? (both ? tile + kTile * kTile : tile) : nullptr;
  InT* cols_stage = p.axes[1].staged ? tile : nullptr;
  // The two passes are iterations of a loop that is not unrolled, so that only one pass's
  // values are live at a time. Written one after the other, each pass fits the variant's register
  // budget on its own, but ptxas kept values of both alive and spilled 256 to 324 bytes per thread
  // to local memory in the MXFP4 variants (`-Xptxas -v`); as loop iterations the round-to-nearest
  // ones spill nothing and the others a few bytes. In a training step the spilling kernel's two-axis
  // launches took 1.45x their time alone, and the MXFP4 arm went from 1.068x to 1.019x the BF16 step
  // (docs/performance.md, issue 20; ratios from calls on different H200s).
MXABLATE_NO_UNROLL
  for (int pass = 0; pass < 2; ++pass) {
    if (!p.axes[pass].enabled) continue;
    if (pass == 0) {
      finish_axis<Axis::kRows, InT, F, kTelemetry, kStochastic, kCodes>(p, p.axes[0], tile, rows_stage, r0, c0,
                                                                        scratch, tile_slots);
      // The columns pass stages its output over the input tile, which the rows pass reads:
      // every thread must be done with the rows pass before any thread writes there.
      if (p.axes[1].enabled && cols_stage == tile) __syncthreads();
    } else {
      finish_axis<Axis::kCols, InT, F, kTelemetry, kStochastic, kCodes>(p, p.axes[1], tile, cols_stage, r0, c0,
                                                                        scratch, tile_slots);
    }
  }
  if (rows_stage == nullptr && cols_stage == nullptr) return;
  __syncthreads();
  constexpr bool kBf16In = sizeof(InT) == 2;
  if (rows_stage != nullptr)
    store_tile(p, r0, c0, rows_stage, reinterpret_cast<InT*>(kBf16In ? static_cast<void*>(p.axes[0].out.dequant_bf16)
                                                                      : static_cast<void*>(p.axes[0].out.dequant)));
  if (cols_stage != nullptr)
    store_tile(p, r0, c0, cols_stage, reinterpret_cast<InT*>(kBf16In ? static_cast<void*>(p.axes[1].out.dequant_bf16)
                                                                      : static_cast<void*>(p.axes[1].out.dequant)));
}

template <typename InT, QuantFormat F, bool kTelemetry, bool kStochastic, bool kCodes>
__global__ void __launch_bounds__(kThreads, min_blocks(kTelemetry, kStochastic))
    quantize_kernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ ReductionScratch scratch;
  __shared__ unsigned int tile_slots[kMaxTileSlots];  // 2-D blocks: the scale tiles' amax
  InT* tile = reinterpret_cast<InT*>(smem);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile<InT>(p, r0, c0, tile);
  __syncthreads();
  quantize_staged_tile<InT, F, kTelemetry, kStochastic, kCodes>(p, tile, r0, c0, scratch, tile_slots);
}

template <Axis kAxis, typename InT>
__device__ void axis_amax(const KernelParams& p, const AxisParams& a, const InT* tile, int64_t r0,
                          int64_t c0, ReductionScratch& scratch) {
  ShuffleExchange ex;
  Amax m{0.0f, false};
  const HadamardSigns signs = axis_randomness(a).signs;
MXABLATE_NO_UNROLL
  for (int sweep = 0; sweep < kSweeps; ++sweep) {
    const SegmentPlace s = place_segment(kAxis, threadIdx.x, sweep, r0, c0, p.rows, p.cols);
    float v[kSegment];
    gather_segment<kAxis>(tile, s, v);
    if (a.spec.hadamard != HadamardMode::kNone)
      rotate_segment(v, s.part, a.spec, segment_sign_word(signs, a.spec.hadamard_size, s.part), ex);
    if (!s.valid) continue;
    const Amax sm = segment_amax(v, s.count);
    m.amax = fmaxf(m.amax, sm.amax);
    m.nonfinite = m.nonfinite || sm.nonfinite;
  }
  const float amax = block_max(m.amax, scratch.f);
  const unsigned long long nonfinite = block_sum(m.nonfinite ? 1ull : 0ull, scratch.u);
  if (threadIdx.x == 0) {
    // Non-negative floats order like their bit patterns.
    atomicMax(&a.amax_slot[0], float_bits(amax));
    if (nonfinite != 0) atomicOr(&a.amax_slot[1], 1u);
  }
}

// The per-tensor formats' first pass: the largest finite |value| of the (rotated) tensor along
// each axis that needs it, and whether any value was NaN/Inf.
template <typename InT>
__global__ void __launch_bounds__(kThreads) amax_kernel(const KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ ReductionScratch scratch;
  InT* tile = reinterpret_cast<InT*>(smem);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile<InT>(p, r0, c0, tile);
  __syncthreads();
  if (p.axes[0].enabled && p.axes[0].amax_slot) axis_amax<Axis::kRows>(p, p.axes[0], tile, r0, c0, scratch);
  // Unrotated axes read the same values: the launcher then gives both one slot (shares_amax).
  const bool shared = p.axes[0].enabled && p.axes[1].amax_slot == p.axes[0].amax_slot;
  if (p.axes[1].enabled && p.axes[1].amax_slot && !shared)
    axis_amax<Axis::kCols>(p, p.axes[1], tile, r0, c0, scratch);
}

}  // namespace mxablate::kernels::gpu::detail
