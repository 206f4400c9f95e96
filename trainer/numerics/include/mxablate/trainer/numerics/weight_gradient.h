// Where a weight's gradient goes when it cannot be its own .grad (docs/design.md §4, "What the
// ranks replicate"). A sharded run keeps some weights as BF16 working copies beside float32
// masters (working_copies.h): the parameter the model reads is the BF16 copy, and autograd would
// round a gradient returned for it to BF16. Such a weight has a sink instead: the layer that
// reads it (MXLinear) hands the sink its float32 gradient, the one it would have returned, and
// returns none. This is Megatron-LM's gradient-accumulation fusion, without its change to where
// the accumulation happens: the sink adds the gradient where AccumulateGrad would have.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace mxablate::trainer {

// Takes one backward's float32 gradient of its weight (the weight's shape), on autograd's thread.
using WeightGradientSink = std::function<void(const at::Tensor& gradient)>;

// `weight`'s gradients go to `sink` from now on, until detached (before the weight is freed).
// Weights are told apart by their tensor: views of one buffer are different weights.
void attach_weight_gradient_sink(const at::Tensor& weight, WeightGradientSink sink);
void detach_weight_gradient_sink(const at::Tensor& weight);
// The sink of `weight`, or null.
std::shared_ptr<const WeightGradientSink> weight_gradient_sink(const at::Tensor& weight);

}  // namespace mxablate::trainer
