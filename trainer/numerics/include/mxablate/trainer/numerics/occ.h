// Outlier clamping and compensation (OCC) of Wang et al., "Optimizing Large Language Model
// Training Using FP4 Quantization" (arXiv 2501.17116), docs/design.md §4: before X is quantized
// (for Fprop and for Wgrad) it is clamped to ±t, t the `quantile` of |X| over the whole operand;
// the residual R = X - clamp(X) is sparse and its products are computed in BF16 and added:
//   Y  = Q(Xc) Q(W)ᵀ   + bf16(R) bf16(W)ᵀ
//   dW = Q(dY)ᵀ Q(Xc)  + bf16(dY)ᵀ bf16(R)
// (FP32 accumulation). Dgrad is unchanged: the clamp passes gradients straight through.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mxablate::trainer {

// The nearest rank of the quantile q in (0, 1] among n values: ceil(q n), in [1, n]. A decimal
// q's double can make q n land just above an integer (0.07 * 100 = 7.000000000000001): a product
// within a relative 1e-12 of an integer counts as that integer, so exact ranks stay exact.
int64_t occ_rank(double quantile, int64_t n);

// The residual R of a rows x cols operand, kept sparse (its non-zeros, row-major, rounded to
// BF16) for the backward pass; its products run as dense GEMMs over the zero-filled matrix.
struct OccResidual {
  at::Tensor indices;  // int64 (2 x nnz): row, column
  at::Tensor values;   // float32 (nnz), each a BF16 value
  int64_t rows = 0, cols = 0;

  int64_t nnz() const { return values.defined() ? values.numel() : 0; }
  double fraction() const;  // nnz / (rows * cols): the share of elements compensated
  // bf16(R) · b for b (cols x N) float32 holding BF16 values: rows x N float32.
  at::Tensor times(const at::Tensor& b) const;
  // bf16(R)ᵀ · b for b (rows x N) float32 holding BF16 values: cols x N float32.
  at::Tensor transposed_times(const at::Tensor& b) const;
};

struct OccSplit {
  at::Tensor clamped;  // clamp(X, -t, t): X's shape, dtype and device
  OccResidual residual;
  double threshold = 0;  // t
};

// Splits the 2-D x at the quantile of |x| (nearest rank: kthvalue on the CPU, a device-wide sort
// on CUDA, the same element either way). Non-finite values: an infinity is an outlier (its residual is infinite, as its product
// would have been); a NaN stays NaN in the clamped part and in the residual.
OccSplit occ_split(const at::Tensor& x, double quantile);

}  // namespace mxablate::trainer
