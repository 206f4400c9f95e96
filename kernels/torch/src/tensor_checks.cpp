#include "tensor_checks.h"

#include "torch_compat.h"

#include <stdexcept>
#include <string>

namespace mxablate::kernels::detail {

void check_quantizable(const at::Tensor& x, const char* what) {
  if (!x.defined()) throw std::invalid_argument(std::string(what) + " is an undefined tensor");
  if (x.dim() != 2)
    throw std::invalid_argument(std::string(what) + " must be 2-D, got " +
                                std::to_string(x.dim()) + " dimensions");
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16)
    throw std::invalid_argument(std::string(what) + " must be float32 or bfloat16, got " +
                                std::string(c10::toString(x.scalar_type())));
}

void check_quantizable(const at::Tensor& x, Axis axis, const QuantSpec& spec, const char* what) {
  check_quantizable(x, what);
  const std::string problem = check_shape(spec, x.size(0), x.size(1), axis);
  if (!problem.empty()) throw std::invalid_argument(std::string(what) + ": " + problem);
}

void check_device_supported(const at::Tensor& x) {
  if (x.is_cpu()) return;
  if (x.is_cuda() && compat::kHasCudaKernels) return;
  throw std::invalid_argument(
      "tensor on " + x.device().str() +
      " but this build of mxablate_kernels_torch has no GPU kernels (configure with "
      "-DMXABLATE_CUDA=ON against a CUDA LibTorch)");
}

void check_float_activation(const at::Tensor& x, const char* what) {
  if (!x.defined()) throw std::invalid_argument(std::string(what) + " is an undefined tensor");
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16)
    throw std::invalid_argument(std::string(what) + " must be float32 or bfloat16, got " +
                                std::string(c10::toString(x.scalar_type())));
  if (x.numel() == 0) throw std::invalid_argument(std::string(what) + " is empty");
}

}  // namespace mxablate::kernels::detail
