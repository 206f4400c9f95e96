// Token batches for training and evaluation, from a prepared dataset (trainer/data).
//
// Training: sample k of the run is the window SequenceSampler picks for k; a micro-batch is a
// run of consecutive samples, so the data position saved in a checkpoint is one integer (the
// number of samples consumed). Validation: the first N windows of the validation split, in
// order — the same fixed set at every evaluation and in every run on that data.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "mxablate/data/manifest.h"
#include "mxablate/data/sequence_sampler.h"

namespace mxablate::trainer {

struct TokenBatch {
  at::Tensor inputs;   // (B, T) int64
  at::Tensor targets;  // (B, T) int64: inputs shifted by one token
};

class TrainBatches {
 public:
  TrainBatches(const data::TokenDataset& dataset, int64_t seq_len, uint64_t data_seed);
  // Samples [first_sample, first_sample + count) on `device`.
  TokenBatch get(int64_t first_sample, int64_t count, const at::Device& device) const;
  int64_t windows_per_epoch() const { return sampler_.windows_per_epoch(); }
  int64_t epoch_of(int64_t sample) const { return sampler_.epoch_of(sample); }

 private:
  const data::TokenDataset& dataset_;
  int64_t seq_len_;
  data::SequenceSampler sampler_;
};

// The fixed validation set, cut into batches of at most `batch_sequences` and kept on `device`.
// Throws std::invalid_argument when the validation split is shorter than `sequences` windows.
std::vector<TokenBatch> validation_batches(const data::TokenDataset& dataset, int64_t seq_len,
                                           int64_t sequences, int64_t batch_sequences,
                                           const at::Device& device);

}  // namespace mxablate::trainer
