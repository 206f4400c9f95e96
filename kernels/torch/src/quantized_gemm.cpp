// quantized_gemm: the exact emulation on any device, and the Hopper FP8 path on CUDA.
#include "mxablate/kernels/torch/quantized_gemm.h"

#include <ATen/ATen.h>

#include <array>
#include <stdexcept>
#include <utility>

#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "tensor_checks.h"
#include "torch_compat.h"
#if MXABLATE_KERNELS_TORCH_CUDA
#include "gpu_ops.h"
#endif

namespace mxablate::kernels {
namespace {

constexpr std::array<std::pair<GemmPath, std::string_view>, 4> kPathNames{
    {{GemmPath::kEmulated, "emulated"},
     {GemmPath::kHopperFP8, "hopper-fp8"},
     {GemmPath::kNativeMXFP4, "native-mxfp4"},
     {GemmPath::kFP8Tensorwise, "fp8-tensorwise"}}};

// The operand as the GEMM sees it: (M or N) x K.
int64_t outer_dim(const GemmOperand& op) { return op.tensor.size(op.axis == Axis::kRows ? 0 : 1); }
int64_t reduction_dim(const GemmOperand& op) {
  return op.tensor.size(op.axis == Axis::kRows ? 1 : 0);
}
at::Tensor as_gemm_operand(const at::Tensor& q, Axis axis) { return axis == Axis::kRows ? q : q.t(); }

void check_operands(const GemmOperand& a, const GemmOperand& b) {
  detail::check_quantizable(a.tensor, a.axis, a.spec, "quantized_gemm operand a");
  detail::check_quantizable(b.tensor, b.axis, b.spec, "quantized_gemm operand b");
  if (a.tensor.device() != b.tensor.device())
    throw std::invalid_argument("quantized_gemm operands are on different devices (" +
                                a.tensor.device().str() + ", " + b.tensor.device().str() + ")");
  if (reduction_dim(a) != reduction_dim(b))
    throw std::invalid_argument("quantized_gemm operands disagree on K: a has " +
                                std::to_string(reduction_dim(a)) + ", b has " +
                                std::to_string(reduction_dim(b)));
}

at::Tensor emulated_gemm(const GemmOperand& a, const GemmOperand& b, GemmReport* report) {
  const float fold = sr_prescale_fold(a.spec, b.spec);
  const at::Tensor qa = fake_quantize(a.tensor, a.axis, a.spec, a.key, report ? &report->a : nullptr);
  const at::Tensor qb = fake_quantize(b.tensor, b.axis, b.spec, b.key, report ? &report->b : nullptr);
  const at::Tensor ma = as_gemm_operand(qa, a.axis);
  const at::Tensor mb = as_gemm_operand(qb, b.axis);
  const bool bf16_operands = qa.scalar_type() == at::kBFloat16 && qb.scalar_type() == at::kBFloat16;
  const at::Tensor c = folded_mm(ma, mb.t(), fold);
  return qa.is_cuda() && bf16_operands ? c : c.to(a.tensor.scalar_type());
}

at::Tensor hopper_fp8_gemm(const GemmOperand& a, const GemmOperand& b, GemmReport* report) {
  for (const GemmOperand* op : {&a, &b}) {
    if (op->spec.format != QuantFormat::kMXFP4)
      throw std::invalid_argument("the hopper-fp8 GEMM path needs MXFP4 operands, got " +
                                  std::string(to_string(op->spec.format)));
  }
  if (reduction_dim(a) % 128 != 0)
    throw std::invalid_argument("the hopper-fp8 GEMM path needs K to be a multiple of 128, got " +
                                std::to_string(reduction_dim(a)));
  if (outer_dim(a) % 16 != 0 || outer_dim(b) % 16 != 0)
    throw std::invalid_argument("the hopper-fp8 GEMM path needs M and N to be multiples of 16, got " +
                                std::to_string(outer_dim(a)) + " and " + std::to_string(outer_dim(b)));
#if MXABLATE_KERNELS_TORCH_CUDA && MXABLATE_TORCH_HAS_BLOCKWISE_SCALED_MM
  const bool counts = report != nullptr;
  detail::Fp8Operand fa = detail::quantize_fp8_operand_gpu(a, report ? &report->a : nullptr, counts);
  detail::Fp8Operand fb = detail::quantize_fp8_operand_gpu(b, report ? &report->b : nullptr, counts);
  // The pre-scale fold goes into a's FP32 chunk scales (powers of two, so each becomes exactly
  // scale * fold); the GEMM applies them to its FP32 partial sums before the one bf16 rounding.
  // In place, keeping the column-major strides cuBLASLt needs.
  const float fold = sr_prescale_fold(a.spec, b.spec);
  if (fold != 1.0f) fa.scales.mul_(fold);
  if (report) {
    report->fp8_chunks = fa.chunks + fb.chunks;
    report->fp8_inexact_chunks = fa.inexact_chunks + fb.inexact_chunks;
  }
  // cuBLASLt's 1x128 x 1x128 recipe: a (M, K) row-major with scales (M, K/128) column-major;
  // b (K, N) column-major with scales (K/128, N) row-major: both are our line-major outputs of
  // b, transposed.
  at::Tensor c = at::_scaled_mm(fa.codes, fb.codes.t(), fa.scales, fb.scales.t(), std::nullopt,
                                std::nullopt, at::kBFloat16, /*use_fast_accum=*/false);
  return c;
#else
  (void)report;
  throw std::invalid_argument("the hopper-fp8 GEMM path needs CUDA LibTorch >= 2.9 with the GPU "
                              "kernels; this build has LibTorch " +
                              std::string(compat::torch_version()));
#endif
}

// Both operands per-tensor FP8, quantized to codes (each along its own axis: the codes are then
// the (M or N) x K operand itself) and multiplied on FP8 tensor cores.
at::Tensor fp8_tensorwise_gemm(const GemmOperand& a, const GemmOperand& b, GemmReport* report) {
  for (const GemmOperand* op : {&a, &b}) {
    if (op->spec.format != QuantFormat::kFP8E4M3 && op->spec.format != QuantFormat::kFP8E5M2)
      throw std::invalid_argument("the fp8-tensorwise GEMM path needs fp8-e4m3 or fp8-e5m2 operands, got " +
                                  std::string(to_string(op->spec.format)));
  }
  if (a.spec.format == QuantFormat::kFP8E5M2 && b.spec.format == QuantFormat::kFP8E5M2)
    throw std::invalid_argument("the fp8-tensorwise GEMM path has no e5m2 x e5m2 kernel");
  const std::string shape = fp8_tensorwise_shape_problem(outer_dim(a), outer_dim(b), reduction_dim(a));
  if (!shape.empty()) throw std::invalid_argument("the fp8-tensorwise GEMM path: " + shape);
  const auto codes = [](const GemmOperand& op, QuantTelemetry* telemetry, at::Tensor& scale) {
    const AxisQuantization q{op.spec, op.key};
    const bool rows = op.axis == Axis::kRows;
    Fp8Codes c = fp8_quantize(op.tensor, rows ? &q : nullptr, rows ? nullptr : &q, rows ? telemetry : nullptr,
                              rows ? nullptr : telemetry);
    scale = rows ? c.rows_scale : c.cols_scale;
    return rows ? c.rows : c.cols;
  };
  at::Tensor sa, sb;
  const at::Tensor ca = codes(a, report ? &report->a : nullptr, sa);
  const at::Tensor cb = codes(b, report ? &report->b : nullptr, sb);
  return fp8_tensorwise_mm(ca, sa, cb, sb, a.tensor.scalar_type(), sr_prescale_fold(a.spec, b.spec));
}

}  // namespace

at::Tensor folded_mm(const at::Tensor& a, const at::Tensor& b, float fold) {
  // The fold multiplies the FP32 result before its one rounding to the output dtype: as cuBLAS's
  // alpha on CUDA (beta = 0: the output's prior contents are ignored, NaN included).
  if (a.is_cuda() && a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16) {
    if (fold == 1.0f) return at::mm(a, b);
    at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
    return at::addmm_out(c, c, a, b, /*beta=*/0, /*alpha=*/fold);
  }
  at::Tensor c = at::mm(a.to(at::kFloat), b.to(at::kFloat));
  if (fold != 1.0f) c.mul_(fold);
  return c;
}

float sr_prescale_fold(const QuantSpec& a, const QuantSpec& b) {
  return 1.0f / (effective_sr_prescale(a) * effective_sr_prescale(b));
}

std::string_view to_string(GemmPath path) {
  for (const auto& [p, name] : kPathNames)
    if (p == path) return name;
  return "?";
}

std::optional<GemmPath> parse_gemm_path(std::string_view s) {
  for (const auto& [p, name] : kPathNames)
    if (name == s) return p;
  return std::nullopt;
}

std::string gemm_path_unavailable_reason(GemmPath path, const at::Device& device) {
  const bool gpu_kernels_here = device.is_cuda() && compat::kHasCudaKernels;
  switch (path) {
    case GemmPath::kEmulated:
      if (device.is_cpu() || gpu_kernels_here) return {};
      return "no quantization kernels for " + device.str() + " in this build";
    case GemmPath::kHopperFP8:
      if (!gpu_kernels_here) return "the hopper-fp8 path needs a CUDA device and the GPU kernels";
      if (!MXABLATE_TORCH_HAS_BLOCKWISE_SCALED_MM)
        return "the hopper-fp8 path needs LibTorch >= 2.9, this is " + std::string(compat::torch_version());
#if MXABLATE_KERNELS_TORCH_CUDA
      return detail::hopper_fp8_unavailable_reason(device);
#else
      return {};
#endif
    case GemmPath::kNativeMXFP4:
      return "native MXFP4 GEMMs need gfx950 or sm_100 tensor cores; no kernel is built for them "
             "(see kernels/torch/README.md, 'native MXFP4 seam')";
    case GemmPath::kFP8Tensorwise:
      if (!gpu_kernels_here)
        return "FP8 tensor cores need a CUDA device and the GPU kernels, this is " + device.str() +
               (compat::kHasCudaKernels ? "" : " in a build without them");
      if (!MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM)
        return "FP8 tensor-core GEMMs need LibTorch >= 2.5, this is " + std::string(compat::torch_version());
#if MXABLATE_KERNELS_TORCH_CUDA
      return detail::fp8_tensorwise_unavailable_reason(device);
#else
      return {};
#endif
  }
  return "unknown GEMM path";
}

at::Tensor quantized_gemm(const GemmOperand& a, const GemmOperand& b, GemmPath path,
                          GemmReport* report) {
  check_operands(a, b);
  if (report) *report = GemmReport{};
  const std::string unavailable = gemm_path_unavailable_reason(path, a.tensor.device());
  if (!unavailable.empty()) throw std::invalid_argument(unavailable);
  switch (path) {
    case GemmPath::kEmulated: return emulated_gemm(a, b, report);
    case GemmPath::kHopperFP8: return hopper_fp8_gemm(a, b, report);
    case GemmPath::kFP8Tensorwise: return fp8_tensorwise_gemm(a, b, report);
    case GemmPath::kNativeMXFP4: break;
  }
  throw std::invalid_argument("unknown GEMM path");
}

}  // namespace mxablate::kernels
