// The scale each element of a tensor is quantized with, as the quantizer itself chooses it: for
// what needs the quantization grid an element was rounded onto, not only the rounded value (the
// trainer's differentiable gradient estimator, docs/design.md §4).
#pragma once

#include <ATen/core/Tensor.h>

#include "mxablate/kernels/quantize.h"

namespace mxablate::kernels {

// The decode scale s of every element of the 2-D float32/bfloat16 tensor x quantized along
// `axis` under `spec` with `key`: Q(x) = s * (an E2M1 value). MXFP4: 2^e of the element's block
// (E8M0); NVFP4: the block's E4M3 scale times the tensor's global scale. float32, x's shape, on
// x's device. The scales are the quantizer's own output (the CPU reference for CPU tensors, the
// GPU kernels for CUDA tensors, bit-identical), so every scale rule agrees with fake_quantize by
// construction. NaN for a block holding a non-finite value; 0 for an NVFP4 block whose scale
// rounded to zero (the block quantizes to zero). With a Hadamard mode, the scales of the rotated
// tensor. Throws std::invalid_argument (one sentence) for formats other than mxfp4/nvfp4, or when
// the spec does not fit the shape.
at::Tensor element_scales(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key);

}  // namespace mxablate::kernels
