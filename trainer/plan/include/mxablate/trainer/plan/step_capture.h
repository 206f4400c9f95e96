// Whether a run's steps are replayed as captured CUDA graphs (docs/design.md §4, "Graphed
// steps"): the one rule, read by the trainer when it sets a run up. A small model's step is bound
// by launching its ~500 kernels, not by running them: the GPU idles between launches. A captured
// graph launches the step's forward and backward passes at once, with the same kernels on the
// same addresses, so it computes the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxablate/contract/quant_settings.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

// A step is graphed under `auto` when parameters × tokens per micro-batch is at most this:
// llama-20m at 16k tokens a micro-batch (3.6e11) is launch-bound, and llama-125m at 16k tokens
// (2e12) still gains 3-4 % from a graph (BF16 and the FP8 arm, whose casts add launches;
// docs/performance.md, issue 20); from llama-350m (6e12) up the kernels' run time covers their
// launches.
inline constexpr double kGraphedStepWorkLimit = 2.5e12;

// What the rule needs to know about a run: step_capture_facts gives what the config decides, the
// trainer adds what its build and model say.
struct StepCaptureFacts {
  bool cuda = false;               // the run's device is a CUDA GPU
  bool graphs_available = false;   // this LibTorch can capture CUDA graphs
  int ranks = 1;                   // parallel.data
  bool reads_back_each_step = false;  // a layer plan reads a value back to the host (OCC)
  int64_t parameters = 0;
  int64_t micro_batch_tokens = 0;
};

struct StepCapture {
  bool graphed = false;
  // Why: "" when graphed under `on`; otherwise a clause a log line or an error can quote.
  std::string reason;
};

// The decision for `setting`. Throws contract::ConfigError (one line, naming train.cuda_graphs)
// when the setting is `on` and the run cannot be graphed.
StepCapture decide_step_capture(contract::CudaGraphs setting, const StepCaptureFacts& facts);

// The facts `config` decides with its layers' plans (plan_run_layers; the LM head's shape does
// not matter here): the device, the ranks, the tokens per micro-batch, and whether a layer in any
// phase of the precision schedule clamps outliers (OCC) or has an MXFP4 GEMM on the mxfp4-as-fp8
// route. graphs_available and parameters are left for the trainer (its LibTorch, its vocabulary).
StepCaptureFacts step_capture_facts(const contract::RunConfig& config, const RunLayerPlans& plans);

// decide_step_capture's refusal of `on` where the config alone rules a graph out, whatever the
// machine: decided on step_capture_facts with a LibTorch that can capture graphs (one that
// cannot is the trainer's to find). check_run_fits calls it, so `mxablate plan` refuses such a
// run at the recipe position of train.cuda_graphs and mxablate-train before it starts any rank
// (docs/design.md §4, "Graphed steps").
void check_step_capture(const contract::RunConfig& config, const RunLayerPlans& plans);

}  // namespace mxablate::trainer
