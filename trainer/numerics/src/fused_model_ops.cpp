// Autograd functions pairing the fused ops' forward and backward adapters (docs/design.md §4).
#include <torch/autograd.h>

#include <optional>
#include <utility>
#include <vector>

#include "mxablate/kernels/torch/fused_ops.h"
#include "mxablate/kernels/torch/produced_operands.h"
#include "mxablate/trainer/numerics/fused_model_ops.h"

namespace mxablate::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps,
                            at::ScalarType out_dtype) {
    kernels::RmsNormOutput out = kernels::rms_norm_forward(x, weight, eps, out_dtype);
    ctx->save_for_backward({x, weight, out.rstd});
    return out.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    kernels::RmsNormGrads g = kernels::rms_norm_backward(grads[0], saved[0], saved[1], saved[2]);
    return {g.dx, g.dweight, at::Tensor(), at::Tensor()};
  }
};

// The residual norms' backward: dres (the stream's gradient from its other readers) summed into
// the norm's own inside its kernel; the branch's gradient (when there is a branch) cast there too.
// Returns {dx, dweight, dbranch}.
variable_list residual_norm_backward(AutogradContext* ctx, const variable_list& grads,
                                     std::optional<at::ScalarType> branch_dtype) {
  const at::Tensor& dres = grads[0];
  const at::Tensor& dy = grads[1];
  if (!dy.defined()) {  // only the stream was read: the add's gradients alone
    const at::Tensor dbranch = dres.defined() && branch_dtype ? dres.to(*branch_dtype) : at::Tensor();
    return {dres, at::Tensor(), dbranch};
  }
  const variable_list saved = ctx->get_saved_variables();
  kernels::RmsNormGrads g = kernels::residual_rms_norm_backward(dy, saved[0], saved[1], saved[2], dres, branch_dtype);
  return {g.dx, g.dweight, g.dbranch};
}

// Outputs (x, norm(x)): x returned as it is, which autograd turns into a view whose gradient comes
// back here as dres, so the sum of the stream's gradients from the norm and from its other
// readers is the norm kernel's, not a separate pass.
class NormedStreamFunction : public torch::autograd::Function<NormedStreamFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps,
                               at::ScalarType out_dtype) {
    kernels::RmsNormOutput out = kernels::rms_norm_forward(x, weight, eps, out_dtype);
    ctx->save_for_backward({x, weight, out.rstd});
    return {x, out.y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list g = residual_norm_backward(ctx, grads, std::nullopt);
    return {g[0], g[1], at::Tensor(), at::Tensor()};
  }
};

// Outputs (h, norm(h)) with h = x + branch.
class AddNormFunction : public torch::autograd::Function<AddNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const at::Tensor& weight, double eps, at::ScalarType out_dtype) {
    kernels::AddRmsNormOutput out = kernels::add_rms_norm_forward(x, branch, weight, eps, out_dtype);
    ctx->save_for_backward({out.h, weight, out.norm.rstd});
    ctx->saved_data["branch_dtype"] = branch.scalar_type();
    return {out.h, out.norm.y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list g = residual_norm_backward(ctx, grads, ctx->saved_data["branch_dtype"].toScalarType());
    return {g[0], g[2], g[1], at::Tensor(), at::Tensor()};
  }
};

class ResidualAddFunction : public torch::autograd::Function<ResidualAddFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch) {
    ctx->saved_data["branch_dtype"] = branch.scalar_type();
    return kernels::residual_add(x, branch);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    return {grads[0], grads[0].to(ctx->saved_data["branch_dtype"].toScalarType())};
  }
};

