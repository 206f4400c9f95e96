#include "mxablate/trainer/training_run.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "mxablate/contract/gemm_route.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/standby.h"
#include "mxablate/data/dataset_location.h"
#include "mxablate/data/manifest.h"
#include "mxablate/kernels/torch/quantized_gemm.h"
#include "mxablate/trainer/batches.h"
#include "mxablate/trainer/checkpoint.h"
#include "mxablate/trainer/curve_projection.h"
#include "mxablate/trainer/divergence.h"
#include "mxablate/trainer/live_target.h"
#include "mxablate/trainer/mllog.h"
#include "mxablate/trainer/model.h"
#include "mxablate/trainer/optimizer.h"
#include "mxablate/trainer/step_engine.h"
#include "mxablate/trainer/plan_rules.h"
#include "mxablate/trainer/process_stats.h"
#include "mxablate/trainer/run_events.h"
#include "mxablate/trainer/ranks.h"
#include "mxablate/trainer/run_fit.h"
#include "mxablate/trainer/stop_signals.h"
#include "mxablate/trainer/training_plan.h"
#include "checkpoint_writer.h"
#include "data_parallel.h"
#include "host_buffers.h"
#include "run_setup.h"
#include "error_line.h"
#include "step_profiler.h"
#include "telemetry_setting.h"
#include "torch_compat.h"

namespace mxablate::trainer {
namespace {

namespace fs = std::filesystem;
using contract::ConfigError;
using contract::RunConfig;
using Clock = std::chrono::steady_clock;

}  // namespace

class TrainingRun::Loop {
 public:
  Loop(RunSetup& setup, const TrainOptions& options)
      : s_(setup), options_(options), dp_(setup.group.get()), detector_(setup.config.divergence, setup.plan.warmup_steps),
        mllog_(setup.config.mllog && setup.rank.rank == 0, std::cout),
        events_path_((fs::path(options.run_dir) / "events.jsonl").string()),
        profiler_(options.profile_first_step > 0 && setup.rank.rank == 0
                      ? std::optional<ProfileRequest>(ProfileRequest{options.profile_first_step,
                                                                     options.profile_last_step,
                                                                     options.profile_trace})
                      : std::nullopt,
                  setup.device),
        live_target_(setup.config.target, options.run_dir),
        writer_(!options.synchronous_checkpoints) {}

  int run() {
    install_stop_signal_handlers();
    bool resumed_from_checkpoint = false;
    if (root()) {
      const LogSummary history = summarize_log(events_path_);
      if (!options_.resume && (history.run_starts > 0 || !history.checkpoints.empty()))
        throw ConfigError(events_path_ + " already holds a run; pass --resume to continue it");
      if (options_.resume && history.run_end && is_final(*history.run_end)) {
        const int code = finished_code(*history.run_end);
        if (dp_) dp_->publish(kStartKey, "finished " + std::to_string(code));
        return code;
      }
      events_ = std::make_unique<RunEvents>(events_path_);
      if (options_.resume) resumed_from_checkpoint = restore(history);
      if (resumed_from_checkpoint) restore_projection();
      if (resumed_from_checkpoint) {
        // The checkpoint's steps ran on the engines its attempt recorded (docs/design.md §3).
        const nlohmann::json before = history.last_run_start && history.last_run_start->contains("gemm_routes")
                                          ? (*history.last_run_start)["gemm_routes"]
                                          : nlohmann::json();
        const std::string change = contract::gemm_routes_change(before, s_.routes, s_.config);
        if (!change.empty()) throw ConfigError("quant.gemm_path: " + change);
      }
      write_run_start(history.run_starts + 1, resumed_from_checkpoint);
      if (dp_) dp_->publish(kStartKey, resumed_from_checkpoint ? "checkpoint " + restored_from_ : "fresh");
    } else {
      // Rank 0 alone reads and writes the run directory; the others start where it decided.
      events_ = std::make_unique<RunEvents>();
      const std::string start = dp_->receive(kStartKey);
      if (start.rfind("finished ", 0) == 0) return std::stoi(start.substr(9));
      if (start.rfind("checkpoint ", 0) == 0) {
        // Rank 0 verified every file of it; here only what this rank reads is checked.
        state_ = load_checkpoint(start.substr(11), *s_.model, *s_.engine, expectation(), false);
        detector_.restore(state_.divergence);
        resumed_from_checkpoint = true;
      }
    }

    // FP8 delayed scaling: the window of the history the checkpoint restored (or of none).
    if (const auto& h = s_.model->session().fp8_history) h->refresh();
    // A resumed run continues in the precision phase it had reached; the switch was announced
    // when it happened.
    enter_precision_phase(precision_phase(s_.config, static_cast<double>(state_.tokens)), false);
    started_ = Clock::now();
    setup_s_ = std::max(0.0, seconds_between(process_start_, started_) - standby_s_);
    last_train_event_ = started_;
    tokens_at_start_ = state_.tokens;
    if (!resumed_from_checkpoint) {
      if (const auto code = evaluate_and_judge()) return *code;
    }
    while (state_.step < s_.plan.total_steps) {
      if (const auto code = train_step()) return *code;
    }
    return finish(state_.target_reached ? contract::run_status::kConverged
                                        : contract::run_status::kBudgetExhausted,
                  exit_code::kSuccess, "");
  }

