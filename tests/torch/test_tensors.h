// Inputs for the kernels/torch tests: realistic values plus every special the quantizers must
// handle (zeros, NaN, Inf, huge outliers, subnormals).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mxablate::test {

// Gaussian rows x cols float32 with an outlier column: what LLM activations look like.
inline at::Tensor activation_like(int64_t rows, int64_t cols, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor x = at::randn({rows, cols}, gen, at::TensorOptions().dtype(at::kFloat));
  x.select(1, 3 % cols).mul_(300.0);
  return x;
}

// activation_like, then specials at fixed places.
inline at::Tensor adversarial_matrix(int64_t rows, int64_t cols, uint64_t seed, bool with_nonfinite) {
  at::Tensor x = activation_like(rows, cols, seed);
  auto a = x.accessor<float, 2>();
  for (int64_t c = 0; c < std::min<int64_t>(cols, 32); ++c) a[0][c] = 0.0f;  // an all-zero block
  a[rows - 1][cols - 1] = 3.0e38f;                      // huge
  a[rows / 2][0] = 1.0e-42f;                            // subnormal
  a[rows / 2][1] = -std::numeric_limits<float>::denorm_min();
  if (with_nonfinite) {
    a[1][cols / 2] = std::numeric_limits<float>::quiet_NaN();
    a[rows - 1][0] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// Bitwise equality that treats NaN like any other bit pattern.
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.cpu().contiguous(), cb = b.cpu().contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.nbytes())) == 0;
}

}  // namespace mxablate::test
