// One rank's view of a data-parallel run (docs/design.md §4, "Data-parallel runs"): the c10d store it met the others
// through and the process group that sums tensors over the ranks — NCCL on CUDA, Gloo on the CPU.
// Collectives are issued in the same order on every rank (c10d requires it), which the training
// loop guarantees by running the same steps with the same decisions everywhere.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxablate/trainer/parallel/ranks.h"

namespace mxablate::trainer {

// A collective failed because another rank is gone. Not the run's failure but its interruption:
// the rank ends without a run_end, like the rank that died, and the run is retried from its
// checkpoint.
struct RanksLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Why this build cannot run `ranks` ranks on the CPU (Gloo) or CUDA (NCCL); empty when it can.
// The launcher asks before starting any rank: one line, not one per rank.
std::string missing_backend(bool cuda, int ranks);

class DataParallel {
 public:
  // Connects to the store at rank.store_host:store_port and joins the process group of
  // rank.world ranks on `device`. Throws contract::ConfigError when this build lacks the
  // backend the device needs.
  DataParallel(const RankInfo& rank, const at::Device& device);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return rank_.rank; }
  int world() const { return rank_.world; }

  // Sums `tensor` (dense, contiguous, on the run's device) over the ranks in place. async: the
  // returned work must be waited on (wait()) before the tensor is read or written.
  c10::intrusive_ptr<c10d::Work> sum_async(at::Tensor& tensor);
  void sum(at::Tensor& tensor);
  // The element-wise maximum of `tensor` over the ranks, in place (FP8 delayed scaling's amaxes,
  // int32 bits: exact in any order).
  void max(at::Tensor& tensor);
  static void wait(const c10::intrusive_ptr<c10d::Work>& work);

  // Sharded data parallelism (docs/design.md §4, "Sharded data parallelism"): `bucket` (1-D,
  // contiguous, numel a multiple of world()) is cut into world() equal chunks, chunk r being rank
  // r's. reduce_scatter: afterwards this rank's chunk holds the sum of everyone's bucket over the
  // ranks (the rest of the bucket is undefined). all_gather: afterwards the whole bucket holds
  // every rank's chunk. In place, as NCCL allows (Megatron-LM's distributed optimizer does the
  // same): no second buffer of the bucket's size. Gloo in LibTorch 1.13 has no reduce-scatter:
  // there the bucket is all-reduced, which leaves the same sums in every chunk (more traffic;
  // CPU ranks exist for tests).
  c10::intrusive_ptr<c10d::Work> reduce_scatter_async(at::Tensor& bucket);
  c10::intrusive_ptr<c10d::Work> all_gather_async(at::Tensor& bucket);
  // This rank's chunk of `bucket` (a view).
  at::Tensor chunk_of(const at::Tensor& bucket) const;

  // Leaves the group after the run ended the same way on every rank (torch 2 warns when a NCCL
  // group is destroyed without it). Not after a failure: a lost peer could make it wait.
  void close();

  // Rank 0 publishes a value; the others wait for it (the store's timeout applies).
  void publish(const std::string& key, const std::string& value);
  std::string receive(const std::string& key);

 private:
  struct Impl;
  RankInfo rank_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxablate::trainer
