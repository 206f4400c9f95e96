// Sums a data-parallel run's gradients over its ranks, overlapped with the backward pass
// (docs/design.md §4, "Data-parallel runs"). Parameters are grouped into buckets of about 25 MiB in reverse order (the
// order backward produces their gradients); each parameter's .grad is a view into its bucket's
// one flat buffer, so autograd accumulates into the buffer in place and a bucket is summed over
// the ranks with one collective as soon as the step's last backward has produced all of its
// gradients. Buckets are launched in index order on every rank (collectives must be issued in
// the same order everywhere).
//
// Each rank back-propagates loss_m / M for its own micro-batches m of the step's M: the sum over
// ranks is then exactly the gradient one rank accumulates over all M (with two ranks and one
// micro-batch each, bit for bit: float addition of two terms commutes).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/trainer/plan/memory_plan.h"

namespace mxablate::trainer {

// Which parameters share a gradient bucket (the one rule for the replicated and the sharded step):
// the parameters in reverse model order, the order backward produces their gradients, cut into
// buckets of at most `bucket_bytes` of float32 (a larger parameter is a bucket of its own).
// `bf16_copy` (empty, or one flag per parameter): a bucket holds only parameters kept as BF16
// working copies or only others (working_copies.h), since its weights are one buffer of one
// dtype. Indices into `parameters`; throws std::invalid_argument unless every parameter is float32.
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<at::Tensor>& parameters,
                                                  int64_t bucket_bytes, const std::vector<bool>& bf16_copy = {});

class GradientSync {
 public:
  static constexpr int64_t kBucketBytes = kGradientBucketBytes;  // memory_plan.h

  // `parameters` in model order; their gradients become views into the buckets from here on.
  GradientSync(const std::vector<at::Tensor>& parameters, DataParallel& group,
               int64_t bucket_bytes = kBucketBytes);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Every gradient to zero (instead of the optimizer's zero_grad, which would drop the views).
  void zero();
  // The next backward pass is the step's last on this rank: sum each bucket once it is ready.
  void arm();
  // After that backward: sums the buckets not launched yet (parameters that got no gradient),
  // then waits for all. The gradients then hold the sum over the ranks.
  void finish();

 private:
  struct Bucket {
    at::Tensor flat;
    int64_t pending = 0;  // parameters whose gradient has not arrived in this backward
    int64_t size = 0;     // parameters in the bucket
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct Hook;
  void ready(size_t bucket);  // one gradient of `bucket` arrived (from autograd's thread)
  void launch_ready_in_order();

  DataParallel& group_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::mutex mutex_;
  bool armed_ = false;
  size_t next_launch_ = 0;
};

}  // namespace mxablate::trainer
