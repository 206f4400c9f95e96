// FP8 delayed scaling's state (docs/design.md §3, "FP8, per-tensor delayed scaling"; §4,
// "Checkpoints and exact resume"): each operand instance's amax history, on the run's device.
//
// An instance is one operand of one GEMM of one linear layer, (layer, GEMM, operand): 6 per layer
// in linear_layers() order. Three int32 tensors, all in fp8_amax_record bits (block_scaling.h):
//   history (instances x length): entry step % length holds the step's largest amax (kNoAmax
//            where no step has written yet). The only state: a model buffer, so checkpoints save
//            and restore it with the weights.
//   window  (instances): the largest entry of each row, the amax the step's scales come from
//            (kNoAmax while a row is empty: that step scales as current scaling does).
//   current (instances): the running maximum of this step's amaxes, which the quantizers max
//            into (atomically on the GPU) as they run.
// Steps: begin_step empties `current`; the passes read `window` and record into `current` through
// the pointers scale_of gives (device memory at fixed addresses, so a captured CUDA graph does the
// same on replay); a data-parallel run then takes the maximum of `current` over its ranks;
// end_step writes it into the step's entry and recomputes `window`. Both run eagerly, outside any
// graph, between steps; evaluations read `window` and their records are emptied by the next
// begin_step, so they change no history.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "mxablate/kernels/philox.h"
#include "mxablate/kernels/quantize.h"

namespace mxablate::trainer {

class Fp8AmaxHistory {
 public:
  static constexpr int64_t kInstancesPerLayer = 6;  // (Fprop, Dgrad, Wgrad) x (A, B)

  Fp8AmaxHistory(int64_t layers, int64_t length, int margin, const at::Device& device);

  static int64_t instance(int layer, kernels::GemmKind gemm, kernels::Operand operand);
  // The delayed scaling of instance (layer, gemm, operand): pointers into window and current.
  kernels::Fp8DelayedScale scale_of(int layer, kernels::GemmKind gemm, kernels::Operand operand) const;

  void begin_step();
  // After the step's passes (and, with several ranks, the maximum of current() over them):
  // optimizer step `step` (0-based) goes into entry step % length; the window moves on.
  void end_step(int64_t step);
  // The window of a history restored from a checkpoint.
  void refresh();

  // The model's buffer (fp8_amax_history); end_step writes it in place.
  const at::Tensor& history() const { return history_; }
  at::Tensor& current() { return current_; }
  const at::Tensor& window() const { return window_; }
  int64_t length() const { return history_.size(1); }
  int margin() const { return margin_; }

 private:
  at::Tensor history_, window_, current_;
  int margin_ = 0;
};

}  // namespace mxablate::trainer
