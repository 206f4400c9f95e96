// Fused producers at the LibTorch level (docs/design.md §4, "Quantization in the producers"):
// SwiGLU's forward and backward that also quantize their results for the GEMMs that consume
// them, in the emulated engine's operand form (dequantized values, as fake_quantize returns them).
//
// On CUDA, where every quantization asked for can be made by the fused kernel
// (mxablate/kernels/gpu/produce_quantize_gpu.h: MXFP4, bf16 tensors and values, one rounding, rows
// a multiple of 8 long), one kernel computes and quantizes each tile; everywhere else the plain op
// runs and fake_quantize follows it. That composition is also the reference: the two give the
// same bits, which the GPU tests check. Arguments are checked as swiglu_forward/swiglu_backward and
// fake_quantize check them; one sentence in a std::invalid_argument where they do not fit.
#pragma once

#include <ATen/core/Tensor.h>

#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/fused_ops.h"

namespace mxablate::kernels {

// The quantizations wanted of one produced tensor, viewed as 2-D (rows = every dimension but the
// last, cols = the last); null where not wanted.
struct ProducedAxes {
  const AxisQuantization* rows = nullptr;
  const AxisQuantization* cols = nullptr;
  bool any() const { return rows != nullptr || cols != nullptr; }
};

// A produced tensor (in the op's shape) and its quantized values, 2-D (rows x cols) in
// `values_dtype`; undefined where not asked for.
struct Produced {
  at::Tensor tensor;
  at::Tensor rows, cols;
  bool one_pass = false;  // made by the fused kernel (diagnostics and tests)
};

// swiglu_forward(g, u, out_dtype) and Q(h).
Produced swiglu_forward_quantized(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype,
                                  const ProducedAxes& h, at::ScalarType values_dtype);

struct ProducedGrads {
  Produced dg, du;
};

// swiglu_backward(dh, g, u) and Q(dg), Q(du).
ProducedGrads swiglu_backward_quantized(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u,
                                        const ProducedAxes& dg, const ProducedAxes& du,
                                        at::ScalarType values_dtype);

}  // namespace mxablate::kernels