  // Where the time before the first step went (docs/design.md §9, "Busy slots"): the process
  // started at `process_start`; a prestarted run then waited `standby_s` for its slot.
  void set_setup_timing(Clock::time_point process_start, double standby_s, bool prestarted) {
    process_start_ = process_start;
    standby_s_ = standby_s;
    prestarted_ = prestarted;
  }

  // After an exception: record the failure if the log is open.
  void record_failure(const std::string& why, int code) {
    if (!events_) return;
    failed_ = true;
    try {
      finish(contract::run_status::kFailed, code, why);
    } catch (...) {
    }
  }

 private:
  Progress progress() const { return {state_.step, state_.tokens}; }

  // Interrupted and failed runs are resumed; the others ended for good.
  static bool is_final(const nlohmann::json& run_end) {
    const std::string status = run_end.value("status", "");
    return status == contract::run_status::kConverged ||
           status == contract::run_status::kBudgetExhausted ||
           status == contract::run_status::kProjectedNotReached ||
           status == contract::run_status::kDiverged;
  }

  static int finished_code(const nlohmann::json& run_end) {
    const std::string status = run_end.value("status", "");
    std::cerr << "mxablate-train: the run already ended (" << status << "); nothing to resume\n";
    return status == contract::run_status::kDiverged ? exit_code::kDiverged : exit_code::kSuccess;
  }

  // Loads the newest intact checkpoint (true) or, without one, restarts from scratch (false);
  // either way a resume event tells readers which earlier events belong to a lost timeline.
  // Each checkpoint that fails verification is set aside and recorded (checkpoint_rejected):
  // a damaged newest checkpoint costs the steps since the one before it, never the run.
  CheckpointExpectation expectation() const {
    CheckpointExpectation expect;
    expect.run_id = s_.config.run_id;
    expect.trajectory_config = trajectory_config(contract::to_json(s_.config));
    expect.total_steps = s_.plan.total_steps;
    expect.tokens_per_step = s_.plan.tokens_per_step;
    expect.samples_per_step = s_.plan.micro_batches_per_step * s_.plan.sequences_per_micro_batch;
    return expect;
  }

  bool restore(const LogSummary& history) {
    const CheckpointExpectation expect = expectation();
    std::vector<std::pair<std::string, std::string>> rejected;
    std::optional<std::string> used;
    for (const std::string& path : checkpoints_newest_first(options_.run_dir)) {
      try {
        state_ = load_checkpoint(path, *s_.model, *s_.engine, expect);
        used = path;
        break;
      } catch (const CheckpointOfAnotherRun& e) {
        // A run directory reused for another config (or another run's copy): falling back would
        // set aside good checkpoints and train a different run under this one's name.
        throw ConfigError("checkpoint " + path + ": " + e.what() +
                          " (resume with the config it was written under, or use a new run directory)");
      } catch (const CheckpointRejected& e) {
        rejected.emplace_back(path, e.what());
      }
    }
    if (used) {
      restored_from_ = *used;
      detector_.restore(state_.divergence);
      // The timeline that survives ends where the checkpoint was taken: its last event then is
      // state.json's events_seq. The checkpoint's own event survives too when it came right
      // after; written once the write was seen complete (docs/design.md §4, "Checkpoints and
      // exact resume"), it may come after later steps' events, which are lost with it, and a
      // write killed after publishing has none.
      const std::optional<int64_t> event = history.checkpoint_seq(*used, state_.step);
      const int64_t discard_after = event && *event == state_.events_seq + 1 ? *event : state_.events_seq;
      events_->resume(progress(), discard_after, *used);
    } else {
      events_->resume(progress(), 0, "");
    }
    // After the resume event, which discards the lost timeline before it.
    for (const auto& [path, reason] : rejected) {
      const std::string moved_to = set_aside_checkpoint(path);
      events_->checkpoint_rejected(progress(), path, reason, moved_to);
      std::cerr << "mxablate-train: checkpoint " << path << " rejected: " << reason
                << (used ? "; resuming from " + *used : std::string("; no intact checkpoint, starting over"))
                << "\n";
    }
    return used.has_value();
  }

