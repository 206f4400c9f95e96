#include "mxablate/trainer/plan/training_plan.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mxablate::trainer {

TrainingPlan make_training_plan(const contract::RunConfig& c) {
  TrainingPlan p;
  p.seq_len = c.data.seq_len;
  p.tokens_per_step = c.train.global_batch_tokens;
  p.micro_batch_tokens = contract::micro_batch_tokens(c);
  p.micro_batches_per_step = contract::micro_batches_per_step(c);
  p.sequences_per_micro_batch = p.micro_batch_tokens / p.seq_len;
  p.total_steps = static_cast<int64_t>(std::ceil(c.train.max_tokens / static_cast<double>(p.tokens_per_step)));
  p.warmup_steps =
      static_cast<int64_t>(std::ceil(c.train.warmup_tokens / static_cast<double>(p.tokens_per_step)));
  p.peak_lr = c.train.lr;
  p.min_lr = c.train.lr * c.train.min_lr_ratio;
  p.eval_every_tokens = c.eval.every_tokens;
  p.eval_sequences = static_cast<int64_t>(std::ceil(c.eval.tokens / static_cast<double>(p.seq_len)));
  return p;
}

double TrainingPlan::lr_at(int64_t step) const {
  if (step < warmup_steps) return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 1) return peak_lr;
  const double progress = std::min(
      1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - 1));
  return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

bool TrainingPlan::eval_due(int64_t tokens_before, int64_t tokens_after) const {
  return std::floor(static_cast<double>(tokens_after) / eval_every_tokens) >
         std::floor(static_cast<double>(tokens_before) / eval_every_tokens);
}

}  // namespace mxablate::trainer
