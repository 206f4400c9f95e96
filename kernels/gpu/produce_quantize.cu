// The fused producers (mxablate/kernels/gpu/produce_quantize_gpu.h): a thread block computes its
// 128 x 128 tile of SwiGLU's h (or of dg or du) from the inputs' tiles, writes it to global
// memory and into shared memory, and runs the quantizer's own tile code (quantize_kernels.cuh,
// quantize_staged_tile) on it. The quantizer would read the tile back from global memory; here it
// is already in shared memory, which is the whole saving (docs/design.md §4).
//
// One block makes one produced tile. The backward pass's dg and du tiles of one place are two
// neighbouring blocks, each reading the three inputs, so that they run close together and the
// second can find them in L2. A block that made both, one after the other, spilled 800 bytes a
// thread to local memory (`-Xptxas -v`: ptxas kept values of both halves alive), and ran 2.5x
// slower than the unfused kernels; one tile a block spills nothing
// (tests/gpu/kernel_spills_test.py holds every kernel to its allowance).
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/produce_quantize_gpu.h"
#include "mxablate/kernels/minifloat.h"
#include "quantize_dispatch.cuh"
#include "swiglu_math.h"

namespace mxablate::kernels::gpu {
namespace detail {
namespace {

enum class ProducerOp : uint8_t { kSwiGlu, kSwiGluBackward };

// The producer's inputs and outputs. The produced tensors' quantizations travel as one array in a
// kernel parameter, indexed by the block's produced tensor: uniform over the block, read from the
// parameter space as the quantizer reads its axes (a runtime index into `out` below would copy
// the array to local memory, hence the select in produce_tile).
struct ProducedParams {
  KernelParams tensor[2];
};

struct ProduceIo {
  const Bf16Bits* g = nullptr;
  const Bf16Bits* u = nullptr;
  const Bf16Bits* dh = nullptr;  // kSwiGluBackward
  Bf16Bits* out[2] = {nullptr, nullptr};
  int64_t rows = 0, cols = 0;
};

constexpr int kVec = 8;  // bf16 elements per 16-byte vector
constexpr int kVecsPerRow = kTile / kVec;
constexpr int kVecsPerThread = kTile * kVecsPerRow / kThreads;
constexpr int kBatch = 2;  // vectors a thread loads before it computes (memory-level parallelism)

__device__ __forceinline__ void unpack8(const uint4& q, float (&out)[kVec]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
MXABLATE_UNROLL
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = bf16_bits_to_float(static_cast<Bf16Bits>(w[i] & 0xFFFFu));
    out[2 * i + 1] = bf16_bits_to_float(static_cast<Bf16Bits>(w[i] >> 16));
  }
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16_bits(lo)) | (static_cast<uint32_t>(float_to_bf16_bits(hi)) << 16);
}

// Tile (r0, c0) of produced tensor `which` (0: h or dg, 1: du): computed from the inputs,
// rounded to bf16 as the plain kernel rounds it, written to global memory and staged in `tile`
// (zeros outside the tensor, as the quantizer's load_tile stages them). The batches are a loop
// that is not unrolled: one batch's vectors are live at a time.
template <ProducerOp kOp>
__device__ void produce_tile(const ProduceIo& pp, int which, int64_t r0, int64_t c0, Bf16Bits* tile) {
  const int64_t rows = pp.rows, cols = pp.cols;
  const int64_t valid_rows = rows - r0 < kTile ? rows - r0 : kTile;
  const int64_t valid_cols = cols - c0 < kTile ? cols - c0 : kTile;
  Bf16Bits* const out = which == 0 ? pp.out[0] : pp.out[1];
MXABLATE_NO_UNROLL
  for (int b = 0; b < kVecsPerThread; b += kBatch) {
    uint4 gq[kBatch], uq[kBatch], dq[kBatch];
    bool inside[kBatch];
MXABLATE_UNROLL
    for (int i = 0; i < kBatch; ++i) {
      const int v = threadIdx.x + (b + i) * kThreads;
      const int r = v / kVecsPerRow, c = (v % kVecsPerRow) * kVec;
      inside[i] = r < valid_rows && c < valid_cols;  // cols % 8 == 0: a vector is all in or all out
      gq[i] = uq[i] = dq[i] = make_uint4(0, 0, 0, 0);
      if (inside[i]) {
        const int64_t at = (r0 + r) * cols + c0 + c;
        gq[i] = *reinterpret_cast<const uint4*>(pp.g + at);
        uq[i] = *reinterpret_cast<const uint4*>(pp.u + at);
        if constexpr (kOp == ProducerOp::kSwiGluBackward) dq[i] = *reinterpret_cast<const uint4*>(pp.dh + at);
      }
    }
MXABLATE_UNROLL
    for (int i = 0; i < kBatch; ++i) {
      const int v = threadIdx.x + (b + i) * kThreads;
      const int r = v / kVecsPerRow, c = (v % kVecsPerRow) * kVec;
      uint4 q = make_uint4(0, 0, 0, 0);
      if (inside[i]) {
        float gv[kVec], uv[kVec], y[kVec];
        unpack8(gq[i], gv);
        unpack8(uq[i], uv);
        if constexpr (kOp == ProducerOp::kSwiGlu) {
MXABLATE_UNROLL
          for (int k = 0; k < kVec; ++k) y[k] = swiglu_h(gv[k], uv[k]);
        } else {
          float dv[kVec];
          unpack8(dq[i], dv);
MXABLATE_UNROLL
          for (int k = 0; k < kVec; ++k) {
            float dg, du;
            swiglu_grads(dv[k], gv[k], uv[k], dg, du);
            y[k] = which == 0 ? dg : du;
          }
        }
        q = make_uint4(pack2(y[0], y[1]), pack2(y[2], y[3]), pack2(y[4], y[5]), pack2(y[6], y[7]));
        *reinterpret_cast<uint4*>(out + (r0 + r) * cols + c0 + c) = q;
      }
      *reinterpret_cast<uint4*>(tile + tile_offset(r, c)) = q;
    }
  }
}

// Tensors an op produces: h; dg and du.
MX_HD constexpr int produced_count(ProducerOp op) { return op == ProducerOp::kSwiGluBackward ? 2 : 1; }

template <ProducerOp kOp, bool kStochastic>
__global__ void __launch_bounds__(kThreads, min_blocks(false, kStochastic))
    produce_quantize_kernel(const ProduceIo io, const ProducedParams params) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ ReductionScratch scratch;
  __shared__ unsigned int tile_slots[kMaxTileSlots];
  Bf16Bits* tile = reinterpret_cast<Bf16Bits*>(smem);
  constexpr int kProduced = produced_count(kOp);
  const int which = static_cast<int>(blockIdx.x % kProduced);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x / kProduced) * kTile;
  produce_tile<kOp>(io, which, r0, c0, tile);
  __syncthreads();
  const KernelParams& p = params.tensor[which];
  if (p.axes[0].enabled || p.axes[1].enabled)
    quantize_staged_tile<Bf16Bits, QuantFormat::kMXFP4, false, kStochastic, false>(p, tile, r0, c0, scratch,
                                                                                   tile_slots);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string axis_name(Axis axis) { return axis == Axis::kRows ? "along rows" : "down columns"; }