  void write_run_start(int64_t attempt, bool resumed) {
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
        {"versions",
         {{"mxablate", "0.1.0"}, {"torch", compat::torch_version()}, {"compiler", __VERSION__}}},
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
        {"run_id", s_.config.run_id},
        {"arm", s_.config.arm},
        // Which engine computed each GEMM precision (and why auto fell back, if it did): a
        // result is attributable to the FP8 tensor cores or the emulation.
        {"gemm_routes", contract::gemm_routes_json(s_.config.quant.gemm_path, s_.routes)},
        // Whether each step's passes were replayed as a CUDA graph, and why (step_capture.h).
        {"cuda_graphs", {{"graphed", s_.capture.graphed}, {"reason", s_.capture.reason}}},
        // Whether each layer quantized its weight once per step (weight_cache.h), and why.
        {"weight_cache", {{"on", s_.weight_cache.on}, {"reason", s_.weight_cache.reason}}},
    };
    // Where FP8 decode scales came from (docs/design.md §3): the baseline a result belongs to.
    details["fp8_scaling"] = {{"mode", contract::to_string(s_.config.quant.fp8_scaling)}};
    if (s_.config.quant.fp8_scaling == contract::Fp8Scaling::kDelayed) {
      details["fp8_scaling"]["amax_history"] = s_.config.quant.fp8_amax_history;
      details["fp8_scaling"]["margin"] = s_.config.quant.fp8_margin;
    }
    if (prestarted_) details["prestarted"] = true;
    events_->run_start(progress(), std::move(details));
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

  // The mean loss over the validation set; a data-parallel run's ranks each take every
  // world-th batch and sum.
  double evaluate() {
    torch::NoGradGuard no_grad;
    s_.model->session().collect_telemetry = false;
    // run_end's mxfp4_as_fp8_calls are the training passes' (an evaluation adds Fprop calls only).
    const SessionFlagSetting not_counted(s_.model->session(), &QuantSession::count_route_calls, false);
    ++s_.model->session().weights_generation;  // the weights may have changed since the last pass
    // Summed on the device in double, in the order and with the roundings the host sum had
    // (each loss widened, times its batch's sequences, then added): the same bits, but one
    // read-back per evaluation instead of one per batch, so the batches queue back to back.
    at::Tensor device_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(s_.device));
    int64_t sequences = 0;
    for (size_t i = static_cast<size_t>(s_.rank.rank); i < s_.validation.size();
         i += static_cast<size_t>(s_.rank.world)) {
      const TokenBatch& b = s_.validation[i];
      const int64_t n = b.inputs.size(0);
      device_sum.add_(s_.model->loss(b.inputs, b.targets).to(at::kDouble) * static_cast<double>(n));
      sequences += n;
    }
    double sum = device_sum.item<double>();
    if (dp_) {
      const std::vector<double> local{sum, static_cast<double>(sequences)};
      const std::vector<double> total = sum_over_ranks(local);
      sum = total[0];
      sequences = static_cast<int64_t>(total[1]);
    }
    return sum / static_cast<double>(sequences);
  }

  // Element-wise sums of small host values over the ranks (one collective).
  std::vector<double> sum_over_ranks(const std::vector<double>& values) {
    at::Tensor t = at::tensor(at::ArrayRef<double>(values), at::TensorOptions().dtype(at::kDouble))
                       .to(s_.device);
    dp_->sum(t);
    t = t.cpu();
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }

