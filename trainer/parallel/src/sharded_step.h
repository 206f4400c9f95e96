// The sharded step engine (step_engine.h; docs/design.md §4, "Sharded data parallelism"), ZeRO
// stages 1 and 2 as Megatron-LM's distributed optimizer lays them out.
//
// The parameters are cut into buckets of about 25 MiB in reverse model order (the order backward
// produces their gradients), each padded to a multiple of the rank count and cut into one equal
// chunk per rank: rank r owns chunk r of every bucket. Each bucket's parameters live in one
// float32 buffer in that layout (each parameter a view into it), so the updated chunks are
// all-gathered in place. This rank's AdamW runs over the pieces of parameters that fall in its chunks (views,
// grouped decayed / not decayed as make_adamw groups them), with the same per-element update as
// the replicated step.
//
// Gradients: with parallel.shard `optimizer` (ZeRO-1) each parameter's .grad is a view into its
// bucket's full gradient buffer, accumulated over the step's micro-batches; each bucket is
// reduce-scattered once its last gradient of the step's last backward has arrived, overlapped with
// the rest of backward. With `gradients` (ZeRO-2) no full gradient buffer exists: each backward's
// gradients are copied into a bucket-sized staging buffer as they arrive and freed, the bucket is
// reduce-scattered as soon as it is complete, and the rank adds its chunk to its own gradient
// shard; up to kInFlightBytes of staged buckets are in flight at a time.
//
// Working copies (docs/design.md §4, "What the ranks replicate"): the weights working_copies.h
// names are kept as BF16 on every rank, each BF16 bucket beside this rank's chunk of its float32
// masters. The model reads the BF16 copy; its gradient reaches the bucket through the weight's
// sink (weight_gradient.h) in float32, where AccumulateGrad would have put it; AdamW updates the
// masters; the updated chunk is rounded to BF16 and all-gathered. The other buckets are float32
// and are their own masters, as above. A checkpoint's model.pt holds the masters (gathered).
//
// The global gradient norm is the square root of the sum over the ranks of each rank's sum of
// squares (one all-reduce in float64), so every rank clips and judges divergence alike. The sums
// differ from the replicated step's only in their order (docs/design.md §4, "Comparing runs that
// sum in another order", says how the tests compare the two).
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/optim/adamw.h>

#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/parallel/step_engine.h"

namespace mxablate::trainer {

class ShardedStep final : public StepEngine {
 public:
  static constexpr int64_t kBucketBytes = kGradientBucketBytes;
  // ZeRO-2: staged buckets being reduce-scattered at once, in bytes (at least two buckets).
  // Waiting on one makes the backward's stream wait for it, so the window must be long enough
  // for the reduce-scatter to be done by then (a window of two buckets was measured slower at
  // llama-1.3b on 4 ranks; that figure was not kept).
  static constexpr int64_t kInFlightBytes = kShardedInFlightBytes;

  // `bf16_weights`: the parameters of `model` to keep as BF16 working copies.
  ShardedStep(const contract::RunConfig& config, torch::nn::Module& model, DataParallel& group,
              const std::vector<at::Tensor>& bf16_weights, int64_t bucket_bytes = kBucketBytes);
  ~ShardedStep() override;
  ShardedStep(const ShardedStep&) = delete;
  ShardedStep& operator=(const ShardedStep&) = delete;

  void zero_gradients() override;
  void begin_backward(bool last) override;
  void end_backward(bool last) override;
  at::Tensor clip_gradients(double max_norm) override;
  void step(double lr) override;
  std::unique_ptr<OptimizerSnapshot> snapshot_optimizer(int64_t step, HostBuffers& host) override;
  void load_optimizer(const std::filesystem::path& dir, const std::vector<CheckpointFile>& files,
                      int64_t step) override;
  bool keeps_master(const at::Tensor& param) const override;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> snapshot_masters(HostBuffers& host, bool root) override;
  void load_masters(const std::unordered_map<const c10::TensorImpl*, at::Tensor>& saved) override;
  int64_t optimizer_state_bytes() const override;
  int64_t gradient_bytes() const override;
  int64_t weight_bytes() const override;

 private:
  struct Member {
    size_t param;    // index in model.parameters()
    int64_t offset;  // in the bucket
    int64_t numel;
  };
  struct Bucket {
    std::vector<Member> members;
    int64_t padded = 0;  // numel rounded up to a multiple of the ranks
    bool bf16 = false;   // its parameters are BF16 working copies
    at::Tensor params;   // the bucket's parameters, back to back, padded
    at::Tensor masters;  // BF16 buckets: this rank's chunk of their float32 masters
    at::Tensor grads;    // ZeRO-1: the full gradient buffer; ZeRO-2: staging while in flight
    at::Tensor shard;    // this rank's summed gradients of its chunk
    int64_t pending = 0;
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  // A piece of one parameter inside this rank's chunk of one bucket: what AdamW updates.
  struct Segment {
    size_t param;
    int64_t logical;  // first element's index in the flat parameter space (model order)
    int64_t length;
    at::Tensor value;  // view of the bucket's float32 parameters or masters; its .grad a view of its shard
  };
  struct Hook;

  void gradient_arrived(size_t bucket, size_t param);  // from autograd's thread
  // A working copy's float32 gradient, from its sink (autograd's thread).
  void gradient_received(size_t bucket, const Member& member, const at::Tensor& gradient);
  void launch_ready_in_order();
  void settle_oldest_in_flight();
  void finish_buckets();

  DataParallel& group_;
  bool shard_gradients_ = false;
  std::vector<at::Tensor> parameters_;  // model order
  std::vector<int64_t> logical_start_;  // per parameter
  int64_t logical_size_ = 0;
  at::TensorOptions options_;  // the parameters' (float32, on the run's device)
  std::vector<Bucket> buckets_;
  std::vector<Segment> segments_;  // sorted by logical index
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<at::Tensor> sunk_;  // the working copies, whose sinks the destructor detaches
  std::mutex mutex_;
  bool armed_ = false;
  size_t next_launch_ = 0;
  std::deque<size_t> in_flight_;  // ZeRO-2
  int64_t in_flight_bytes_ = 0;
};

}  // namespace mxablate::trainer
