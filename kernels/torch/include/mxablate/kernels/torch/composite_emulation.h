// The composite-operator emulation: fake quantization written with ordinary LibTorch tensor ops
// (abs, amax, frexp, divide, round, multiply, …), the way most research code emulates MXFP4.
// It is the baseline the fused kernels are measured against (docs/design.md §9), not a reference:
// it computes the same function as fake_quantize for finite inputs with round-to-nearest and no
// rotation (tests/torch checks that), but draws its stochastic-rounding noise from LibTorch's
// generator and rotates by a matrix product, so those modes agree only in distribution.
#pragma once

#include <ATen/core/Tensor.h>

#include "mxablate/kernels/quant_spec.h"
#include "mxablate/kernels/philox.h"

namespace mxablate::kernels {

// Q(x) along `axis`, same shape and dtype as x (2-D float32/bf16, any device). Formats: mxfp4,
// nvfp4, fp8-e4m3, fp8-e5m2, bf16, fp32; throws std::invalid_argument otherwise, for scale rule
// mse (not emulated), or when the spec does not fit the shape. The SR pre-scale is applied.
at::Tensor composite_fake_quantize(const at::Tensor& x, Axis axis, const QuantSpec& spec,
                                   const RngKey& key);
// 2-D blocks (spec.blocks) are not emulated: it throws rather than quietly use 1-D blocks.

}  // namespace mxablate::kernels