  // Evaluates, logs, checks the target and validation regressions. Returns an exit code when
  // the run must end here.
  std::optional<int> evaluate_and_judge() {
    // The steps queued before belong to training: synchronized here, at a boundary that already
    // synchronizes (the evaluation's loss is read back), never once per step.
    compat::synchronize(s_.device);
    const Clock::time_point eval_start = Clock::now();
    const double val_loss = evaluate();
    eval_s_ += seconds_between(eval_start, Clock::now());
    events_->eval(progress(), val_loss);
    mllog_.point("eval_accuracy", val_loss,
                 {{"samples_count", state_.samples},
                  {"epoch_num", static_cast<double>(state_.tokens) / static_cast<double>(s_.dataset->train.size())}});
    if (root())
      std::cerr << "mxablate-train: step " << state_.step << "/" << s_.plan.total_steps << " tokens "
              << state_.tokens << " val_loss " << val_loss << "\n";
    for (const auto& f : detector_.observe_eval(val_loss)) {
      events_->divergence(progress(), f);
      if (f.fatal) return finish(contract::run_status::kDiverged, exit_code::kDiverged, f.reason);
    }
    // A target fixed after the evaluation that reached it counts from here: the run stops now
    // (docs/design.md §5, "Live targets"). best_val_loss includes this evaluation.
    const std::optional<double> target = current_target();
    const double reached_with = std::min(val_loss, detector_.best_val_loss());
    if (target && reached_with <= *target && !state_.target_reached) {
      state_.target_reached = true;
      events_->target_reached(progress(), reached_with, *target);
      if (live_target_.stop_at_target())
        return finish(contract::run_status::kConverged, exit_code::kSuccess, "");
    }
    return project_and_judge(target, val_loss);
  }

  // Projected outcomes (docs/design.md §4, "Projected outcomes and hopeless runs"): while a
  // target is known and not yet reached, rank 0 fits the curve so far against the run's schedule
  // and projects it (curve_projection.h), records the projection, and with target.stop_hopeless
  // ends the run once the rule says it will not reach the target within its budget. The ranks
  // take rank 0's decision in one collective, as they do for a stop signal, so they end together.
  std::optional<int> project_and_judge(std::optional<double> target, double val_loss) {
    curve_.push_back({static_cast<double>(state_.tokens), val_loss});
    if (!target || state_.target_reached) return std::nullopt;
    bool stop = false;
    std::string why;
    if (root()) {
      if (!schedule_) {
        std::vector<double> lr(static_cast<size_t>(s_.plan.total_steps));
        for (int64_t s = 0; s < s_.plan.total_steps; ++s) lr[static_cast<size_t>(s)] = s_.plan.lr_at(s);
        schedule_.emplace(std::move(lr), s_.plan.tokens_per_step);
      }
      ProjectionSettings settings;
      settings.confidence = s_.config.target.hopeless_confidence;
      const ProjectionResult r = project_curve(curve_, *schedule_, s_.plan.warmup_steps * s_.plan.tokens_per_step,
                                               target, settings);
      stop = hopeless_.observe(r) && s_.config.target.stop_hopeless;
      events_->projection(progress(), *target, r, hopeless_.streak());
      if (stop) {
        const Projection& p = *r.projection;
        std::ostringstream line;
        line << "projected loss at the end of the budget " << p.loss_at_budget << " ["
             << p.loss_at_budget_lo << ", " << p.loss_at_budget_hi << "] at " << p.confidence
             << " confidence, above the target " << *target;
        why = line.str();
      }
    }
    if (dp_) stop = sum_over_ranks({stop ? 1.0 : 0.0})[0] > 0;
    if (stop) return finish(contract::run_status::kProjectedNotReached, exit_code::kSuccess, why);
    return std::nullopt;
  }

  // A resumed run's curve and verdict streak, as the surviving timeline of its log has them
  // (rank 0, which alone projects): the same decisions as an uninterrupted run.
  void restore_projection() {
    for (const nlohmann::json& ev : contract::read_effective_events(events_path_)) {
      if (ev.value("tokens", int64_t{0}) > state_.tokens) continue;
      const std::string kind = ev["kind"].get<std::string>();
      if (kind == contract::event_kind::kEval && ev["val_loss"].is_number())
        curve_.push_back({ev["tokens"].get<double>(), ev["val_loss"].get<double>()});
      if (kind == contract::event_kind::kProjection) hopeless_.restore(ev.value("streak", 0));
    }
  }

