// The unfused formulas the fused common-path ops replace (the model's ops before them), shared
// by the CPU adapter tests (tests/torch) and the CUDA kernel tests (tests/gpu).
#pragma once

#include <ATen/ATen.h>

namespace mxablate::test {

inline at::Tensor unfused_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * w;
}

// Rotate-half RoPE of x (..., T, D) with cos/sin (T, D/2).
inline at::Tensor unfused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

// ‖got − want‖ / ‖want‖ in float64, on the CPU.
inline double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.cpu().to(at::kDouble), w = want.cpu().to(at::kDouble);
  return ((g - w).norm() / w.norm()).item<double>();
}

}  // namespace mxablate::test
