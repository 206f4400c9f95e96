// Which blocks recompute in the backward (docs/design.md §4, "Recompute chosen by the memory
// plan"): the one rule for train.activation_checkpointing's settings, read by the memory plan,
// by `mxablate plan` and `run` (what they show and refuse) and by mxablate-train, which resolves
// `auto` against the GPU it got. Recomputing changes no bit of a run (block_checkpoint.h), only
// its peak memory and its compute; so `auto` recomputes the fewest blocks that fit.
#pragma once

#include <cstdint>
#include <vector>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

// The share of the GPU's memory `auto` plans a run into: the rest is headroom for what the plan
// only approximates (it has stayed within 3 % of the measured peak, docs/performance.md).
inline constexpr int64_t kAutoRecomputeMemoryPercent = 95;

// How many blocks recompute (blocks 0 … n-1 of them) under a setting of a model of `n_layers`:
// false 0, true all, N N (at most all). `auto` before it is resolved: all, the least memory it can
// take (what the plan shows where the GPU is not known).
int64_t recomputed_blocks(const contract::Recompute& setting, int64_t n_layers);

// The setting that recomputes `blocks` of `n_layers` blocks: false, N or true.
contract::Recompute recompute_of_blocks(int64_t blocks, int64_t n_layers);

struct RecomputeChoice {
  int64_t blocks = 0;     // blocks 0 … blocks-1 recompute
  int64_t predicted = 0;  // the memory plan's peak per rank with them
  bool fits = false;      // within kAutoRecomputeMemoryPercent of the capacity
};

// `auto`'s choice for `config` with `capacity` bytes of GPU memory: the fewest recomputing blocks
// whose predicted peak is at most kAutoRecomputeMemoryPercent of it; where none is, the fewest
// with the lowest prediction (fits false). Keeping the last block costs what recomputing it
// would (its saved tensors at the forward's end are the recompute-time peak), so the choice is
// never every block: at most n - 1.
RecomputeChoice choose_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                 int64_t vocab_size, const RunLayerPlans& plans, int64_t capacity);

// The same choice from the plans of every count (plan_memory_by_recompute), for a caller that
// shows them too.
RecomputeChoice choose_recompute(const std::vector<MemoryPlan>& by_recompute, int64_t capacity);

// `config` with `auto` replaced by its choice at `capacity` (other settings as they are): the
// config a run executes, whose memory plan is the one it gets.
contract::RunConfig resolve_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                      int64_t vocab_size, const RunLayerPlans& plans,
                                      int64_t capacity);

// The same, deriving the layers' plans (the planner's side, which does not hold them).
contract::RunConfig resolve_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                      int64_t vocab_size, int64_t capacity);

// The forward FLOPs that recomputing `blocks` blocks adds to a step, as a fraction of the step's
// FLOPs without recompute (3 × the forward: the backward is two forwards' worth). Counted as the
// usual MFU arithmetic counts them: 2 per weight per token, and causal attention's two products
// (2 · seq · d_model per token per block, half of the full square).
double recompute_flops_fraction(const ModelShape& shape, int64_t seq_len, int64_t vocab_size,
                                int64_t blocks);

}  // namespace mxablate::trainer
