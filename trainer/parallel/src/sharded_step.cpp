#include "sharded_step.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/trainer/torch/error_line.h"
#include "gradient_sync.h"
#include "mxablate/trainer/checkpoint/host_buffers.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"
#include "mxablate/trainer/model/optimizer.h"
#include "mxablate/trainer/numerics/weight_gradient.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {
namespace {

namespace fs = std::filesystem;

std::string checkpoint_key(int64_t step, const std::string& what) {
  return "mxablate/checkpoint/" + std::to_string(step) + "/" + what;
}

// A shard file's table: one row (logical index, length) per segment, in the order of its data.
struct ShardTable {
  std::vector<std::pair<int64_t, int64_t>> rows;
  at::Tensor exp_avg, exp_avg_sq;  // on the CPU, float32, the rows' elements back to back
};

ShardTable read_shard(const fs::path& file, int64_t logical_size, int64_t step) {
  const std::string name = file.filename().string();
  ShardTable t;
  at::Tensor segments, size, steps;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(file.string(), at::kCPU);
    if (!archive.try_read("segments", segments) || !archive.try_read("exp_avg", t.exp_avg) ||
        !archive.try_read("exp_avg_sq", t.exp_avg_sq) || !archive.try_read("logical_size", size) ||
        !archive.try_read("step", steps))
      throw CheckpointRejected(name + ": not an optimizer shard (a tensor is missing)");
  } catch (const CheckpointRejected&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointRejected(name + ": " + error_line(e));
  }
  if (size.scalar_type() != at::kLong || size.numel() != 1 || size.item<int64_t>() != logical_size)
    throw CheckpointRejected(name + ": written for a model of another size");
  if (steps.scalar_type() != at::kLong || steps.numel() != 1 || steps.item<int64_t>() != step)
    throw CheckpointRejected(name + ": its moments have taken another number of steps than the checkpoint says");
  if (segments.scalar_type() != at::kLong || segments.dim() != 2 || segments.size(1) != 2)
    throw CheckpointRejected(name + ": its segment table is malformed");
  int64_t total = 0;
  const at::Tensor rows = segments.contiguous();
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const int64_t begin = r[2 * i], length = r[2 * i + 1];
    if (begin < 0 || length <= 0 || begin > logical_size - length)
      throw CheckpointRejected(name + ": a segment lies outside the model's parameters");
    // Written in ascending order and disjoint: a segment counted twice would hide a missing one.
    if (!t.rows.empty() && begin < t.rows.back().first + t.rows.back().second)
      throw CheckpointRejected(name + ": its segments overlap or are out of order");
    t.rows.emplace_back(begin, length);
    total += length;
  }
  for (const at::Tensor* m : {&t.exp_avg, &t.exp_avg_sq})
    if (m->scalar_type() != at::kFloat || m->dim() != 1 || m->numel() != total)
      throw CheckpointRejected(name + ": its moments do not match its segment table");
  t.exp_avg = t.exp_avg.contiguous();
  t.exp_avg_sq = t.exp_avg_sq.contiguous();
  return t;
}

// This rank's optimizer-shard-R-of-N.pt, written on the checkpoint writer's thread. The ranks
// meet through the c10d store only (thread-safe, and not used by training after the start), so
// this runs beside the training thread's collectives (docs/design.md §4, "Sharded checkpoints").
class ShardSnapshot final : public OptimizerSnapshot {
 public:
  ShardSnapshot(DataParallel& group, int64_t step, std::unique_ptr<torch::serialize::OutputArchive> archive)
      : group_(group), step_(step), archive_(std::move(archive)) {}

