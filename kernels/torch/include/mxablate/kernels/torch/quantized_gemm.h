// GEMMs on quantized operands: C = L(a) · L(b)ᵀ, each operand quantized along the reduction
// dimension K.
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

#include "mxablate/kernels/quantize.h"

namespace mxablate::kernels {

struct GemmOperand {
  at::Tensor tensor;  // 2-D float32 or bfloat16
  Axis axis = Axis::kRows;
  QuantSpec spec;
  RngKey key;
};

enum class GemmPath : uint8_t {
  // Dequantized operands, FP32 accumulation; any device. On CUDA with bf16 inputs the operands
  // are BF16 (exact for MXFP4/NVFP4/FP8 values) and cuBLAS accumulates in FP32; with float32
  // inputs, and always on CPU, the operands are float32 (same values) and accumulate in FP32.
  kEmulated = 0,
  // Hopper: MXFP4 operands re-expressed as E4M3 with 1x128 FP32 block scales and multiplied on
  // FP8 tensor cores (at::_scaled_mm, CUDA torch >= 2.9). Exact where the four 32-blocks of each
  // 128-chunk of K lie within 14 binades; other chunks are counted (GemmReport), not hidden.
  // Needs MXFP4 operands with K a multiple of 128, M and N multiples of 16; output is bf16.
  kHopperFP8 = 1,
  // Native MXFP4 tensor cores (gfx950, sm_100). The seam only: our GPUs lack them, so this path
  // reports itself unavailable rather than shipping code nobody can test. It would consume the
  // packed E2M1 + E8M0 outputs of the quantizer (quantize.h layout) directly.
  kNativeMXFP4 = 2,
  // Per-tensor FP8 operands (fp8-e4m3, fp8-e5m2; not both e5m2) as FP8 codes with tensor-wise
  // decode scales, multiplied on FP8 tensor cores (at::_scaled_mm, CUDA torch >= 2.5, compute
  // capability 8.9+): the FP8 baseline as the hardware runs it (fp8_gemm.h). Products are exact
  // and accumulate in FP32, as in the emulation; only the summation order differs. K and N
  // multiples of 16; output in a's dtype.
  kFP8Tensorwise = 3,
};

std::string_view to_string(GemmPath path);
// "emulated", "hopper-fp8", "native-mxfp4", "fp8-tensorwise"
std::optional<GemmPath> parse_gemm_path(std::string_view s);

// Empty when `path` can run on `device`, else one sentence saying why not.
std::string gemm_path_unavailable_reason(GemmPath path, const at::Device& device);

struct GemmReport {
  QuantTelemetry a, b;  // telemetry of the two quantizations
  // kHopperFP8: 128-chunks of K over both operands, and those whose E4M3 re-expression was not
  // exact (a block more than 14 binades below the chunk's largest, so small values lost bits).
  int64_t fp8_chunks = 0;
  int64_t fp8_inexact_chunks = 0;
};

// 1 / (pa · pb), in float32: what quantized_gemm multiplies its product by when operands were
// quantized with an SR pre-scale (pa = effective_sr_prescale(a), docs/design.md §3), so that the
// result estimates a · bᵀ again. 1 without pre-scales.
float sr_prescale_fold(const QuantSpec& a, const QuantSpec& b);

// fold · (a · b) for dequantized operands a (M x K) and b (K x N), any strides: the exact
// emulation's GEMM (docs/design.md §3). CUDA with BF16 operands: BF16 tensor cores, FP32
// accumulation, fold as cuBLAS's alpha, one rounding to BF16. Elsewhere the (BF16-representable)
// values are multiplied as float32 and the float32 product is multiplied by fold. Everyone who
// multiplies quantized operands goes through it, so no caller can forget the fold.
at::Tensor folded_mm(const at::Tensor& a, const at::Tensor& b, float fold);

// C = L(a) · L(b)ᵀ · sr_prescale_fold(a, b), M x N, in a's dtype (bf16 for the FP8 path) on a's device. `report`, when
// given, receives telemetry of both operands and the FP8 chunk counts (this synchronizes on
// CUDA). Throws std::invalid_argument with one sentence on mismatched shapes/devices, a spec
// that does not fit, or a path that cannot run here.
at::Tensor quantized_gemm(const GemmOperand& a, const GemmOperand& b,
                          GemmPath path = GemmPath::kEmulated, GemmReport* report = nullptr);

}  // namespace mxablate::kernels
