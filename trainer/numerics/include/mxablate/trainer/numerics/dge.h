// The differentiable gradient estimator (DGE) of Wang et al., "Optimizing Large Language Model
// Training Using FP4 Quantization" (arXiv 2501.17116), docs/design.md §4. Instead of the
// straight-through estimator, the weight's gradient is multiplied elementwise by the derivative
// of a smooth approximation of the E2M1 rounding step, evaluated at W as Fprop quantized it.
//
// With s the element's decode scale (block scale; NVFP4: block scale x global scale) and
// u = w / s in E2M1's range [-6, 6]: within the grid interval [q_i, q_i + δ] holding |u| (steps
// 0.5 up to 2, 1 up to 4, 2 up to 6),
//   f(u)  = q_i + (δ/2) (1 + sign(t) |t|^(1/k)),   t = 2 (|u| - q_i) / δ - 1   (odd in u),
//   f'(u) = min((1/k) |t|^(1/k - 1), clamp).
// Conventions, after Microsoft's MS-AMP (msamp/operators/fp4_quantize/quantize.cu,
// differentiable_quantize_derivative, and its Python twin _differentiable_quantize_derivative):
// - Sign: MS-AMP walks the signed grid [-6, …, 6] with half-open intervals [q_i, q_i+1); f' only
//   depends on |t|, which is the same for u and -u, so we evaluate on |u|. Grid points (t = ±1)
//   get 1/k from either side, so the choice of closed end does not matter.
// - Saturated values, |u| > 6: derivative 0. MS-AMP's Python twin and its CUDA kernel give 0 above
//   6 (the kernel's last interval is [4, 6] closed); the kernel's first branch (u < -4) also
//   extends the formula below -6, an asymmetry its per-tensor amax scaling never reaches (there
//   |u| <= 6). 0 is the derivative of the saturating quantizer there, symmetric in sign. With
//   block scales |u| > 6 does occur (MXFP4 under the floor rule: block maxima up to 8), and those
//   weights then get no gradient while they stay saturated.
// - The pole, t = 0 (mid-interval) with k > 1: |t|^(1/k - 1) is +inf and the clamp gives `clamp`,
//   as powf/fminf do in MS-AMP's kernel.
// - Non-finite u (a NaN weight or block): NaN, propagated rather than hidden (MS-AMP gives 0).
//   An NVFP4 block whose scale rounded to zero (s = 0) quantizes to zero whatever w is: 0.
// MS-AMP evaluates in bfloat16; here u and f' are float32 (the scalar twin: double).
#pragma once

#include <ATen/core/Tensor.h>

#include "mxablate/contract/quant_settings.h"
#include "mxablate/kernels/quantize.h"

namespace mxablate::trainer {

// The smooth approximation f(u) for k > 0; beyond [-6, 6] the saturated value ±6.
double dge_smooth(double u, double k);
// f'(u) as above: the scalar twin of the tensor function below (which tests check against it).
double dge_derivative(double u, const contract::DgeConfig& config);
// f'(u) elementwise for a float32 tensor on any device (tensor ops only).
at::Tensor dge_derivative(const at::Tensor& u, const contract::DgeConfig& config);

// The factor MXLinear multiplies dW by: f'(w_q / s) with w_q what the quantizer rounds (w, or
// sr_prescale * w under stochastic rounding) and s the scales the quantizer picks for W under
// Fprop's W spec `spec` and key (kernels::element_scales). float32, w's shape and device.
at::Tensor dge_weight_factor(const at::Tensor& w, const kernels::QuantSpec& spec,
                             const kernels::RngKey& key, const contract::DgeConfig& config);

}  // namespace mxablate::trainer
