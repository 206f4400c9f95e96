// The LM head and the cross-entropy taken a chunk of tokens at a time (docs/design.md §4, "The
// loss without the logits"): no (tokens × vocabulary) tensor of a large micro-batch ever exists.
// How many tokens a chunk holds is loss_chunks.h's rule; a micro-batch whose logits fit is taken
// whole, through the unchunked expression, and keeps its bits.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "mxablate/trainer/numerics/mx_linear.h"

namespace mxablate::trainer {

// Mean cross-entropy of logits rows (rows, vocab) against int64 targets (rows): the fused kernel
// (reading the GEMM's BF16 logits, float32 math) when `fused`, else the unfused float32 ATen
// expression. The one definition the whole and the chunked loss both use.
at::Tensor mean_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, bool fused);

// mean_cross_entropy(lm_head(hidden), targets) for hidden (rows, d_model) — the final norm's
// output — taken `chunk_tokens` rows at a time (chunk_tokens ≥ rows: one chunk, exactly the whole
// expression). The forward keeps no logits; the backward recomputes each chunk's logits through
// the LM head's own MXLinear (its plan, so its precision, as the forward ran it), takes that
// chunk's share of the gradient and returns d hidden and the LM head's dW summed over chunks.
// Equal to the whole expression up to float32 summation order (the mean over chunks, dW's sum
// over chunks; tests/trainer/model/chunked_loss_test.cpp).
at::Tensor chunked_lm_head_loss(const at::Tensor& hidden, MXLinear lm_head, const at::Tensor& targets,
                                int64_t chunk_tokens, bool fused);

}  // namespace mxablate::trainer
