#include "mxablate/trainer/plan/weight_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "mxablate/trainer/plan/linear_plan.h"

namespace mxablate::trainer {

namespace {
constexpr int64_t kBF16Bytes = 2;
}  // namespace

int64_t weight_cache_bytes(const RunLayerPlans& plans, const std::vector<bool>& bf16_copies) {
  int64_t most = 0;
  for (const std::vector<LinearPlan>& phase : plans.phases) {
    int64_t bytes = 0;
    for (size_t i = 0; i < plans.layers.size(); ++i) {
      if (bf16_copies[i]) continue;
      const int64_t elements = plans.layers[i].in_features * plans.layers[i].out_features;
      bytes += elements * kBF16Bytes * (weight_shares_rounding(phase[i]) ? 1 : 2);
    }
    most = std::max(most, bytes);
  }
  return most;
}

int64_t allocator_peak_with_weight_cache(const MemoryPlan& plan, int64_t cache_bytes) {
  return plan.allocator_peak() - plan.weight_operands + cache_bytes;
}

int64_t weight_cache_least_device_memory(int64_t plan_total, int64_t cache_bytes) {
  // plan + cache ≤ device · p / 100 (rounded down) holds exactly when device ≥ ⌈(plan + cache) · 100 / p⌉.
  const int64_t needed = (plan_total + cache_bytes) * 100;
  return (needed + kWeightCacheMemoryPercent - 1) / kWeightCacheMemoryPercent;
}

WeightCache decide_weight_cache(bool cuda, int64_t plan_total, int64_t cache_bytes, int64_t device_memory_bytes) {
  if (!cuda) return {true, "the CPU's memory is not planned"};
  const std::string sizes =
      fmt::format("the memory plan ({}) plus the cache ({})", format_bytes(plan_total), format_bytes(cache_bytes));
  if (device_memory_bytes < weight_cache_least_device_memory(plan_total, cache_bytes))
    return {false, fmt::format("{} is above {}% of the GPU's {}", sizes, kWeightCacheMemoryPercent,
                               format_bytes(device_memory_bytes))};
  return {true, fmt::format("{} is within {}% of the GPU's {}", sizes, kWeightCacheMemoryPercent,
                            format_bytes(device_memory_bytes))};
}

}  // namespace mxablate::trainer
