// The fused common-path ops: argument checks, then CUDA tensors through the raw kernels and CPU
// tensors through the references below (plain ATen ops in float32, the formulas the kernels
// implement; the forward ones are the model's former unfused expressions, op for op).
#include "mxablate/kernels/torch/fused_ops.h"

#include <ATen/ATen.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor_checks.h"
#include "torch_compat.h"
#if MXABLATE_KERNELS_TORCH_CUDA
#include "fused_ops_cuda.h"
#endif

namespace mxablate::kernels {
namespace {

[[noreturn]] void refuse(const std::string& sentence) { throw std::invalid_argument(sentence); }

std::string shape_of(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + ")";
}

void check_out_dtype(at::ScalarType t, const char* op) {
  if (t != at::kFloat && t != at::kBFloat16)
    refuse(std::string(op) + ": the output dtype must be float32 or bfloat16, got " + c10::toString(t));
}

void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op, const char* name) {
  if (a.device() != b.device())
    refuse(std::string(op) + ": " + name + " is on " + b.device().str() + ", the input on " + a.device().str());
}

void check_float32(const at::Tensor& t, const char* op, const char* name) {
  if (!t.defined() || t.scalar_type() != at::kFloat)
    refuse(std::string(op) + ": " + name + " must be a float32 tensor");
}

void check_same_shape(const at::Tensor& a, const at::Tensor& b, const char* op, const char* name) {
  if (a.sizes() != b.sizes())
    refuse(std::string(op) + ": " + name + " has shape " + shape_of(b) + ", expected " + shape_of(a));
}

void check_rms_norm(const at::Tensor& x, const at::Tensor& weight, const char* op) {
  detail::check_float_activation(x, (std::string(op) + " input").c_str());
  detail::check_device_supported(x);
  if (x.dim() < 1) refuse(std::string(op) + ": the input must have at least one dimension");
  check_float32(weight, op, "weight");
  check_same_device(x, weight, op, "weight");
  if (weight.dim() != 1 || weight.size(0) != x.size(-1))
    refuse(std::string(op) + ": weight has shape " + shape_of(weight) + ", expected (" +
           std::to_string(x.size(-1)) + ")");
}

// ---- CPU references --------------------------------------------------------------------------

RmsNormOutput rms_norm_forward_cpu(const at::Tensor& x, const at::Tensor& weight, double eps,
                                   at::ScalarType out_dtype) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor rstd = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return {(xf * rstd * weight).to(out_dtype), rstd.squeeze(-1)};
}

// y = x r w with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / d and
//   dx = r (dy w) - x r^3 sum(dy w x) / d,  dweight = sum over rows of dy x r.
RmsNormGrads rms_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& rstd) {
  const int64_t d = x.size(-1);
  const at::Tensor xf = x.to(at::kFloat), dyf = dy.to(at::kFloat), r = rstd.unsqueeze(-1);
  const at::Tensor g = dyf * weight;
  const at::Tensor dot = (g * xf).sum(-1, /*keepdim=*/true);
  const at::Tensor dx = r * g - xf * (r * r * r * (dot / static_cast<double>(d)));
  const at::Tensor dweight = (dyf * xf * r).reshape({-1, d}).sum(0);
  return {dx, dweight, at::Tensor()};
}

// The residual stream's sum and the branch's cast that autograd does after the norm's backward:
// the residual ops' CPU references are the unfused composition op for op, whose bits the CUDA
// kernels must give too (fused_ops.h).
RmsNormGrads with_residual_cpu(RmsNormGrads g, const at::Tensor& dres, std::optional<at::ScalarType> branch_dtype) {
  if (dres.defined()) g.dx = dres + g.dx;
  if (branch_dtype) g.dbranch = g.dx.to(*branch_dtype);
  return g;
}

// silu(g) = g sigmoid(g), silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
SwiGluGrads swiglu_backward_cpu(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u) {
  const at::Tensor dhf = dh.to(at::kFloat), gf = g.to(at::kFloat), uf = u.to(at::kFloat);
  const at::Tensor sig = at::sigmoid(gf);
  const at::Tensor dg = dhf * uf * sig * (1.0 + gf * (1.0 - sig));
  const at::Tensor du = dhf * at::silu(gf);
  return {dg.to(g.scalar_type()), du.to(g.scalar_type())};
}

at::Tensor rope_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeDirection direction) {
  const at::Tensor xf = x.to(at::kFloat);
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = xf.narrow(-1, 0, half);
  const at::Tensor x2 = xf.narrow(-1, half, half);
  if (direction == RopeDirection::kForward) return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
  return at::cat({x1 * cos + x2 * sin, x2 * cos - x1 * sin}, -1);
}

// A target outside the vocabulary would index out of the row; on the CPU the check is cheap.
void check_targets_in_range(const at::Tensor& targets, int64_t vocab) {
  const int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
  const int64_t bad = lo < 0 ? lo : hi;
  if (lo < 0 || hi >= vocab)
    refuse("cross_entropy: target " + std::to_string(bad) + " is outside the vocabulary [0, " + std::to_string(vocab) +
           ")");
}

