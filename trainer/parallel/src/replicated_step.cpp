// The replicated step (docs/design.md §4, "The step engine"): every rank keeps every weight,
// gradient and AdamW moment; gradients are summed over the ranks in buckets overlapped with the
// last backward (gradient_sync.h). One rank is the case of no group at all.
#include "replicated_step.h"

#include <torch/serialize.h>

#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/trainer/torch/error_line.h"
#include "gradient_sync.h"
#include "mxablate/trainer/checkpoint/host_buffers.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/model/optimizer.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {
namespace {

namespace fs = std::filesystem;

// The AdamW moments loaded into `loaded` must exist for every parameter, match its shape and
// dtype, and have taken as many steps as the checkpoint says the run has.
void verify_adamw_state(torch::optim::AdamW& loaded, int64_t step) {
  size_t index = 0;
  for (auto& group : loaded.param_groups()) {
    for (auto& p : group.params()) {
      const std::string which = std::string(kOptimizerFile) + ": the moments of parameter " + std::to_string(index++);
      const auto it = loaded.state().find(compat::optimizer_state_key(loaded, p.unsafeGetTensorImpl()));
      if (it == loaded.state().end()) {
        if (step == 0) continue;
        throw CheckpointRejected(which + " (" + tensor_shape_text(p) + ") are missing");
      }
      const auto* st = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get());
      if (!st) throw CheckpointRejected(which + " are not AdamW's");
      for (const at::Tensor* m : {&st->exp_avg(), &st->exp_avg_sq()})
        if (!m->defined() || m->sizes() != p.sizes() || m->dtype() != p.dtype())
          throw CheckpointRejected(which + " are " + (m->defined() ? tensor_shape_text(*m) : "undefined") +
                                   ", the parameter is " + tensor_shape_text(p));
      if (static_cast<int64_t>(st->step()) != step)
        throw CheckpointRejected(which + " have taken " + std::to_string(st->step()) +
                                 " steps, the checkpoint says " + std::to_string(step));
    }
  }
}

// optimizer.pt, or nothing (a rank other than 0 of a replicated run).
class OptimizerArchive final : public OptimizerSnapshot {
 public:
  explicit OptimizerArchive(std::unique_ptr<torch::serialize::OutputArchive> archive) : archive_(std::move(archive)) {}
  std::vector<CheckpointFile> write(const fs::path& dir) override {
    if (!archive_) return {};
    archive_->save_to((dir / kOptimizerFile).string());
    return {describe_checkpoint_file(dir, kOptimizerFile)};
  }

 private:
  std::unique_ptr<torch::serialize::OutputArchive> archive_;
};

}  // namespace

ReplicatedStep::ReplicatedStep(const contract::RunConfig& config, torch::nn::Module& model, DataParallel* group)
    : model_(model), group_(group), optimizer_(make_adamw(model, config.train)) {
  if (group_) sync_ = std::make_unique<GradientSync>(model_.parameters(), *group_);
}

ReplicatedStep::~ReplicatedStep() = default;

void ReplicatedStep::zero_gradients() {
  if (sync_) sync_->zero();
  else optimizer_->zero_grad();
}

void ReplicatedStep::begin_backward(bool last) {
  if (sync_ && last) sync_->arm();
}

void ReplicatedStep::end_backward(bool last) {
  if (sync_ && last) sync_->finish();
}

at::Tensor ReplicatedStep::clip_gradients(double max_norm) { return clip_grad_norm(model_.parameters(), max_norm); }

void ReplicatedStep::step(double lr) {
  set_learning_rate(*optimizer_, lr);
  adamw_step(*optimizer_);  // fused on CUDA, torch::optim::AdamW itself elsewhere
}

std::unique_ptr<OptimizerSnapshot> ReplicatedStep::snapshot_optimizer(int64_t /*step*/, HostBuffers& host) {
  // Every rank holds the same state; rank 0 keeps it.
  if (group_ && group_->rank() != 0) return std::make_unique<OptimizerArchive>(nullptr);
  // The optimizer's own archive, written while host copies stand in for its moments: the same
  // keys, order and values as the archive of the device state (docs/design.md §4, "Checkpoints
  // and exact resume"), without repeating how each LibTorch version lays it out.
  struct Swapped {
    torch::optim::AdamWParamState* state;
    at::Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  std::vector<Swapped> swapped;
  const auto put_back = [&] {
    for (Swapped& s : swapped) {
      s.state->exp_avg(s.exp_avg);
      s.state->exp_avg_sq(s.exp_avg_sq);
      s.state->max_exp_avg_sq(s.max_exp_avg_sq);
    }
  };
  auto archive = std::make_unique<torch::serialize::OutputArchive>();
  try {
    for (auto& entry : optimizer_->state()) {
      auto& st = static_cast<torch::optim::AdamWParamState&>(*entry.second);
      swapped.push_back({&st, st.exp_avg(), st.exp_avg_sq(), st.max_exp_avg_sq()});
      const auto copy = [&](const at::Tensor& t) { return t.defined() ? host.copy_of(t) : t; };
      st.exp_avg(copy(st.exp_avg()));
      st.exp_avg_sq(copy(st.exp_avg_sq()));
      st.max_exp_avg_sq(copy(st.max_exp_avg_sq()));
    }
    optimizer_->save(*archive);
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
  return std::make_unique<OptimizerArchive>(std::move(archive));
}

void ReplicatedStep::load_optimizer(const fs::path& dir, const std::vector<CheckpointFile>& files, int64_t step) {
  for (const CheckpointFile& f : files)
    if (const auto shard = parse_optimizer_shard_file(f.name))
      throw contract::ConfigError(
          "parallel.shard: checkpoint " + dir.string() + " holds the AdamW state in " +
          std::to_string(shard->second) +
          " shards (a run with parallel.shard: optimizer or gradients); this run keeps it whole "
          "(parallel.shard: none): resume it with the shard setting it was written under");
  const at::Device device = model_.parameters().front().device();
  torch::optim::AdamW loaded(optimizer_->param_groups(),
                             static_cast<const torch::optim::AdamWOptions&>(optimizer_->defaults()));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / kOptimizerFile).string(), device);
    loaded.load(archive);
  } catch (const std::exception& e) {
    throw CheckpointRejected(std::string(kOptimizerFile) + ": " + error_line(e));
  }
  verify_adamw_state(loaded, step);
  optimizer_->state().swap(loaded.state());
}

int64_t ReplicatedStep::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const at::Tensor& p : model_.parameters()) n += p.numel();
  return 2 * n * static_cast<int64_t>(sizeof(float));
}

int64_t ReplicatedStep::gradient_bytes() const { return optimizer_state_bytes() / 2; }

int64_t ReplicatedStep::weight_bytes() const { return optimizer_state_bytes() / 2; }  // float32, whole

}  // namespace mxablate::trainer
