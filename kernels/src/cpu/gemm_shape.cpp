#include "mxablate/kernels/gemm_shape.h"

namespace mxablate::kernels {

std::string fp8_tensorwise_shape_problem(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0)
    return "an FP8 GEMM needs non-empty operands, got M " + std::to_string(m) + ", N " + std::to_string(n) +
           ", K " + std::to_string(k);
  if (k % 16 != 0 || n % 16 != 0)
    return "FP8 tensor cores need K and N to be multiples of 16, got K " + std::to_string(k) + ", N " +
           std::to_string(n);
  return {};
}

}  // namespace mxablate::kernels