// One produced tensor's kernel parameters, after checking its jobs against the contract.
KernelParams tensor_params(const ProducedTensor& t, int64_t rows, int64_t cols, const std::string& where,
                           bool& any_stochastic, bool& any_nearest) {
  if (t.out == nullptr || !aligned16(t.out))
    throw std::invalid_argument(where + ": the produced tensor's pointer is null or not 16-byte aligned");
  KernelParams p;
  p.rows = rows;
  p.cols = cols;
  p.vector_loads = true;  // cols % 8 == 0 and aligned pointers: store_tile's 16-byte stores
  p.input_is_bf16 = true;
  const AxisJob* jobs[2] = {t.along_rows, t.down_cols};
  for (int i = 0; i < 2; ++i) {
    if (jobs[i] == nullptr) continue;
    const Axis axis = i == 0 ? Axis::kRows : Axis::kCols;
    const AxisJob& job = *jobs[i];
    const std::string problem = produced_axis_problem(job.spec, axis, rows, cols);
    if (!problem.empty()) throw std::invalid_argument(where + " " + axis_name(axis) + ": " + problem);
    const AxisOutputs& o = job.out;
    if (o.dequant_bf16 == nullptr || !aligned16(o.dequant_bf16) || o.dequant || o.packed || o.scales ||
        o.tensor_scale || o.fp8_codes || o.fp8_scales || o.fp8_inexact_chunks || o.telemetry)
      throw std::invalid_argument(where + " " + axis_name(axis) +
                                  ": a producer writes 16-byte aligned bf16 values and nothing else");
    if (job.delayed.window != nullptr || job.delayed.record != nullptr)
      throw std::invalid_argument(where + " " + axis_name(axis) + ": delayed scaling is for FP8, not mxfp4");
    p.axes[i] = axis_params(&job, axis, nullptr);
    p.axes[i].staged = true;
    (job.spec.rounding == Rounding::kStochastic ? any_stochastic : any_nearest) = true;
  }
  return p;
}

