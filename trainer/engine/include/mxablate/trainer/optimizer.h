// AdamW as docs/design.md §4 sets it up (MLPerf's defaults: β 0.9/0.95, ε 1e-5, weight decay 0.1), with
// weight decay on the matrices (linears and embeddings) and none on the RMSNorm gains.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <memory>

#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {

// Group 0: parameters with two or more dimensions (decayed); group 1: vectors (not decayed).
std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model,
                                                const contract::TrainConfig& train);
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace mxablate::trainer
