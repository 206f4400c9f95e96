// Whether a resolved run config can run on its model (a preset or a custom shape): the trainer's own rule
// (trainer/run_fit.h, torch-free), applied before anything is launched so that a recipe error
// is reported at its line and column instead of as a failed run.
#pragma once

#include "mxablate/contract/run_config.h"

namespace mxablate::orchestrator {

// Throws contract::ConfigError("key.path: why"): runnable_model_shape's ("model: …" for an
// unknown preset, "model.n_heads: …" for a shape mistake), else
// check_run_fits's errors.
void check_model_fit(const contract::RunConfig& config);

}  // namespace mxablate::orchestrator
