// The GEMM engine seam (docs/design.md §3, "GEMM paths"): one engine per route, behind one
// interface, used by both the trainer's MXLinear and quantized_gemm (and so by the benchmark).
//
// A GEMM C = L(a) · L(b)ᵀ takes two operands, each quantized along the reduction dimension K.
// An engine does the two halves of that work:
//   quantize: a tensor into the QuantizedOperand(s) its GEMMs need: along rows (the tensor is
//             (M or N) x K) and/or down columns (the tensor is K x (M or N)), both in one pass
//             where the route's quantizer allows;
//   multiply: two QuantizedOperands into the product, dividing any SR pre-scale back out
//             (sr_prescale_fold) itself, so that no caller can forget it.
// Which engine multiplies a GEMM is decided elsewhere, once: the trainer resolves a route per
// GEMM precision (contract::resolve_gemm_route) and picks each layer's engines when its plan is
// set; quantized_gemm is told the route by its caller.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "mxablate/kernels/gemm_route.h"
#include "mxablate/kernels/quantize.h"
#include "mxablate/kernels/torch/fake_quantize.h"

namespace mxablate::kernels {

// A tensor as one GEMM operand before quantization: the tensor the training step holds and the
// axis that runs along K (kRows: the tensor is (M or N) x K; kCols: it is K x (M or N), L(t) = tᵀ).
struct GemmOperand {
  at::Tensor tensor;  // 2-D float32 or bfloat16
  Axis axis = Axis::kRows;
  QuantSpec spec;
  RngKey key;
};

// One GEMM operand after quantization, in the form its route multiplies; `data` is always the
// (M or N) x K matrix as the GEMM sees it (for an operand quantized down columns, a transposed
// view). Exactly one form:
struct QuantizedOperand {
  enum class Form : uint8_t {
    kNone,  // no operand (a GEMM that will not run)
    // The emulated route: dequantized values Q(t) in the GEMM dtype (BF16 on CUDA, float32 on
    // the CPU, or what the caller asked for), exactly representable in BF16.
    kValues,
    // The fp8-tensorwise route: FP8 codes (Float8_e4m3fn / Float8_e5m2, K-contiguous) and
    // `scale`, the per-tensor decode scale as a one-element float32 tensor on the device.
    kFP8Tensorwise,
    // The hopper-fp8 route: MXFP4 values re-expressed as E4M3 codes (K-contiguous) with `scale`
    // the FP32 scale of each 1x128 chunk of K, (M or N) x K/128 stored column-major.
    kFP8Chunks,
    // The mxfp4-as-fp8 route: MXFP4 operands re-expressed as E4M3 codes (K-contiguous) with
    // `scale`, the (M or N) float32 power-of-two decode scales, one per line, and `mx`, what
    // the fix-up after the FP8 GEMM reads for the lines E4M3 did not hold.
    kFP8Rowwise,
  };

  Form form = Form::kNone;
  at::Tensor data;
  at::Tensor scale;  // kFP8Tensorwise and kFP8Chunks
  Axis axis = Axis::kRows;
  QuantSpec spec;
  RngKey key;
  // kFP8Chunks, counted when telemetry was asked for: the 128-chunks of K, and those whose E4M3
  // re-expression was not exact (a block more than 14 binades below the chunk's largest).
  int64_t chunks = 0;
  int64_t inexact_chunks = 0;
  // kFP8Rowwise, on the device (mx_as_fp8_gpu.h): the packed MXFP4 codes and E8M0 block scales
  // the E4M3 codes were made from, one byte per line marking the lines E4M3 did not hold, and the
  // Fp8LineStatus (4 int32). Nothing of it is read back to the host.
  struct MxSource {
    at::Tensor packed, block_scales, line_inexact, status;
  };
  MxSource mx;

  bool defined() const { return form != Form::kNone; }
  int64_t outer() const { return data.size(0); }      // M or N
  int64_t reduction() const { return data.size(1); }  // K
  // `data` in the quantized tensor's own layout (transposed back for an operand down columns).
  at::Tensor source_layout() const { return axis == Axis::kRows ? data : data.t(); }

  // Dequantized values q, in the tensor's layout and quantized along `axis`, as an emulated-route
  // operand: the emulated engine's own results, and values made without it (the trainer's
  // plain-BF16 rounding, a memoized quantization).
  static QuantizedOperand values(const at::Tensor& q, Axis axis, const QuantSpec& spec, const RngKey& key);
};

// The operands of one tensor quantized for up to two GEMMs (undefined where not asked for).
struct QuantizedAxes {
  QuantizedOperand rows, cols;
};

class GemmEngine {
 public:
  virtual ~GemmEngine() = default;

