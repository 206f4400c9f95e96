// AdamW as docs/design.md §4 sets it up (MLPerf's defaults: β 0.9/0.95, ε 1e-5, weight decay 0.1), with
// weight decay on the matrices (linears and embeddings) and none on the RMSNorm gains.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <vector>

#include "mxablate/contract/run_config.h"

namespace mxablate::trainer {

// Group 0: parameters with two or more dimensions (decayed); group 1: vectors (not decayed).
std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model,
                                                const contract::TrainConfig& train);
// Whether a parameter is weight-decayed (group 0): matrices (linears, embeddings), not gains.
bool is_decayed(const at::Tensor& parameter);
// AdamW over the two groups as given (a sharded step's pieces of the parameters, grouped by
// is_decayed of the parameter each piece belongs to), with the options make_adamw uses.
std::unique_ptr<torch::optim::AdamW> make_adamw(std::vector<at::Tensor> decayed, std::vector<at::Tensor> plain,
                                                const contract::TrainConfig& train);
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// True when adamw_step takes ATen's fused multi-tensor kernel: every parameter with a gradient
// is on a CUDA device, LibTorch is >= 2.1 (compat header), and no group asks for AMSGrad.
bool fused_adamw_applies(torch::optim::AdamW& optimizer);

// One AdamW step with each group's current options (the learning rate may change between steps).
// Where fused_adamw_applies: one fused multi-tensor launch per group (fused_adamw_step); elsewhere
// (the CPU, LibTorch 1.13) optimizer.step(), the reference. Both keep the state in AdamW's own
// param state (exp_avg, exp_avg_sq, step), so a checkpoint is the same whichever path wrote it.
void adamw_step(torch::optim::AdamW& optimizer);
// The fused step alone; std::logic_error where fused_adamw_applies is false.
void fused_adamw_step(torch::optim::AdamW& optimizer);

// torch's clip_grad_norm_ (L2): scales the gradients of `parameters` (those that have one) by
// max_norm / (norm + 1e-6) when that is below 1 and returns their global norm as a 0-dim tensor
// on their device, unread: the training loop reads it with the step's loss, in one read. An
// infinite max_norm only measures. On CUDA with LibTorch >= 2.1 the norms and the scaling are one
// multi-tensor launch each and nothing waits; elsewhere LibTorch's clip_grad_norm_ itself (the
// reference).
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm);

}  // namespace mxablate::trainer
