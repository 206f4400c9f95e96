#include "mxablate/trainer/numerics/occ.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace mxablate::trainer {
namespace {

// The residual as a dense float32 matrix of zeros and its entries. Its products run as dense
// GEMMs: on a GPU a dense GEMM over a 1 %-filled matrix is far faster than a sparse product
// (cuSPARSE COO), and the entries, exact in BF16, are the same either way; only the storage
// kept for the backward pass is sparse.
at::Tensor dense_of(const OccResidual& r) {
  at::Tensor d = at::zeros({r.rows, r.cols}, r.values.options().dtype(at::kFloat));
  if (r.nnz() > 0) d.index_put_({r.indices[0], r.indices[1]}, r.values.to(at::kFloat));
  return d;
}

// The rank-th smallest of `magnitude` (1-based). kthvalue on a CUDA tensor selects within one
// thread block per slice, far too slow for a whole operand as one slice; a device-wide sort
// gives the same element.
at::Tensor kth_smallest(const at::Tensor& magnitude, int64_t rank) {
  if (magnitude.is_cuda()) return std::get<0>(at::sort(magnitude)).select(0, rank - 1);
  return std::get<0>(at::kthvalue(magnitude, rank));
}

}  // namespace

int64_t occ_rank(double quantile, int64_t n) {
  if (!(quantile > 0 && quantile <= 1) || n < 1)
    throw std::invalid_argument("occ: quantile must lie in (0, 1] and the operand be non-empty, got " +
                                std::to_string(quantile) + " of " + std::to_string(n) + " values");
  // A product within a relative 1e-12 of an integer is that integer (see occ.h).
  const double qn = quantile * static_cast<double>(n);
  const double nearest = std::round(qn);
  const double rank = std::fabs(qn - nearest) <= 1e-12 * qn ? nearest : std::ceil(qn);
  return std::clamp(static_cast<int64_t>(rank), int64_t{1}, n);
}

double OccResidual::fraction() const {
  const int64_t n = rows * cols;
  return n == 0 ? 0.0 : static_cast<double>(nnz()) / static_cast<double>(n);
}

at::Tensor OccResidual::times(const at::Tensor& b) const {
  if (nnz() == 0) return at::zeros({rows, b.size(1)}, b.options().dtype(at::kFloat));
  return at::mm(dense_of(*this), b.to(at::kFloat));
}

at::Tensor OccResidual::transposed_times(const at::Tensor& b) const {
  if (nnz() == 0) return at::zeros({cols, b.size(1)}, b.options().dtype(at::kFloat));
  return at::mm(dense_of(*this).t(), b.to(at::kFloat));
}

OccSplit occ_split(const at::Tensor& x, double quantile) {
  if (x.dim() != 2) throw std::invalid_argument("occ: expected a 2-D operand");
  OccSplit out;
  const int64_t n = x.numel();
  const at::Tensor magnitude = x.abs().flatten();
  const at::Tensor t = kth_smallest(magnitude, occ_rank(quantile, n));
  out.threshold = t.item<double>();
  out.clamped = at::minimum(at::maximum(x, -t), t);
  const at::Tensor r = x - out.clamped;
  OccResidual& res = out.residual;
  res.rows = x.size(0);
  res.cols = x.size(1);
  res.indices = at::nonzero(r).t().contiguous();  // a NaN is non-zero, so it is kept
  res.values = r.to(at::kFloat)
                   .flatten()
                   .index_select(0, res.indices[0] * res.cols + res.indices[1])
                   .to(at::kBFloat16)
                   .to(at::kFloat);
  return out;
}

}  // namespace mxablate::trainer
