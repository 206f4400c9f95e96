#include "mxablate/trainer/parallel/step_engine.h"

#include "replicated_step.h"
#include "sharded_step.h"

namespace mxablate::trainer {

// The one place that decides how a run's step is distributed (docs/design.md §4, "The step engine").
std::unique_ptr<StepEngine> make_step_engine(const contract::RunConfig& config, torch::nn::Module& model,
                                             DataParallel* group, const std::vector<at::Tensor>& bf16_weights) {
  if (config.parallel.shard != contract::ShardLevel::kNone && group)
    return std::make_unique<ShardedStep>(config, model, *group, bf16_weights);
  return std::make_unique<ReplicatedStep>(config, model, group);
}

}  // namespace mxablate::trainer
