// LibTorch adapter of the quantizers: at::Tensor in, at::Tensor out.
//
// A CPU tensor goes through the CPU reference (kernels/src/cpu); a CUDA tensor through the fused
// GPU kernel (kernels/gpu), which is bit-exact with it. Both follow the layout contract of
// mxablate/kernels/quantize.h; "fake quantization" returns the dequantized values Q(x) in the
// input's shape, dtype and device.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "mxablate/kernels/quantize.h"

namespace mxablate::kernels {

// Q(x) for a 2-D float32 or bfloat16 tensor, quantized along `axis` (kRows: blocks run along a
// row; kCols: down a column). With a Hadamard mode, Q(rotated x): the rotation only cancels
// inside a GEMM whose two operands were rotated alike. Throws std::invalid_argument with one
// sentence when the spec does not fit the shape or the tensor is not 2-D float32/bf16.
// `telemetry`, when given, receives the statistics of this call (on CUDA this costs a device
// synchronization; without it nothing is computed).
// `out_dtype` (float32 or bfloat16; default: the input's) is the result's dtype, written by the
// quantizer itself (a separate conversion would be another pass over memory). BF16 results are
// the float32 ones rounded to nearest-even, clamped to BF16's largest finite value so that a
// finite input stays finite; MX values (E2M1/E4M3/E5M2 times a power of two) are exact in it.
at::Tensor fake_quantize(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key,
                         QuantTelemetry* telemetry = nullptr,
                         std::optional<at::ScalarType> out_dtype = std::nullopt);

// How one axis of a tensor is quantized: the spec and the random stream of the GEMM that uses it,
// and for FP8 under delayed scaling (docs/design.md §3) the operand instance's window and record,
// in memory on x's device (one int32 each); a null window is current scaling.
struct AxisQuantization {
  AxisQuantization() = default;
  AxisQuantization(const QuantSpec& s, const RngKey& k, const Fp8DelayedScale& d = {})
      : spec(s), key(k), delayed(d) {}
  QuantSpec spec;
  RngKey key;
  Fp8DelayedScale delayed;
};

// fake_quantize of one axis described by `q` (its delayed scaling included).
at::Tensor fake_quantize(const at::Tensor& x, Axis axis, const AxisQuantization& q,
                         QuantTelemetry* telemetry = nullptr,
                         std::optional<at::ScalarType> out_dtype = std::nullopt);

struct BothAxes {
  at::Tensor rows;  // Q along rows (e.g. X for Fprop)
  at::Tensor cols;  // Q down columns (e.g. X for Wgrad)
};

// Q along rows and Q down columns of one tensor: one pass over memory on CUDA (a training step
// needs X row-wise for Fprop and column-wise for Wgrad), two CPU reference calls on CPU. The
// results equal two fake_quantize calls bit for bit.
BothAxes fake_quantize_both(const at::Tensor& x, const AxisQuantization& rows,
                            const AxisQuantization& cols, QuantTelemetry* rows_telemetry = nullptr,
                            QuantTelemetry* cols_telemetry = nullptr,
                            std::optional<at::ScalarType> out_dtype = std::nullopt);

}  // namespace mxablate::kernels
