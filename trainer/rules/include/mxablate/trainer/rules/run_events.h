// The trainer's side of RUN_DIR/events.jsonl (contract/event_log.h): one function per event
// kind, so the fields and the durability of each kind are decided in one place. Evaluations,
// checkpoints, divergences, resumes and run_end are durable (flushed and fsynced); sampled train
// and quant_stats events are not (a crash may lose those since the last durable one).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mxablate/contract/event_log.h"
#include "mxablate/contract/quant_settings.h"
#include "mxablate/kernels/quantize.h"
#include "mxablate/trainer/rules/curve_projection.h"
#include "mxablate/trainer/rules/divergence.h"

namespace mxablate::trainer {

struct Progress {
  int64_t step = 0;
  int64_t tokens = 0;
};

// Output tiles of one GEMM kind on the mxfp4-as-fp8 route (docs/design.md §3): kept as the FP8
// tensor cores wrote them, or recomputed by the fix-up from the MXFP4 values.
struct RouteTiles {
  int64_t tensor_cores = 0;
  int64_t recomputed = 0;
  bool operator==(const RouteTiles&) const = default;
};

class RunEvents {
 public:
  explicit RunEvents(const std::string& events_path) : writer_(std::in_place, events_path) {}
  // Writes nothing: the events of a data-parallel run's ranks other than rank 0, which alone
  // keeps the log (docs/design.md §4, "Data-parallel runs"); every call returns seq 0.
  RunEvents() = default;

  int64_t last_seq() const { return writer_ ? writer_->last_seq() : 0; }

  // `details` carries run_start's fields besides step/tokens (attempt, device, params, versions…).
  int64_t run_start(Progress p, nlohmann::json details);
  int64_t resume(Progress p, int64_t discard_after_seq, const std::string& checkpoint);
  int64_t train(Progress p, double loss, double lr, double grad_norm, double tokens_per_s);
  int64_t eval(Progress p, double val_loss);
  // `occ_fraction`: Fprop's X under OCC, the share of elements clamped and compensated.
  int64_t quant_stats(Progress p, int layer, const std::string& layer_name, const char* gemm,
                      const char* operand, const kernels::QuantTelemetry& t,
                      std::optional<double> occ_fraction = std::nullopt);
  int64_t divergence(Progress p, const DivergenceFinding& f);
  int64_t checkpoint(Progress p, const std::string& path);
  int64_t checkpoint_rejected(Progress p, const std::string& path, const std::string& reason,
                              const std::string& moved_to);
  int64_t target_reached(Progress p, double val_loss, double target);
  // The curve's projection towards `target` at this evaluation, or why there is none; `streak`:
  // verdicts of "not reaching" in a row, this one included (curve_projection.h). Durable.
  int64_t projection(Progress p, double target, const ProjectionResult& r, int streak);
  // A target taken from RUN_DIR/target.json (`val_loss`, `basis`), or the reason the file was
  // not used (`ignored`, val_loss nullopt): docs/design.md §5, "Live targets". Durable.
  int64_t live_target(Progress p, std::optional<double> val_loss, const std::string& basis,
                      const std::string& ignored);
  // Durable: a resume must know which precisions the run had reached.
  int64_t precision_switch(Progress p, size_t phase, const contract::PrecisionConfig& precision);
  struct End {
    std::string status;
    double wall_s = 0;
    double tokens_per_s = 0;
    int64_t peak_rss_bytes = 0;
    int64_t peak_gpu_bytes = 0;
    std::string reason;  // empty: omitted
    // Where the attempt's time went (docs/design.md §9, "Busy slots"); unset: omitted.
    std::optional<double> setup_s, standby_s, train_s, eval_s, checkpoint_s;
    // Steps of this attempt replayed from a captured CUDA graph (step_graph.h); unset: omitted.
    std::optional<int64_t> graphed_steps;
    // Seconds the checkpoint writer spent writing (mostly beside training, so not a part of
    // wall_s's split); unset: omitted.
    std::optional<double> checkpoint_write_s;
    // The attempt's MXFP4 GEMM output tiles on the mxfp4-as-fp8 route, by GEMM (indexed by
    // kernels::GemmKind); unset: omitted (no GEMM on that route).
    std::optional<std::array<RouteTiles, 3>> mxfp4_as_fp8_tiles;
  };
  int64_t run_end(Progress p, const End& end);

 private:
  int64_t append(const std::string& kind, nlohmann::json fields, bool durable = false) {
    return writer_ ? writer_->append(kind, std::move(fields), durable) : 0;
  }
  std::optional<contract::EventWriter> writer_;
};

// The events of the surviving timeline (resume discards applied), for resume decisions.
struct LogSummary {
  int64_t run_starts = 0;
  std::optional<nlohmann::json> last_run_start;  // the last run_start, if any
  std::optional<nlohmann::json> run_end;  // the last run_end, if the timeline ended
  // seq of the checkpoint event announcing `path` at `step`, if it was written.
  std::optional<int64_t> checkpoint_seq(const std::string& path, int64_t step) const;
  std::vector<nlohmann::json> checkpoints;
};
LogSummary summarize_log(const std::string& events_path);

}  // namespace mxablate::trainer