  std::vector<CheckpointFile> write(const fs::path& dir) override {
    const int rank = group_.rank(), world = group_.world();
    // Rank 0 has made the directory fresh before the others write into it.
    if (rank == 0) group_.publish(checkpoint_key(step_, "directory"), dir.string());
    else if (group_.receive(checkpoint_key(step_, "directory")) != dir.string())
      throw std::runtime_error("checkpoint: the ranks disagree on the checkpoint's directory");
    const std::string name = optimizer_shard_file(rank, world);
    archive_->save_to((dir / name).string());
    const CheckpointFile mine = describe_checkpoint_file(dir, name);
    if (rank != 0) {
      group_.publish(checkpoint_key(step_, name), std::to_string(mine.bytes) + " " + mine.sha256);
      return {mine};
    }
    std::vector<CheckpointFile> files{mine};
    for (int r = 1; r < world; ++r) {
      const std::string other = optimizer_shard_file(r, world);
      const std::string entry = group_.receive(checkpoint_key(step_, other));
      const size_t space = entry.find(' ');
      files.push_back({other, std::stoll(entry.substr(0, space)), entry.substr(space + 1)});
    }
    return files;
  }

 private:
  DataParallel& group_;
  int64_t step_;
  std::unique_ptr<torch::serialize::OutputArchive> archive_;
};

}  // namespace

// Runs after a parameter's AccumulateGrad node: its gradient of this backward is complete.
struct ShardedStep::Hook : torch::autograd::FunctionPostHook {
  Hook(ShardedStep* step, size_t bucket, size_t param) : step(step), bucket(bucket), param(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    step->gradient_arrived(bucket, param);
    return outputs;
  }
  ShardedStep* step;
  size_t bucket, param;
};

ShardedStep::ShardedStep(const contract::RunConfig& config, torch::nn::Module& model, DataParallel& group,
                         const std::vector<at::Tensor>& bf16_weights, int64_t bucket_bytes)
    : group_(group),
      shard_gradients_(config.parallel.shard == contract::ShardLevel::kGradients),
      parameters_(model.parameters()) {
  const int64_t world = group_.world();
  logical_start_.resize(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    logical_start_[i] = logical_size_;
    logical_size_ += parameters_[i].numel();
  }
  std::vector<bool> bf16(parameters_.size(), false);
  for (const at::Tensor& w : bf16_weights)
    for (size_t i = 0; i < parameters_.size(); ++i)
      if (parameters_[i].is_same(w)) bf16[i] = true;
  // Which parameters share a bucket depends on neither the rank count (only the padding does)
  // nor anything a checkpoint stores.
  for (const std::vector<size_t>& indices : gradient_buckets(parameters_, bucket_bytes, bf16)) {
    Bucket& bucket = buckets_.emplace_back();
    bucket.bf16 = bf16[indices.front()];
    int64_t offset = 0;
    for (const size_t i : indices) {
      bucket.members.push_back({i, offset, parameters_[i].numel()});
      offset += parameters_[i].numel();
    }
  }
  for (Bucket& b : buckets_) {
    const int64_t numel = b.members.back().offset + b.members.back().numel;
    b.padded = (numel + world - 1) / world * world;
  }
  options_ = parameters_.front().options().requires_grad(false);
  const at::TensorOptions& options = options_;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> decayed, plain;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    // Bucket by bucket, each parameter's old storage freed as it moves: the weights are never
    // held twice (the 8B shape's are 32 GB).
    b.params = at::zeros({b.padded}, b.bf16 ? options.dtype(at::kBFloat16) : options);
    const int64_t chunk = b.padded / world, mine = chunk * group_.rank();
    if (b.bf16) b.masters = at::zeros({chunk}, options);
    if (!shard_gradients_) {
      b.grads = at::zeros({b.padded}, options);
      b.shard = group_.chunk_of(b.grads);
    } else {
      b.shard = at::zeros({chunk}, options);
    }
    for (const Member& m : b.members) {
      at::Tensor p = parameters_[m.param];
      if (!p.requires_grad() || !p.is_leaf())
        throw std::invalid_argument("ShardedStep: a parameter is not a leaf requiring grad");
      const at::Tensor values = p.detach().reshape({-1});
      // The piece of this parameter inside this rank's chunk, if any.
      const int64_t begin = std::max(m.offset, mine), end = std::min(m.offset + m.numel, mine + chunk);
      if (b.bf16 && begin < end)
        b.masters.narrow(0, begin - mine, end - begin).copy_(values.narrow(0, begin - m.offset, end - begin));
      at::Tensor place = b.params.narrow(0, m.offset, m.numel);
      place.copy_(values);  // a working copy: rounded to BF16 (nearest even), as step() rounds
      p.set_data(place.view(p.sizes()));
      if (b.bf16) {
        // Its float32 gradient comes through the sink; autograd's own would be BF16.
        const Member member = m;
        attach_weight_gradient_sink(p, [this, k, member](const at::Tensor& g) { gradient_received(k, member, g); });
        sunk_.push_back(p);
      } else {
        if (!shard_gradients_) p.mutable_grad() = b.grads.narrow(0, m.offset, m.numel).view(p.sizes());
        auto accumulator = torch::autograd::impl::grad_accumulator(p);
        hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<Hook>(this, k, m.param)));
        accumulators_.push_back(std::move(accumulator));
      }
      if (begin >= end) continue;
      Segment s;
      s.param = m.param;
      s.logical = logical_start_[m.param] + (begin - m.offset);
      s.length = end - begin;
      s.value = b.bf16 ? b.masters.narrow(0, begin - mine, end - begin) : b.params.narrow(0, begin, end - begin);
      s.value.mutable_grad() = b.shard.narrow(0, begin - mine, end - begin);
      (is_decayed(p) ? decayed : plain).push_back(s.value);
      segments_.push_back(std::move(s));
    }
  }
  std::sort(segments_.begin(), segments_.end(),
            [](const Segment& a, const Segment& b) { return a.logical < b.logical; });
  // AdamW as make_adamw sets it up, over this rank's pieces: the same groups, the same update.
  optimizer_ = make_adamw(std::move(decayed), std::move(plain), config.train);
}

