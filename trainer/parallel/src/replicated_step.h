// The replicated step engine (step_engine.h): AdamW over every parameter on every rank.
#pragma once

#include <torch/optim/adamw.h>

#include <memory>

#include "mxablate/trainer/parallel/step_engine.h"

namespace mxablate::trainer {

class GradientSync;

class ReplicatedStep final : public StepEngine {
 public:
  ReplicatedStep(const contract::RunConfig& config, torch::nn::Module& model, DataParallel* group);
  ~ReplicatedStep() override;

  void zero_gradients() override;
  void begin_backward(bool last) override;
  void end_backward(bool last) override;
  at::Tensor clip_gradients(double max_norm) override;
  void step(double lr) override;
  std::unique_ptr<OptimizerSnapshot> snapshot_optimizer(int64_t step, HostBuffers& host) override;
  void load_optimizer(const std::filesystem::path& dir, const std::vector<CheckpointFile>& files,
                      int64_t step) override;
  int64_t optimizer_state_bytes() const override;
  int64_t gradient_bytes() const override;
  int64_t weight_bytes() const override;

 private:
  torch::nn::Module& model_;
  DataParallel* group_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<GradientSync> sync_;  // a data-parallel run's gradient buckets
};

}  // namespace mxablate::trainer
