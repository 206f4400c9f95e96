#include "mxablate/trainer/numerics/fp8_history.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "mxablate/kernels/block_scaling.h"

namespace mxablate::trainer {

Fp8AmaxHistory::Fp8AmaxHistory(int64_t layers, int64_t length, int margin, const at::Device& device)
    : margin_(margin) {
  if (layers < 1 || length < 1)
    throw std::invalid_argument("an FP8 amax history needs at least one layer and one step, got " +
                                std::to_string(layers) + " and " + std::to_string(length));
  const at::TensorOptions i32 = at::TensorOptions(at::kInt).device(device);
  history_ = at::full({layers * kInstancesPerLayer, length}, kernels::kNoAmax, i32);
  window_ = at::full({layers * kInstancesPerLayer}, kernels::kNoAmax, i32);
  current_ = at::full({layers * kInstancesPerLayer}, kernels::kNoAmax, i32);
}

int64_t Fp8AmaxHistory::instance(int layer, kernels::GemmKind gemm, kernels::Operand operand) {
  return static_cast<int64_t>(layer) * kInstancesPerLayer + static_cast<int64_t>(gemm) * 2 +
         static_cast<int64_t>(operand);
}

kernels::Fp8DelayedScale Fp8AmaxHistory::scale_of(int layer, kernels::GemmKind gemm,
                                                  kernels::Operand operand) const {
  const int64_t i = instance(layer, gemm, operand);
  if (i < 0 || i >= window_.size(0))
    throw std::invalid_argument("FP8 amax history: layer " + std::to_string(layer) + " has no instance");
  return {window_.data_ptr<int32_t>() + i, current_.data_ptr<int32_t>() + i, margin_};
}

void Fp8AmaxHistory::begin_step() { current_.fill_(kernels::kNoAmax); }

void Fp8AmaxHistory::end_step(int64_t step) {
  // In place: the buffer a checkpoint reads, and the addresses captured graphs read.
  history_.select(1, step % length()).copy_(current_);
  refresh();
}

// Maximum over int32 bits = maximum over the amaxes (non-negative floats order like their bits):
// exact, and a non-finite record (kNonfiniteAmax) stays the maximum.
void Fp8AmaxHistory::refresh() { window_.copy_(std::get<0>(history_.max(1))); }

}  // namespace mxablate::trainer
