#include "mxablate/trainer/model/optimizer.h"

#include <ATen/ATen.h>
#include <torch/types.h>  // clip_grad.h uses torch::Tensor without including it (1.13)
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <stdexcept>

#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {

bool is_decayed(const at::Tensor& parameter) { return parameter.dim() >= 2; }

std::unique_ptr<torch::optim::AdamW> make_adamw(std::vector<at::Tensor> decayed, std::vector<at::Tensor> plain,
                                                const contract::TrainConfig& train) {
  const auto options = [&](double weight_decay) {
    return torch::optim::AdamWOptions(train.lr)
        .betas({train.beta1, train.beta2})
        .eps(train.eps)
        .weight_decay(weight_decay);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(decayed), std::make_unique<torch::optim::AdamWOptions>(options(train.weight_decay)));
  groups.emplace_back(std::move(plain), std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), options(train.weight_decay));
}

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model,
                                                const contract::TrainConfig& train) {
  std::vector<at::Tensor> decayed, plain;
  for (const auto& p : model.parameters()) (is_decayed(p) ? decayed : plain).push_back(p);
  return make_adamw(std::move(decayed), std::move(plain), train);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

bool fused_adamw_applies(torch::optim::AdamW& optimizer) {
  bool any = false;
  for (auto& group : optimizer.param_groups()) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!compat::has_multi_tensor_kernels(p.device())) return false;
      any = true;
    }
  }
  return any;
}

void fused_adamw_step(torch::optim::AdamW& optimizer) {
  if (!fused_adamw_applies(optimizer))
    throw std::logic_error("fused AdamW: needs CUDA parameters, LibTorch >= 2.1 and no AMSGrad");
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<float> counts;  // each parameter's step count after this step
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;  // as AdamW::step: no gradient, no step
      // The state AdamW::step keeps (created as it creates it), so that a checkpoint does not
      // depend on the path that wrote it.
      auto& slot = optimizer.state()[compat::optimizer_state_key(optimizer, p.unsafeGetTensorImpl())];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      counts.push_back(static_cast<float>(state.step()));  // exact up to 2^24 steps
    }
    if (params.empty()) continue;
    // The kernel reads one float32 step count per parameter on the device. They are normally
    // all equal: one fill, no host-to-device copy.
    const at::TensorOptions on_device = at::TensorOptions(at::kFloat).device(params.front().device());
    bool equal = true;
    for (const float c : counts) equal = equal && c == counts.front();
    const at::Tensor steps =
        equal ? at::full({static_cast<int64_t>(counts.size())}, counts.front(), on_device)
              : at::tensor(at::ArrayRef<float>(counts)).to(on_device);
    compat::fused_adamw(params, grads, exp_avgs, exp_avg_sqs, steps.unbind(0), o.lr(),
                        std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps());
  }
}

void adamw_step(torch::optim::AdamW& optimizer) {
  if (fused_adamw_applies(optimizer)) fused_adamw_step(optimizer);
  else optimizer.step();
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  bool multi = !grads.empty();
  for (const at::Tensor& g : grads) multi = multi && compat::has_multi_tensor_kernels(g.device());
  if (!multi) return at::scalar_tensor(torch::nn::utils::clip_grad_norm_(parameters, max_norm), at::kDouble);
  torch::NoGradGuard no_grad;
  const at::Tensor total = at::stack(compat::norms(grads)).norm(2);
  if (!std::isinf(max_norm)) {
    // torch's rule: scale by min(1, max_norm / (norm + 1e-6)), on the device (no sync here).
    compat::scale_in_place(grads, at::clamp_max(max_norm / (total + 1e-6), 1.0));
  }
  return total;
}

}  // namespace mxablate::trainer
