#include "mxablate/trainer/plan/recompute_plan.h"

#include <algorithm>
#include <optional>


namespace mxablate::trainer {

using contract::Recompute;

int64_t recomputed_blocks(const Recompute& setting, int64_t n_layers) {
  switch (setting.mode) {
    case Recompute::Mode::kNone: return 0;
    case Recompute::Mode::kAll:
    case Recompute::Mode::kAuto: return n_layers;
    case Recompute::Mode::kFirstBlocks: break;
  }
  return std::clamp<int64_t>(setting.first_blocks, 0, n_layers);
}

Recompute recompute_of_blocks(int64_t blocks, int64_t n_layers) {
  if (blocks <= 0) return {};
  if (blocks >= n_layers) return {Recompute::Mode::kAll, 0};
  return {Recompute::Mode::kFirstBlocks, static_cast<int>(blocks)};
}

RecomputeChoice choose_recompute(const std::vector<MemoryPlan>& by_recompute, int64_t capacity) {
  // In double: a hostile --gpu-memory times the percentage may not fit int64.
  const double budget = static_cast<double>(capacity) * kAutoRecomputeMemoryPercent / 100.0;
  std::optional<RecomputeChoice> least;  // the lowest prediction, at the fewest blocks
  for (size_t k = 0; k < by_recompute.size(); ++k) {
    const RecomputeChoice choice{static_cast<int64_t>(k), by_recompute[k].total(), false};
    if (static_cast<double>(choice.predicted) <= budget) return {choice.blocks, choice.predicted, true};
    if (!least || choice.predicted < least->predicted) least = choice;
  }
  return least.value_or(RecomputeChoice{});
}

RecomputeChoice choose_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                 int64_t vocab_size, const RunLayerPlans& plans, int64_t capacity) {
  return choose_recompute(plan_memory_by_recompute(config, shape, vocab_size, plans), capacity);
}

contract::RunConfig resolve_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                      int64_t vocab_size, const RunLayerPlans& plans,
                                      int64_t capacity) {
  if (config.train.activation_checkpointing.mode != Recompute::Mode::kAuto) return config;
  contract::RunConfig c = config;
  c.train.activation_checkpointing = recompute_of_blocks(
      choose_recompute(config, shape, vocab_size, plans, capacity).blocks, shape.n_layers);
  return c;
}

contract::RunConfig resolve_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                      int64_t vocab_size, int64_t capacity) {
  if (config.train.activation_checkpointing.mode != Recompute::Mode::kAuto) return config;
  return resolve_recompute(config, shape, vocab_size,
                           plan_run_layers(config, linear_layers(shape, vocab_size), shape.n_layers),
                           capacity);
}

double recompute_flops_fraction(const ModelShape& shape, int64_t seq_len, int64_t vocab_size,
                                int64_t blocks) {
  const double d = static_cast<double>(shape.d_model);
  const double block_weights =
      static_cast<double>(non_embedding_parameter_count(shape)) / static_cast<double>(shape.n_layers);
  const double block = 2.0 * block_weights + 2.0 * static_cast<double>(seq_len) * d;
  const double forward = static_cast<double>(shape.n_layers) * block + 2.0 * d * static_cast<double>(vocab_size);
  return forward > 0 ? static_cast<double>(std::clamp<int64_t>(blocks, 0, shape.n_layers)) * block / (3.0 * forward)
                     : 0.0;
}

}  // namespace mxablate::trainer