  // The target at this evaluation (live_target.h): rank 0 reads RUN_DIR/target.json and records
  // what changed; with several ranks every rank then takes rank 0's value in one collective, so
  // all of them stop at the same evaluation (docs/design.md §4, "Data-parallel runs").
  std::optional<double> current_target() {
    if (!live_target_.live()) return live_target_.current();
    if (root()) {
      const LiveTarget::Change c = live_target_.read();
      if (c.adopted) events_->live_target(progress(), c.adopted, c.basis, "");
      if (!c.ignored.empty()) {
        events_->live_target(progress(), std::nullopt, "", c.ignored);
        std::cerr << "mxablate-train: warning: " << c.ignored << "; the run keeps "
                  << (live_target_.current() ? "its earlier target" : "training without a target")
                  << "\n";
      }
    }
    if (dp_) {
      const std::optional<double> mine = root() ? live_target_.current() : std::nullopt;
      const std::vector<double> shared = sum_over_ranks({mine ? 1.0 : 0.0, mine.value_or(0.0)});
      live_target_.agree(shared[0] > 0 ? std::optional<double>(shared[1]) : std::nullopt);
    }
    return live_target_.current();
  }

  // The schedule's phase `phase` takes effect from the next forward on (docs/design.md §4).
  void enter_precision_phase(size_t phase, bool announce) {
    if (phase == phase_) return;
    s_.model->set_layer_plans(layer_plans(s_.config, s_.layers, s_.shape.n_layers, phase));
    phase_ = phase;
    if (announce)
      events_->precision_switch(progress(), phase,
                                contract::block_settings_in_phase(s_.config, phase).precision);
  }

  // Forward and backward of this rank's micro-batches of the step; returns the sum of their
  // losses, summed on the device (in float64, as the host did) and read once per step: a read
  // per micro-batch made the GPU drain its queue before each next one. Run eagerly, or captured
  // and replayed by the step graph (step_graph.h): the same code either way.
  at::Tensor run_passes(const std::vector<TokenBatch>& batches) {
    LlamaModelImpl& model = *s_.model;
    at::Tensor device_loss_sum;
    for (size_t i = 0; i < batches.size(); ++i) {
      const at::Tensor loss = model.loss(batches[i].inputs, batches[i].targets);
      const bool last = i + 1 == batches.size();
      s_.engine->begin_backward(last);
      (loss / static_cast<double>(s_.plan.micro_batches_per_step)).backward();
      s_.engine->end_backward(last);
      const at::Tensor l = loss.detach().to(at::kDouble);
      device_loss_sum = device_loss_sum.defined() ? device_loss_sum + l : l;
      model.session().collect_telemetry = false;  // one micro-batch per sampled step is enough
    }
    return device_loss_sum;
  }

