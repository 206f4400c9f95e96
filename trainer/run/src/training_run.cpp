#include "mxablate/trainer/run/training_run.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "evaluation.h"
#include "mxablate/contract/gemm_routing.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/run/batches.h"
#include "mxablate/trainer/checkpoint/checkpoint.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/plan/plan_rules.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/rules/run_events.h"
#include "mxablate/trainer/parallel/step_engine.h"
#include "mxablate/trainer/rules/stop_signals.h"
#include "mxablate/trainer/plan/training_plan.h"
#include "rank_group.h"
#include "run_checkpoints.h"
#include "run_record.h"
#include "run_setup.h"
#include "step_profiler.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {
namespace {

using contract::ConfigError;

// Runs f as a named phase of the step's host work: in a profile (--profile-steps) the host's
// phases lie beside the GPU's kernels, and scripts/profile-summary.py says in which phase the host
// was while the GPU idled (docs/performance.md, "CUDA graphs").
template <class F>
decltype(auto) host_phase(const char* name, F&& f) {
  RECORD_USER_SCOPE(name);
  return f();
}

// Converged, out of budget, projected not to reach the target, diverged: ended for good, never
// resumed. Interrupted and failed runs are resumed.
bool ends_for_good(const std::string& status) {
  return status == contract::run_status::kConverged || status == contract::run_status::kBudgetExhausted ||
         status == contract::run_status::kProjectedNotReached || status == contract::run_status::kDiverged;
}

std::optional<ProfileRequest> profile_request(const TrainOptions& o, bool writes) {
  if (o.profile_first_step <= 0 || !writes) return std::nullopt;
  return ProfileRequest{o.profile_first_step, o.profile_last_step, o.profile_trace};
}

}  // namespace

// The training loop (docs/design.md §4, "The step engine"): the parts it is made of decide, the
// loop calls them in order. RankGroup: this rank's batches and what the ranks agree on.
// Evaluation: validation, the target, the projection, divergence. RunRecord: events, MLPerf log,
// timings. RunCheckpoints: restore, cadence, writes beside training. FaultPlan: a test's faults.
class TrainingRun::Loop {
 public:
  Loop(RunSetup& setup, const TrainOptions& options, const FaultPlan& faults)
      : s_(setup),
        options_(options),
        faults_(faults),
        group_(setup.rank, setup.group.get(), setup.device),
        record_(setup, options.run_dir),
        evaluation_(setup, group_, record_, state_, options.run_dir),
        checkpoints_(setup, group_, record_, evaluation_, state_, options, faults),
        profiler_(profile_request(options, group_.writes()), setup.device) {}

  int run() {
    install_stop_signal_handlers();
    const Start start = group_.writes() ? start_writing() : start_following();
    if (start.finished) return *start.finished;
    // FP8 delayed scaling: the window of the history the checkpoint restored (or of none).
    if (const auto& h = s_.model->session().fp8_history) h->refresh();
    // A resumed run continues in the precision phase it had reached; the switch was announced
    // when it happened.
    enter_precision_phase(precision_phase(s_.config, static_cast<double>(state_.tokens)), false);
    record_.training_starts(state_.tokens);
    if (!start.resumed)
      if (const auto end = evaluation_.evaluate_and_judge()) return finish(*end);
    while (state_.step < s_.plan.total_steps)
      if (const auto code = train_step()) return *code;
    return finish({state_.target_reached ? contract::run_status::kConverged : contract::run_status::kBudgetExhausted,
                   exit_code::kSuccess, ""});
  }

  void set_setup_timing(RunRecord::Clock::time_point process_start, double standby_s, bool prestarted) {
    record_.set_setup_timing(process_start, standby_s, prestarted);
  }

  // After an exception: record the failure if the log is open.
  void record_failure(const std::string& why, int code) {
    if (!record_.is_open()) return;
    failed_ = true;
    try {
      finish({contract::run_status::kFailed, code, why});
    } catch (...) {
    }
  }

 private:
  // How this attempt starts: the code of a run that had ended already, or whether it resumed
  // from a checkpoint.
  struct Start {
    std::optional<int> finished;
    bool resumed = false;
  };