  virtual GemmRoute route() const = 0;
  // The form this engine's quantize writes and its multiply reads.
  virtual QuantizedOperand::Form form() const = 0;

  // Empty when this engine can multiply operands of these specs (a in the GEMM's A position),
  // else one sentence saying why not. Shape-independent: the trainer asks it when it picks a
  // layer's engines.
  virtual std::string operand_problem(const QuantSpec& a, const QuantSpec& b) const = 0;
  // Empty when this engine can multiply an M x K by an N x K operand, else one sentence.
  virtual std::string shape_problem(int64_t m, int64_t n, int64_t k) const = 0;

  // The 2-D float32/bf16 tensor t quantized along rows and/or down columns (either may be
  // null), each with its own spec and key; telemetry as fake_quantize's (asking for it
  // synchronizes on CUDA, and on the hopper-fp8 route also counts inexact chunks).
  // `values_dtype` is the dtype of dequantized values (the emulated route; float32 or bf16);
  // the other routes write codes. Throws std::invalid_argument (one sentence) where the spec does
  // not fit the tensor or the route cannot run on t's device.
  virtual QuantizedAxes quantize(const at::Tensor& t, const AxisQuantization* rows,
                                 const AxisQuantization* cols, QuantTelemetry* rows_telemetry,
                                 QuantTelemetry* cols_telemetry, at::ScalarType values_dtype) const = 0;

  // C = a · bᵀ · sr_prescale_fold(a.spec, b.spec): M x N for a (M x K) and b (N x K) made by this
  // engine's quantize. The result's dtype is `out_dtype` when given, else the route's own: the
  // emulated route's GEMM dtype (folded_mm's), BF16 on CUDA for fp8-tensorwise (float32
  // elsewhere), float32 for hopper-fp8 (its BF16 output widened, as the trainer keeps it).
  // `route_tiles`, when given, is a 2-element int64 device tensor: the mxfp4-as-fp8 engine adds
  // the kFixupTile² output tiles it kept from the FP8 tensor cores ([0]) and recomputed ([1]),
  // without a host synchronization; the other engines leave it alone.
  virtual at::Tensor multiply(const QuantizedOperand& a, const QuantizedOperand& b,
                              std::optional<at::ScalarType> out_dtype = std::nullopt,
                              const at::Tensor* route_tiles = nullptr) const = 0;

  // One operand: `op.tensor` quantized along `op.axis`.
  QuantizedOperand quantize_operand(const GemmOperand& op, QuantTelemetry* telemetry,
                                    at::ScalarType values_dtype) const;
};

// The mxfp4-as-fp8 engine's host half of its rule (docs/design.md §3, "mxfp4-as-fp8"): whether
// the row-wise scaled FP8 GEMM takes an M x K by N x K product (M, N and K multiples of 16).
// Where it does, the FP8 GEMM runs and the fix-up recomputes, on the device, the output tiles
// whose lines or scale products it could not get right (kernels::fp8_line_scales_normal and the
// line marks, mx_to_fp8.h); where it does not, the engine multiplies the MXFP4 values.
bool mxfp4_as_fp8_shape_fits(int64_t m, int64_t n, int64_t k);

// The engine of `route`, one per process (every route has one; std::invalid_argument for a
// value outside the enum).
const GemmEngine& gemm_engine(GemmRoute route);

// Empty when `route` can run on `device`, else one sentence saying why not.
std::string gemm_route_unavailable_reason(GemmRoute route, const at::Device& device);

// 1 / (pa · pb), in float32: what every engine multiplies its product by when operands were
// quantized with an SR pre-scale (pa = effective_sr_prescale(a), docs/design.md §3), so that the
// result estimates a · bᵀ again. 1 without pre-scales.
float sr_prescale_fold(const QuantSpec& a, const QuantSpec& b);

// fold · (a · b) for dequantized operands a (M x K) and b (K x N), any strides: the emulated
// engine's GEMM (docs/design.md §3). CUDA with BF16 operands: BF16 tensor cores, FP32
// accumulation, fold as cuBLAS's alpha, one rounding to BF16. Elsewhere the (BF16-representable)
// values are multiplied as float32 and the float32 product is multiplied by fold.
at::Tensor folded_mm(const at::Tensor& a, const at::Tensor& b, float fold);

}  // namespace mxablate::kernels
