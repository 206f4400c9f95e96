// This rank's place among the run's ranks (docs/design.md §4, "Data-parallel runs"): which
// micro-batches and validation batches are its own, what the ranks agree on (sums, maxima, a
// stop, a target), whether it writes the run's records, and how it leaves. One rank is a group
// of one: the same calls with nothing to exchange, so the training loop never asks how many
// ranks there are. Every method that exchanges is called in the same order on every rank (c10d
// requires it), which the loop guarantees by taking the same decisions everywhere.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/trainer/parallel/ranks.h"

namespace mxablate::trainer {

class RankGroup {
 public:
  // `dp` is the run's process group (null for one rank); it must outlive the group.
  RankGroup(const RankInfo& rank, DataParallel* dp, at::Device device);

  // Rank 0 reads and writes the run directory (events, the checkpoints' shared files).
  bool writes() const { return rank_.rank == 0; }
  int rank() const { return rank_.rank; }

  // This rank's micro-batches of a step of `micro_batches` (their indices in the global batch),
  // and its validation batches of `batches` (every world-th).
  std::vector<int64_t> my_micro_batches(int64_t micro_batches) const;
  std::vector<size_t> my_validation_batches(size_t batches) const;

  // Element-wise sums of small host values over the ranks (one collective; one rank: as given).
  std::vector<double> sum(std::vector<double> values) const;
  // The element-wise maximum of `tensor` over the ranks, in place (FP8 delayed scaling's amaxes).
  void max(at::Tensor& tensor) const;
  // Rank 0's value on every rank (the target it read), in one collective.
  std::optional<double> rank0_value(std::optional<double> mine) const;

  // Whether the run stops after this step for a signal: several ranks stop where they agreed
  // (`agreed`, the sum folded into the step's loss collective: a signal may reach them at
  // different steps); one rank stops for a signal received up to now. The signal to name.
  int stop_signal(bool agreed) const;

  // A one-rank run that ended for good may end before its last checkpoint's write is done (the
  // slot passes on); several ranks end together, after it (docs/design.md §9, "Busy slots").
  bool may_end_before_last_write() const { return dp_ == nullptr; }

  // Rank 0 tells the others how the run starts ("fresh", "checkpoint PATH", "finished CODE").
  void publish_start(const std::string& how) const;
  std::string receive_start() const;

  // Each rank of several says its own peak GPU memory (run_end holds rank 0's).
  void report_peak_gpu_bytes(int64_t bytes) const;
  // After the run ended the same way on every rank; not after a failure (a lost peer could make
  // the group wait).
  void close() const;

 private:
  RankInfo rank_;
  DataParallel* dp_;
  at::Device device_;
};

}  // namespace mxablate::trainer
