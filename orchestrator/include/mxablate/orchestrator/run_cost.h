// What a run costs in GPU-hours, from the rates measured on the GPU it will run on
// (measured_rates.h; docs/design.md §5, "What a sweep costs"). A run gets a figure only from a
// measured row whose run did at least as much work a token as it will — the same model, sequence
// length, GPU, ranks, sharding and arm class; as many blocks recomputed or more, a vocabulary as
// large or larger, micro-batches as small or smaller — so the figure is an upper bound, and the
// plan says where the row did more. Everything else gets no figure and the reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/contract/run_config.h"
#include "mxablate/orchestrator/measured_rates.h"

namespace mxablate::orchestrator {

// The arm class of a run's numerics (the table's `arm`), from its precisions, its rotation and
// quant.gemm_path; nullopt where they are none of the measured ones: another precision mix,
// stochastic rounding, another rotation, scale rule or block shape, DGE, OCC, overrides, a
// precision schedule, delayed FP8 scaling, or FP8 GEMMs emulated (quant.gemm_path emulated).
std::optional<ArmClass> arm_class(const contract::RunConfig& c);

// What a run knows beside its config: its dataset's vocabulary (the manifest's) and the GPU
// memory its `auto` recompute is chosen at (--gpu-memory), where known. Without the memory
// `auto` counts as every block recomputed, the most it may choose.
struct RunFacts {
  std::optional<int64_t> vocab;
  std::optional<int64_t> gpu_memory_bytes;
};

struct RateMatch {
  const MeasuredRate* rate = nullptr;  // a row of the MeasuredRates given; null: no measured rate
  std::string no_rate;                 // why, when rate is null: the first property no row has
  // Where the row's run did more work a token than this run will ("measured with every block
  // recomputed, the most auto may choose"); empty when it is measured at the run's settings.
  std::vector<std::string> bounds;
};

// The row whose rate bounds the run's: one at the run's own settings where there is one, else
// the fastest of those that bound it.
RateMatch match_rate(const MeasuredRates& rates, GpuKind gpu, const contract::RunConfig& run,
                     const RunFacts& facts);

// The tokens a run's steps process at most: every optimizer step up to train.max_tokens (whole
// steps), and every evaluation (each time the tokens pass a multiple of eval.every_tokens, and
// after the last step) in whole micro-batches, each rank evaluating as many as the busiest.
struct RunTokens {
  double trained = 0;
  double evaluated = 0;
};
RunTokens tokens_at_most(const contract::RunConfig& c);

// GPU-hours at most = (trained + evaluated tokens) ÷ the measured tokens/s a GPU ÷ 3600: the
// tokens a second of one GPU is independent of the ranks, so this is every rank's time together.
// An evaluation's forward costs less a token than a training step, so counting it at the
// training rate keeps the bound. Start-up and checkpoint writes are not counted.
struct RunCost {
  RateMatch match;
  RunTokens tokens;
  std::optional<double> gpu_hours;  // with a rate only
};
RunCost run_cost(const MeasuredRates& rates, GpuKind gpu, const contract::RunConfig& run,
                 const RunFacts& facts);

}  // namespace mxablate::orchestrator
