// A host model of the fused GPU quantizer: the kernel's per-thread pipeline
// (kernels/gpu/segment_quant.h) run by four host threads per 128-chunk that swap values through
// a barrier where the GPU uses warp shuffles, over the same segment placement as the kernel.
// Comparing it with the CPU reference checks the kernel's logic on any machine; the GPU tests
// then check the hardware.
#pragma once

#include <algorithm>
#include <array>
#include <barrier>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mxablate/kernels/gpu/mx_to_fp8.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "mxablate/kernels/quantize.h"
#include "reference.h"
#include "segment_quant.h"
#include "tile_layout.h"

namespace mxablate::test {

// The model fills the same outputs the CPU reference does.
using ModelOutput = Expected;

namespace model_detail {

using namespace kernels;
using namespace kernels::gpu::detail;

// The four threads of a chunk and the slots they swap values through.
struct ChunkLanes {
  std::barrier<> barrier{kSegmentsPerChunk};
  std::array<std::array<float, kSegment>, kSegmentsPerChunk> floats{};
  std::array<uint32_t, kSegmentsPerChunk> words{};
};

struct BarrierExchange {
  ChunkLanes& lanes;
  int part;
  void xor_floats(const float (&own)[kSegment], int mask, float (&partner)[kSegment]) {
    std::memcpy(lanes.floats[part].data(), own, sizeof own);
    lanes.barrier.arrive_and_wait();
    std::memcpy(partner, lanes.floats[part ^ mask].data(), sizeof partner);
    lanes.barrier.arrive_and_wait();
  }
  uint32_t xor_u32(uint32_t own, int mask) {
    lanes.words[part] = own;
    lanes.barrier.arrive_and_wait();
    const uint32_t other = lanes.words[part ^ mask];
    lanes.barrier.arrive_and_wait();
    return other;
  }
  bool all(bool b) {
    uint32_t v = b ? 1u : 0u;
    for (int mask = 1; mask < kSegmentsPerChunk; mask <<= 1) v &= xor_u32(v, mask);
    return v != 0;
  }
};

struct Problem {
  const float* x;
  int64_t rows, cols;
  Axis axis;
  QuantSpec spec;
  RngKey key;
  bool want_fp8;
  int64_t lines() const { return axis == Axis::kRows ? rows : cols; }
  int64_t length() const { return axis == Axis::kRows ? cols : rows; }
  int64_t index(int64_t line, int64_t j) const { return axis == Axis::kRows ? line * cols + j : j * cols + line; }
};

// Runs `body(part, line, start, v, count, ex)` for every 128-chunk of every line, the four parts
// on four threads in lockstep, after loading each part's `count` values (zeros past the line's
// end, as the kernel's tile staging pads them).
template <typename Body>
void for_each_segment(const Problem& pb, Body body) {
  const int64_t chunks = (pb.length() + 127) / 128;
  ChunkLanes lanes;
  std::vector<std::jthread> threads;
  for (int part = 0; part < kSegmentsPerChunk; ++part) {
    threads.emplace_back([&, part] {
      BarrierExchange ex{lanes, part};
      for (int64_t line = 0; line < pb.lines(); ++line) {
        for (int64_t chunk = 0; chunk < chunks; ++chunk) {
          const int64_t start = chunk * 128 + part * kSegment;
          const int count = static_cast<int>(std::clamp<int64_t>(pb.length() - start, 0, kSegment));
          float v[kSegment];
          for (int j = 0; j < kSegment; ++j) v[j] = j < count ? pb.x[pb.index(line, start + j)] : 0.0f;
          body(part, line, start, v, count, ex);
        }
      }
    });
  }
}

inline void merge(ThreadTelemetry& into, const ThreadTelemetry& t) {
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

template <QuantFormat F, bool kStochastic>
ModelOutput run(const Problem& pb) {
  ModelOutput out;
  const size_t n = static_cast<size_t>(pb.rows * pb.cols);
  out.dequant.assign(n, -12345.0f);
  out.dequant_bf16.assign(n, 0xDEAD);
  out.packed.assign(packed_bytes(F, pb.rows, pb.cols), 0xAB);
  out.scales.assign(scale_bytes(F, pb.rows, pb.cols), 0xCD);
  if (pb.want_fp8) {
    out.fp8_codes.assign(n, 0xEE);
    out.fp8_scales.assign(static_cast<size_t>(pb.lines() * (pb.length() / 128)), -1.0f);
  }
  const int n_h = pb.spec.hadamard_size;
  const HadamardSigns signs = hadamard_signs(pb.spec.hadamard, pb.key);

  float global = 1.0f;
  if constexpr (is_per_tensor(F)) {
    std::array<Amax, kSegmentsPerChunk> partial{};
    for_each_segment(pb, [&](int part, int64_t, int64_t, float (&v)[kSegment], int count, BarrierExchange& ex) {
      if (pb.spec.hadamard != HadamardMode::kNone)
        rotate_segment(v, part, pb.spec, segment_sign_word(signs, n_h, part), ex);
      if (count == 0) return;
      const Amax a = segment_amax(v, count);
      partial[part].amax = std::max(partial[part].amax, a.amax);
      partial[part].nonfinite = partial[part].nonfinite || a.nonfinite;
    });
    Amax total{0.0f, false};
    for (const Amax& a : partial) {
      total.amax = std::max(total.amax, a.amax);
      total.nonfinite = total.nonfinite || a.nonfinite;
    }
    global = tensor_global<F>(total.amax, total.nonfinite);
    out.tensor_scale = global;
  }

  // 2-D blocks: the kernel's tile pass (tile_amax_pass): per thread block of 128 x 128, the
  // scale tiles' amax in tile_2d_slot order, read along rows from the unrotated input (2-D blocks
  // never rotate). A thread block is identified by (its first row, its first column) / 128.
  const int tile = block_2d_tile(pb.spec);
  const int64_t grid_cols = (pb.cols + kTile - 1) / kTile;
  std::vector<uint32_t> tile_max;
  if (tile != 0) {
    tile_max.assign(static_cast<size_t>((pb.rows + kTile - 1) / kTile * grid_cols * kMaxTileSlots), 0u);
    for (int64_t r = 0; r < pb.rows; ++r) {
      for (int64_t c0 = 0; c0 < pb.cols; c0 += kSegment) {
        SegmentPlace s{};
        s.line_in_tile = static_cast<int>(r % kTile);
        s.part = static_cast<int>((c0 % kTile) / kSegment);
        const int count = static_cast<int>(std::min<int64_t>(pb.cols - c0, kSegment));
        float v[kSegment] = {};
        for (int j = 0; j < count; ++j) v[j] = pb.x[r * pb.cols + c0 + j];
        uint32_t bits[2];
        segment_block_max_bits<F>(v, count, bits);
        const int64_t thread_block = (r / kTile) * grid_cols + c0 / kTile;
        for (int b = 0; b * tile < count; ++b) {
          uint32_t& slot = tile_max[static_cast<size_t>(thread_block * kMaxTileSlots) +
                                    static_cast<size_t>(tile_2d_slot(Axis::kRows, s, b, tile))];
          slot = std::max(slot, bits[b]);
        }
      }
    }
  }
  // The slot the quantization pass reads for block b of the segment at (line, start).
  auto slot_of = [&](int part, int64_t line, int64_t start, int b) {
    SegmentPlace s{};
    s.line_in_tile = static_cast<int>(line % kTile);
    s.part = part;
    const int64_t row = pb.axis == Axis::kRows ? line : start, col = pb.axis == Axis::kRows ? start : line;
    const int64_t thread_block = (row / kTile) * grid_cols + col / kTile;
    return static_cast<size_t>(thread_block * kMaxTileSlots + tile_2d_slot(pb.axis, s, b, tile));
  };

  std::array<ThreadTelemetry, kSegmentsPerChunk> tel{};
  std::array<int64_t, kSegmentsPerChunk> inexact{};
  const int64_t length = pb.length();
  for_each_segment(pb, [&](int part, int64_t line, int64_t start, float (&v)[kSegment], int count, BarrierExchange& ex) {
    SegmentContext ctx;
    ctx.spec = pb.spec;
    ctx.key = pb.key;
    ctx.global = global;
    ctx.first_index = pb.index(line, start);
    ctx.index_stride = pb.axis == Axis::kRows ? 1 : pb.cols;
    ctx.bf16_written = true;
    ctx.count = count;
    if (tile != 0) {
      ctx.tile_amax = true;
      for (int b = 0; b < kSegment / tile; ++b) ctx.tile_max_bits[b] = tile_max[slot_of(part, line, start, b)];
    }
    SegmentResult res;
    Fp8Segment fp8;
    ThreadTelemetry seg_tel;
    process_segment<F, true, kStochastic, true>(v, part, ctx, segment_sign_word(signs, n_h, part), ex, res, seg_tel,
                             pb.want_fp8, fp8);
    if (count == 0) return;
    merge(tel[part], seg_tel);
    for (int j = 0; j < count; ++j) {
      const size_t i = static_cast<size_t>(pb.index(line, start + j));
      out.dequant[i] = dequant_f32(v[j]);
      out.dequant_bf16[i] = dequant_bf16_bits<F>(v[j]);
    }
    if constexpr (F == QuantFormat::kMXFP4 || F == QuantFormat::kNVFP4) {
      std::memcpy(out.packed.data() + line * (length / 2) + start / 2, res.code_words, count / 2);
      const int block = block_size_of(F);
      for (int b = 0; b * block < count; ++b)
        out.scales[static_cast<size_t>(line * (length / block) + start / block + b)] = res.scale_codes[b];
    } else if constexpr (F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2) {
      std::memcpy(out.packed.data() + line * length + start, res.code_words, count);
    }
    if (pb.want_fp8) {
      std::memcpy(out.fp8_codes.data() + line * length + start, fp8.words, 32);
      if (part == 0) {
        out.fp8_scales[static_cast<size_t>((start / 128) * pb.lines() + line)] = fp8.scale;
        inexact[part] += fp8.chunk_exact ? 0 : 1;
      }
    }
  });
  ThreadTelemetry total;
  for (const auto& t : tel) merge(total, t);
  if constexpr (F == QuantFormat::kFP8E4M3 || F == QuantFormat::kFP8E5M2) total.nonfinite_blocks = global != global ? 1 : 0;
  out.telemetry = gpu::to_quant_telemetry({total.elements, total.nonzero_inputs, total.saturated, total.flushed,
                                           total.nonfinite_blocks, total.dequant_clamped, total.sum_sq_error,
                                           total.sum_sq_input, total.sum_error});
  for (int64_t c : inexact) out.fp8_inexact_chunks += c;
  return out;
}

template <bool kStochastic>
ModelOutput run_format(const Problem& pb) {
  switch (pb.spec.format) {
    case QuantFormat::kFP32: return run<QuantFormat::kFP32, kStochastic>(pb);
    case QuantFormat::kBF16: return run<QuantFormat::kBF16, kStochastic>(pb);
    case QuantFormat::kFP8E4M3: return run<QuantFormat::kFP8E4M3, kStochastic>(pb);
    case QuantFormat::kFP8E5M2: return run<QuantFormat::kFP8E5M2, kStochastic>(pb);
    case QuantFormat::kMXFP4: return run<QuantFormat::kMXFP4, kStochastic>(pb);
    case QuantFormat::kNVFP4: return run<QuantFormat::kNVFP4, kStochastic>(pb);
  }
  throw std::invalid_argument("unknown format");
}

}  // namespace model_detail

// The model's outputs for one axis. Throws like the reference when the spec does not fit.
inline ModelOutput model_quantize(const float* x, int64_t rows, int64_t cols, kernels::Axis axis,
                                  const kernels::QuantSpec& spec, const kernels::RngKey& key,
                                  bool want_fp8) {
  using kernels::QuantFormat;
  const std::string problem = kernels::check_shape(spec, rows, cols, axis);
  if (!problem.empty()) throw std::invalid_argument(problem);
  const model_detail::Problem pb{x, rows, cols, axis, spec, key, want_fp8};
  if (spec.rounding == kernels::Rounding::kStochastic) return model_detail::run_format<true>(pb);
  return model_detail::run_format<false>(pb);
}

}  // namespace mxablate::test
