// The arithmetic of a run, derived from the config once: batch geometry, step counts, the
// learning-rate schedule (linear warmup, then cosine to lr * min_lr_ratio), and when to evaluate.
// All of it is a function of the step number, so a resumed run needs no schedule state.
#pragma once

#include <cstdint>

#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {

struct TrainingPlan {
  int64_t seq_len = 0;
  int64_t tokens_per_step = 0;         // global batch
  int64_t micro_batch_tokens = 0;      // one forward/backward
  int64_t micro_batches_per_step = 0;  // gradient accumulation
  int64_t sequences_per_micro_batch = 0;
  int64_t total_steps = 0;             // ceil(max_tokens / tokens_per_step)
  int64_t warmup_steps = 0;            // ceil(warmup_tokens / tokens_per_step)
  double peak_lr = 0;
  double min_lr = 0;
  double eval_every_tokens = 0;
  int64_t eval_sequences = 0;          // ceil(eval.tokens / seq_len)

  // Learning rate for optimizer step `step` (0-based): (step+1)/warmup of the peak during
  // warmup, then cosine from the peak down to min_lr at the last step.
  double lr_at(int64_t step) const;
  // Whether to evaluate after the step that brought the token count from `before` to `after`.
  bool eval_due(int64_t tokens_before, int64_t tokens_after) const;
};

TrainingPlan make_training_plan(const contract::RunConfig& config);

}  // namespace mxablate::trainer
