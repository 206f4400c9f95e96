// Argument checks shared by the adapters: each failure is one sentence in std::invalid_argument.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "mxablate/kernels/quant_spec.h"

namespace mxablate::kernels::detail {

// `x` must be a 2-D, non-empty float32 or bfloat16 tensor; `what` names it in the message.
void check_quantizable(const at::Tensor& x, const char* what);

// check_quantizable plus check_shape(spec, rows, cols, axis).
void check_quantizable(const at::Tensor& x, Axis axis, const QuantSpec& spec, const char* what);

// `x` is on the CPU, or on CUDA in a build with the GPU kernels; else why not.
void check_device_supported(const at::Tensor& x);

// `x` is a defined float32 or bfloat16 tensor with at least one element.
void check_float_activation(const at::Tensor& x, const char* what);

}  // namespace mxablate::kernels::detail