ShardedStep::~ShardedStep() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  for (const at::Tensor& p : sunk_) detach_weight_gradient_sink(p);
}

void ShardedStep::zero_gradients() {
  for (Bucket& b : buckets_) {
    if (!shard_gradients_) b.grads.zero_();
    else b.shard.zero_();
  }
  if (shard_gradients_)
    for (at::Tensor& p : parameters_) p.mutable_grad().reset();
}

void ShardedStep::begin_backward(bool last) {
  std::lock_guard<std::mutex> lock(mutex_);
  // ZeRO-1 sums once per step, after the last backward has accumulated every micro-batch; ZeRO-2
  // after every backward, since it keeps no full gradients between them.
  if (!last && !shard_gradients_) return;
  armed_ = true;
  next_launch_ = 0;
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int64_t>(b.members.size());
    b.launched = false;
    b.work.reset();
  }
}

void ShardedStep::gradient_arrived(size_t bucket, size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;  // ZeRO-1, an earlier micro-batch of the step: accumulate only
  Bucket& b = buckets_[bucket];
  if (shard_gradients_) {
    // Into the staging buffer, and the parameter's own gradient freed.
    if (!b.grads.defined()) b.grads = at::zeros({b.padded}, b.shard.options());
    at::Tensor& grad = parameters_[param].mutable_grad();
    if (grad.defined()) {
      for (const Member& m : b.members)
        if (m.param == param) b.grads.narrow(0, m.offset, m.numel).copy_(grad.reshape({-1}));
      grad.reset();
    }
  }
  if (--b.pending == 0) launch_ready_in_order();
}

void ShardedStep::gradient_received(size_t bucket, const Member& member, const at::Tensor& gradient) {
  std::lock_guard<std::mutex> lock(mutex_);
  Bucket& b = buckets_[bucket];
  const at::Tensor flat = gradient.reshape({-1});
  if (!shard_gradients_) {
    // Added where AccumulateGrad adds a float32 parameter's gradient: its view of the bucket.
    b.grads.narrow(0, member.offset, member.numel).add_(flat);
    if (!armed_) return;  // an earlier micro-batch of the step: accumulate only
  } else {
    if (!b.grads.defined()) b.grads = at::zeros({b.padded}, b.shard.options());
    b.grads.narrow(0, member.offset, member.numel).copy_(flat);
  }
  if (--b.pending == 0) launch_ready_in_order();
}

