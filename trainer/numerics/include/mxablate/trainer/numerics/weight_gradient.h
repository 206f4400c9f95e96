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

// What a reader calls with its float32 gradient of a weight that has a sink: the sink takes it,
// unless a WeightGradientSum for that sink is open on this thread.
void give_weight_gradient(const std::shared_ptr<const WeightGradientSink>& sink, const at::Tensor& gradient);

// While open on this thread, the gradients readers give `sink` are summed here instead, in the
// order they arrive (the first one taken, the others added to it), for a reader made of parts
// whose gradients it sums before the weight's gradient is complete: the chunked loss, one
// MXLinear backward per chunk, sums them as it would have summed them returned.
class WeightGradientSum {
 public:
  explicit WeightGradientSum(std::shared_ptr<const WeightGradientSink> sink);
  ~WeightGradientSum();
  WeightGradientSum(const WeightGradientSum&) = delete;
  WeightGradientSum& operator=(const WeightGradientSum&) = delete;
  // The sum so far (undefined if nothing arrived).
  const at::Tensor& sum() const { return sum_; }

 private:
  friend void give_weight_gradient(const std::shared_ptr<const WeightGradientSink>&, const at::Tensor&);
  std::shared_ptr<const WeightGradientSink> sink_;
  at::Tensor sum_;
  WeightGradientSum* outer_;  // the one open before it on this thread
};

}  // namespace mxablate::trainer