  // Rank 0 alone reads and writes the run directory, and tells the others how the run starts.
  Start start_writing() {
    const LogSummary history = summarize_log(record_.events_path());
    if (!options_.resume && (history.run_starts > 0 || !history.checkpoints.empty()))
      throw ConfigError(record_.events_path() + " already holds a run; pass --resume to continue it");
    if (options_.resume && history.run_end && ends_for_good(history.run_end->value("status", ""))) {
      const std::string status = history.run_end->value("status", "");
      std::cerr << "mxablate-train: the run already ended (" << status << "); nothing to resume\n";
      const int code = status == contract::run_status::kDiverged ? exit_code::kDiverged : exit_code::kSuccess;
      group_.publish_start("finished " + std::to_string(code));
      return {code, false};
    }
    record_.open(true);
    const bool resumed = options_.resume && checkpoints_.restore(history);
    if (resumed) {
      evaluation_.restore_projection();
      // The checkpoint's steps ran on the engines its attempt recorded (docs/design.md §3).
      const nlohmann::json before = history.last_run_start && history.last_run_start->contains("gemm_routes")
                                        ? (*history.last_run_start)["gemm_routes"]
                                        : nlohmann::json();
      const std::string change = contract::gemm_routes_change(before, s_.routes, s_.config);
      if (!change.empty()) throw ConfigError("quant.gemm_path: " + change);
    }
    record_.run_start(progress(), history.run_starts + 1, resumed);
    group_.publish_start(resumed ? "checkpoint " + checkpoints_.restored_from() : "fresh");
    return {std::nullopt, resumed};
  }

  // The other ranks start where rank 0 decided.
  Start start_following() {
    record_.open(false);
    const std::string how = group_.receive_start();
    if (how.rfind("finished ", 0) == 0) return {std::stoi(how.substr(9)), false};
    if (how.rfind("checkpoint ", 0) == 0) {
      checkpoints_.load_verified(how.substr(11));
      return {std::nullopt, true};
    }
    return {std::nullopt, false};
  }

  // One optimizer step: this rank's passes, the clipping and the update queued behind them, one
  // read of loss and norm, the agreed loss, the judgement, then what the step's end asks for (an
  // evaluation, a checkpoint, a stop).
  std::optional<int> train_step() {
    enter_precision_phase(precision_phase(s_.config, static_cast<double>(state_.tokens)), true);
    const int64_t step_number = state_.step + 1;  // the step being taken, 1-based
    profiler_.before_step(step_number, s_.device);
    // The step's bounds in a profile (profile-summary.py --skip-steps): after the profiler has
    // started, so that the first profiled step is marked too.
    RECORD_USER_SCOPE("mxablate::step");
    if (step_number == faults_.inject_nonfinite_at_step) poison_a_weight();
    const double lr = s_.plan.lr_at(state_.step);
    QuantSession& session = begin_step_session();
    s_.engine->zero_gradients();
    const at::Tensor my_loss_sum = run_step_passes(take_micro_batches(), session);
    const at::Tensor norm = host_phase("mxablate::clip", [&] {
      return s_.engine->clip_gradients(
          s_.config.train.grad_clip > 0 ? s_.config.train.grad_clip : std::numeric_limits<double>::infinity());
    });
    // The update is queued too, before the host has seen the loss: a step the divergence rule
    // judges fatal below ends the run for good, so its weights are never used again.
    host_phase("mxablate::optimizer", [&] { s_.engine->step(lr); });
    // Everything of this step is queued: the host reads the next step's tokens meanwhile, then
    // waits once, for the loss and the gradient norm together.
    prefetch_next_micro_batches(step_number);
    const auto [my_loss, grad_norm] = host_phase("mxablate::read", [&] { return read_pair(my_loss_sum, norm); });
    // The ranks agree on the loss and on whether to stop after this step (a signal may reach
    // them at different steps); every later decision is then the same on every rank.
    const std::vector<double> agreed = host_phase("mxablate::agree", [&] {
      return group_.sum({my_loss, stop_signal_received() != 0 ? 1.0 : 0.0});
    });
    const double loss = agreed[0] / static_cast<double>(s_.plan.micro_batches_per_step);
    const int64_t tokens_before = state_.tokens;
    const Progress at_step{step_number, tokens_before + s_.plan.tokens_per_step};
    if (const auto end = evaluation_.judge_step(at_step, loss, grad_norm)) {
      state_.step = at_step.step;
      state_.tokens = at_step.tokens;
      return finish(*end);
    }
    state_.step = step_number;
    state_.tokens = at_step.tokens;
    state_.samples += s_.plan.micro_batches_per_step * s_.plan.sequences_per_micro_batch;
    profiler_.after_step(step_number, s_.device);
    host_phase("mxablate::records", [&] {
      record_.quant_stats(progress(), session.take_records());
      record_.step_done(progress(), loss, lr, grad_norm);
    });
    if (s_.plan.eval_due(tokens_before, state_.tokens) || state_.step == s_.plan.total_steps)
      if (const auto end = host_phase("mxablate::evaluation", [&] { return evaluation_.evaluate_and_judge(); }))
        return finish(*end);
    const bool checkpointed = host_phase("mxablate::checkpoint", [&] { return checkpoints_.after_step(); });
    suffer_faults_after_step();
    if (const int sig = group_.stop_signal(agreed[1] > 0)) {
      // The stop's checkpoint is complete and published before the run ends (finish waits too).
      if (!checkpointed) checkpoints_.write(true);
      return finish({contract::run_status::kInterrupted, exit_code::kInterrupted, sig == SIGINT ? "SIGINT" : "SIGTERM"});
    }
    return std::nullopt;
  }