  std::optional<int> train_step() {
    enter_precision_phase(precision_phase(s_.config, static_cast<double>(state_.tokens)), true);
    LlamaModelImpl& model = *s_.model;
    QuantSession& session = model.session();
    const int64_t step_number = state_.step + 1;  // the step being taken, 1-based
    profiler_.before_step(step_number, s_.device);
    if (step_number == options_.inject_nonfinite_at_step) {
      torch::NoGradGuard no_grad;
      model.linears().front()->weight.index_put_({0, 0}, std::numeric_limits<float>::quiet_NaN());
    }
    const double lr = s_.plan.lr_at(state_.step);
    session.step = static_cast<uint32_t>(state_.step);
    ++session.weights_generation;  // the last step (or a restore) wrote the weights
    const int64_t quant_every = s_.config.telemetry.quant_every_steps;
    session.collect_telemetry = quant_every > 0 && state_.step % quant_every == 0;

    // Rank r of a data-parallel run takes the r-th slice of the step's micro-batches, at their
    // places in the global batch (docs/design.md §4, "Data-parallel runs"); telemetry comes from micro-batch 0.
    s_.engine->zero_gradients();
    if (!root()) session.collect_telemetry = false;
    const int64_t micro = s_.plan.sequences_per_micro_batch;
    const int64_t per_rank = s_.plan.micro_batches_per_step / s_.rank.world;
    const int64_t first = per_rank * s_.rank.rank;
    std::vector<TokenBatch> batches;
    for (int64_t m = first; m < first + per_rank; ++m)
      batches.push_back(s_.batches->get(state_.samples + m * micro, micro, s_.device));
    const MicroBatchPasses passes = [this](const std::vector<TokenBatch>& b) { return run_passes(b); };
    // FP8 delayed scaling (docs/design.md §3): the step's amaxes are recorded from empty, and
    // after the passes (eagerly, outside any graph) become the step's history entry. The ranks
    // take the maximum first, so that every rank scales the next step alike.
    Fp8AmaxHistory* fp8_history = session.fp8_history.get();
    if (fp8_history) fp8_history->begin_step();
    const at::Tensor device_loss_sum =
        s_.graph ? s_.graph->run(passes, batches, session.step, phase_, session.collect_telemetry)
                 : run_passes(batches);
    if (fp8_history) {
      if (dp_) dp_->max(fp8_history->current());
      fp8_history->end_step(state_.step);
    }
    double loss_sum = device_loss_sum.item<double>();
    // The ranks agree on the loss and on whether to stop after this step (a signal may reach
    // them at different steps); every later decision is then the same on every rank.
    bool stop_agreed = false;
    if (dp_) {
      const std::vector<double> total =
          sum_over_ranks({loss_sum, stop_signal_received() != 0 ? 1.0 : 0.0});
      loss_sum = total[0];
      stop_agreed = total[1] > 0;
    }
    const double loss = loss_sum / static_cast<double>(s_.plan.micro_batches_per_step);
    const double clip = s_.config.train.grad_clip > 0 ? s_.config.train.grad_clip
                                                      : std::numeric_limits<double>::infinity();
    const double grad_norm = s_.engine->clip_gradients(clip);

    const int64_t tokens_before = state_.tokens;
    const Progress at_step{step_number, tokens_before + s_.plan.tokens_per_step};
    for (const auto& f : detector_.observe_step(loss, grad_norm)) {
      events_->divergence(at_step, f);
      if (f.fatal) {
        state_.step = at_step.step;
        state_.tokens = at_step.tokens;
        return finish(contract::run_status::kDiverged, exit_code::kDiverged, f.reason);
      }
    }
    s_.engine->step(lr);
    state_.step = step_number;
    state_.tokens = at_step.tokens;
    state_.samples += s_.plan.micro_batches_per_step * micro;
    profiler_.after_step(step_number, s_.device);

    for (const auto& r : session.take_records())
      events_->quant_stats(progress(), r.layer, s_.layers[static_cast<size_t>(r.layer)].name,
                           gemm_name(r.gemm), operand_name(r.gemm, r.operand), r.telemetry,
                           r.occ_fraction);
    if (state_.step % s_.config.telemetry.train_every_steps == 0 || state_.step == 1) {
      const auto now = Clock::now();
      const double dt = seconds_between(last_train_event_, now);
      const double tps = dt > 0 ? static_cast<double>(state_.tokens - tokens_at_last_train_event_) / dt : 0;
      events_->train(progress(), loss, lr, grad_norm, tps);
      last_train_event_ = now;
      tokens_at_last_train_event_ = state_.tokens;
    }
    if (s_.plan.eval_due(tokens_before, state_.tokens) || state_.step == s_.plan.total_steps) {
      if (const auto code = evaluate_and_judge()) return code;
    }
    collect_checkpoint(false);  // the write in flight, if it has finished
    bool checkpointed = false;
    const int64_t every = s_.config.checkpoint.every_steps;
    if (every > 0 && state_.step % every == 0 && state_.step < s_.plan.total_steps) {
      checkpoint(options_.synchronous_checkpoints);
      checkpointed = true;
    }

    if (faults_here() && state_.step == options_.signal_at_step) std::raise(SIGTERM);
    if (state_.step == options_.crash_at_step) {
      // A kill after step N finds on disk what it found when checkpoints were written in place:
      // every rank first finishes its write in flight (a kill during a write is
      // crash_writing_checkpoint's).
      collect_checkpoint(true);
      // A real kill -9: the launcher and the orchestrator see a rank killed by a signal.
      if (faults_here()) std::raise(SIGKILL);
    }
    const int sig = dp_ ? (stop_agreed ? SIGTERM : 0) : stop_signal_received();
    if (sig != 0) {
      // The stop's checkpoint is complete and published before the run ends (finish waits too).
      if (!checkpointed) checkpoint(true);
      const int local = stop_signal_received();
      return finish(contract::run_status::kInterrupted, exit_code::kInterrupted,
                    (local != 0 ? local : sig) == SIGINT ? "SIGINT" : "SIGTERM");
    }
    return std::nullopt;
  }

