// The CUDA side of the adapters: at::Tensor on a CUDA device -> the raw GPU API
// (mxablate/kernels/gpu/quantize_gpu.h) on LibTorch's current stream. Compiled only when the GPU
// kernels are built against a CUDA LibTorch (MXABLATE_KERNELS_TORCH_CUDA).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "mxablate/kernels/gpu/mx_to_fp8.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "mxablate/kernels/torch/quantized_gemm.h"

namespace mxablate::kernels::detail {

at::Tensor fake_quantize_gpu(const at::Tensor& x, Axis axis, const AxisQuantization& q, QuantTelemetry* telemetry,
                             at::ScalarType out_dtype);

BothAxes fake_quantize_both_gpu(const at::Tensor& x, const AxisQuantization& rows,
                                const AxisQuantization& cols, QuantTelemetry* rows_telemetry,
                                QuantTelemetry* cols_telemetry, at::ScalarType out_dtype);

// An MXFP4 operand re-expressed for at::_scaled_mm with 1x128 blockwise scales: codes are E4M3,
// (lines x K) row-major; scales are float32 (lines x K/128) stored column-major (strides
// (1, lines)), the layout cuBLASLt accepts for the A operand (and, transposed, for B).
struct Fp8Operand {
  at::Tensor codes;
  at::Tensor scales;
  int64_t chunks = 0;          // filled when counts were asked for
  int64_t inexact_chunks = 0;  // idem
};

// Empty when `device` has FP8 tensor cores that cuBLASLt's 1x128 blockwise recipe runs on
// (compute capability 9.0 and later), else why not.
std::string hopper_fp8_unavailable_reason(const at::Device& device);

Fp8Operand quantize_fp8_operand_gpu(const GemmOperand& op, QuantTelemetry* telemetry,
                                    bool want_counts);

// MXFP4 operands of x along rows and/or down columns (one quantizer pass) re-expressed as E4M3
// codes with one decode scale per line (mx_as_fp8_gpu.h): the mxfp4-as-fp8 engine's quantize.
// Nothing is read back (telemetry aside): whether E4M3 held each line stays on the device, for
// the fix-up after the GEMM (mx_rowwise_fixup_gpu).
struct MxAsFp8Axis {
  at::Tensor codes;         // lines x length Float8_e4m3fn (lines = rows along rows, cols down columns)
  at::Tensor line_scales;   // lines float32: 2^(E_l - 133)
  at::Tensor packed;        // lines x length/2 bytes: the MXFP4 codes the E4M3 codes came from
  at::Tensor block_scales;  // lines x length/32 E8M0 codes
  at::Tensor line_inexact;  // lines bytes: 1 where E4M3 did not hold the line
  at::Tensor status;        // 4 int32 on the device: the axis's Fp8LineStatus
};
struct MxAsFp8Operands {
  MxAsFp8Axis rows, cols;  // empty where the axis was not asked for
};
MxAsFp8Operands mx_as_fp8_gpu(const at::Tensor& x, const AxisQuantization* rows, const AxisQuantization* cols,
                              QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry);

// After c = the row-wise scaled FP8 GEMM of a and b (BF16, m x n, row-major): recomputes the
// tiles whose lines E4M3 did not hold, on c's stream (mx_as_fp8_gpu.h, mx_rowwise_fixup).
// `tiles`, when defined, is a 2-element int64 device tensor the tile counts are added to.
void mx_rowwise_fixup_gpu(const MxAsFp8Axis& a, const MxAsFp8Axis& b, float fold, at::Tensor& c,
                          const at::Tensor* tiles);

// The MXFP4 values of an axis (lines x length, `dtype` float32 or bfloat16): mx_dequant's, the
// emulated engine's values bit for bit.
at::Tensor mx_values_gpu(const MxAsFp8Axis& axis, at::ScalarType dtype);

// Empty when `device` runs FP8 GEMMs with row-wise scales (at::_scaled_mm's row-wise kernels:
// compute capability 9.0 and later), else why not.
std::string fp8_rowwise_unavailable_reason(const at::Device& device);

// Empty when `device` has FP8 tensor cores for per-tensor FP8 GEMMs (compute capability 8.9 and
// later), else why not.
std::string fp8_tensorwise_unavailable_reason(const at::Device& device);

// Per-tensor FP8 codes of x along rows and/or down columns in one pass (fp8_gemm.h, Fp8Codes).
Fp8Codes fp8_codes_gpu(const at::Tensor& x, const AxisQuantization* rows, const AxisQuantization* cols,
                       QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry);

// The block scale codes of one quantization (no values): (lines x length/block) bytes, E8M0 for
// MXFP4, E4M3 for NVFP4, and NVFP4's global scale as a one-element float tensor on the device.
struct ScaleCodesGpu {
  at::Tensor codes;
  at::Tensor tensor_scale;
};

ScaleCodesGpu scale_codes_gpu(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key);

}  // namespace mxablate::kernels::detail
