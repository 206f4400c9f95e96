// What a run is built from before its first step (docs/design.md §4, "The step engine"): the
// config, this rank's place, the device, the data, the model and its step engine. Any problem
// found while building it is a configuration problem (contract::ConfigError: exit 2) and nothing
// has been trained.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/contract/gemm_routing.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/data/manifest.h"
#include "mxablate/trainer/run/batches.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/plan/model_presets.h"
#include "mxablate/trainer/parallel/ranks.h"
#include "mxablate/trainer/plan/recompute_plan.h"
#include "mxablate/trainer/plan/step_capture.h"
#include "mxablate/trainer/parallel/step_engine.h"
#include "mxablate/trainer/run/trainer.h"
#include "mxablate/trainer/plan/training_plan.h"
#include "mxablate/trainer/plan/weight_cache.h"
#include "step_graph.h"

namespace mxablate::trainer {

// train.activation_checkpointing as this run executes it (recompute_plan.h): `auto` resolved
// against the GPU memory the run may plan into.
struct RecomputeDecision {
  int64_t blocks = 0;      // blocks 0 … blocks-1 recompute whole
  bool selective = false;  // every block makes its norms' outputs and SwiGLU's product again
  std::string reason;      // a clause a log line or run_start can quote
};

// Everything a run needs, built from the config before the first step; any problem here is a
// configuration problem (exit 2) and nothing has been trained.
struct RunSetup {
  contract::RunConfig config;
  RankInfo rank;  // rank 0 of 1 unless the run is data-parallel
  at::Device device = at::kCPU;
  ModelShape shape;
  TrainingPlan plan;
  std::string data_dir;
  std::unique_ptr<data::TokenDataset> dataset;
  RunLayerPlans layer_plans;  // every layer's shape, and its plan in each precision phase
  contract::GemmRoutes routes;  // how each GEMM precision runs here
  LlamaModel model{nullptr};
  std::unique_ptr<DataParallel> group;  // a data-parallel run's process group (null for one rank)
  std::unique_ptr<StepEngine> engine;   // the optimizer step, replicated or sharded
  StepCapture capture;                  // whether steps are graphed, and why (step_capture.h)
  std::unique_ptr<StepGraph> graph;     // the graphed passes when capture.graphed
  WeightCache weight_cache;             // whether layers keep their weight operands per step
  RecomputeDecision recompute;          // which blocks recompute in the backward, and why
  contract::RunConfig executed;         // config with `auto` resolved: the run's memory plan is its
  std::unique_ptr<TrainBatches> batches;
  std::vector<TokenBatch> validation;
};

RunSetup build_setup(const contract::RunConfig& config, const TrainOptions& options, const RankInfo& rank);

}  // namespace mxablate::trainer