  // The session's step, a fresh weights generation (the last step or a restore wrote them), and
  // whether this step samples quantization telemetry (the writing rank's micro-batch 0 only).
  QuantSession& begin_step_session() {
    QuantSession& session = s_.model->session();
    session.step = static_cast<uint32_t>(state_.step);
    ++session.weights_generation;
    const int64_t quant_every = s_.config.telemetry.quant_every_steps;
    session.collect_telemetry = group_.writes() && quant_every > 0 && state_.step % quant_every == 0;
    return session;
  }

  // This rank's micro-batches of the step, at their places in the global batch (docs/design.md
  // §4, "Data-parallel runs"): those the last step fetched ahead when they are this step's.
  std::vector<TokenBatch> take_micro_batches() {
    if (prefetched_ && prefetched_->first_sample == state_.samples) {
      std::vector<TokenBatch> batches = std::move(prefetched_->batches);
      prefetched_.reset();
      return batches;
    }
    prefetched_.reset();
    return micro_batches_from(state_.samples);
  }

  // The next step's micro-batches, read and sent on their way while the GPU runs this step's
  // passes: the host's reading no longer leaves the GPU idle between steps (docs/performance.md,
  // "CUDA graphs"). The same samples as fetching them then: the step's bits do not change.
  void prefetch_next_micro_batches(int64_t step_number) {
    if (step_number >= s_.plan.total_steps) return;
    const int64_t next = state_.samples + s_.plan.micro_batches_per_step * s_.plan.sequences_per_micro_batch;
    prefetched_ = Prefetched{next, micro_batches_from(next)};
  }

  std::vector<TokenBatch> micro_batches_from(int64_t first_sample) const {
    RECORD_USER_SCOPE("mxablate::batches");
    const int64_t micro = s_.plan.sequences_per_micro_batch;
    std::vector<TokenBatch> batches;
    for (const int64_t m : group_.my_micro_batches(s_.plan.micro_batches_per_step))
      batches.push_back(s_.batches->get(first_sample + m * micro, micro, s_.device));
    return batches;
  }

  // The step's passes, eager or replayed as a graph (step_graph.h), with FP8 delayed scaling's
  // amaxes recorded from empty and, after the passes (outside any graph), agreed over the ranks
  // and made the step's history entry (docs/design.md §3). This rank's loss sum, on the device,
  // unread.
  at::Tensor run_step_passes(const std::vector<TokenBatch>& batches, QuantSession& session) {
    const MicroBatchPasses passes = [this](const std::vector<TokenBatch>& b) { return run_passes(b); };
    Fp8AmaxHistory* fp8_history = session.fp8_history.get();
    if (fp8_history) fp8_history->begin_step();
    const at::Tensor device_loss_sum = host_phase("mxablate::passes", [&] {
      return s_.graph ? s_.graph->run(passes, batches, session.step, phase_, session.collect_telemetry)
                      : run_passes(batches);
    });
    if (fp8_history) {
      group_.max(fp8_history->current());
      fp8_history->end_step(state_.step);
    }
    return device_loss_sum;
  }

  // Two 0-dim device values as float64 on the host, in one copy: the step's one wait.
  static std::pair<double, double> read_pair(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor both = at::stack({a.to(at::kDouble), b.to(at::kDouble)}).cpu();
    const double* v = both.data_ptr<double>();
    return {v[0], v[1]};
  }

  // Forward and backward of the micro-batches; returns the sum of their losses, summed on the
  // device (in float64, as the host did) and read once per step: a read per micro-batch made
  // the GPU drain its queue before each next one. The same code eager or captured.
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

  // The schedule's phase `phase` takes effect from the next forward on (docs/design.md §4).
  void enter_precision_phase(size_t phase, bool announce) {
    if (phase == phase_) return;
    s_.model->set_layer_plans(s_.layer_plans.phases[phase]);
    phase_ = phase;
    if (announce)
      record_.events().precision_switch(progress(), phase, contract::block_settings_in_phase(s_.config, phase).precision);
  }

