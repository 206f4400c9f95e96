#include "mxablate/trainer/numerics/dge.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "mxablate/kernels/torch/block_scales.h"

namespace mxablate::trainer {
namespace {

constexpr double kE2M1Max = 6.0;

// The grid interval [q, q + δ] of E2M1 magnitudes holding a (0 <= a <= 6).
struct Interval {
  double q, delta;
};

Interval interval_of(double a) {
  if (a < 2) return {std::floor(a / 0.5) * 0.5, 0.5};
  if (a < 4) return {std::floor(a), 1.0};
  return {4.0, 2.0};
}

}  // namespace

double dge_smooth(double u, double k) {
  const double a = std::fabs(u);
  if (!(a <= kE2M1Max)) return std::isnan(u) ? u : std::copysign(kE2M1Max, u);
  const Interval iv = interval_of(a);
  const double t = 2 * (a - iv.q) / iv.delta - 1;
  const double f = iv.q + iv.delta / 2 * (1 + std::copysign(std::pow(std::fabs(t), 1 / k), t));
  return std::copysign(f, u);
}

double dge_derivative(double u, const contract::DgeConfig& c) {
  if (std::isnan(u)) return u;
  const double a = std::fabs(u);
  if (a > kE2M1Max) return 0;
  const Interval iv = interval_of(a);
  const double t = std::fabs(2 * (a - iv.q) / iv.delta - 1);
  return std::min(std::pow(t, 1 / c.k - 1) / c.k, c.clamp);  // pow(0, < 0) = +inf: the pole
}

at::Tensor dge_derivative(const at::Tensor& u, const contract::DgeConfig& c) {
  const at::Tensor a = u.to(at::kFloat).abs();
  // The interval [q, q + δ] per element; a NaN falls into the last branch and stays NaN.
  const at::Tensor below2 = a < 2;
  const at::Tensor below4 = a < 4;
  const at::Tensor delta = at::where(below2, at::full_like(a, 0.5),
                                     at::where(below4, at::ones_like(a), at::full_like(a, 2.0)));
  const at::Tensor q = at::where(below2, at::floor(a * 2) * 0.5,
                                 at::where(below4, at::floor(a), at::full_like(a, 4.0)));
  const at::Tensor t = (2 * (a - q) / delta - 1).abs();
  // pow(0, 1/k - 1) is +inf for k > 1; clamp_max turns it into `clamp` (NaN stays NaN).
  const at::Tensor d = (at::pow(t, 1 / c.k - 1) / c.k).clamp_max(c.clamp);
  return at::where(a > kE2M1Max, at::zeros_like(d), d);
}

at::Tensor dge_weight_factor(const at::Tensor& w, const kernels::QuantSpec& spec,
                             const kernels::RngKey& key, const contract::DgeConfig& config) {
  const at::Tensor scales = kernels::element_scales(w.contiguous(), kernels::Axis::kRows, spec, key);
  const double prescale =
      spec.rounding == kernels::Rounding::kStochastic ? static_cast<double>(spec.sr_prescale) : 1.0;
  at::Tensor wq = w.to(at::kFloat);
  if (prescale != 1.0) wq = wq * prescale;
  const at::Tensor d = dge_derivative(wq / scales, config);
  // s = 0: an NVFP4 block whose scale rounded to zero is constant zero whatever W holds.
  return at::where(scales == 0, at::zeros_like(d), d);
}

}  // namespace mxablate::trainer
