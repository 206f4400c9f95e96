// A step's forward and backward passes replayed as one captured CUDA graph (docs/design.md §4,
// "Graphed steps"). A small model's step is bound by launching its kernels: the host spends
// longer queueing ~500 launches than the GPU spends running them. Captured once, the passes of
// every later step are one launch, on the same kernels and the same memory, and compute the
// same bits as the eager step (tests/trainer/run/step_graph_run_test.cpp holds us to it).
//
// What a graph keeps fixed and how each step still gets its own values: the micro-batches are
// copied into the tensors the capture read; the step that keys stochastic rounding and random
// Hadamard signs is read by the kernels from a device word written before each replay
// (RngKey::step_source); the gradients are the tensors the capture made (autograd takes the
// first micro-batch's as the gradient and adds the others, as in an eager step), handed back to
// the parameters after each replay. What a graph cannot replay runs eagerly: a step that records
// quantization telemetry (it reads counters back to the host), and the steps of a precision
// phase before its capture. A new phase drops the graph and captures the new plans.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mxablate/trainer/run/batches.h"
#include "mxablate/trainer/numerics/mx_linear.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {

// One step's passes on this rank: forward and backward of each micro-batch, and the sum of
// their losses (float64, on the device).
using MicroBatchPasses = std::function<at::Tensor(const std::vector<TokenBatch>&)>;

class StepGraph {
 public:
  // Graphs the passes of a run on `device` (a CUDA device; this thread's current stream becomes
  // a side stream of it for the graph's lifetime).
  StepGraph(at::Device device, QuantSession& session, std::vector<at::Tensor> parameters);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // The passes of step `step` (0-based) of precision phase `phase` over `batches`: replayed
  // from the graph of this phase, captured first once an eager step of the phase has warmed it
  // up, or run eagerly (`eager_only`: a telemetry step). The result lives until the next call.
  at::Tensor run(const MicroBatchPasses& passes, const std::vector<TokenBatch>& batches, uint32_t step,
                 size_t phase, bool eager_only);

  // Replays so far (a run's record of how many steps the graph took).
  int64_t replays() const { return replays_; }
  int64_t captures() const { return captures_; }

 private:
  void capture(const MicroBatchPasses& passes, const std::vector<TokenBatch>& batches);

  at::Device device_;
  QuantSession& session_;
  compat::SideStream stream_;
  compat::CapturedGraph graph_;
  bool captured_ = false;
  size_t phase_ = 0;
  int64_t warm_steps_ = 0;  // eager non-telemetry steps of this phase so far
  std::vector<TokenBatch> inputs_;  // what the capture read: the batches are copied in
  at::Tensor step_word_;            // int32 on the device: the step the replay is for
  at::Tensor losses_;               // the captured passes' loss sum
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> gradients_;  // each parameter's gradient as the capture left it
  int64_t replays_ = 0, captures_ = 0;
};

}  // namespace mxablate::trainer
