#include "mxablate/orchestrator/slot_handover.h"

#include <algorithm>

#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/recompute_plan.h"
#include "mxablate/trainer/plan/run_fit.h"

namespace mxablate::orchestrator {

Handover HandoverRule::when(const RunSpec& finishing, const RunSpec& standby) const {
  if (!at_run_end) return Handover::kAtExit;
  const auto on_cpu = [](const RunSpec& r) { return r.config.device == contract::Device::kCPU; };
  if (on_cpu(finishing) && on_cpu(standby)) return Handover::kAtRunEnd;
  const auto a = peak_bytes.find(finishing.run_id);
  const auto b = peak_bytes.find(standby.run_id);
  if (!slot_bytes || a == peak_bytes.end() || b == peak_bytes.end()) return Handover::kAtExit;
  // Both at their peak at once: the finishing one has not freed anything before it exits.
  return a->second <= *slot_bytes - b->second ? Handover::kAtRunEnd : Handover::kAtExit;
}

HandoverRule make_handover_rule(const Plan& plan, const DatasetVocabularies& vocabularies,
                                std::optional<int64_t> gpu_bytes, int runs_per_gpu) {
  HandoverRule rule;
  if (gpu_bytes && *gpu_bytes > 0) rule.slot_bytes = *gpu_bytes / std::max(1, runs_per_gpu);
  for (const RunSpec& run : plan.runs) {
    if (run.config.device != contract::Device::kCUDA) continue;
    const auto vocab = vocabularies.find(run.config.data.dataset);
    if (vocab == vocabularies.end()) continue;
    // The planner resolved and checked every run's model (check_gpu_memory relies on it too).
    const trainer::ModelShape shape = trainer::model_shape(run.config.model);
    // As the trainer will run it: `auto` recompute resolved against the slot's share of the GPU.
    const contract::RunConfig executed =
        rule.slot_bytes ? trainer::resolve_recompute(run.config, shape, vocab->second, *rule.slot_bytes)
                        : run.config;
    rule.peak_bytes[run.run_id] = trainer::plan_memory(executed, shape, vocab->second).total();
  }
  return rule;
}

}  // namespace mxablate::orchestrator