CrossEntropyOutput cross_entropy_forward_cpu(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor lf = logits.to(at::kFloat);
  const at::Tensor lse = at::logsumexp(lf, 1);
  return {lse - lf.gather(1, targets.unsqueeze(1)).squeeze(1), lse};
}

at::Tensor cross_entropy_backward_cpu(const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& targets,
                                      const at::Tensor& lse) {
  const at::Tensor lf = logits.to(at::kFloat);
  const at::Tensor softmax = at::exp(lf - lse.unsqueeze(1));
  const at::Tensor onehot = at::one_hot(targets, logits.size(1)).to(at::kFloat);
  const at::Tensor scale = grad.to(at::kFloat).reshape({}) / static_cast<double>(logits.size(0));
  return ((softmax - onehot) * scale).to(logits.scalar_type());
}

void check_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const char* op = "rope";
  detail::check_float_activation(x, "rope input");
  detail::check_device_supported(x);
  if (x.dim() != 4) refuse("rope: the input must be (batch, heads, seq, head_dim), got shape " + shape_of(x));
  if (x.size(3) % 2 != 0) refuse("rope: head_dim must be even, got " + std::to_string(x.size(3)));
  const auto check_table = [&](const at::Tensor& t, const char* name) {
    check_float32(t, op, name);
    check_same_device(x, t, op, name);
    if (t.dim() != 2 || t.size(0) != x.size(2) || t.size(1) != x.size(3) / 2)
      refuse(std::string("rope: ") + name + " has shape " + shape_of(t) + ", expected (" + std::to_string(x.size(2)) +
             ", " + std::to_string(x.size(3) / 2) + ")");
  };
  check_table(cos, "cos");
  check_table(sin, "sin");
}

void check_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const char* op) {
  detail::check_float_activation(logits, (std::string(op) + " logits").c_str());
  detail::check_device_supported(logits);
  if (logits.dim() != 2) refuse(std::string(op) + ": the logits must be (rows, vocab), got shape " + shape_of(logits));
  if (!targets.defined() || targets.scalar_type() != at::kLong)
    refuse(std::string(op) + ": the targets must be an int64 tensor");
  check_same_device(logits, targets, op, "targets");
  if (targets.dim() != 1 || targets.size(0) != logits.size(0))
    refuse(std::string(op) + ": the targets have shape " + shape_of(targets) + ", expected (" +
           std::to_string(logits.size(0)) + ")");
  if (targets.is_cpu()) check_targets_in_range(targets, logits.size(1));
}

void check_residual_branch(const at::Tensor& x, const at::Tensor& branch, const char* op, const char* name) {
  check_float32(x, op, "the input");
  detail::check_float_activation(branch, (std::string(op) + " " + name).c_str());
  check_same_device(x, branch, op, name);
  check_same_shape(x, branch, op, name);
}

void check_rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& rstd, const char* op) {
  check_rms_norm(x, weight, op);
  detail::check_float_activation(dy, (std::string(op) + " dy").c_str());
  check_same_device(x, dy, op, "dy");
  check_same_shape(x, dy, op, "dy");
  check_float32(rstd, op, "rstd");
  check_same_device(x, rstd, op, "rstd");
  if (rstd.numel() * x.size(-1) != x.numel() || rstd.dim() != x.dim() - 1)
    refuse(std::string(op) + ": rstd has shape " + shape_of(rstd) + ", expected one value per row of " + shape_of(x));
}

}  // namespace

RmsNormOutput rms_norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out_dtype) {
  check_rms_norm(x, weight, "rms_norm_forward");
  check_out_dtype(out_dtype, "rms_norm_forward");
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::rms_norm_forward_cuda(x, weight, eps, out_dtype);
#endif
  return rms_norm_forward_cpu(x, weight, eps, out_dtype);
}

RmsNormGrads rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& rstd) {
  check_rms_norm_backward(dy, x, weight, rstd, "rms_norm_backward");
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::rms_norm_backward_cuda(dy, x, weight, rstd, at::Tensor(), std::nullopt);
#endif
  return rms_norm_backward_cpu(dy, x, weight, rstd);
}

AddRmsNormOutput add_rms_norm_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                      double eps, at::ScalarType out_dtype) {
  const char* op = "add_rms_norm_forward";
  check_rms_norm(x, weight, op);
  check_residual_branch(x, branch, op, "branch");
  check_out_dtype(out_dtype, op);
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::add_rms_norm_forward_cuda(x, branch, weight, eps, out_dtype);
#endif
  AddRmsNormOutput out;
  out.h = x + branch;
  out.norm = rms_norm_forward_cpu(out.h, weight, eps, out_dtype);
  return out;
}

