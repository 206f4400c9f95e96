#include "mxablate/trainer/plan/recompute_plan.h"

#include <algorithm>
#include <optional>


namespace mxablate::trainer {

using contract::Recompute;

bool selective_recompute(const Recompute& setting) { return setting.selective; }

int64_t recomputed_blocks(const Recompute& setting, int64_t n_layers) {
  switch (setting.mode) {
    case Recompute::Mode::kNone: return 0;
    case Recompute::Mode::kAll:
    case Recompute::Mode::kAuto: return n_layers;
    case Recompute::Mode::kFirstBlocks: break;
  }
  return std::clamp<int64_t>(setting.first_blocks, 0, n_layers);
}

Recompute recompute_of_blocks(int64_t blocks, int64_t n_layers, bool selective) {
  if (blocks <= 0) return {Recompute::Mode::kNone, 0, selective};
  if (blocks >= n_layers) return {Recompute::Mode::kAll, 0};  // no block is left to be selective
  return {Recompute::Mode::kFirstBlocks, static_cast<int>(blocks), selective};
}

std::vector<RecomputeStep> recompute_ladder(const contract::RunConfig& config, const ModelShape& shape,
                                            int64_t vocab_size, const RunLayerPlans& plans) {
  contract::RunConfig c = config;
  c.train.activation_checkpointing = {};
  std::vector<RecomputeStep> ladder{{c.train.activation_checkpointing,
                                     plan_memory_by_recompute(c, shape, vocab_size, plans).front()}};
  c.train.activation_checkpointing = recompute_of_blocks(0, shape.n_layers, /*selective=*/true);
  const std::vector<MemoryPlan> selective = plan_memory_by_recompute(c, shape, vocab_size, plans);
  for (size_t k = 0; k < selective.size(); ++k)
    ladder.push_back({recompute_of_blocks(static_cast<int64_t>(k), shape.n_layers, true), selective[k]});
  return ladder;
}

RecomputeChoice choose_recompute(const std::vector<RecomputeStep>& ladder, int64_t n_layers, int64_t capacity) {
  // In double: a hostile --gpu-memory times the percentage may not fit int64.
  const double budget = static_cast<double>(capacity) * kAutoRecomputeMemoryPercent / 100.0;
  std::optional<RecomputeChoice> least;  // the lowest prediction, the first step of it
  for (const RecomputeStep& step : ladder) {
    RecomputeChoice choice{step.setting, recomputed_blocks(step.setting, n_layers), step.plan.total(), false};
    choice.fits = static_cast<double>(choice.predicted) <= budget;
    if (choice.fits) return choice;
    if (!least || choice.predicted < least->predicted) least = choice;
  }
  return least.value_or(RecomputeChoice{});
}

RecomputeChoice choose_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                 int64_t vocab_size, const RunLayerPlans& plans, int64_t capacity) {
  return choose_recompute(recompute_ladder(config, shape, vocab_size, plans), shape.n_layers, capacity);
}

contract::RunConfig resolve_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                      int64_t vocab_size, const RunLayerPlans& plans,
                                      int64_t capacity) {
  if (config.train.activation_checkpointing.mode != Recompute::Mode::kAuto) return config;
  contract::RunConfig c = config;
  c.train.activation_checkpointing = choose_recompute(config, shape, vocab_size, plans, capacity).setting;
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
