// Fused producers (docs/design.md §4, "Quantization in the producers"): kernels that compute an
// activation or a gradient and quantize it in the same pass, tile by tile in shared memory, so
// that the quantizer never reads the tensor back. The produced tensor is still written (bf16), and
// its quantizations are exactly quantize()'s (quantize_gpu.h): the same per-segment pipeline runs
// on the same bf16 values, so the outputs are bit-identical to the unfused kernel followed by the
// quantizer. Torch-free, like quantize_gpu.h; single source for CUDA and HIP.
//
// What a producer takes: MXFP4 along rows and/or down columns (any scale rule, rounding and
// Hadamard mode the quantizer takes, 1-D blocks), written as dequantized bf16 values (the emulated
// GEMM engine's operand form), without telemetry; every quantization of one launch rounds alike
// (the kernel is compiled per rounding). Inputs and outputs are bf16, row-major, contiguous,
// 16-byte aligned, with cols % 8 == 0. Anything else is refused with std::invalid_argument (one
// sentence): callers ask produced_axis_problem first and quantize the plain way otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "mxablate/kernels/gpu/quantize_gpu.h"

namespace mxablate::kernels::gpu {

// Empty when a fused producer can quantize a rows x cols tensor along `axis` under `spec`, else
// one sentence saying why not. The one rule for "may a producer make this operand".
std::string produced_axis_problem(const QuantSpec& spec, Axis axis, int64_t rows, int64_t cols);

// One produced tensor: where it is written (bf16 bits, rows x cols) and its quantizations, as
// quantize()'s AxisJob (only out.dequant_bf16 may be set); either axis may be null.
struct ProducedTensor {
  uint16_t* out = nullptr;
  const AxisJob* along_rows = nullptr;
  const AxisJob* down_cols = nullptr;
};

// h = silu(g) * u (fused_ops_gpu.h's swiglu_forward), quantized as it is written.
struct SwiGluQuantizeJob {
  const uint16_t* g = nullptr;
  const uint16_t* u = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  ProducedTensor h;
};

void swiglu_forward_quantize(const SwiGluQuantizeJob& job, void* stream);

// dg and du (fused_ops_gpu.h's swiglu_backward), each quantized as it is written.
struct SwiGluBackwardQuantizeJob {
  const uint16_t* dh = nullptr;
  const uint16_t* g = nullptr;
  const uint16_t* u = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  ProducedTensor dg, du;
};

void swiglu_backward_quantize(const SwiGluBackwardQuantizeJob& job, void* stream);

}  // namespace mxablate::kernels::gpu
