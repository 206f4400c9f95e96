// Whether a run config's numerics can run on a model shape: the one rule that mxablate-train
// applies before its first step and that `mxablate plan` applies before anything is launched
// (so a recipe error is reported at its line and column, not as a failed run). For every layer
// and every phase of the precision schedule: each quantized operand blocks (1-D or 2-D) and
// rotates evenly, the layer's settings can run (DGE's requirements), and every override pattern
// matches some layer.
#pragma once

#include <cstdint>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/model_presets.h"

namespace mxablate::trainer {

// Throws contract::ConfigError("key.path: why"), the key being the setting that decides it:
// "precision.<gemm>: …" when a format's block does not divide a reduction length,
// "quant.weight_blocks: …" for 2-D tiles, "quant.hadamard.size: …" for rotations,
// "quant.dge: …", "overrides[i].layers: …".
// vocab_size 0: not known yet (the planner); the LM head's shapes are then not checked.
void check_run_fits(const contract::RunConfig& config, const ModelShape& shape, int64_t vocab_size);

}  // namespace mxablate::trainer
