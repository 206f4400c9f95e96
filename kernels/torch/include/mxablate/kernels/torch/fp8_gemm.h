// Per-tensor FP8 operands on FP8 tensor cores (docs/design.md §3): the FP8 baseline's GEMMs as
// the hardware runs them. A tensor's codes are written in one or both layouts a training step
// needs by one pass of the GPU quantizer (after its amax pass; both layouts share that pass when
// unrotated), with the decode scale d = amax / max_finite left on the device: no host
// synchronization, and the scale goes straight into at::_scaled_mm. Since the scale is per
// tensor, one code tensor serves every GEMM up to layout:
//   Fprop  Y  = X Wᵀ:  a = X codes along rows,  b = W codes along rows
//   Dgrad  dX = dY W:  a = dY codes along rows, b = W codes down columns (Wᵀ, row-major)
//   Wgrad  dW = dYᵀ X: a = dY codes down columns, b = X codes down columns
// CUDA only (FP8 tensor cores, torch >= 2.5); the exact emulation (quantized_gemm, kEmulated)
// runs everywhere and is what this path is tested against.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "mxablate/kernels/gemm_shape.h"  // fp8_tensorwise_shape_problem
#include "mxablate/kernels/quantize.h"
#include "mxablate/kernels/torch/fake_quantize.h"

namespace mxablate::kernels {

// The per-tensor FP8 codes of a rows x cols tensor. Codes are Float8_e4m3fn or Float8_e5m2
// (the spec's format), bit-identical to the CPU reference's packed FP8 output (quantize.h).
struct Fp8Codes {
  at::Tensor rows;        // (rows, cols): codes along rows; undefined when not asked for
  at::Tensor cols;        // (cols, rows): codes down columns, i.e. of the transpose
  at::Tensor rows_scale;  // one-element float32 decode scale on the device (NaN: non-finite x)
  at::Tensor cols_scale;
};

// Codes of the 2-D float32/bf16 CUDA tensor x along rows and/or down columns, each with its own
// spec (format fp8-e4m3 or fp8-e5m2) and key, in one pass over x. Telemetry as fake_quantize's
// (asking for it synchronizes). Throws std::invalid_argument (one sentence) for a CPU tensor, a
// format other than FP8, a spec that does not fit, or a build without FP8 support.
Fp8Codes fp8_quantize(const at::Tensor& x, const AxisQuantization* rows, const AxisQuantization* cols,
                      QuantTelemetry* rows_telemetry = nullptr, QuantTelemetry* cols_telemetry = nullptr);

// C = fold · Σ_k a[m,k] b[n,k] · a_scale · b_scale for code tensors a (M x K) and b (N x K),
// both K-contiguous, on FP8 tensor cores: products exact, FP32 accumulation (no fast
// accumulation), one rounding to `out_dtype` (float32 or bfloat16). K and N must be multiples of
// 16 (fp8_tensorwise_shape_problem); e5m2 x e5m2 has no kernel and is refused. `fold` (sr_prescale_fold) multiplies
// a's scale on the device first.
at::Tensor fp8_tensorwise_mm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                             const at::Tensor& b_scale, at::ScalarType out_dtype, float fold = 1.0f);

}  // namespace mxablate::kernels