  // Every rank takes part (a sharded run's ranks each write their optimizer shard); rank 0 writes
  // the rest and records it. On the training thread: the snapshot into host memory, and first
  // waiting for the previous write if it is still going (at most one in flight); the writing
  // itself runs beside training (docs/design.md §4, "Checkpoints and exact resume"), unless
  // `wait`. All of it is checkpoint_s.
  void checkpoint(bool wait) {
    compat::synchronize(s_.device);  // as for evaluations: the steps before are training time
    const Clock::time_point checkpoint_start = Clock::now();
    collect_checkpoint(true);
    state_.divergence = detector_.state();
    state_.events_seq = events_->last_seq();
    auto snapshot = std::make_shared<CheckpointSnapshot>(snapshot_checkpoint(
        options_.run_dir, *s_.model, *s_.engine, state_, contract::to_json(s_.config), root(), host_));
    writer_.start(progress(), [snapshot, probe = write_probe(state_.step), run_dir = options_.run_dir,
                               keep = s_.config.checkpoint.keep]() mutable {
      const std::string path = write_checkpoint(*snapshot, probe);
      snapshot.reset();
      if (!path.empty()) prune_checkpoints(run_dir, keep);  // only once the new one is published
      return path;
    });
    if (wait) collect_checkpoint(true);
    checkpoint_s_ += seconds_between(checkpoint_start, Clock::now());
  }

  // Takes the result of the write in flight once it has finished (`wait`: waits for it): rank 0
  // records its checkpoint event; a write that failed throws its error here, on the training
  // thread, and the run fails with the line a write in place gave.
  void collect_checkpoint(bool wait) {
    const auto written = writer_.collect(wait);
    if (written && root()) events_->checkpoint(written->at, written->path);
  }

  // The write still in flight when a run ended for good: finished before the process exits (a
  // kill meanwhile leaves a temporary directory, never a damaged checkpoint), without an event
  // (run_end is the attempt's last); its failure costs no result, so it is a warning.
  void after_end_write() {
    try {
      writer_.collect(true);
    } catch (const std::exception& e) {
      std::cerr << "mxablate-train: warning: the checkpoint written as the run ended was not completed: "
                << error_line(e) << "\n";
    }
  }

  bool faults_here() const { return options_.fault_rank < 0 || options_.fault_rank == s_.rank.rank; }

  // Fault injection on the writer's thread (TrainOptions): killed during the write of checkpoint
  // `step` (its files in the temporary directory), or just after publishing it.
  CheckpointWriteProbe write_probe(int64_t step) const {
    const bool while_writing = faults_here() && step == options_.crash_writing_checkpoint;
    const bool after_publishing = faults_here() && step == options_.crash_after_checkpoint_published;
    if (!while_writing && !after_publishing) return {};
    return [while_writing, after_publishing](CheckpointWriteStage stage) {
      if ((stage == CheckpointWriteStage::kFilesWritten && while_writing) ||
          (stage == CheckpointWriteStage::kPublished && after_publishing))
        std::_Exit(137);
    };
  }

