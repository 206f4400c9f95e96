// One GEMM on quantized operands, C = L(a) · L(b)ᵀ, each operand quantized along the reduction
// dimension K: a thin wrapper over the GEMM engines (gemm_engine.h) that the trainer runs, so
// that what the benchmark times and the tests check is the trainer's code (docs/design.md §3).
//
// An operand is given as the tensor the training step holds plus the axis that runs along K:
//   kRows: the tensor is (M or N) x K and quantized along its rows (X and W in Fprop, dY in Dgrad);
//   kCols: the tensor is K x (M or N) and quantized down its columns (W in Dgrad, dY and X in
//          Wgrad), i.e. L(t) = tᵀ.
// So Fprop is quantized_gemm({X, kRows}, {W, kRows}), Dgrad ({dY, kRows}, {W, kCols}) and
// Wgrad ({dY, kCols}, {X, kCols}) (docs/design.md §1).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mxablate/kernels/gemm_route.h"
#include "mxablate/kernels/quantize.h"
#include "mxablate/kernels/torch/gemm_engine.h"

namespace mxablate::kernels {

// quantized_gemm's older spellings of the route (GemmRoute, gemm_route.h): the same enum, names
// and availability rule.
//   kEmulated:       dequantized operands, FP32 accumulation, any device. On CUDA with bf16
//                    inputs the operands are BF16 (exact for MXFP4/NVFP4/FP8 values) and cuBLAS
//                    accumulates in FP32; with float32 inputs, and always on CPU, the operands
//                    are float32 (same values). Output in a's dtype.
//   kHopperFP8:      MXFP4 operands re-expressed as E4M3 with 1x128 FP32 block scales on FP8
//                    tensor cores (at::_scaled_mm, CUDA torch >= 2.9). Exact where the four
//                    32-blocks of each 128-chunk of K lie within 14 binades; other chunks are
//                    counted (GemmReport), not hidden. MXFP4 operands, K a multiple of 128, M and
//                    N multiples of 16; output bf16.
//   kFP8Tensorwise:  per-tensor FP8 operands (fp8-e4m3, fp8-e5m2; not both e5m2) as FP8 codes
//                    with tensor-wise decode scales on FP8 tensor cores (CUDA torch >= 2.5,
//                    compute capability 8.9+), fp8_gemm.h. K and N multiples of 16; output in
//                    a's dtype.
using GemmPath = GemmRoute;
inline std::optional<GemmPath> parse_gemm_path(std::string_view s) { return parse_gemm_route(s); }
inline std::string gemm_path_unavailable_reason(GemmPath path, const at::Device& device) {
  return gemm_route_unavailable_reason(path, device);
}

struct GemmReport {
  QuantTelemetry a, b;  // telemetry of the two quantizations
  // kHopperFP8: 128-chunks of K over both operands, and those whose E4M3 re-expression was not
  // exact (a block more than 14 binades below the chunk's largest, so small values lost bits).
  int64_t fp8_chunks = 0;
  int64_t fp8_inexact_chunks = 0;
};

// C = L(a) · L(b)ᵀ · sr_prescale_fold(a, b), M x N, in a's dtype (bf16 for the hopper-fp8 path)
// on a's device: gemm_engine(path) quantizes a, then b, and multiplies. `report`, when given,
// receives telemetry of both operands and the FP8 chunk counts (this synchronizes on CUDA).
// Throws std::invalid_argument with one sentence on mismatched shapes/devices, a spec that does
// not fit, or a path that cannot run here.
at::Tensor quantized_gemm(const GemmOperand& a, const GemmOperand& b,
                          GemmPath path = GemmPath::kEmulated, GemmReport* report = nullptr);

}  // namespace mxablate::kernels
