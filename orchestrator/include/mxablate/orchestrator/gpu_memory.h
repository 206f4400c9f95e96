// The GPU memory a plan is checked against before launch (docs/design.md §4, "Memory planned
// before launch"): `--gpu-memory SIZE` of `mxablate plan` and `mxablate run`, or for `run` the
// memory its GPUs report. A CUDA run whose predicted peak per rank (trainer/plan memory_plan.h)
// exceeds it is refused at the recipe position of the setting to change, naming the settings
// that would make it fit. CPU runs are not checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mxablate/orchestrator/launch_checks.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::orchestrator {

// "80GB" (10^9), "80GiB" (2^30), "141e9" (bytes), "81559MiB"; units B, kB/KB, MB, GB, TB, KiB,
// MiB, GiB, TiB, case-insensitive, with or without a space. Throws std::invalid_argument with a
// sentence ("expected a size such as 80GB, 80GiB or 141e9, got 'x'") for anything else, zero or
// more than 2^60 bytes.
int64_t parse_memory_size(std::string_view text);

// The memory of this machine's GPUs as `nvidia-smi --query-gpu=memory.total --format=csv,
// noheader,nounits` reports it (MiB), the smallest of them; nullopt with `note` saying why when
// nvidia-smi is absent, fails or prints nothing usable.
std::optional<int64_t> query_gpu_memory(std::string* note);

// What the plan is checked against: `bytes` per GPU, described for messages ("--gpu-memory 80GB",
// "the GPUs' memory (nvidia-smi)").
struct GpuMemory {
  int64_t bytes = 0;
  std::string source;
};

// Throws RecipeError at the first CUDA run that does not fit: "FILE:LINE:COL: parallel.shard:
// predicted … per rank (…), more than the 74.5 GiB of --gpu-memory 80GB; set parallel.shard:
// gradients (predicted 61.2 GiB per rank) (run: …)", at the position of the setting the first fix
// changes (the model's when none does). Runs whose dataset's vocabulary is unknown are skipped.
void check_gpu_memory(const Recipe& recipe, const Plan& plan,
                      const DatasetVocabularies& vocabularies, const GpuMemory& gpu);

}  // namespace mxablate::orchestrator
