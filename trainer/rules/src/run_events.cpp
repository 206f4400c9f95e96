#include "mxablate/trainer/rules/run_events.h"

#include <algorithm>

#include <cmath>

namespace mxablate::trainer {
namespace {

using nlohmann::json;
namespace kind = contract::event_kind;

json base(Progress p) { return {{"step", p.step}, {"tokens", p.tokens}}; }

// JSON has no NaN or infinity: a non-finite value is written as null (what nlohmann::json and
// most JSON writers do); the divergence event's reason says which kind it was.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

int64_t RunEvents::run_start(Progress p, json details) {
  json f = base(p);
  for (auto& item : details.items()) f[item.key()] = item.value();
  return append(kind::kRunStart, std::move(f), true);
}

int64_t RunEvents::resume(Progress p, int64_t discard_after_seq, const std::string& checkpoint) {
  json f = base(p);
  f["discard_after_seq"] = discard_after_seq;
  f["checkpoint"] = checkpoint;
  return append(kind::kResume, std::move(f), true);
}

int64_t RunEvents::train(Progress p, double loss, double lr, double grad_norm, double tokens_per_s) {
  json f = base(p);
  f["loss"] = number(loss);
  f["lr"] = lr;
  f["grad_norm"] = number(grad_norm);
  f["tokens_per_s"] = tokens_per_s;
  return append(kind::kTrain, std::move(f));
}

int64_t RunEvents::eval(Progress p, double val_loss) {
  json f = base(p);
  f["val_loss"] = number(val_loss);
  return append(kind::kEval, std::move(f), true);
}

int64_t RunEvents::quant_stats(Progress p, int layer, const std::string& layer_name, const char* gemm,
                               const char* operand, const kernels::QuantTelemetry& t,
                               std::optional<double> occ_fraction) {
  json f = base(p);
  f["layer"] = layer;
  f["layer_name"] = layer_name;
  f["gemm"] = gemm;
  f["operand"] = operand;
  f["relative_error"] = number(t.relative_error());
  f["fraction_saturated"] = number(t.fraction_saturated());
  f["fraction_flushed"] = number(t.fraction_flushed());
  f["mean_error"] = number(t.mean_error());
  f["elements"] = t.elements;
  f["nonfinite_blocks"] = t.nonfinite_blocks;
  if (occ_fraction) f["occ_fraction"] = number(*occ_fraction);
  return append(kind::kQuantStats, std::move(f));
}

int64_t RunEvents::divergence(Progress p, const DivergenceFinding& d) {
  json f = base(p);
  f["reason"] = d.reason;
  f["value"] = number(d.value);
  f["reference"] = number(d.reference);
  f["severity"] = d.fatal ? "fatal" : "warning";
  return append(kind::kDivergence, std::move(f), true);
}

int64_t RunEvents::checkpoint(Progress p, const std::string& path) {
  json f = base(p);
  f["path"] = path;
  return append(kind::kCheckpoint, std::move(f), true);
}

int64_t RunEvents::checkpoint_rejected(Progress p, const std::string& path, const std::string& reason,
                                       const std::string& moved_to) {
  json f = base(p);
  f["path"] = path;
  f["reason"] = reason;
  f["moved_to"] = moved_to;
  return append(kind::kCheckpointRejected, std::move(f), true);
}

int64_t RunEvents::target_reached(Progress p, double val_loss, double target) {
  json f = base(p);
  f["val_loss"] = number(val_loss);
  f["target"] = target;
  return append(kind::kTargetReached, std::move(f), true);
}

int64_t RunEvents::live_target(Progress p, std::optional<double> val_loss, const std::string& basis,
                               const std::string& ignored) {
  json f = base(p);
  if (val_loss) f["val_loss"] = number(*val_loss);
  if (val_loss && !basis.empty()) f["basis"] = basis;
  if (!ignored.empty()) f["ignored"] = ignored;
  return append(kind::kLiveTarget, std::move(f), true);
}

int64_t RunEvents::projection(Progress p, double target, const ProjectionResult& r, int streak) {
  json f = base(p);
  f["target"] = number(target);
  if (!r.projection) {
    f["no_projection"] = r.no_projection_reason;
    return append(kind::kProjection, std::move(f), true);
  }
  const Projection& pr = *r.projection;
  const auto tokens = [](const std::optional<double>& t) { return t ? json(*t) : json(nullptr); };
  f["confidence"] = pr.confidence;
  f["points"] = pr.points;
  f["loss_at_budget"] = number(pr.loss_at_budget);
  f["loss_at_budget_lo"] = number(pr.loss_at_budget_lo);
  f["loss_at_budget_hi"] = number(pr.loss_at_budget_hi);
  f["tokens_to_target"] = tokens(pr.tokens_to_target);
  f["tokens_to_target_lo"] = tokens(pr.tokens_to_target_lo);
  f["tokens_to_target_hi"] = tokens(pr.tokens_to_target_hi);
  f["not_reaching"] = pr.not_reaching;
  f["streak"] = streak;
  return append(kind::kProjection, std::move(f), true);
}

int64_t RunEvents::precision_switch(Progress p, size_t phase,
                                    const contract::PrecisionConfig& precision) {
  json f = base(p);
  f["phase"] = phase;
  f["fprop"] = std::string(contract::to_string(precision.fprop));
  f["dgrad"] = std::string(contract::to_string(precision.dgrad));
  f["wgrad"] = std::string(contract::to_string(precision.wgrad));
  return append(kind::kPrecisionSwitch, std::move(f), true);
}

int64_t RunEvents::run_end(Progress p, const End& e) {
  json f = base(p);
  f["status"] = e.status;
  f["wall_s"] = e.wall_s;
  f["tokens_per_s"] = e.tokens_per_s;
  f["peak_rss_bytes"] = e.peak_rss_bytes;
  f["peak_gpu_bytes"] = e.peak_gpu_bytes;
  if (!e.reason.empty()) f["reason"] = e.reason;
  for (const auto& [name, value] : {std::pair{"setup_s", &e.setup_s}, std::pair{"standby_s", &e.standby_s},
                                    std::pair{"train_s", &e.train_s}, std::pair{"eval_s", &e.eval_s},
                                    std::pair{"checkpoint_s", &e.checkpoint_s},
                                    std::pair{"checkpoint_write_s", &e.checkpoint_write_s}})
    if (*value) f[name] = std::max(0.0, **value);
  if (e.graphed_steps) f["graphed_steps"] = *e.graphed_steps;
  if (e.mxfp4_as_fp8_tiles) {
    json tiles = json::object();
    for (kernels::GemmKind g : contract::kAllGemms) {
      const RouteTiles& t = (*e.mxfp4_as_fp8_tiles)[static_cast<size_t>(g)];
      tiles[std::string(kernels::to_string(g))] = {{"tensor_cores", t.tensor_cores}, {"recomputed", t.recomputed}};
    }
    f["mxfp4_as_fp8_tiles"] = std::move(tiles);
  }
  return append(kind::kRunEnd, std::move(f), true);
}

std::optional<int64_t> LogSummary::checkpoint_seq(const std::string& path, int64_t step) const {
  std::optional<int64_t> seq;
  for (const auto& ev : checkpoints)
    if (ev.value("path", "") == path && ev.value("step", int64_t{-1}) == step) seq = ev["seq"].get<int64_t>();
  return seq;
}

LogSummary summarize_log(const std::string& events_path) {
  LogSummary s;
  for (auto& ev : contract::read_effective_events(events_path)) {
    const std::string k = ev["kind"].get<std::string>();
    if (k == kind::kRunStart) {
      ++s.run_starts;
      s.last_run_start = ev;
      s.run_end.reset();
    } else if (k == kind::kRunEnd) {
      s.run_end = ev;
    } else if (k == kind::kCheckpoint) {
      s.checkpoints.push_back(ev);
    }
  }
  return s;
}

}  // namespace mxablate::trainer
