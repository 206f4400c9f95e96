// Which blocks recompute in the backward (docs/design.md §4, "Recompute chosen by the memory
// plan"): the one rule for train.activation_checkpointing's settings, read by the memory plan,
// by `mxablate plan` and `run` (what they show and refuse) and by mxablate-train, which resolves
// `auto` against the GPU it got. Recomputing changes no bit of a run (block_checkpoint.h,
// mx_linear.h's RebuiltInput), only its peak memory and its compute; so `auto` takes the first
// step of its ladder that fits: no recompute, selective recompute (the norms' outputs and
// SwiGLU's product made again), then selective with the fewest whole blocks besides.
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

// How many blocks recompute whole (blocks 0 … n-1 of them) under a setting of a model of
// `n_layers`: false 0, true all, N N (at most all), selective+N as N. `auto` before it is
// resolved: all, the least memory it can take (what the plan shows where the GPU is not known).
int64_t recomputed_blocks(const contract::Recompute& setting, int64_t n_layers);
// Whether the blocks not recomputed whole make their norms' outputs and SwiGLU's product again in
// the backward: the selective settings (not `auto` before it is resolved: its least memory is
// every block whole, where no block is left to be selective).
bool selective_recompute(const contract::Recompute& setting);

// The setting that recomputes `blocks` of `n_layers` blocks whole, the others selectively or not:
// false, N or true; selective or selective+N (every block whole is true either way).
contract::Recompute recompute_of_blocks(int64_t blocks, int64_t n_layers, bool selective = false);

// One step of auto's ladder: a setting and the memory plan with it.
struct RecomputeStep {
  contract::Recompute setting;
  MemoryPlan plan;
};

// auto's ladder for `config`, least recompute first: none, selective, then selective with 1 … n-1
// blocks recomputed whole, then every block (the setting's own value ignored).
std::vector<RecomputeStep> recompute_ladder(const contract::RunConfig& config, const ModelShape& shape,
                                            int64_t vocab_size, const RunLayerPlans& plans);

struct RecomputeChoice {
  contract::Recompute setting;  // what auto resolves to: false, selective or selective+N
  int64_t blocks = 0;           // of which blocks 0 … blocks-1 recompute whole
  int64_t predicted = 0;        // the memory plan's peak per rank with it
  bool fits = false;            // within kAutoRecomputeMemoryPercent of the capacity
};

// `auto`'s choice for `config` with `capacity` bytes of GPU memory: the first step of the ladder
// whose predicted peak is at most kAutoRecomputeMemoryPercent of it; where none is, the first
// with the lowest prediction (fits false).
RecomputeChoice choose_recompute(const contract::RunConfig& config, const ModelShape& shape,
                                 int64_t vocab_size, const RunLayerPlans& plans, int64_t capacity);

// The same choice from the ladder (recompute_ladder), for a caller that shows it too.
RecomputeChoice choose_recompute(const std::vector<RecomputeStep>& ladder, int64_t n_layers, int64_t capacity);

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
// (2 · seq · d_model per token per block, half of the full square). Selective recompute adds no
// GEMM: its norms and SwiGLU products are elementwise work the count leaves out, as it leaves
// out the forward's own.
double recompute_flops_fraction(const ModelShape& shape, int64_t seq_len, int64_t vocab_size,
                                int64_t blocks);

}  // namespace mxablate::trainer
