#include "evaluation.h"

#include <torch/torch.h>

#include <iostream>
#include <sstream>

#include "mxablate/contract/event_log.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/run/trainer.h"
#include "mxablate/trainer/numerics/telemetry_setting.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {

Evaluation::Evaluation(RunSetup& setup, const RankGroup& group, RunRecord& record, TrainerState& state,
                       const std::string& run_dir)
    : s_(setup),
      group_(group),
      record_(record),
      state_(state),
      detector_(setup.config.divergence, setup.plan.warmup_steps),
      live_target_(setup.config.target, run_dir) {}

std::optional<Ending> Evaluation::judge_step(Progress at_step, double loss, double grad_norm) {
  for (const auto& f : detector_.observe_step(loss, grad_norm)) {
    record_.events().divergence(at_step, f);
    if (f.fatal) return Ending{contract::run_status::kDiverged, exit_code::kDiverged, f.reason};
  }
  return std::nullopt;
}

// The mean loss over the validation set; each rank takes its share of the batches and the ranks
// sum.
double Evaluation::validation_loss() {
  torch::NoGradGuard no_grad;
  s_.model->session().collect_telemetry = false;
  // run_end's mxfp4_as_fp8_tiles are the training passes' (an evaluation adds Fprop tiles only).
  const SessionFlagSetting not_counted(s_.model->session(), &QuantSession::count_route_calls, false);
  ++s_.model->session().weights_generation;  // the weights may have changed since the last pass
  // Summed on the device in double, in the order and with the roundings the host sum had
  // (each loss widened, times its batch's sequences, then added): the same bits, but one
  // read-back per evaluation instead of one per batch, so the batches queue back to back.
  at::Tensor device_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(s_.device));
  int64_t sequences = 0;
  for (const size_t i : group_.my_validation_batches(s_.validation.size())) {
    const TokenBatch& b = s_.validation[i];
    const int64_t n = b.inputs.size(0);
    device_sum.add_(s_.model->loss(b.inputs, b.targets).to(at::kDouble) * static_cast<double>(n));
    sequences += n;
  }
  const std::vector<double> total = group_.sum({device_sum.item<double>(), static_cast<double>(sequences)});
  return total[0] / total[1];
}

std::optional<Ending> Evaluation::evaluate_and_judge() {
  // The steps queued before belong to training: synchronized here, at a boundary that already
  // synchronizes (the evaluation's loss is read back), never once per step.
  compat::synchronize(s_.device);
  const auto eval_start = RunRecord::Clock::now();
  const double val_loss = validation_loss();
  record_.add_eval_seconds(seconds_between(eval_start, RunRecord::Clock::now()));
  record_.events().eval(progress(), val_loss);
  record_.mllog().point("eval_accuracy", val_loss,
                        {{"samples_count", state_.samples},
                         {"epoch_num", static_cast<double>(state_.tokens) /
                                           static_cast<double>(s_.dataset->train.size())}});
  std::ostringstream line;
  line << "step " << state_.step << "/" << s_.plan.total_steps << " tokens " << state_.tokens << " val_loss "
       << val_loss;
  record_.say(line.str());
  for (const auto& f : detector_.observe_eval(val_loss)) {
    record_.events().divergence(progress(), f);
    if (f.fatal) return Ending{contract::run_status::kDiverged, exit_code::kDiverged, f.reason};
  }
  // A target fixed after the evaluation that reached it counts from here: the run stops now
  // (docs/design.md §5, "Live targets"). best_val_loss includes this evaluation.
  const std::optional<double> target = current_target();
  const double reached_with = std::min(val_loss, detector_.best_val_loss());
  if (target && reached_with <= *target && !state_.target_reached) {
    state_.target_reached = true;
    record_.events().target_reached(progress(), reached_with, *target);
    if (live_target_.stop_at_target()) return Ending{contract::run_status::kConverged, exit_code::kSuccess, ""};
  }
  return project_and_judge(target, val_loss);
}

// While a target is known and not yet reached, rank 0 fits the curve so far against the run's
// schedule and projects it (curve_projection.h), records the projection, and with
// target.stop_hopeless ends the run once the rule says it will not reach the target within its
// budget. The ranks take rank 0's decision in one collective, as they do for a stop signal.
std::optional<Ending> Evaluation::project_and_judge(std::optional<double> target, double val_loss) {
  curve_.push_back({static_cast<double>(state_.tokens), val_loss});
  if (!target || state_.target_reached) return std::nullopt;
  bool stop = false;
  std::string why;
  if (group_.writes()) {
    if (!schedule_) {
      std::vector<double> lr(static_cast<size_t>(s_.plan.total_steps));
      for (int64_t s = 0; s < s_.plan.total_steps; ++s) lr[static_cast<size_t>(s)] = s_.plan.lr_at(s);
      schedule_.emplace(std::move(lr), s_.plan.tokens_per_step);
    }
    ProjectionSettings settings;
    settings.confidence = s_.config.target.hopeless_confidence;
    const ProjectionResult r =
        project_curve(curve_, *schedule_, s_.plan.warmup_steps * s_.plan.tokens_per_step, target, settings);
    stop = hopeless_.observe(r) && s_.config.target.stop_hopeless;
    record_.events().projection(progress(), *target, r, hopeless_.streak());
    if (stop) {
      const Projection& p = *r.projection;
      std::ostringstream line;
      line << "projected loss at the end of the budget " << p.loss_at_budget << " [" << p.loss_at_budget_lo
           << ", " << p.loss_at_budget_hi << "] at " << p.confidence << " confidence, above the target "
           << *target;
      why = line.str();
    }
  }
  if (group_.sum({stop ? 1.0 : 0.0})[0] > 0)
    return Ending{contract::run_status::kProjectedNotReached, exit_code::kSuccess, why};
  return std::nullopt;
}

void Evaluation::restore_detector(const nlohmann::json& state) { detector_.restore(state); }

void Evaluation::restore_projection() {
  for (const nlohmann::json& ev : contract::read_effective_events(record_.events_path())) {
    if (ev.value("tokens", int64_t{0}) > state_.tokens) continue;
    const std::string kind = ev["kind"].get<std::string>();
    if (kind == contract::event_kind::kEval && ev["val_loss"].is_number())
      curve_.push_back({ev["tokens"].get<double>(), ev["val_loss"].get<double>()});
    if (kind == contract::event_kind::kProjection) hopeless_.restore(ev.value("streak", 0));
  }
}

// The target at this evaluation (live_target.h): rank 0 reads RUN_DIR/target.json and records
// what changed; every rank then takes rank 0's value, so all of them stop at the same
// evaluation (docs/design.md §4, "Data-parallel runs").
std::optional<double> Evaluation::current_target() {
  if (!live_target_.live()) return live_target_.current();
  if (group_.writes()) {
    const LiveTarget::Change c = live_target_.read();
    if (c.adopted) record_.events().live_target(progress(), c.adopted, c.basis, "");
    if (!c.ignored.empty()) {
      record_.events().live_target(progress(), std::nullopt, "", c.ignored);
      std::cerr << "mxablate-train: warning: " << c.ignored << "; the run keeps "
                << (live_target_.current() ? "its earlier target" : "training without a target") << "\n";
    }
  }
  live_target_.agree(group_.rank0_value(live_target_.current()));
  return live_target_.current();
}

}  // namespace mxablate::trainer
