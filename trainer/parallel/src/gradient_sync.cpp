#include "gradient_sync.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>

namespace mxablate::trainer {

// Runs after a parameter's AccumulateGrad node: its gradient is in the bucket.
struct GradientSync::Hook : torch::autograd::FunctionPostHook {
  Hook(GradientSync* sync, size_t bucket) : sync(sync), bucket(bucket) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    sync->ready(bucket);
    return outputs;
  }
  GradientSync* sync;
  size_t bucket;
};

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<at::Tensor>& parameters,
                                                  int64_t bucket_bytes, const std::vector<bool>& bf16_copy) {
  std::vector<std::vector<size_t>> members;
  int64_t bytes = bucket_bytes;
  for (size_t i = parameters.size(); i-- > 0;) {
    const at::Tensor& p = parameters[i];
    if (p.scalar_type() != at::kFloat)
      throw std::invalid_argument("gradient buckets: parameters must be float32 (master weights)");
    const int64_t b = p.numel() * static_cast<int64_t>(sizeof(float));
    const bool other_kind = !bf16_copy.empty() && !members.empty() && bf16_copy[members.back().front()] != bf16_copy[i];
    if (members.empty() || bytes + b > bucket_bytes || other_kind) {
      members.emplace_back();
      bytes = 0;
    }
    members.back().push_back(i);
    bytes += b;
  }
  return members;
}

GradientSync::GradientSync(const std::vector<at::Tensor>& parameters, DataParallel& group,
                           int64_t bucket_bytes)
    : group_(group) {
  const std::vector<std::vector<size_t>> members = gradient_buckets(parameters, bucket_bytes);
  buckets_.resize(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    int64_t numel = 0;
    for (size_t i : members[k]) numel += parameters[i].numel();
    Bucket& bucket = buckets_[k];
    bucket.flat = at::zeros({numel}, parameters[members[k].front()].options());
    bucket.size = static_cast<int64_t>(members[k].size());
    int64_t offset = 0;
    for (size_t i : members[k]) {
      at::Tensor p = parameters[i];
      const int64_t n = p.numel();
      p.mutable_grad() = bucket.flat.narrow(0, offset, n).view(p.sizes());
      offset += n;
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      if (!accumulator) throw std::invalid_argument("GradientSync: a parameter is not a leaf requiring grad");
      hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<Hook>(this, k)));
      accumulators_.push_back(std::move(accumulator));
    }
  }
}

GradientSync::~GradientSync() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradientSync::zero() {
  for (Bucket& b : buckets_) b.flat.zero_();
}

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = true;
  next_launch_ = 0;
  for (Bucket& b : buckets_) {
    b.pending = b.size;
    b.launched = false;
    b.work.reset();
  }
}

void GradientSync::ready(size_t bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;  // an earlier micro-batch of the step: accumulate only
  if (--buckets_[bucket].pending == 0) launch_ready_in_order();
}

void GradientSync::launch_ready_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending <= 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = group_.sum_async(b.flat);
    b.launched = true;
  }
}

void GradientSync::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  for (size_t k = next_launch_; k < buckets_.size(); ++k) buckets_[k].pending = 0;
  launch_ready_in_order();
  for (Bucket& b : buckets_) {
    DataParallel::wait(b.work);
    b.work.reset();
  }
  armed_ = false;
}

}  // namespace mxablate::trainer
