// The CPU reference quantizer: the oracle every other implementation is checked against.
//
// Layout contract (shared with the GPU kernels):
// - The input is a row-major rows x cols float32 tensor.
// - A "line" is one run along the quantization axis: row r for Axis::kRows (length cols),
//   column c for Axis::kCols (length rows). Lines are numbered 0..lines-1.
// - Dequantized outputs (float32 or bf16) have the input's shape and layout. With a Hadamard
//   rotation they hold Q(rotated x): the rotation cancels only inside a GEMM whose two operands
//   were both rotated. Under stochastic rounding with an SR pre-scale p they hold Q(p x), on the
//   scales chosen from x; quantized_gemm divides p back out (quant_spec.h, effective_sr_prescale).
// - Packed codes are stored line by line, the quantization axis contiguous, so that a column-wise
//   quantization yields the transposed operand a GEMM wants: (lines, line_length / 2) bytes for
//   FP4, element 2i in the low nibble and 2i+1 in the high nibble; (lines, line_length) bytes
//   for FP8. Scales are (lines, line_length / block) bytes: E8M0 for MXFP4, E4M3 for NVFP4.
// - 2-D blocks (spec.blocks == k2D, MXFP4/NVFP4; docs/design.md §3): the scale is shared by a
//   block x block square tile of the rows x cols tensor and comes from the tile's amax. The
//   layout stays per line: each line crossing a tile stores the tile's scale byte, so the scale
//   bytes of the `block` lines of one tile are equal. Quantizing along rows and down columns
//   gives the same dequantized values element for element (W and Wᵀ), stochastic rounding
//   included (same key: the number comes from the logical index). No Hadamard rotation.
// - `tensor_scale` is one float: NVFP4's global decode scale, FP8's per-tensor decode scale
//   (value = code * scale for FP8; code * block_scale * tensor_scale for NVFP4).
// - Stochastic rounding draws element (r, c)'s number from its logical index r * cols + c.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxablate/kernels/philox.h"
#include "mxablate/kernels/quant_spec.h"

namespace mxablate::kernels {

struct QuantOutputs {
  float* dequant = nullptr;
  uint16_t* dequant_bf16 = nullptr;
  uint8_t* packed = nullptr;
  uint8_t* scales = nullptr;
  float* tensor_scale = nullptr;
};

// FP8 delayed scaling of one quantization (docs/design.md §3, "FP8, per-tensor delayed
// scaling"): where the decode scale comes from and where the tensor's amax goes. The pointers are
// host memory for the CPU reference and device memory for the GPU quantizers, so that a captured
// CUDA graph reads each step's window from memory. `window` is null for current scaling.
struct Fp8DelayedScale {
  // One int32: the largest amax the operand instance recorded over the window (fp8_amax_record
  // bits), kNoAmax while it has recorded none.
  const int32_t* window = nullptr;
  // One int32: this tensor's amax (fp8_amax_record) is max-ed into it (atomically on the GPU).
  int32_t* record = nullptr;
  int margin = 0;  // [0, kMaxFp8Margin]: d is multiplied by 2^margin
};

// Empty when `delayed` can go with `format` (current scaling, or delayed scaling of an FP8
// format with both pointers and a margin in range), else one sentence.
std::string fp8_delayed_problem(const Fp8DelayedScale& delayed, QuantFormat format);

// Quantization telemetry of one call. Errors are measured in the quantized (rotated) domain,
// against p x under an SR pre-scale p (so the relative error does not depend on p).
struct QuantTelemetry {
  uint64_t elements = 0;
  uint64_t nonzero_inputs = 0;    // finite non-zero values entering the rounding
  uint64_t saturated = 0;         // values clamped at the element format's largest magnitude
  uint64_t flushed = 0;           // non-zero values that became zero
  uint64_t nonfinite_blocks = 0;  // blocks (or whole tensors, per-tensor formats) given NaN scales
  uint64_t dequant_clamped = 0;   // dequantized values beyond float32/bf16 range, clamped
  double sum_sq_error = 0;        // over elements of finite blocks
  double sum_sq_input = 0;
  double sum_error = 0;

  double relative_error() const;   // ||Q(x) - x|| / ||x||
  double fraction_saturated() const;
  double fraction_flushed() const;  // of the non-zero inputs
  double mean_error() const;       // mean signed error (bias)
  void merge(const QuantTelemetry& other);
};

// Number of bytes of packed codes / scale bytes that `format` produces for rows x cols.
size_t packed_bytes(QuantFormat format, int64_t rows, int64_t cols);
size_t scale_bytes(QuantFormat format, int64_t rows, int64_t cols);

// Quantizes x. Throws std::invalid_argument if check_shape fails or if packed/scales are asked
// of a format that has none. Any output pointer may be null. The result does not depend on the
// number of threads.
// `delayed` (FP8 formats only) takes the decode scale from its window and records the tensor's
// amax; without it FP8 uses current scaling.
QuantTelemetry quantize(const float* x, int64_t rows, int64_t cols, Axis axis,
                        const QuantSpec& spec, const RngKey& key, const QuantOutputs& out,
                        const Fp8DelayedScale& delayed = {});

// Inverse of the packed outputs: writes the rows x cols dequantized tensor (input layout).
// Bit-identical to quantize()'s `dequant` output.
void dequantize_packed(const uint8_t* packed, const uint8_t* scales, float tensor_scale,
                       int64_t rows, int64_t cols, Axis axis, QuantFormat format, float* out);

// Number of worker threads the CPU kernels use (default: hardware concurrency, or the
// MXABLATE_NUM_THREADS environment variable). Results never depend on it.
void set_cpu_threads(int n);
int cpu_threads();

}  // namespace mxablate::kernels
