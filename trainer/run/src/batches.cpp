#include "mxablate/trainer/run/batches.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace mxablate::trainer {
namespace {

// (count, T + 1) windows starting at the given token positions -> inputs and targets.
TokenBatch make_batch(const data::TokenStream& stream, const std::vector<int64_t>& starts,
                      int64_t seq_len, const at::Device& device) {
  const int64_t count = static_cast<int64_t>(starts.size());
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  // For a GPU, in page-locked memory and copied without waiting: a copy from pageable memory
  // would hold the host until the GPU's queue drained (the trainer reads the next step's tokens
  // while the GPU runs this one's passes). The host allocator keeps the buffer until the copy ends.
  at::Tensor tokens = at::empty({count, seq_len + 1}, at::TensorOptions(at::kLong).pinned_memory(device.is_cuda()));
  int64_t* out = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    stream.read(starts[static_cast<size_t>(i)], window);
    for (int64_t j = 0; j <= seq_len; ++j) out[i * (seq_len + 1) + j] = window[static_cast<size_t>(j)];
  }
  tokens = tokens.to(device, /*non_blocking=*/true);
  return {tokens.narrow(1, 0, seq_len).contiguous(), tokens.narrow(1, 1, seq_len).contiguous()};
}

}  // namespace

TrainBatches::TrainBatches(const data::TokenDataset& dataset, int64_t seq_len, uint64_t data_seed)
    : dataset_(dataset), seq_len_(seq_len), sampler_(dataset.train.size(), seq_len, data_seed) {}

TokenBatch TrainBatches::get(int64_t first_sample, int64_t count, const at::Device& device) const {
  std::vector<int64_t> starts;
  for (int64_t k = first_sample; k < first_sample + count; ++k) starts.push_back(sampler_.window_start(k));
  return make_batch(dataset_.train, starts, seq_len_, device);
}

std::vector<TokenBatch> validation_batches(const data::TokenDataset& dataset, int64_t seq_len,
                                           int64_t sequences, int64_t batch_sequences,
                                           const at::Device& device) {
  const int64_t available = data::sequences_in_stream(dataset.validation.size(), seq_len);
  if (available < sequences)
    throw std::invalid_argument(
        "eval.tokens: " + std::to_string(sequences * seq_len) + " tokens (" +
        std::to_string(sequences) + " sequences) asked, but the validation split of " + dataset.dir +
        " holds " + std::to_string(available) + " sequences of " + std::to_string(seq_len));
  std::vector<TokenBatch> batches;
  for (int64_t first = 0; first < sequences; first += batch_sequences) {
    std::vector<int64_t> starts;
    for (int64_t i = first; i < std::min(sequences, first + batch_sequences); ++i) starts.push_back(i * seq_len);
    batches.push_back(make_batch(dataset.validation, starts, seq_len, device));
  }
  return batches;
}

}  // namespace mxablate::trainer
