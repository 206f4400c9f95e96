// A checkpoint's trainer state after `step` steps of `tokens_per_step` tokens in
// `samples_per_step` sequences, the divergence detector fresh: what the in-process checkpoint
// tests write.
#pragma once

#include <cstdint>

#include "mxablate/trainer/rules/checkpoint_state.h"
#include "mxablate/trainer/rules/divergence.h"

namespace mxablate::test {

inline trainer::TrainerState trainer_state_at(int64_t step, int64_t tokens_per_step, int64_t samples_per_step) {
  trainer::TrainerState s;
  s.step = step;
  s.tokens = step * tokens_per_step;
  s.samples = step * samples_per_step;
  s.divergence = trainer::DivergenceDetector(contract::DivergenceConfig{}).state();
  return s;
}

}  // namespace mxablate::test
