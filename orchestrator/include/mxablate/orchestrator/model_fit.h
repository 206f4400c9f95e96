// Whether a resolved run config can run on its model preset, decided exactly as mxablate-train
// decides it before training (trainer/engine: every quantized operand of every transformer linear
// outside the BF16-kept blocks must block, and rotate, evenly) — but before anything is launched,
// so that a recipe error is reported at its line and column instead of as a failed run.
// Built from the trainer's torch-free core (presets, per-GEMM plans), so both sides agree.
#pragma once

#include "mxablate/contract/run_config.h"

namespace mxablate::orchestrator {

// Throws contract::ConfigError("key.path: why"): "model: …" for an unknown or shape-check-only
// preset, "precision.<gemm>: …" when a format's block size does not divide a reduction
// length, "quant.hadamard.size: …" when the rotation size does not.
void check_model_fit(const contract::RunConfig& config);

}  // namespace mxablate::orchestrator