RmsNormGrads residual_rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& rstd, const at::Tensor& dres,
                                        std::optional<at::ScalarType> branch_dtype) {
  const char* op = "residual_rms_norm_backward";
  check_rms_norm_backward(dy, x, weight, rstd, op);
  check_float32(x, op, "the input");
  if (dres.defined()) {
    check_float32(dres, op, "dres");
    check_same_device(x, dres, op, "dres");
    check_same_shape(x, dres, op, "dres");
  }
  if (branch_dtype) check_out_dtype(*branch_dtype, op);
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::rms_norm_backward_cuda(dy, x, weight, rstd, dres, branch_dtype);
#endif
  return with_residual_cpu(rms_norm_backward_cpu(dy, x, weight, rstd), dres, branch_dtype);
}

at::Tensor residual_add(const at::Tensor& x, const at::Tensor& branch) {
  const char* op = "residual_add";
  detail::check_float_activation(x, "residual_add input");
  detail::check_device_supported(x);
  check_residual_branch(x, branch, op, "branch");
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::residual_add_cuda(x, branch);
#endif
  return x + branch;
}

at::Tensor to_float32(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return t;
#if MXABLATE_KERNELS_TORCH_CUDA
  if (t.is_cuda() && t.scalar_type() == at::kBFloat16) return detail::widen_bf16_cuda(t);
#endif
  return t.to(at::kFloat);
}

at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype) {
  const char* op = "swiglu_forward";
  detail::check_float_activation(g, "swiglu_forward gate");
  detail::check_device_supported(g);
  check_same_device(g, u, op, "up");
  check_same_shape(g, u, op, "up");
  if (u.scalar_type() != g.scalar_type())
    refuse(std::string(op) + ": gate and up must have one dtype, got " + c10::toString(g.scalar_type()) + " and " +
           c10::toString(u.scalar_type()));
  check_out_dtype(out_dtype, op);
#if MXABLATE_KERNELS_TORCH_CUDA
  if (g.is_cuda()) return detail::swiglu_forward_cuda(g, u, out_dtype);
#endif
  return (at::silu(g.to(at::kFloat)) * u.to(at::kFloat)).to(out_dtype);
}

SwiGluGrads swiglu_backward(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u) {
  const char* op = "swiglu_backward";
  detail::check_float_activation(g, "swiglu_backward gate");
  detail::check_float_activation(dh, "swiglu_backward dh");
  detail::check_device_supported(g);
  check_same_device(g, u, op, "up");
  check_same_device(g, dh, op, "dh");
  check_same_shape(g, u, op, "up");
  check_same_shape(g, dh, op, "dh");
  if (u.scalar_type() != g.scalar_type())
    refuse(std::string(op) + ": gate and up must have one dtype, got " + c10::toString(g.scalar_type()) + " and " +
           c10::toString(u.scalar_type()));
#if MXABLATE_KERNELS_TORCH_CUDA
  if (g.is_cuda()) return detail::swiglu_backward_cuda(dh, g, u);
#endif
  return swiglu_backward_cpu(dh, g, u);
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeDirection direction,
                at::ScalarType out_dtype) {
  check_rope(x, cos, sin);
  check_out_dtype(out_dtype, "rope");
  const at::Tensor out = at::empty(x.sizes(), x.options().dtype(out_dtype).memory_format(at::MemoryFormat::Contiguous));
  rope_into(x, cos, sin, direction, out);
  return out;
}

void rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, RopeDirection direction,
               const at::Tensor& out) {
  check_rope(x, cos, sin);
  detail::check_float_activation(out, "rope output");
  check_same_device(x, out, "rope", "the output");
  check_same_shape(x, out, "rope", "the output");
  if (!out.is_non_overlapping_and_dense() || out.stride(3) != 1)
    refuse("rope: the output must be dense, non-overlapping and contiguous along head_dim");
#if MXABLATE_KERNELS_TORCH_CUDA
  if (x.is_cuda()) return detail::rope_cuda(x, cos, sin, direction == RopeDirection::kInverse, out);
#endif
  out.copy_(rope_cpu(x, cos, sin, direction));
}

CrossEntropyOutput cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets) {
  check_cross_entropy(logits, targets, "cross_entropy_forward");
#if MXABLATE_KERNELS_TORCH_CUDA
  if (logits.is_cuda()) return detail::cross_entropy_forward_cuda(logits, targets);
#endif
  return cross_entropy_forward_cpu(logits, targets);
}

at::Tensor cross_entropy_backward(const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& targets,
                                  const at::Tensor& lse) {
  const char* op = "cross_entropy_backward";
  check_cross_entropy(logits, targets, op);
  if (!grad.defined() || grad.numel() != 1) refuse(std::string(op) + ": grad must hold exactly one value");
  check_same_device(logits, grad, op, "grad");
  check_float32(lse, op, "lse");
  check_same_device(logits, lse, op, "lse");
  if (lse.dim() != 1 || lse.size(0) != logits.size(0))
    refuse(std::string(op) + ": lse has shape " + shape_of(lse) + ", expected (" + std::to_string(logits.size(0)) + ")");
#if MXABLATE_KERNELS_TORCH_CUDA
  if (logits.is_cuda()) return detail::cross_entropy_backward_cuda(grad, logits, targets, lse);
#endif
  return cross_entropy_backward_cpu(grad, logits, targets, lse);
}

}  // namespace mxablate::kernels
