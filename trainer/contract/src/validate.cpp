// The run config's ranges (validate.h): each key's own range, then the limits no attempt of the
// trainer could pass (validate_limits, validate_runnable).
#include "validate.h"

#include <cmath>
#include <string>
#include <utility>

#include "json_reading.h"
#include "mxablate/contract/gemm_routing.h"

namespace mxablate::contract::detail {
namespace {

using nlohmann::json;

// Limits beyond the planner's runnable rules (validate_runnable): quantization keys number steps
// in 32 bits (the last value reserved); sequences and batches no machine holds; learning rates
// and epsilons that are typing mistakes. Non-finite numbers never get this far: read_value
// refuses them.
void validate_limits(const RunConfig& c) {
  constexpr int64_t kMaxSteps = 0xFFFFFFFEll;
  const TrainConfig& t = c.train;
  require(t.global_batch_tokens <= (int64_t{1} << 40), "train.global_batch_tokens",
          "must be at most 2^40", t.global_batch_tokens);
  // Budgets beyond 9e15 tokens are validate_runnable's to refuse.
  if (t.global_batch_tokens > 0 && t.max_tokens <= kLargestFloatInteger)
    require(std::ceil(t.max_tokens / static_cast<double>(t.global_batch_tokens)) <=
                static_cast<double>(kMaxSteps),
            "train.max_tokens",
            "needs more than " + std::to_string(kMaxSteps) +
                " optimizer steps of train.global_batch_tokens (the most a run can number)",
            t.max_tokens);
  require(t.lr <= 10, "train.lr", "must be at most 10", t.lr);
  require(t.eps <= 1, "train.eps", "must be at most 1", t.eps);
  if (c.target.val_loss)
    require(*c.target.val_loss > 0, "target.val_loss", "must be > 0 (or null)", *c.target.val_loss);
  require(c.target.hopeless_confidence > 0.5 && c.target.hopeless_confidence < 1,
          "target.hopeless_confidence", "must be in (0.5, 1)", c.target.hopeless_confidence);
}

// FP8 delayed scaling (docs/design.md §3): the window and margin in range, and set only where
// they mean something. A history or margin under current scaling, or delayed scaling in a config
// without an FP8 GEMM, would compute exactly what the config without it computes under another
// run id: refused, so that no two ids name one computation.
void validate_fp8_scaling(const RunConfig& c) {
  const QuantConfig& q = c.quant;
  require(q.fp8_amax_history >= 1 && q.fp8_amax_history <= kMaxFp8AmaxHistory, "quant.fp8_amax_history",
          "must be in [1, " + std::to_string(kMaxFp8AmaxHistory) + "] (steps)", q.fp8_amax_history);
  require(q.fp8_margin >= 0 && q.fp8_margin <= kMaxFp8Margin, "quant.fp8_margin",
          "must be in [0, " + std::to_string(kMaxFp8Margin) + "]", q.fp8_margin);
  if (q.fp8_scaling == Fp8Scaling::kCurrent) {
    const QuantConfig defaults;
    require(q.fp8_amax_history == defaults.fp8_amax_history, "quant.fp8_amax_history",
            "applies only with quant.fp8_scaling: delayed (this config scales FP8 by the current amax)",
            q.fp8_amax_history);
    require(q.fp8_margin == defaults.fp8_margin, "quant.fp8_margin",
            "applies only with quant.fp8_scaling: delayed (this config scales FP8 by the current amax)",
            q.fp8_margin);
  } else if (!has_fp8_gemm(c)) {
    throw ConfigError("quant.fp8_scaling: \"delayed\" scales the operands of FP8 GEMMs, and no GEMM of this "
                      "config is fp8 (precision, precision_schedule and overrides)");
  }
}

// Values that pass the per-key rules above yet make every attempt of the trainer fail or never
// end: a thread pool of a million threads, a decoupled weight decay whose step lr * weight_decay
// reaches 1 (weights flip sign or overflow to inf on the first step), token counts whose step
// arithmetic (int64 steps) would overflow, a GPU-only GEMM path on the CPU.
void validate_runnable(const RunConfig& c) {
  constexpr int kMaxThreads = 1024;
  require(c.threads >= 0 && c.threads <= kMaxThreads, "threads", "must be in [0, 1024] (0: the library default)",
          c.threads);
  require(c.train.weight_decay >= 0, "train.weight_decay", "must be >= 0",
          c.train.weight_decay);
  require(c.train.lr * c.train.weight_decay < 1, "train.weight_decay",
          "must keep train.lr * train.weight_decay below 1 (the decay step; lr " +
              json(c.train.lr).dump() + ")",
          c.train.weight_decay);
  for (const auto& [name, value] : {std::pair{"train.max_tokens", c.train.max_tokens},
                                    std::pair{"train.warmup_tokens", c.train.warmup_tokens},
                                    std::pair{"eval.every_tokens", c.eval.every_tokens},
                                    std::pair{"eval.tokens", c.eval.tokens}})
    require(value <= kLargestFloatInteger, name, "must be at most 9e15", value);
  // The trainer resolves the GEMM path before the first step, whatever the precisions.
  if (demands_fp8_tensor_cores(c.quant.gemm_path) && c.device != Device::kCUDA)
    throw ConfigError("quant.gemm_path: \"" + std::string(to_string(c.quant.gemm_path)) +
                      "\" (FP8 and MXFP4 GEMMs on FP8 tensor cores) needs device: cuda, this run's device is \"" +
                      std::string(to_string(c.device)) + "\"");
  validate_fp8_scaling(c);
  // What train.cuda_graphs: on needs (a CUDA device, one rank, no per-step read-back) is one
  // rule, the trainer's (trainer/plan step_capture.h), which the planner applies too: it needs
  // the layers' plans, which the contract does not make.
}

}  // namespace

void validate(const RunConfig& c) {
  require(c.data.seq_len > 0, "data.seq_len", "must be > 0", c.data.seq_len);
  require(c.data.seq_len <= (int64_t{1} << 20), "data.seq_len", "must be at most 1048576",
          c.data.seq_len);
  const TrainConfig& t = c.train;
  require(t.global_batch_tokens > 0 && t.global_batch_tokens % c.data.seq_len == 0,
          "train.global_batch_tokens", "must be a positive multiple of data.seq_len",
          t.global_batch_tokens);
  constexpr int kMaxRanks = 4096;
  require(c.parallel.data >= 1 && c.parallel.data <= kMaxRanks, "parallel.data",
          "must be in [1, 4096] (the ranks of one run)", c.parallel.data);
  require(t.micro_batch_tokens >= 0 && (t.micro_batch_tokens == 0 ||
                                        (t.micro_batch_tokens % c.data.seq_len == 0 &&
                                         t.global_batch_tokens % t.micro_batch_tokens == 0)),
          "train.micro_batch_tokens",
          "must be 0 or a multiple of data.seq_len dividing train.global_batch_tokens",
          t.micro_batch_tokens);
  // The micro-batch is set explicitly for several ranks: it decides where the quantizers' blocks and
  // random streams begin (docs/design.md §4, "Data-parallel runs"), so the same run on one rank is the same config.
  if (c.parallel.data > 1)
    require(micro_batches_per_step(c) % c.parallel.data == 0, "parallel.data",
            "must divide the step's " + std::to_string(micro_batches_per_step(c)) +
                " micro-batches (train.global_batch_tokens / train.micro_batch_tokens; set "
                "train.micro_batch_tokens to split a step among the ranks)",
            c.parallel.data);
  if (c.parallel.shard != ShardLevel::kNone && c.parallel.data < 2)
    throw ConfigError("parallel.shard: \"" + std::string(to_string(c.parallel.shard)) +
                      "\" splits state over the ranks of parallel.data, which is " +
                      std::to_string(c.parallel.data) + " (set parallel.data to 2 or more, or shard: none)");
  require(t.max_tokens > 0, "train.max_tokens", "must be > 0", t.max_tokens);
  require(t.lr > 0, "train.lr", "must be > 0", t.lr);
  require(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1, "train.min_lr_ratio", "must be in [0, 1]",
          t.min_lr_ratio);
  require(t.warmup_tokens >= 0, "train.warmup_tokens", "must be >= 0", t.warmup_tokens);
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "must be in [0, 1)", t.beta1);
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "must be in [0, 1)", t.beta2);
  require(t.eps > 0, "train.eps", "must be > 0", t.eps);
  require(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 disables)", t.grad_clip);
  validate_limits(c);
  require(c.eval.every_tokens > 0, "eval.every_tokens", "must be > 0", c.eval.every_tokens);
  require(c.eval.tokens >= c.data.seq_len, "eval.tokens", "must be at least one sequence",
          c.eval.tokens);
  require(c.quant.bf16_first_blocks >= 0, "quant.bf16_first_blocks", "must be >= 0",
          c.quant.bf16_first_blocks);
  require(c.quant.bf16_last_blocks >= 0, "quant.bf16_last_blocks", "must be >= 0",
          c.quant.bf16_last_blocks);
  require(c.divergence.loss_spike_factor > 1, "divergence.loss_spike_factor", "must be > 1",
          c.divergence.loss_spike_factor);
  require(c.divergence.grad_norm_factor > 1, "divergence.grad_norm_factor", "must be > 1",
          c.divergence.grad_norm_factor);
  require(c.divergence.val_regression >= 0, "divergence.val_regression", "must be >= 0",
          c.divergence.val_regression);
  require(c.divergence.fatal_after_spikes >= 0, "divergence.fatal_after_spikes", "must be >= 0",
          c.divergence.fatal_after_spikes);
  require(c.checkpoint.every_steps >= 0, "checkpoint.every_steps", "must be >= 0",
          c.checkpoint.every_steps);
  require(c.checkpoint.keep >= 1, "checkpoint.keep", "must be >= 1", c.checkpoint.keep);
  require(c.telemetry.train_every_steps >= 1, "telemetry.train_every_steps", "must be >= 1",
          c.telemetry.train_every_steps);
  require(c.telemetry.quant_every_steps >= 0, "telemetry.quant_every_steps", "must be >= 0",
          c.telemetry.quant_every_steps);
  validate_runnable(c);
}

}  // namespace mxablate::contract::detail
