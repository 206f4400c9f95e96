// fake_quantize: CPU tensors through the CPU reference, CUDA tensors through the GPU kernels.
#include "mxablate/kernels/torch/fake_quantize.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "tensor_checks.h"
#include "torch_compat.h"
#if MXABLATE_KERNELS_TORCH_CUDA
#include "gpu_ops.h"
#endif

namespace mxablate::kernels {
namespace {

// The CPU reference reads float32; bf16 -> float32 is exact, so the result is the same as
// quantizing the bf16 values themselves.
at::Tensor fake_quantize_cpu(const at::Tensor& x, Axis axis, const AxisQuantization& q, QuantTelemetry* telemetry,
                             at::ScalarType out_dtype) {
  const at::Tensor in = x.to(at::kFloat).contiguous();
  at::Tensor result =
      at::empty(x.sizes(), x.options().dtype(out_dtype).memory_format(at::MemoryFormat::Contiguous));
  QuantOutputs out;
  if (out_dtype == at::kFloat) {
    out.dequant = result.data_ptr<float>();
  } else {
    out.dequant_bf16 = reinterpret_cast<uint16_t*>(result.data_ptr<at::BFloat16>());
  }
  const QuantTelemetry t = quantize(in.data_ptr<float>(), x.size(0), x.size(1), axis, q.spec, q.key, out, q.delayed);
  if (telemetry) *telemetry = t;
  return result;
}

at::ScalarType checked_out_dtype(const at::Tensor& x, std::optional<at::ScalarType> out_dtype) {
  const at::ScalarType t = out_dtype.value_or(x.scalar_type());
  if (t != at::kFloat && t != at::kBFloat16)
    throw std::invalid_argument(std::string("fake_quantize: out_dtype must be float32 or bfloat16, got ") +
                                c10::toString(t));
  return t;
}

}  // namespace

at::Tensor fake_quantize(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key,
                         QuantTelemetry* telemetry, std::optional<at::ScalarType> out_dtype) {
  return fake_quantize(x, axis, AxisQuantization{spec, key, {}}, telemetry, out_dtype);
}

at::Tensor fake_quantize(const at::Tensor& x, Axis axis, const AxisQuantization& q, QuantTelemetry* telemetry,
                         std::optional<at::ScalarType> out_dtype) {
  detail::check_quantizable(x, axis, q.spec, "fake_quantize input");
  detail::check_device_supported(x);
  const at::ScalarType dtype = checked_out_dtype(x, out_dtype);
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::fake_quantize_gpu(x, axis, q, telemetry, dtype);
#endif
  return fake_quantize_cpu(x, axis, q, telemetry, dtype);
}

BothAxes fake_quantize_both(const at::Tensor& x, const AxisQuantization& rows,
                            const AxisQuantization& cols, QuantTelemetry* rows_telemetry,
                            QuantTelemetry* cols_telemetry,
                            std::optional<at::ScalarType> out_dtype) {
  detail::check_quantizable(x, Axis::kRows, rows.spec, "fake_quantize_both input (rows)");
  detail::check_quantizable(x, Axis::kCols, cols.spec, "fake_quantize_both input (cols)");
  detail::check_device_supported(x);
  const at::ScalarType dtype = checked_out_dtype(x, out_dtype);
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda())
    return detail::fake_quantize_both_gpu(x, rows, cols, rows_telemetry, cols_telemetry, dtype);
#endif
  return BothAxes{fake_quantize_cpu(x, Axis::kRows, rows, rows_telemetry, dtype),
                  fake_quantize_cpu(x, Axis::kCols, cols, cols_telemetry, dtype)};
}

}  // namespace mxablate::kernels
