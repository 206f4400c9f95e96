// The model's fused common path (docs/design.md §4): autograd functions over the fused RMSNorm
// (alone and with the residual stream's add), SwiGLU, RoPE and cross-entropy of kernels/torch
// (fused_ops.h), and the rule for when the model
// uses them. Each function's forward and backward are one kernel each on CUDA (RMSNorm's backward
// adds a small fixed-order reduction for dweight); all are deterministic, so a block recomputed
// by activation checkpointing gives the same bits as its first pass.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "mxablate/trainer/numerics/mx_linear.h"

namespace mxablate::trainer {

// Where the model runs the fused ops instead of the unfused LibTorch expressions.
enum class FusedOps : uint8_t {
  kOnCuda,  // CUDA tensors fused; CPU tensors unfused, so CPU results keep their bits (default)
  kNever,   // unfused everywhere: the reference the fused model is tested against
  kAlways,  // CPU tensors through the adapters' CPU references too (tests of the wiring)
};

bool use_fused(FusedOps mode, const at::Device& device);

// The dtype of an activation whose only consumer is a GEMM (a norm's output, SwiGLU's h): BF16
// on CUDA, the GEMM's operand type; float32 on the CPU, where the GEMMs emulate BF16 in float32.
at::ScalarType gemm_input_dtype(const at::Device& device);

// x * rstd * weight over the last dimension; dx comes back float32 (the residual stream's dtype).
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out_dtype);

// A pre-norm block's residual stream around a norm (docs/design.md §4, "The residual stream's
// glue"): stream = x + branch (branch undefined: x itself, as a view), normed = the norm of
// stream. The backward sums the stream's gradient from its other readers into the norm's own and
// casts the branch's gradient, inside the norm's kernel on CUDA: the bits of the unfused
// `x + branch` and fused_rms_norm, with autograd's sum and cast. x float32.
struct ResidualNormed {
  at::Tensor stream;  // float32
  at::Tensor normed;  // out_dtype
};
ResidualNormed fused_residual_rms_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                       double eps, at::ScalarType out_dtype);

// x + branch into a new float32 tensor (x float32, branch float32 or bf16): the bits of the
// unfused add, forward and backward, with one vectorized kernel on CUDA.
at::Tensor fused_residual_add(const at::Tensor& x, const at::Tensor& branch);

// What SwiGLU's fused producers make ahead of the MLP's linears (docs/design.md §4, "Quantization
// in the producers"; mx_linear.h, MadeAhead): Q(h) for down in the forward pass, Q(dg) for gate
// and Q(du) for up in the backward pass, handed over through the session's made-ahead memo.
struct SwiGluMadeAhead {
  std::shared_ptr<QuantSession> session;
  MadeAhead h, dg, du;
  bool any() const { return h.any() || dg.any() || du.any(); }
};

// silu(g) * u; with `ahead`, the quantizations it names are made by the same kernel (on CUDA
// where kernels::swiglu_forward_quantized takes them) and offered to their layers.
at::Tensor fused_swiglu(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype,
                        std::shared_ptr<const SwiGluMadeAhead> ahead = nullptr);

// Rotate-half RoPE of x (B, H, T, D) (any strides) with cos, sin (T, D/2): the result in x's dtype
// and, where x is dense with D contiguous, in x's layout (else contiguous); the gradient comes back
// in x's own layout.
at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Mean cross-entropy of logits (rows, vocab) against int64 targets (rows); the logits'
// gradient has their dtype.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace mxablate::trainer
