#include "mxablate/data/sequence_sampler.h"

#include <stdexcept>
#include <string>

namespace mxablate::data {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

KeyedPermutation::KeyedPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  if (n == 0) throw std::invalid_argument("KeyedPermutation: empty domain");
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t KeyedPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t f = splitmix64(key_ ^ (round << 56) ^ right) & half_mask_;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << half_bits_) | right;
}

uint64_t KeyedPermutation::operator()(uint64_t i) const {
  if (i >= n_) throw std::out_of_range("KeyedPermutation: index out of range");
  // Cycle-walking: the Feistel network permutes the power-of-4 domain; following the cycle from
  // i until it re-enters [0, n) gives a permutation of [0, n). The domain is < 4n, so the
  // expected number of extra rounds is small.
  uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

SequenceSampler::SequenceSampler(int64_t stream_tokens, int64_t seq_len, uint64_t data_seed)
    : seq_len_(seq_len), windows_(sequences_in_stream(stream_tokens, seq_len)),
      seed_(data_seed) {
  if (seq_len <= 0) throw std::invalid_argument("sequence length must be > 0");
  if (windows_ <= 0)
    throw std::invalid_argument("the training split holds " + std::to_string(stream_tokens) +
                                " tokens, less than one sequence of " + std::to_string(seq_len) +
                                " + 1");
}

int64_t SequenceSampler::window_start(int64_t sample) const {
  const int64_t epoch = sample / windows_;
  const int64_t index = sample % windows_;
  const KeyedPermutation order(static_cast<uint64_t>(windows_),
                               splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch))));
  return static_cast<int64_t>(order(static_cast<uint64_t>(index))) * seq_len_;
}

}  // namespace mxablate::data