void ShardedStep::launch_ready_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending <= 0) {
    const size_t k = next_launch_++;
    Bucket& b = buckets_[k];
    if (shard_gradients_ && !b.grads.defined()) b.grads = at::zeros({b.padded}, b.shard.options());
    b.work = group_.reduce_scatter_async(b.grads);
    b.launched = true;
    if (shard_gradients_) {
      in_flight_.push_back(k);
      in_flight_bytes_ += b.padded * static_cast<int64_t>(sizeof(float));
      while (in_flight_.size() > 2 && in_flight_bytes_ > kInFlightBytes) settle_oldest_in_flight();
    }
  }
}

// ZeRO-2: the oldest staged bucket's sum arrives in this rank's shard; its staging is freed.
void ShardedStep::settle_oldest_in_flight() {
  Bucket& b = buckets_[in_flight_.front()];
  in_flight_.pop_front();
  in_flight_bytes_ -= b.padded * static_cast<int64_t>(sizeof(float));
  DataParallel::wait(b.work);
  b.work.reset();
  b.shard.add_(group_.chunk_of(b.grads));
  b.grads = at::Tensor();
}

void ShardedStep::finish_buckets() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  // Parameters that got no gradient in this backward leave their buckets pending.
  for (size_t k = next_launch_; k < buckets_.size(); ++k) buckets_[k].pending = 0;
  launch_ready_in_order();
  if (shard_gradients_) {
    while (!in_flight_.empty()) settle_oldest_in_flight();
  } else {
    for (Bucket& b : buckets_) {
      DataParallel::wait(b.work);
      b.work.reset();
    }
  }
  armed_ = false;
}

void ShardedStep::end_backward(bool last) {
  if (!last && !shard_gradients_) return;
  finish_buckets();
}

at::Tensor ShardedStep::clip_gradients(double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  grads.reserve(segments_.size());
  for (const Segment& s : segments_) grads.push_back(s.value.grad());
  // Each rank's sum of squares in float64, summed over the ranks: one value everywhere.
  at::Tensor local = at::zeros({}, at::TensorOptions(at::kDouble).device(options_.device()));
  if (!grads.empty()) local = at::stack(compat::norms(grads)).to(at::kDouble).pow(2).sum();
  group_.sum(local);
  const at::Tensor norm = local.sqrt();
  if (!std::isinf(max_norm) && !grads.empty()) {
    // torch's rule, as the replicated step applies it, on the device: the float64 coefficient
    // max_norm / (norm + 1e-6), at most 1, rounded to float32 as the host's was (a factor of
    // exactly 1 leaves every gradient as it is).
    compat::scale_in_place(grads, at::clamp_max(max_norm / (norm + 1e-6), 1.0).to(at::kFloat));
  }
  return norm;
}

void ShardedStep::step(double lr) {
  set_learning_rate(*optimizer_, lr);
  adamw_step(*optimizer_);
  // Every rank's updated chunks into every rank's weights: a BF16 bucket's masters rounded into
  // this rank's chunk of the working copies first. The BF16 buckets travel as bytes (Gloo in
  // LibTorch 1.13 gathers no BF16).
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.reserve(buckets_.size());
  for (Bucket& b : buckets_) {
    if (!b.bf16) {
      works.push_back(group_.all_gather_async(b.params));
      continue;
    }
    group_.chunk_of(b.params).copy_(b.masters);
    at::Tensor bytes = b.params.view(at::kByte);
    works.push_back(group_.all_gather_async(bytes));
  }
  for (const auto& w : works) DataParallel::wait(w);
}

bool ShardedStep::keeps_master(const at::Tensor& param) const {
  return std::any_of(sunk_.begin(), sunk_.end(), [&](const at::Tensor& p) { return p.is_same(param); });
}

