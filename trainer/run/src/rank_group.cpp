#include "rank_group.h"

#include <csignal>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "mxablate/trainer/rules/stop_signals.h"

namespace mxablate::trainer {
namespace {
constexpr const char* kStartKey = "mxablate/start";
}  // namespace

RankGroup::RankGroup(const RankInfo& rank, DataParallel* dp, at::Device device)
    : rank_(rank), dp_(dp), device_(device) {}

std::vector<int64_t> RankGroup::my_micro_batches(int64_t micro_batches) const {
  // Rank r takes the r-th slice, at their places in the global batch.
  const int64_t per_rank = micro_batches / rank_.world;
  std::vector<int64_t> mine;
  for (int64_t m = per_rank * rank_.rank; m < per_rank * (rank_.rank + 1); ++m) mine.push_back(m);
  return mine;
}

std::vector<size_t> RankGroup::my_validation_batches(size_t batches) const {
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(rank_.rank); i < batches; i += static_cast<size_t>(rank_.world))
    mine.push_back(i);
  return mine;
}

std::vector<double> RankGroup::sum(std::vector<double> values) const {
  if (!dp_) return values;
  at::Tensor t = at::tensor(at::ArrayRef<double>(values), at::TensorOptions().dtype(at::kDouble)).to(device_);
  dp_->sum(t);
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

void RankGroup::max(at::Tensor& tensor) const {
  if (dp_) dp_->max(tensor);
}

std::optional<double> RankGroup::rank0_value(std::optional<double> mine) const {
  if (!dp_) return mine;
  const std::optional<double> sent = writes() ? mine : std::nullopt;
  const std::vector<double> shared = sum({sent ? 1.0 : 0.0, sent.value_or(0.0)});
  return shared[0] > 0 ? std::optional<double>(shared[1]) : std::nullopt;
}

int RankGroup::stop_signal(bool agreed) const {
  if (!dp_) return stop_signal_received();
  if (!agreed) return 0;
  const int local = stop_signal_received();
  return local != 0 ? local : SIGTERM;
}

void RankGroup::publish_start(const std::string& how) const {
  if (dp_) dp_->publish(kStartKey, how);
}

std::string RankGroup::receive_start() const { return dp_->receive(kStartKey); }

void RankGroup::report_peak_gpu_bytes(int64_t bytes) const {
  if (!dp_ || bytes <= 0) return;
  // One write, so that the ranks' lines do not interleave.
  std::ostringstream line;
  line << "mxablate-train: rank " << rank_.rank << " peak GPU memory " << std::fixed << std::setprecision(2)
       << static_cast<double>(bytes) / double(int64_t{1} << 30) << " GiB\n";
  std::cerr << line.str() << std::flush;
}

void RankGroup::close() const {
  if (dp_) dp_->close();
}

}  // namespace mxablate::trainer