// The made-ahead plan rides in autograd's saved data (IValues only).
struct MadeAheadCapsule : torch::CustomClassHolder {
  explicit MadeAheadCapsule(std::shared_ptr<const SwiGluMadeAhead> a) : ahead(std::move(a)) {}
  std::shared_ptr<const SwiGluMadeAhead> ahead;
};

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype,
                            std::shared_ptr<const SwiGluMadeAhead> ahead) {
    ctx->save_for_backward({g, u});
    if (ahead && (ahead->dg.any() || ahead->du.any()))
      ctx->saved_data["ahead"] = c10::IValue::make_capsule(c10::make_intrusive<MadeAheadCapsule>(ahead));
    if (!ahead || !ahead->h.any()) return kernels::swiglu_forward(g, u, out_dtype);
    kernels::Produced h =
        kernels::swiglu_forward_quantized(g, u, out_dtype, ahead->h.axes(), gemm_input_dtype(g.device()));
    offer_made_ahead(*ahead->session, h.tensor, ahead->h, h);
    return h.tensor;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    if (ctx->saved_data.find("ahead") == ctx->saved_data.end()) {
      kernels::SwiGluGrads g = kernels::swiglu_backward(grads[0], saved[0], saved[1]);
      return {g.dg, g.du, at::Tensor(), at::Tensor()};
    }
    const auto capsule = c10::static_intrusive_pointer_cast<MadeAheadCapsule>(ctx->saved_data["ahead"].toCapsule());
    const SwiGluMadeAhead& ahead = *capsule->ahead;
    kernels::ProducedGrads g = kernels::swiglu_backward_quantized(grads[0], saved[0], saved[1], ahead.dg.axes(),
                                                                  ahead.du.axes(), gemm_input_dtype(saved[0].device()));
    offer_made_ahead(*ahead.session, g.dg.tensor, ahead.dg, g.dg);
    offer_made_ahead(*ahead.session, g.du.tensor, ahead.du, g.du);
    return {g.dg.tensor, g.du.tensor, at::Tensor(), at::Tensor()};
  }
};

// Keeps only the tables and x's layout: the backward is the rotation by -angle of the gradient.
class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["sizes"] = x.sizes().vec();
    // The gradient goes back in x's layout (a transposed projection, typically) when that layout
    // is dense; otherwise contiguous.
    const bool dense = x.is_non_overlapping_and_dense() && x.stride(3) == 1;
    ctx->saved_data["strides"] = dense ? x.strides().vec() : std::vector<int64_t>{};
    ctx->saved_data["dtype"] = x.scalar_type();
    if (!dense) return kernels::rope(x, cos, sin, kernels::RopeDirection::kForward, x.scalar_type());
    // The rotation in x's own layout too: a projection's (B, T, H, D) memory viewed as (B, H, T, D)
    // stays so, attention reads q and k in the layout v already has, and its output comes back in
    // it, so merging the heads after attention is a view, not a copy.
    const at::Tensor out = at::empty_strided(x.sizes(), x.strides(), x.options());
    kernels::rope_into(x, cos, sin, kernels::RopeDirection::kForward, out);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const std::vector<int64_t> strides = ctx->saved_data["strides"].toIntVector();
    const at::TensorOptions options = grads[0].options().dtype(ctx->saved_data["dtype"].toScalarType());
    const at::Tensor dx = strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
    kernels::rope_into(grads[0], saved[0], saved[1], kernels::RopeDirection::kInverse, dx);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets) {
    kernels::CrossEntropyOutput out = kernels::cross_entropy_forward(logits, targets);
    ctx->save_for_backward({logits, targets, out.lse});
    return out.loss.mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    const variable_list saved = ctx->get_saved_variables();
    return {kernels::cross_entropy_backward(grads[0], saved[0], saved[1], saved[2]), at::Tensor()};
  }
};

}  // namespace

bool use_fused(FusedOps mode, const at::Device& device) {
  switch (mode) {
    case FusedOps::kOnCuda: return device.is_cuda();
    case FusedOps::kNever: return false;
    case FusedOps::kAlways: return true;
  }
  return false;
}

at::ScalarType gemm_input_dtype(const at::Device& device) { return device.is_cuda() ? at::kBFloat16 : at::kFloat; }

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out_dtype) {
  return RmsNormFunction::apply(x, weight, eps, out_dtype);
}

ResidualNormed fused_residual_rms_norm(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                       double eps, at::ScalarType out_dtype) {
  // Two functions, not one with an undefined branch: LibTorch 1.13's custom functions refuse
  // undefined inputs.
  const variable_list out = branch.defined() ? AddNormFunction::apply(x, branch, weight, eps, out_dtype)
                                             : NormedStreamFunction::apply(x, weight, eps, out_dtype);
  return {out[0], out[1]};
}

at::Tensor fused_residual_add(const at::Tensor& x, const at::Tensor& branch) {
  return ResidualAddFunction::apply(x, branch);
}

at::Tensor fused_swiglu(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype,
                        std::shared_ptr<const SwiGluMadeAhead> ahead) {
  if (ahead && !ahead->any()) ahead = nullptr;
  return SwiGluFunction::apply(g, u, out_dtype, std::move(ahead));
}

at::Tensor fused_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RopeFunction::apply(x, cos, sin);
}

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  return CrossEntropyFunction::apply(logits, targets);
}

}  // namespace mxablate::trainer
