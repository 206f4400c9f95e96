#include "run_record.h"

#include <ATen/Parallel.h>

#include <filesystem>
#include <iostream>

#include "mxablate/contract/gemm_routing.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {

RunRecord::RunRecord(const RunSetup& setup, const std::string& run_dir)
    : s_(setup),
      events_path_((std::filesystem::path(run_dir) / "events.jsonl").string()),
      mllog_(setup.config.mllog && setup.rank.rank == 0, std::cout) {}

void RunRecord::open(bool writes) {
  writes_ = writes;
  events_ = writes ? std::make_unique<RunEvents>(events_path_) : std::make_unique<RunEvents>();
}

void RunRecord::say(const std::string& line) const {
  if (writes_) std::cerr << "mxablate-train: " << line << "\n";
}

void RunRecord::set_setup_timing(Clock::time_point process_start, double standby_s, bool prestarted) {
  process_start_ = process_start;
  standby_s_ = standby_s;
  prestarted_ = prestarted;
}

void RunRecord::training_starts(int64_t tokens) {
  started_ = Clock::now();
  setup_s_ = std::max(0.0, seconds_between(process_start_, started_) - standby_s_);
  last_train_event_ = started_;
  tokens_at_start_ = tokens;
}

void RunRecord::run_start(Progress p, int64_t attempt, bool resumed) {
  const int64_t vocab = s_.dataset->manifest.tokenizer.vocab_size;
  const double epochs = s_.config.train.max_tokens / static_cast<double>(s_.dataset->train.size());
  if (epochs > 2.0)
    std::cerr << "mxablate-train: warning: " << s_.config.train.max_tokens << " training tokens are "
              << epochs << " epochs of " << s_.data_dir
              << "; beyond ~2 epochs small models overfit it (watch for val_regression events)\n";
  nlohmann::json details = {
      {"attempt", attempt},
      {"resumed", resumed},
      {"device", compat::device_description(s_.device)},
      {"params", s_.model->parameter_count()},
      {"non_embedding_params", s_.model->parameter_count() - embedding_parameter_count(s_.shape, vocab)},
      {"versions", {{"mxablate", "0.1.0"}, {"torch", compat::torch_version()}, {"compiler", __VERSION__}}},
      {"model", s_.shape.name},
      {"vocab_size", vocab},
      {"dataset", s_.data_dir},
      {"train_tokens_available", s_.dataset->train.size()},
      {"data_epochs", epochs},
      {"total_steps", s_.plan.total_steps},
      {"threads", at::get_num_threads()},
      {"ranks", s_.rank.world},
      // What this rank holds of the optimizer state and gradients (sharded runs hold a slice).
      {"shard", contract::to_string(s_.config.parallel.shard)},
      {"optimizer_state_bytes_per_rank", s_.engine->optimizer_state_bytes()},
      {"gradient_bytes_per_rank", s_.engine->gradient_bytes()},
      {"weight_bytes_per_rank", s_.engine->weight_bytes()},
      {"run_id", s_.config.run_id},
      {"arm", s_.config.arm},
      // Which engine computed each GEMM precision (and why auto fell back, if it did): a
      // result is attributable to the FP8 tensor cores or the emulation.
      {"gemm_routes", contract::gemm_routes_json(s_.config.quant.gemm_path, s_.routes)},
      // Whether each step's passes were replayed as a CUDA graph, and why (step_capture.h).
      {"cuda_graphs", {{"graphed", s_.capture.graphed}, {"reason", s_.capture.reason}}},
      // Whether each layer quantized its weight once per step (weight_cache.h), and why.
      {"weight_cache", {{"on", s_.weight_cache.on}, {"reason", s_.weight_cache.reason}}},
      // Which blocks recomputed in the backward (recompute_plan.h: `auto` resolved here), and why.
      {"recompute", {{"blocks", s_.recompute.blocks}, {"of", s_.shape.n_layers},
                     {"selective", s_.recompute.selective},
                     {"reason", s_.recompute.reason}}},
  };
  // Where FP8 decode scales came from (docs/design.md §3): the baseline a result belongs to.
  details["fp8_scaling"] = {{"mode", contract::to_string(s_.config.quant.fp8_scaling)}};
  if (s_.config.quant.fp8_scaling == contract::Fp8Scaling::kDelayed) {
    details["fp8_scaling"]["amax_history"] = s_.config.quant.fp8_amax_history;
    details["fp8_scaling"]["margin"] = s_.config.quant.fp8_margin;
  }
  if (prestarted_) details["prestarted"] = true;
  events_->run_start(p, std::move(details));
  if (mllog_.enabled()) {
    mllog_.start("run_start");
    mllog_.point("seed", s_.config.train.seed);
    mllog_.point("global_batch_size", s_.plan.tokens_per_step / s_.plan.seq_len);
    mllog_.point("max_sequence_length", s_.plan.seq_len);
    mllog_.point("gradient_accumulation_steps", s_.plan.micro_batches_per_step);
    mllog_.point("opt_base_learning_rate", s_.config.train.lr);
    mllog_.point("opt_learning_rate_warmup_steps", s_.plan.warmup_steps);
    mllog_.point("opt_adamw_weight_decay", s_.config.train.weight_decay);
    mllog_.point("opt_gradient_clip_norm", s_.config.train.grad_clip);
    mllog_.point("train_samples", s_.dataset->train.size() / s_.plan.seq_len);
    mllog_.point("eval_samples", s_.plan.eval_sequences);
  }
}

void RunRecord::step_done(Progress p, double loss, double lr, double grad_norm) {
  if (p.step % s_.config.telemetry.train_every_steps != 0 && p.step != 1) return;
  const auto now = Clock::now();
  const double dt = seconds_between(last_train_event_, now);
  const double tps = dt > 0 ? static_cast<double>(p.tokens - tokens_at_last_train_event_) / dt : 0;
  events_->train(p, loss, lr, grad_norm, tps);
  last_train_event_ = now;
  tokens_at_last_train_event_ = p.tokens;
}

void RunRecord::quant_stats(Progress p, const std::vector<QuantSession::Record>& records) {
  for (const auto& r : records)
    events_->quant_stats(p, r.layer, s_.layer_plans.layers[static_cast<size_t>(r.layer)].name, gemm_name(r.gemm),
                         operand_name(r.gemm, r.operand), r.telemetry, r.occ_fraction);
}

RunEvents::End RunRecord::end(int64_t tokens) const {
  const double wall = seconds_between(started_, Clock::now());
  RunEvents::End end;
  end.wall_s = wall;
  end.tokens_per_s = wall > 0 ? static_cast<double>(tokens - tokens_at_start_) / wall : 0;
  end.peak_rss_bytes = peak_rss_bytes();
  end.peak_gpu_bytes = compat::peak_device_bytes(s_.device);
  // train_s is the part of wall_s that is neither evaluation nor checkpoints; a slot is busy for
  // train_s + eval_s + checkpoint_s (orchestrator busy_time.h, docs/design.md §9 "Busy slots").
  end.setup_s = setup_s_;
  if (prestarted_) end.standby_s = standby_s_;
  end.eval_s = eval_s_;
  end.checkpoint_s = checkpoint_s_;
  end.train_s = std::max(0.0, wall - eval_s_ - checkpoint_s_);
  return end;
}

}  // namespace mxablate::trainer
