// Which training sequence comes next: a deterministic function of (data seed, sample number).
//
// The training stream is cut into non-overlapping windows of seq_len + 1 tokens starting at
// multiples of seq_len (input = first seq_len, target = last seq_len). Each epoch visits every
// window once, in an order given by a keyed bijection on [0, windows) that changes per epoch.
// Because the order is a pure function of the sample number, the data position in a checkpoint
// is one integer, and resuming reproduces the exact batches of an uninterrupted run.
#pragma once

#include <cstdint>

namespace mxablate::data {

// How many sequences of seq_len a stream of `tokens` tokens holds: every sequence is read with
// the token after it (its last target), so (tokens - 1) / seq_len. The one definition the
// training windows, the validation batches and the planner's launch checks all use.
inline int64_t sequences_in_stream(int64_t tokens, int64_t seq_len) {
  return seq_len > 0 && tokens > 0 ? (tokens - 1) / seq_len : 0;
}

// A keyed pseudo-random permutation of [0, n): a 4-round Feistel network on the smallest
// even-bit-width domain ≥ n, with cycle-walking to stay inside [0, n). O(1) memory, any n.
class KeyedPermutation {
 public:
  KeyedPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_;
  uint64_t key_;
  int half_bits_;
  uint64_t half_mask_;
};

uint64_t splitmix64(uint64_t x);

class SequenceSampler {
 public:
  // Throws std::invalid_argument when the stream holds less than one window.
  SequenceSampler(int64_t stream_tokens, int64_t seq_len, uint64_t data_seed);
  int64_t windows_per_epoch() const { return windows_; }
  // First token of the `sample`-th sequence drawn (sample = 0, 1, 2, … across epochs).
  int64_t window_start(int64_t sample) const;
  int64_t epoch_of(int64_t sample) const { return sample / windows_; }

 private:
  int64_t seq_len_;
  int64_t windows_;
  uint64_t seed_;
};

}  // namespace mxablate::data
