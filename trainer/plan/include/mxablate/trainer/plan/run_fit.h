// Whether a run config can run on a model shape, whatever the machine: the one rule that
// mxablate-train applies before its first step and that `mxablate plan` applies before anything
// is launched (so a recipe error is reported at its line and column, not as a failed run). For
// every layer and every phase of the precision schedule: each quantized operand blocks (1-D or
// 2-D) and rotates evenly, the layer's settings can run (DGE's requirements), and every override
// pattern matches some layer. Before those: the model itself — a known preset, or a custom shape
// whose heads divide evenly, whose head dimension RoPE can rotate, and whose size a machine
// holds. After them: the trainer's start-up rules that the config decides although they are
// about execution — a GEMM path demanding FP8 tensor cores for a GEMM shape they cannot take, and
// train.cuda_graphs: on where no step can be graphed. What depends on the machine (a CUDA device,
// the GPUs visible, tensor cores, NCCL or Gloo in the build, GPU memory) and on the data (the
// shards) is checked by the trainer alone, or by the planner with its own inputs (launch checks,
// --gpu-memory; docs/design.md §5, "Validation before anything runs").
#pragma once

#include <cstdint>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

// The most parameters a model may have: 100 B (400 GB of FP32 weights before optimizer state),
// far beyond any machine this trainer runs on; a larger shape is a typing mistake or hostile.
inline constexpr int64_t kMaxModelParameters = 100'000'000'000;

// The shape a run config's model names: a preset, or the custom shape named by its label
// (contract::model_label). Throws ConfigError "model: expected one of <presets>, got "x"".
ModelShape model_shape(const contract::ModelChoice& model);

// What every shape must satisfy to be built: n_kv_heads divides n_heads, n_heads divides
// d_model, the head dimension is even (RoPE rotates pairs), at most kMaxModelParameters outside
// the embeddings. Throws ConfigError naming the key ("model.n_kv_heads: …"). The GEMM widths'
// blocks and rotations are check_run_fits's (they depend on the numerics).
void check_model_shape(const ModelShape& shape);

// model_shape, then check_model_shape: the model that mxablate-train builds and that the planner
// plans (every preset is trainable; the vocabulary is the data's).
ModelShape runnable_model_shape(const contract::RunConfig& config);

// Throws contract::ConfigError("key.path: why"), the key being the setting that decides it:
// "precision.<gemm>: …" when a format's block does not divide a reduction length,
// "quant.weight_blocks: …" for 2-D tiles, "quant.hadamard.size: …" for rotations,
// "quant.dge: …", "quant.occ: …", "overrides[i].layers: …", "quant.gemm_path: …",
// "train.activation_checkpointing: …" (more blocks than the model has)
// (contract::resolve_gemm_routes with every route available), "train.cuda_graphs: …"
// (check_step_capture).
// vocab_size 0: not known yet (the planner's expansion); the LM head's shapes are then not
// checked. check_model_shape comes first; with a vocabulary the whole count must stay within
// kMaxModelParameters too. Returns the layers' plans it checked (plan_run_layers), for a caller
// that goes on to run them.
RunLayerPlans check_run_fits(const contract::RunConfig& config, const ModelShape& shape, int64_t vocab_size);

// What a run config alone decides: runnable_model_shape, then check_run_fits without the
// vocabulary. The planner applies it to every run it expands; mxablate-train applies it first,
// before it looks at the machine, its ranks or its data, so the two refuse the same configs with
// the same line. Throws contract::ConfigError("key.path: why").
void check_runnable(const contract::RunConfig& config);

}  // namespace mxablate::trainer