std::unordered_map<const c10::TensorImpl*, at::Tensor> ShardedStep::snapshot_masters(HostBuffers& host, bool root) {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> out;
  torch::NoGradGuard no_grad;
  // One bucket at a time through one float32 buffer: the masters are never whole on the device.
  // On CUDA the next gather waits for the copy out of the buffer (NCCL orders its stream after
  // the current one).
  int64_t largest = 0;
  for (const Bucket& b : buckets_)
    if (b.bf16) largest = std::max(largest, b.padded);
  if (largest == 0) return out;
  const at::Tensor gathered = at::empty({largest}, options_);
  const bool pinned = options_.device().is_cuda();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    if (!b.bf16) continue;
    at::Tensor whole = gathered.narrow(0, 0, b.padded);
    group_.chunk_of(whole).copy_(b.masters);
    DataParallel::wait(group_.all_gather_async(whole));
    if (!root) continue;
    at::Tensor copy = host.buffer("masters/" + std::to_string(k), b.padded, at::kFloat, pinned);
    copy.copy_(whole, /*non_blocking=*/pinned);
    for (const Member& m : b.members)
      out[parameters_[m.param].unsafeGetTensorImpl()] =
          copy.narrow(0, m.offset, m.numel).view(parameters_[m.param].sizes());
  }
  return out;
}

void ShardedStep::load_masters(const std::unordered_map<const c10::TensorImpl*, at::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  const int64_t world = group_.world();
  for (Bucket& b : buckets_) {
    if (!b.bf16) continue;
    const int64_t chunk = b.padded / world, mine = chunk * group_.rank();
    for (const Member& m : b.members) {
      const auto it = saved.find(parameters_[m.param].unsafeGetTensorImpl());
      if (it == saved.end()) throw std::logic_error("ShardedStep: model.pt's master of a working copy was not passed");
      const int64_t begin = std::max(m.offset, mine), end = std::min(m.offset + m.numel, mine + chunk);
      if (begin >= end) continue;
      b.masters.narrow(0, begin - mine, end - begin)
          .copy_(it->second.reshape({-1}).narrow(0, begin - m.offset, end - begin));
    }
  }
}

std::unique_ptr<OptimizerSnapshot> ShardedStep::snapshot_optimizer(int64_t step, HostBuffers& host) {
  // The moments of this rank's pieces, back to back, straight into host buffers (no device copy
  // of the whole shard first).
  std::vector<int64_t> table;
  int64_t total = 0;
  for (const Segment& s : segments_) {
    table.push_back(s.logical);
    table.push_back(s.length);
    total += s.length;
  }
  const bool pinned = options_.device().is_cuda();
  at::Tensor avg = host.buffer("shard/exp_avg", total, at::kFloat, pinned);
  at::Tensor avg_sq = host.buffer("shard/exp_avg_sq", total, at::kFloat, pinned);
  int64_t at = 0;
  for (const Segment& s : segments_) {
    at::Tensor to_avg = avg.narrow(0, at, s.length), to_avg_sq = avg_sq.narrow(0, at, s.length);
    at += s.length;
    const auto it = optimizer_->state().find(compat::optimizer_state_key(*optimizer_, s.value.unsafeGetTensorImpl()));
    if (it == optimizer_->state().end()) {  // before the first step: zero moments
      to_avg.zero_();
      to_avg_sq.zero_();
      continue;
    }
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    to_avg.copy_(st.exp_avg().reshape({-1}), /*non_blocking=*/pinned);
    to_avg_sq.copy_(st.exp_avg_sq().reshape({-1}), /*non_blocking=*/pinned);
  }
  auto archive = std::make_unique<torch::serialize::OutputArchive>();
  archive->write("segments", at::tensor(table, at::TensorOptions(at::kLong)).view({-1, 2}));
  archive->write("exp_avg", avg);
  archive->write("exp_avg_sq", avg_sq);
  archive->write("logical_size", at::scalar_tensor(logical_size_, at::TensorOptions(at::kLong)));
  archive->write("step", at::scalar_tensor(step, at::TensorOptions(at::kLong)));
  return std::make_unique<ShardSnapshot>(group_, step, std::move(archive));
}

