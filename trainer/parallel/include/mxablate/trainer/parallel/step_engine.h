// The optimizer step of a run, and how it is distributed (docs/design.md §4, "The step engine"):
// the one seam behind which a run's gradients are zeroed, finished (summed over the ranks or
// reduce-scattered to their owners), clipped by the global norm, applied by AdamW, and the updated
// weights gathered again; and through which checkpoints save and restore the optimizer state.
// The training loop never asks how many ranks there are or what is sharded.
//
// Two implementations: replicated (one rank, or data-parallel ranks that all keep every weight,
// gradient and AdamW moment: DDP), and sharded (parallel.shard: optimizer | gradients, ZeRO
// stages 1 and 2: each rank keeps the AdamW state, and with `gradients` the summed gradients, of
// its own slice of the flat parameter space only).
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"

namespace mxablate::trainer {

class DataParallel;

class StepEngine : public CheckpointedOptimizer {
 public:
  virtual ~StepEngine() = default;

  // Every gradient to zero before a step's first backward.
  virtual void zero_gradients() = 0;
  // Around each backward of the step on this rank; `last`: the step's last micro-batch here.
  virtual void begin_backward(bool last) = 0;
  virtual void end_backward(bool last) = 0;
  // The gradients scaled by min(1, max_norm / (norm + 1e-6)) as torch's clip_grad_norm_ does,
  // and the global L2 norm of the step's summed gradients (the same on every rank) as a 0-dim
  // tensor on the run's device, unread: the loop reads it with the step's loss in one read, so
  // the host does not wait twice a step. An infinite max_norm only measures.
  virtual at::Tensor clip_gradients(double max_norm) = 0;
  // One AdamW step at learning rate `lr` of what this rank owns; afterwards every rank holds the
  // updated weights.
  virtual void step(double lr) = 0;

  // Checkpoints save and restore the optimizer state through CheckpointedOptimizer
  // (checkpoint.h): snapshot_optimizer and load_optimizer.

  // For run_start and the memory plan: bytes of optimizer state, of gradients and of weights
  // (the working copies the model reads and the masters kept apart from them) this rank holds.
  virtual int64_t optimizer_state_bytes() const = 0;
  virtual int64_t gradient_bytes() const = 0;
  virtual int64_t weight_bytes() const = 0;
};

// The engine the config asks for: replicated unless parallel.shard is set. `group` is the run's
// process group (null for one rank). The model's parameters must be float32 leaves; a sharded
// engine moves them into one flat buffer (the values are kept), and keeps `bf16_weights` (those
// working_copies.h names) as BF16 working copies beside their float32 masters; a replicated
// engine keeps every weight float32.
std::unique_ptr<StepEngine> make_step_engine(const contract::RunConfig& config, torch::nn::Module& model,
                                             DataParallel* group, const std::vector<at::Tensor>& bf16_weights);

}  // namespace mxablate::trainer
