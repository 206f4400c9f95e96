// When a slot passes from the run that finishes in it to the standby prestarted there
// (docs/design.md §9, "Busy slots"): at the finishing run's run_end event, or only once its
// process has exited. After run_end the finishing trainer only tears down, but until it exits it
// still holds its device memory — everything its peak took, the caching allocator's blocks
// included — while the released standby allocates its first steps' activations. So a GPU run is
// handed over at run_end only when the memory plan (trainer/plan memory_plan.h) says both runs'
// predicted peaks fit the slot's share of the GPU together; otherwise, or when either figure is
// unknown, at exit. CPU runs hold no device memory: always at run_end.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "mxablate/orchestrator/launch_checks.h"
#include "mxablate/orchestrator/plan.h"

namespace mxablate::orchestrator {

enum class Handover { kAtRunEnd, kAtExit };

struct HandoverRule {
  // False: every slot passes at the finishing trainer's exit (how it was before; the overhead
  // benchmark compares the two in one run).
  bool at_run_end = true;
  // The device memory one slot may use: a GPU's memory over the slots on it; nullopt: unknown.
  std::optional<int64_t> slot_bytes;
  // The predicted peak per rank of each GPU run whose plan is known, by run id.
  std::map<std::string, int64_t> peak_bytes;

  // When `standby` may start training in the slot that `finishing` holds.
  Handover when(const RunSpec& finishing, const RunSpec& standby) const;
};

// The rule for a plan on slots of `gpu_bytes` per GPU (nullopt: unknown) with `runs_per_gpu`
// slots on each GPU: every CUDA run's predicted peak, where its dataset's vocabulary is known.
HandoverRule make_handover_rule(const Plan& plan, const DatasetVocabularies& vocabularies,
                                std::optional<int64_t> gpu_bytes, int runs_per_gpu);

}  // namespace mxablate::orchestrator
