// GEMM shapes the FP8 tensor-core path accepts: the rule the adapter (kernels/torch fp8_gemm.h)
// enforces and the trainer checks every FP8 GEMM of a run against before the first step.
#pragma once

#include <cstdint>
#include <string>

namespace mxablate::kernels {

// Empty when a GEMM of (M x K) and (N x K) per-tensor FP8 operands can run on FP8 tensor cores
// (cuBLASLt: K and N multiples of 16, any M), else one sentence saying why not.
std::string fp8_tensorwise_shape_problem(int64_t m, int64_t n, int64_t k);

}  // namespace mxablate::kernels
