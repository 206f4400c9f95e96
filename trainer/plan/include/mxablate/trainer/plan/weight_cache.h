// Whether a run keeps each layer's quantized weight operands for the whole optimizer step
// (docs/design.md §4, "Weight operands per step"): the one rule, read by the trainer when it sets
// a run up. Q(W) depends only on W and on the step's random key, so every micro-batch and every
// recomputed forward of a step quantizes W to the same bits: cached, W (float32) is read and
// quantized once per step instead of once per micro-batch and pass. The cache holds the operands
// of every layer at once, which the memory plan does not include, so on CUDA it is kept only where
// the plan plus the cache fits the GPU.
#pragma once

#include <cstdint>
#include <string>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

// The share of the GPU's memory the plan plus the cache may take for the cache to be kept: the
// rest is headroom for what the plan only approximates.
inline constexpr int64_t kWeightCacheMemoryPercent = 90;

// Bytes the cache holds at most: every linear's weight operands along rows (Fprop) and down
// columns (Dgrad) as the emulated route keeps them (BF16 values; one shared rounding for a plain
// BF16 layer, none for a weight kept as a BF16 working copy, which is its own rounding:
// `bf16_copies` is bf16_working_copies' answer, working_copies.h), in the precision phase that
// needs the most.
int64_t weight_cache_bytes(const RunLayerPlans& plans, const std::vector<bool>& bf16_copies);

struct WeightCache {
  bool on = false;
  std::string reason;  // a clause a log line or run_start can quote
};

// The decision: on the CPU always (its memory is not planned, and the models it trains are small);
// on CUDA when plan_total + cache_bytes is at most kWeightCacheMemoryPercent of
// device_memory_bytes, i.e. when device_memory_bytes is at least
// weight_cache_least_device_memory(plan_total, cache_bytes).
WeightCache decide_weight_cache(bool cuda, int64_t plan_total, int64_t cache_bytes, int64_t device_memory_bytes);

// The allocator's peak (MemoryPlan::allocator_peak) of a run that keeps the cache: the cache's
// bytes in place of the plan's weight operands, which are the cached tensors then (a block's
// backward reads the step's operands instead of copies of its own). What run_end's
// peak_gpu_bytes is checked against when run_start says the cache was kept. The decision above
// adds the cache to the whole plan instead: a margin on the safe side.
int64_t allocator_peak_with_weight_cache(const MemoryPlan& plan, int64_t cache_bytes);

// The least device memory with which decide_weight_cache keeps the cache on CUDA: what `mxablate
// plan` states where it does not know the GPU (docs/design.md §4, "Memory planned before launch").
int64_t weight_cache_least_device_memory(int64_t plan_total, int64_t cache_bytes);

}  // namespace mxablate::trainer
