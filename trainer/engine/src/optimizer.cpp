#include "mxablate/trainer/optimizer.h"

namespace mxablate::trainer {

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model,
                                                const contract::TrainConfig& train) {
  std::vector<at::Tensor> decayed, plain;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decayed : plain).push_back(p);
  const auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(train.lr)
            .betas({train.beta1, train.beta2})
            .eps(train.eps)
            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, options(train.weight_decay));
  groups.emplace_back(plain, options(0.0));
  return std::make_unique<torch::optim::AdamW>(
      std::move(groups), torch::optim::AdamWOptions(train.lr)
                             .betas({train.beta1, train.beta2})
                             .eps(train.eps)
                             .weight_decay(train.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

}  // namespace mxablate::trainer