void check_inputs(const std::string& where, std::initializer_list<const void*> inputs, int64_t rows, int64_t cols) {
  for (const void* in : inputs)
    if (in == nullptr || !aligned16(in))
      throw std::invalid_argument(where + ": an input pointer is null or not 16-byte aligned");
  if (rows <= 0 || cols <= 0)
    throw std::invalid_argument(where + ": the tensor is empty (" + std::to_string(rows) + " x " +
                                std::to_string(cols) + ")");
  if (cols % kVec != 0)
    throw std::invalid_argument(where + ": rows must be a multiple of 8 elements long, got " + std::to_string(cols));
  if ((rows + kTile - 1) / kTile > 65535) throw std::invalid_argument(where + ": more than 65535 * 128 rows");
}

int smem_bytes(const KernelParams& first, const KernelParams& second) {
  const auto both = [](const KernelParams& p) { return p.axes[0].enabled && p.axes[1].enabled; };
  return kTile * kTile * 2 * (both(first) || both(second) ? 2 : 1);
}

template <ProducerOp kOp>
void launch(const ProduceIo& io, const KernelParams& first, const KernelParams& second, bool stochastic,
            gpuStream_t stream, const char* what) {
  const int64_t col_tiles = (io.cols + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(col_tiles * produced_count(kOp)),
                  static_cast<unsigned>((io.rows + kTile - 1) / kTile));
  const int smem = smem_bytes(first, second);
  ProducedParams params;
  params.tensor[0] = first;
  params.tensor[1] = second;
  const auto go = [&](auto kernel) {
    check(gpuSetMaxDynamicSharedMemory(kernel, 2 * kTile * kTile * 2), what);
    kernel<<<grid, kThreads, smem, stream>>>(io, params);
    check(gpuGetLastError(), what);
  };
  if (stochastic) {
    go(produce_quantize_kernel<kOp, true>);
  } else {
    go(produce_quantize_kernel<kOp, false>);
  }
}

void require_one_rounding(bool any_stochastic, bool any_nearest, const std::string& where) {
  if (any_stochastic && any_nearest)
    throw std::invalid_argument(where + ": every quantization of one launch must round alike");
}

}  // namespace
}  // namespace detail

std::string produced_axis_problem(const QuantSpec& spec, Axis axis, int64_t rows, int64_t cols) {
  if (spec.format != QuantFormat::kMXFP4)
    return "producers quantize to mxfp4 only, not " + std::string(to_string(spec.format));
  return check_shape(spec, rows, cols, axis);
}

void swiglu_forward_quantize(const SwiGluQuantizeJob& job, void* stream) {
  const std::string where = "swiglu_forward_quantize";
  detail::check_inputs(where, {job.g, job.u}, job.rows, job.cols);
  bool stochastic = false, nearest = false;
  detail::ProduceIo io;
  io.g = job.g;
  io.u = job.u;
  io.out[0] = job.h.out;
  io.rows = job.rows;
  io.cols = job.cols;
  const detail::KernelParams h = detail::tensor_params(job.h, job.rows, job.cols, where, stochastic, nearest);
  detail::require_one_rounding(stochastic, nearest, where);
  detail::launch<detail::ProducerOp::kSwiGlu>(io, h, detail::KernelParams{}, stochastic,
                                              static_cast<gpuStream_t>(stream), "launching swiglu_forward_quantize");
}

void swiglu_backward_quantize(const SwiGluBackwardQuantizeJob& job, void* stream) {
  const std::string where = "swiglu_backward_quantize";
  detail::check_inputs(where, {job.dh, job.g, job.u}, job.rows, job.cols);
  bool stochastic = false, nearest = false;
  detail::ProduceIo io;
  io.g = job.g;
  io.u = job.u;
  io.dh = job.dh;
  io.out[0] = job.dg.out;
  io.out[1] = job.du.out;
  io.rows = job.rows;
  io.cols = job.cols;
  const detail::KernelParams dg = detail::tensor_params(job.dg, job.rows, job.cols, where + " (dg)", stochastic, nearest);
  const detail::KernelParams du = detail::tensor_params(job.du, job.rows, job.cols, where + " (du)", stochastic, nearest);
  detail::require_one_rounding(stochastic, nearest, where);
  detail::launch<detail::ProducerOp::kSwiGluBackward>(io, dg, du, stochastic, static_cast<gpuStream_t>(stream),
                                                      "launching swiglu_backward_quantize");
}

}  // namespace mxablate::kernels::gpu
