// How many tokens of a micro-batch the LM head and the cross-entropy take at a time
// (docs/design.md §4, "The loss without the logits"): the one rule that the model follows and
// that the memory plan counts. A micro-batch whose logits (tokens × vocabulary, float32) stay
// within kLogitsChunkBytes is taken whole, as always (those runs keep their bits); a larger one is
// cut into chunks of at most that size, so no seq × vocabulary float32 tensor ever exists (the
// 8B shape at seq 8192: 4 GiB a sequence otherwise).
#pragma once

#include <algorithm>
#include <cstdint>

namespace mxablate::trainer {

inline constexpr int64_t kLogitsChunkBytes = int64_t{256} << 20;

// Chunks are whole multiples of this many tokens where they can be: an LM head whose Wgrad is
// configured in a block format quantizes along the tokens in blocks of 32 (MXFP4) or 16 (NVFP4).
inline constexpr int64_t kLogitsChunkAlign = 32;

// Tokens per chunk for `tokens` tokens over a vocabulary of `vocab`: `tokens` itself when its
// float32 logits fit kLogitsChunkBytes, else the most tokens that do, rounded down to a multiple
// of kLogitsChunkAlign when that leaves any (at least one token).
inline int64_t logits_chunk_tokens(int64_t tokens, int64_t vocab) {
  if (tokens <= 0 || vocab <= 0) return std::max<int64_t>(tokens, 1);
  int64_t fit = std::max<int64_t>(1, kLogitsChunkBytes / (vocab * int64_t{4}));
  if (fit >= kLogitsChunkAlign) fit -= fit % kLogitsChunkAlign;
  return tokens <= fit ? tokens : fit;
}

}  // namespace mxablate::trainer
