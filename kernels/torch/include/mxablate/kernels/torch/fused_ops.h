// LibTorch adapters of the fused common-path ops (docs/design.md §4): RMSNorm, SwiGLU, RoPE and
// cross-entropy, forward and backward as separate calls (the trainer's autograd functions pair
// them). A CUDA tensor goes through the raw kernels (mxablate/kernels/gpu/fused_ops_gpu.h) on
// LibTorch's current stream; a CPU tensor through the reference, plain ATen ops written to be
// obviously right, which is what the kernels are tested against.
//
// Activations are float32 or bfloat16; all arithmetic is float32 whatever the storage; a bf16
// result is the float32 one rounded to nearest-even. The CPU forward references are the unfused
// formulas the model used before, operation for operation, so on float32 CPU tensors they give
// the same bits. Every function throws std::invalid_argument with one sentence when shapes,
// dtypes or devices do not fit.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace mxablate::kernels {

// ---- RMSNorm over the last dimension: y = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps) ----

struct RmsNormOutput {
  at::Tensor y;     // x's shape, out_dtype
  at::Tensor rstd;  // x's shape without the last dimension, float32 (saved for backward)
};

// x (..., d) float32 or bf16; weight (d) float32; out_dtype float32 or bf16.
RmsNormOutput rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps,
                               at::ScalarType out_dtype);

struct RmsNormGrads {
  at::Tensor dx;       // x's shape, float32 (the residual stream's dtype)
  at::Tensor dweight;  // (d) float32; deterministic: the same bits on every call
  at::Tensor dbranch;  // residual_rms_norm_backward's, when asked; undefined otherwise
};

// dy (x's shape, float32 or bf16), and the forward's x, weight and rstd. On CUDA, d <= 8192.
RmsNormGrads rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& rstd);

// ---- RMSNorm fused with the residual stream around it --------------------------------------------
// A pre-norm block reads its residual stream x as norm(x) and adds a branch to it: h = x + b,
// then norm(h). Fused, the norm's kernels do the add and the backward's sums and cast that
// autograd would otherwise run as separate passes over the stream (docs/design.md §4, "The
// residual stream's glue"). Each is bit for bit its unfused composition, on the CPU and on CUDA.

struct AddRmsNormOutput {
  at::Tensor h;        // x + branch, float32: the residual stream after the add, the norm's input
  RmsNormOutput norm;  // of h
};

// x (..., d) float32; branch x's shape, float32 or bf16. The bits of the add `x + branch` and
// of rms_norm_forward(x + branch, weight, eps, out_dtype).
AddRmsNormOutput add_rms_norm_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                      double eps, at::ScalarType out_dtype);

// rms_norm_backward with the residual stream's other gradient summed in: dx = dres + the norm's
// dx (dres undefined: no sum), dweight as rms_norm_backward's, and dbranch = dx in branch_dtype
// (float32 or bf16) when that is given. x float32; dres float32 of x's shape.
RmsNormGrads residual_rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& rstd, const at::Tensor& dres,
                                        std::optional<at::ScalarType> branch_dtype);

// out = x + branch, float32: the block's last add, which no norm follows inside the block.
// x float32; branch x's shape, float32 or bf16. The bits of `x + branch`.
at::Tensor residual_add(const at::Tensor& x, const at::Tensor& branch);

// t as float32 (t itself when it is float32 already): exact. On CUDA a bf16 t takes one
// vectorized kernel; ATen's own bf16 -> float32 copy takes its unvectorized cast path there
// (about half the copy rate at a weight gradient's size).
at::Tensor to_float32(const at::Tensor& t);

// ---- SwiGLU: h = silu(g) * u, elementwise --------------------------------------------------------

// g, u: the same shape and dtype (float32 or bf16).
at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype);

struct SwiGluGrads {
  at::Tensor dg, du;  // g's shape and dtype
};

SwiGluGrads swiglu_backward(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u);

// ---- RoPE, rotate-half layout ---------------------------------------------------------------------

enum class RopeDirection {
  kForward,  // by +angle: y1 = x1 cos - x2 sin, y2 = x1 sin + x2 cos
  kInverse,  // by -angle (the forward's backward): y1 = x1 cos + x2 sin, y2 = x2 cos - x1 sin
};

// x: (B, H, T, D) float32 or bf16, any strides (a (B, T, H, D) projection viewed as (B, H, T, D)
// is read in place when its D is contiguous); cos, sin: (T, D/2) float32 on x's device. Returns
// the rotation as a contiguous (B, H, T, D) tensor of out_dtype.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeDirection direction,
                at::ScalarType out_dtype);

// The same, written into `out` (x's sizes, float32 or bf16, non-overlapping and dense, stride 1
// along D), so a backward can return the gradient in its input's own layout.
void rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeDirection direction,
               const at::Tensor& out);

// ---- Cross-entropy of logits rows against int64 targets --------------------------------------------

struct CrossEntropyOutput {
  at::Tensor loss;  // (rows) float32: logsumexp(row) - row[target]
  at::Tensor lse;   // (rows) float32: saved for backward
};

// logits (rows, vocab) float32 or bf16; targets (rows) int64 in [0, vocab). CPU: an out-of-range
// target is refused. CUDA: checking would synchronize the stream, so a row with an out-of-range
// target gets loss NaN instead (nothing out of bounds is read), which the trainer's divergence
// check reports.
CrossEntropyOutput cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets);

// The gradient of mean(loss) times `grad` (a one-element tensor: the upstream gradient of the
// mean): (softmax(row) - onehot(target)) * grad / rows, in the logits' dtype.
at::Tensor cross_entropy_backward(const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& targets,
                                  const at::Tensor& lse);

}  // namespace mxablate::kernels