  // A test's faults (fault_plan.h): a NaN weight before a step's forward pass.
  void poison_a_weight() {
    torch::NoGradGuard no_grad;
    s_.model->linears().front()->weight.index_put_({0, 0}, std::numeric_limits<float>::quiet_NaN());
  }

  // A test's faults after a step: a SIGTERM, or a kill once every rank's checkpoint write in
  // flight has finished (what was on disk when checkpoints were written in place); a real kill
  // -9, so the launcher and the orchestrator see a rank killed by a signal.
  void suffer_faults_after_step() {
    const bool here = faults_.acts_on(group_.rank());
    if (here && state_.step == faults_.signal_at_step) std::raise(SIGTERM);
    if (state_.step == faults_.crash_at_step) {
      checkpoints_.collect(true);
      if (here) std::raise(SIGKILL);
    }
  }

  // A one-rank run that ended for good is never resumed: the checkpoint still being written
  // serves nothing, so run_end comes first and the slot passes on (docs/design.md §9), while this
  // process stays to finish the write. Otherwise the end waits for the checkpoint in flight,
  // whose event comes before run_end; its error fails the run here, unless the run is failing
  // already (then the first error is the reason).
  int finish(const Ending& ending) {
    compat::synchronize(s_.device);
    const bool for_good = group_.may_end_before_last_write() && !failed_ && ends_for_good(ending.status);
    const auto waited_from = RunRecord::Clock::now();
    if (for_good) {
      checkpoints_.collect(false);  // records a write that has completed already; no wait
    } else if (!failed_) {
      checkpoints_.collect(true);
    } else {
      try {
        checkpoints_.collect(true);
      } catch (...) {
      }
    }
    if (!for_good) record_.add_checkpoint_seconds(seconds_between(waited_from, RunRecord::Clock::now()));
    RunEvents::End end = record_.end(state_.tokens);
    end.status = ending.status;
    end.reason = ending.reason;
    if (s_.graph) end.graphed_steps = s_.graph->replays();
    if (s_.routes.of(contract::GemmPrecision::kMXFP4) == contract::GemmRoute::kMXFP4AsFP8)
      end.mxfp4_as_fp8_tiles = s_.model->session().mxfp4_as_fp8_tiles();
    end.checkpoint_write_s = checkpoints_.write_seconds();
    record_.events().run_end(progress(), end);
    if (for_good) checkpoints_.finish_in_background();
    group_.report_peak_gpu_bytes(end.peak_gpu_bytes);  // run_end holds rank 0's
    record_.mllog().end("run_stop", {{"status", ending.code == exit_code::kSuccess ? "success" : "aborted"},
                                     {"samples_count", state_.samples}});
    if (!failed_) group_.close();  // every rank ends here together, unless one failed
    std::ostringstream line;
    line << ending.status << " at step " << state_.step << ", " << state_.tokens << " tokens, " << end.tokens_per_s
         << " tokens/s" << (ending.reason.empty() ? "" : " (" + ending.reason + ")");
    record_.say(line.str());
    return ending.code;
  }

  Progress progress() const { return {state_.step, state_.tokens}; }

  RunSetup& s_;
  const TrainOptions& options_;
  FaultPlan faults_;
  TrainerState state_;
  RankGroup group_;
  RunRecord record_;
  Evaluation evaluation_;
  RunCheckpoints checkpoints_;  // after the parts it records through
  StepProfiler profiler_;
  struct Prefetched {
    int64_t first_sample = 0;
    std::vector<TokenBatch> batches;
  };
  std::optional<Prefetched> prefetched_;  // the next step's micro-batches, fetched during this one
  size_t phase_ = 0;     // the precision schedule phase the model's plans are in
  bool failed_ = false;  // ending on an exception (peers may be gone)
};

TrainingRun::TrainingRun(const contract::RunConfig& config, const TrainOptions& options, const RankInfo& rank,
                         const FaultPlan& faults)
    : setup_(std::make_unique<RunSetup>(build_setup(config, options, rank))),
      loop_(std::make_unique<Loop>(*setup_, options, faults)) {}

TrainingRun::~TrainingRun() = default;

void TrainingRun::set_setup_timing(std::chrono::steady_clock::time_point process_start, double standby_s,
                                   bool prestarted) {
  loop_->set_setup_timing(process_start, standby_s, prestarted);
}

int TrainingRun::run() { return loop_->run(); }

void TrainingRun::record_failure(const std::string& why, int code) { loop_->record_failure(why, code); }

int64_t TrainingRun::vocab_size() const { return setup_->dataset->manifest.tokenizer.vocab_size; }
const contract::RunConfig& TrainingRun::executed_config() const { return setup_->executed; }

}  // namespace mxablate::trainer
