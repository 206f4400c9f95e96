#include "mxablate/trainer/plan/working_copies.h"

namespace mxablate::trainer {

std::vector<bool> bf16_working_copies(const contract::RunConfig& config, const RunLayerPlans& plans) {
  std::vector<bool> out(plans.layers.size(), false);
  if (config.parallel.shard == contract::ShardLevel::kNone || config.parallel.data < 2) return out;
  for (size_t i = 0; i < plans.layers.size(); ++i) {
    bool plain = true;
    for (const std::vector<LinearPlan>& phase : plans.phases) plain = plain && weight_shares_rounding(phase[i]);
    out[i] = plain;
  }
  return out;
}

}  // namespace mxablate::trainer