void ShardedStep::load_optimizer(const fs::path& dir, const std::vector<CheckpointFile>& files, int64_t step) {
  std::vector<std::string> shards;
  for (const CheckpointFile& f : files)
    if (parse_optimizer_shard_file(f.name)) shards.push_back(f.name);
  if (shards.empty())
    throw contract::ConfigError(
        "parallel.shard: checkpoint " + dir.string() + " holds the AdamW state whole (" + kOptimizerFile +
        ", a run with parallel.shard: none); this run shards it (parallel.shard: " +
        std::string(contract::to_string(shard_gradients_ ? contract::ShardLevel::kGradients
                                                           : contract::ShardLevel::kOptimizer)) +
        "): resume it with the shard setting it was written under");
  // This rank's moments, assembled from whichever shards hold them: the rank's own file when the
  // rank count is the checkpoint's, every shard otherwise (re-sharding).
  std::vector<at::Tensor> avg, avg_sq;
  std::vector<int64_t> covered(segments_.size(), 0);
  for (const Segment& s : segments_) {
    avg.push_back(at::zeros({s.length}, at::TensorOptions(at::kFloat)));
    avg_sq.push_back(at::zeros({s.length}, at::TensorOptions(at::kFloat)));
  }
  const std::string own = optimizer_shard_file(group_.rank(), group_.world());
  const bool same_layout = std::find(shards.begin(), shards.end(), own) != shards.end() &&
                           static_cast<int>(shards.size()) == group_.world();
  std::vector<std::pair<int64_t, int64_t>> read_rows;  // every file's, to check they are disjoint
  for (const std::string& name : shards) {
    if (same_layout && name != own) continue;
    const ShardTable t = read_shard(dir / name, logical_size_, step);
    read_rows.insert(read_rows.end(), t.rows.begin(), t.rows.end());
    int64_t at_data = 0;
    for (const auto& [begin, length] : t.rows) {
      // The segments of this rank overlapping [begin, begin + length).
      auto it = std::upper_bound(segments_.begin(), segments_.end(), begin,
                                 [](int64_t v, const Segment& s) { return v < s.logical; });
      if (it != segments_.begin()) --it;
      for (; it != segments_.end() && it->logical < begin + length; ++it) {
        const int64_t from = std::max(begin, it->logical), to = std::min(begin + length, it->logical + it->length);
        if (from >= to) continue;
        const size_t i = static_cast<size_t>(it - segments_.begin());
        avg[i].narrow(0, from - it->logical, to - from).copy_(t.exp_avg.narrow(0, at_data + from - begin, to - from));
        avg_sq[i].narrow(0, from - it->logical, to - from).copy_(t.exp_avg_sq.narrow(0, at_data + from - begin, to - from));
        covered[i] += to - from;
      }
      at_data += length;
    }
  }
  // Across the files too: two shards claiming the same elements are not one rank count's.
  std::sort(read_rows.begin(), read_rows.end());
  for (size_t i = 1; i < read_rows.size(); ++i)
    if (read_rows[i].first < read_rows[i - 1].first + read_rows[i - 1].second)
      throw CheckpointRejected("two optimizer shards hold the same elements (from " +
                               std::to_string(read_rows[i].first) + ")");
  for (size_t i = 0; i < segments_.size(); ++i)
    if (covered[i] != segments_[i].length)
      throw CheckpointRejected("the optimizer shards do not cover the parameters exactly (elements " +
                               std::to_string(segments_[i].logical) + " to " +
                               std::to_string(segments_[i].logical + segments_[i].length) + ")");
  // All read and checked: now the optimizer's state.
  optimizer_->state().clear();
  if (step == 0) return;
  for (size_t i = 0; i < segments_.size(); ++i) {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(step);
    state->exp_avg(avg[i].to(options_.device()));
    state->exp_avg_sq(avg_sq[i].to(options_.device()));
    optimizer_->state()[compat::optimizer_state_key(*optimizer_, segments_[i].value.unsafeGetTensorImpl())] =
        std::move(state);
  }
}

int64_t ShardedStep::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const Segment& s : segments_) n += s.length;
  return 2 * n * static_cast<int64_t>(sizeof(float));
}

int64_t ShardedStep::weight_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_)
    n += b.params.numel() * static_cast<int64_t>(b.params.element_size()) +
         (b.bf16 ? b.masters.numel() * static_cast<int64_t>(sizeof(float)) : 0);
  return n;
}

int64_t ShardedStep::gradient_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) n += shard_gradients_ ? b.shard.numel() : b.padded;
  return n * static_cast<int64_t>(sizeof(float));
}

}  // namespace mxablate::trainer
