// The CUDA side of the fused-op adapters: at::Tensor on a CUDA device -> the raw kernels
// (mxablate/kernels/gpu/fused_ops_gpu.h) on LibTorch's current stream. Arguments are checked by
// the callers in fused_ops.cpp. Compiled only with MXABLATE_KERNELS_TORCH_CUDA.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "mxablate/kernels/torch/fused_ops.h"
#include "mxablate/kernels/torch/produced_operands.h"

namespace mxablate::kernels::detail {

RmsNormOutput rms_norm_forward_cuda(const at::Tensor& x, const at::Tensor& weight, double eps,
                                    at::ScalarType out_dtype);
// dres and branch_dtype as residual_rms_norm_backward's (undefined / nullopt: the plain norm).
RmsNormGrads rms_norm_backward_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& rstd, const at::Tensor& dres,
                                    std::optional<at::ScalarType> branch_dtype);
AddRmsNormOutput add_rms_norm_forward_cuda(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                           double eps, at::ScalarType out_dtype);
at::Tensor residual_add_cuda(const at::Tensor& x, const at::Tensor& branch);
at::Tensor widen_bf16_cuda(const at::Tensor& t);
at::Tensor swiglu_forward_cuda(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype);
SwiGluGrads swiglu_backward_cuda(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u);
// The fused producers (produce_quantize_gpu.h) where they take every quantization asked for and
// the tensors fit (bf16 throughout, rows a multiple of 8 long, 16-byte aligned); nullopt
// otherwise, and the caller composes the plain op and fake_quantize.
std::optional<Produced> swiglu_forward_quantized_cuda(const at::Tensor& g, const at::Tensor& u,
                                                      at::ScalarType out_dtype, const ProducedAxes& h,
                                                      at::ScalarType values_dtype);
std::optional<ProducedGrads> swiglu_backward_quantized_cuda(const at::Tensor& dh, const at::Tensor& g,
                                                            const at::Tensor& u, const ProducedAxes& dg,
                                                            const ProducedAxes& du, at::ScalarType values_dtype);
void rope_cuda(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse,
               const at::Tensor& out);
CrossEntropyOutput cross_entropy_forward_cuda(const at::Tensor& logits, const at::Tensor& targets);
at::Tensor cross_entropy_backward_cuda(const at::Tensor& grad, const at::Tensor& logits,
                                       const at::Tensor& targets, const at::Tensor& lse);

}  // namespace mxablate::kernels::detail