  int finish(const std::string& status, int code, const std::string& reason) {
    compat::synchronize(s_.device);
    // A one-rank run that ended for good (its budget, its target, divergence) is never resumed:
    // the checkpoint still being written serves nothing, so run_end comes first and the slot
    // passes on to the next run (docs/design.md §9), while this process stays to finish the
    // write (after_end_write). Otherwise the end waits for the checkpoint in flight, whose event
    // comes before run_end; its error fails the run here, unless the run is failing already
    // (then the first error is the reason).
    const bool for_good = !dp_ && !failed_ &&
                          (status == contract::run_status::kConverged ||
                           status == contract::run_status::kBudgetExhausted ||
                           status == contract::run_status::kProjectedNotReached ||
                           status == contract::run_status::kDiverged);
    const Clock::time_point waited_from = Clock::now();
    if (for_good) {
      collect_checkpoint(false);  // records a write that has completed already; no wait
    } else if (!failed_) {
      collect_checkpoint(true);
    } else {
      try {
        collect_checkpoint(true);
      } catch (...) {
      }
    }
    if (!for_good) checkpoint_s_ += seconds_between(waited_from, Clock::now());
    const double wall = seconds_between(started_, Clock::now());
    RunEvents::End end;
    end.status = status;
    end.wall_s = wall;
    end.tokens_per_s = wall > 0 ? static_cast<double>(state_.tokens - tokens_at_start_) / wall : 0;
    end.peak_rss_bytes = peak_rss_bytes();
    end.peak_gpu_bytes = compat::peak_device_bytes(s_.device);
    end.reason = reason;
    // Busy time is train_s + eval_s: the parts of wall_s that are not checkpoints.
    end.setup_s = setup_s_;
    if (prestarted_) end.standby_s = standby_s_;
    end.eval_s = eval_s_;
    if (s_.graph) end.graphed_steps = s_.graph->replays();
    if (s_.routes.of(contract::GemmPrecision::kMXFP4) == contract::GemmRoute::kMXFP4AsFP8)
      end.mxfp4_as_fp8_calls = s_.model->session().mxfp4_as_fp8_calls();
    end.checkpoint_s = checkpoint_s_;
    end.checkpoint_write_s = writer_.write_seconds();
    end.train_s = std::max(0.0, wall - eval_s_ - checkpoint_s_);
    events_->run_end(progress(), end);
    if (for_good) after_end_write();
    // run_end holds rank 0's peak; each rank of a sharded or replicated run says its own.
    if (dp_ && end.peak_gpu_bytes > 0) {
      // One write, so that the ranks' lines do not interleave.
      std::ostringstream line;
      line << "mxablate-train: rank " << s_.rank.rank << " peak GPU memory " << std::fixed
           << std::setprecision(2) << static_cast<double>(end.peak_gpu_bytes) / double(int64_t{1} << 30)
           << " GiB\n";
      std::cerr << line.str() << std::flush;
    }
    const bool success = code == exit_code::kSuccess;
    mllog_.end("run_stop", {{"status", success ? "success" : "aborted"}, {"samples_count", state_.samples}});
    if (dp_ && !failed_) dp_->close();  // every rank ends here together, unless one failed
    if (!root()) return code;
    std::cerr << "mxablate-train: " << status << " at step " << state_.step << ", " << state_.tokens
              << " tokens, " << end.tokens_per_s << " tokens/s"
              << (reason.empty() ? "" : " (" + reason + ")") << "\n";
    return code;
  }

  bool root() const { return s_.rank.rank == 0; }
  static constexpr const char* kStartKey = "mxablate/start";

  RunSetup& s_;
  const TrainOptions& options_;
  DataParallel* dp_;                    // a data-parallel run's process group (setup's)
  std::string restored_from_;           // the checkpoint rank 0 resumed from
  bool failed_ = false;                 // ending on an exception (peers may be gone)
  DivergenceDetector detector_;
  MlLogger mllog_;
  std::string events_path_;
  StepProfiler profiler_;
  std::unique_ptr<RunEvents> events_;
  TrainerState state_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_train_event_ = Clock::now();
  int64_t tokens_at_last_train_event_ = 0;
  int64_t tokens_at_start_ = 0;
  size_t phase_ = 0;  // the precision schedule phase the model's plans are in
  Clock::time_point process_start_ = Clock::now();
  double standby_s_ = 0;
  bool prestarted_ = false;
  double setup_s_ = 0, eval_s_ = 0, checkpoint_s_ = 0;
  HostBuffers host_;          // checkpoint snapshots' host copies, kept between checkpoints
  std::vector<CurvePoint> curve_;        // the evaluations so far, for the projection
  std::optional<LrSchedule> schedule_;   // the run's learning rates, built at the first projection
  HopelessRule hopeless_{ProjectionSettings{}.consecutive};
  // The target every check reads (current()): the config's, or one fixed mid-sweep.
  LiveTarget live_target_;
  CheckpointWriter writer_;   // last: its destructor waits for a write in flight
};


TrainingRun::TrainingRun(const contract::RunConfig& config, const TrainOptions& options, const RankInfo& rank)
    : setup_(std::make_unique<RunSetup>(build_setup(config, options, rank))),
      loop_(std::make_unique<Loop>(*setup_, options)) {}

TrainingRun::~TrainingRun() = default;

void TrainingRun::set_setup_timing(Clock::time_point process_start, double standby_s, bool prestarted) {
  loop_->set_setup_timing(process_start, standby_s, prestarted);
}

int TrainingRun::run() { return loop_->run(); }

void TrainingRun::record_failure(const std::string& why, int code) { loop_->record_failure(why, code); }

int64_t TrainingRun::vocab_size() const { return setup_->dataset->manifest.tokenizer.vocab_size; }

}  // namespace mxablate::trainer
