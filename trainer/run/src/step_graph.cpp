#include "step_graph.h"

#include <ATen/record_function.h>

#include <stdexcept>
#include <string>

#include "mxablate/trainer/torch/error_line.h"

namespace mxablate::trainer {
namespace {

// The eager steps of a phase before its capture: one runs every kernel the capture will record
// once, so that nothing is loaded or allocated for the first time while capturing (CUDA's lazy
// module loading, cuBLAS's per-stream workspace, the RoPE tables).
constexpr int64_t kWarmStepsBeforeCapture = 1;

}  // namespace

StepGraph::StepGraph(at::Device device, QuantSession& session, std::vector<at::Tensor> parameters)
    : device_(device), session_(session), stream_(device), parameters_(std::move(parameters)) {
  // What was queued on the default stream before (the model's initialization) is done before
  // anything on the side stream reads it.
  compat::synchronize(device_);
  step_word_ = at::zeros({1}, at::TensorOptions(at::kInt).device(device_));
}

StepGraph::~StepGraph() { session_.device_step = nullptr; }

at::Tensor StepGraph::run(const MicroBatchPasses& passes, const std::vector<TokenBatch>& batches, uint32_t step,
                          size_t phase, bool eager_only) {
  if (phase != phase_) {  // new layer plans: the graph of the old ones must not run again
    graph_.reset();
    captured_ = false;
    warm_steps_ = 0;
    phase_ = phase;
  }
  if (eager_only || (!captured_ && warm_steps_ < kWarmStepsBeforeCapture)) {
    if (!eager_only) ++warm_steps_;
    return passes(batches);
  }
  if (captured_ && batches.size() != inputs_.size())
    throw std::logic_error("step graph: " + std::to_string(batches.size()) + " micro-batches, the graph holds " +
                           std::to_string(inputs_.size()));
  if (!captured_) capture(passes, batches);
  {
    RECORD_USER_SCOPE("mxablate::graph_inputs");  // a phase of profile-summary.py's idle split
    for (size_t m = 0; m < batches.size(); ++m) {
      inputs_[m].inputs.copy_(batches[m].inputs, /*non_blocking=*/true);
      inputs_[m].targets.copy_(batches[m].targets, /*non_blocking=*/true);
    }
    // The word is int32 on the device and read as uint32 by the kernels: the same 32 bits.
    step_word_.fill_(static_cast<int64_t>(static_cast<int32_t>(step)));
  }
  {
    RECORD_USER_SCOPE("mxablate::replay");
    graph_.replay();
  }
  // The step engine dropped the gradients before the step (zero_gradients); the replay wrote
  // this step's into the tensors the capture made.
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].mutable_grad() = gradients_[i];
  ++replays_;
  return losses_;
}

void StepGraph::capture(const MicroBatchPasses& passes, const std::vector<TokenBatch>& batches) {
  inputs_.clear();
  for (const TokenBatch& b : batches) inputs_.push_back({at::empty_like(b.inputs), at::empty_like(b.targets)});
  // Captured kernels take the device word's address as their step (RngKey::step_source); the
  // eager steps after this one read the host value again.
  session_.device_step = reinterpret_cast<const uint32_t*>(step_word_.data_ptr<int32_t>());
  compat::synchronize(device_);  // nothing of the eager steps is in flight while capturing
  try {
    graph_.begin();
    try {
      losses_ = passes(inputs_);
    } catch (...) {
      graph_.abandon();
      throw;
    }
    graph_.end();
  } catch (const std::exception& e) {
    session_.device_step = nullptr;
    throw std::runtime_error("train.cuda_graphs: the step could not be captured as a CUDA graph (" +
                             error_line(e) + "); run it with train.cuda_graphs: off");
  }
  session_.device_step = nullptr;
  gradients_.clear();
  for (const at::Tensor& p : parameters_) gradients_.push_back(p.grad());
  captured_ = true;
  ++captures_;
}

}  // namespace mxablate::trainer
