// fp8_quantize and fp8_tensorwise_mm: per-tensor FP8 operands on FP8 tensor cores (CUDA).
#include "mxablate/kernels/torch/fp8_gemm.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "tensor_checks.h"
#include "torch_compat.h"
#if MXABLATE_KERNELS_TORCH_CUDA
#include "gpu_ops.h"
#endif

namespace mxablate::kernels {
namespace {

bool is_fp8(QuantFormat f) { return f == QuantFormat::kFP8E4M3 || f == QuantFormat::kFP8E5M2; }

void check_fp8_axis(const at::Tensor& x, Axis axis, const AxisQuantization& q) {
  if (!is_fp8(q.spec.format))
    throw std::invalid_argument("fp8_quantize: the format must be fp8-e4m3 or fp8-e5m2, got " +
                                std::string(to_string(q.spec.format)) + " (" + std::string(to_string(axis)) + ")");
  detail::check_quantizable(x, axis, q.spec, "fp8_quantize input");
}

#if MXABLATE_KERNELS_TORCH_CUDA && MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM
void check_codes(const at::Tensor& t, const at::Tensor& scale, const char* what) {
  if (!t.defined() || t.dim() != 2)
    throw std::invalid_argument(std::string("fp8_tensorwise_mm: ") + what + " must be a 2-D code tensor");
  if (t.scalar_type() != compat::kFloat8E4M3 && t.scalar_type() != compat::kFloat8E5M2)
    throw std::invalid_argument(std::string("fp8_tensorwise_mm: ") + what + " must hold FP8 codes, got " +
                                std::string(c10::toString(t.scalar_type())));
  if (!t.is_cuda())
    throw std::invalid_argument(std::string("fp8_tensorwise_mm: ") + what + " must be on a CUDA device, got " +
                                t.device().str());
  if (!scale.defined() || scale.numel() != 1 || scale.scalar_type() != at::kFloat || scale.device() != t.device())
    throw std::invalid_argument(std::string("fp8_tensorwise_mm: ") + what +
                                "'s scale must be one float32 on the codes' device");
}
#endif

}  // namespace

Fp8Codes fp8_quantize(const at::Tensor& x, const AxisQuantization* rows, const AxisQuantization* cols,
                      QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry) {
  detail::check_quantizable(x, "fp8_quantize input");
  if (!rows && !cols) throw std::invalid_argument("fp8_quantize: no axis asked for");
  if (rows) check_fp8_axis(x, Axis::kRows, *rows);
  if (cols) check_fp8_axis(x, Axis::kCols, *cols);
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::fp8_codes_gpu(x, rows, cols, rows_telemetry, cols_telemetry);
#endif
  (void)rows_telemetry;
  (void)cols_telemetry;
  throw std::invalid_argument("fp8_quantize: FP8 codes for tensor cores need a CUDA tensor and the GPU kernels, "
                              "got a tensor on " + x.device().str() + " (the emulated path runs anywhere)");
}

at::Tensor fp8_tensorwise_mm(const at::Tensor& a, const at::Tensor& a_scale, const at::Tensor& b,
                             const at::Tensor& b_scale, at::ScalarType out_dtype, float fold) {
#if MXABLATE_KERNELS_TORCH_CUDA && MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM
  check_codes(a, a_scale, "a");
  check_codes(b, b_scale, "b");
  if (a.device() != b.device())
    throw std::invalid_argument("fp8_tensorwise_mm: operands on different devices (" + a.device().str() + ", " +
                                b.device().str() + ")");
  if (a.size(1) != b.size(1))
    throw std::invalid_argument("fp8_tensorwise_mm: operands disagree on K: a has " + std::to_string(a.size(1)) +
                                ", b has " + std::to_string(b.size(1)));
  if (a.scalar_type() == compat::kFloat8E5M2 && b.scalar_type() == compat::kFloat8E5M2)
    throw std::invalid_argument("fp8_tensorwise_mm: e5m2 x e5m2 has no FP8 tensor-core kernel");
  const std::string shape = fp8_tensorwise_shape_problem(a.size(0), b.size(0), a.size(1));
  if (!shape.empty()) throw std::invalid_argument("fp8_tensorwise_mm: " + shape);
  if (out_dtype != at::kFloat && out_dtype != at::kBFloat16)
    throw std::invalid_argument(std::string("fp8_tensorwise_mm: out_dtype must be float32 or bfloat16, got ") +
                                c10::toString(out_dtype));
  // cuBLASLt: a (M, K) row-major, b (K, N) column-major, i.e. our (N, K) row-major codes
  // transposed. The scales multiply the FP32 sums before the one rounding to out_dtype.
  const at::Tensor sa = fold == 1.0f ? a_scale : a_scale * fold;
  return at::_scaled_mm(a.contiguous(), b.contiguous().t(), sa, b_scale, std::nullopt, std::nullopt, out_dtype,
                        /*use_fast_accum=*/false);
#else
  (void)a;
  (void)a_scale;
  (void)b;
  (void)b_scale;
  (void)out_dtype;
  (void)fold;
  throw std::invalid_argument("fp8_tensorwise_mm needs CUDA LibTorch >= 2.5 with the GPU kernels; this build has "
                              "LibTorch " + std::string(compat::torch_version()));
#endif
}

}  // namespace mxablate::kernels
