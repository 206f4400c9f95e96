// Activation checkpointing of one transformer block (docs/trainer.md): the forward pass keeps only
// the block's input; the backward pass runs the block's forward again, with grad on, and
// back-propagates through that. LibTorch's C++ API has no torch.utils.checkpoint; this is it, as
// a custom autograd function.
//
// The recomputed forward gives the same bits as the first: every MXLinear random stream is keyed
// by (run seed, optimizer step, layer, GEMM, operand), not drawn from a generator that moves, and
// the step does not change between a forward and its backward. So the gradients are bit-identical
// to the unchecked block's.
//
// Quantization telemetry is recorded once, by the recomputed forward: the first pass runs with
// QuantSession::collect_telemetry off (it is also a no-grad pass, which skips the column-wise
// quantizations that only backward needs, so its records would be incomplete); the recompute
// runs with the setting the first pass found, and quantizes every operand the unchecked forward
// would.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

#include "mxablate/trainer/numerics/mx_linear.h"

namespace mxablate::trainer {

using BlockFunction = std::function<at::Tensor(const at::Tensor&)>;

// block(x) without keeping its activations when grad mode is on (otherwise plainly block(x)).
// `parameters`: every tensor block reads that may want a gradient; they become inputs of the
// autograd node, so their gradients reach .grad through autograd's usual accumulation. `block`
// must compute the same values each time it runs within a step, and is kept alive (with
// `session`) until the backward has run.
at::Tensor checkpointed(BlockFunction block, const at::Tensor& x,
                        const std::vector<at::Tensor>& parameters,
                        std::shared_ptr<QuantSession> session);

}  // namespace mxablate::trainer
