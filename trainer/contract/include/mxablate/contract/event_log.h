// RUN_DIR/events.jsonl: the trainer's append-only record of a run, and the source of truth the
// orchestrator ingests (docs/design.md §2). One JSON object per line, each with a strictly increasing
// `seq` (from 1), a `kind` and a wall-clock `time` (Unix seconds).
//
// Kinds and their fields (all numbers are JSON numbers; a non-finite value — a NaN loss, an
// infinite gradient norm — is written as null):
//   run_start      step, tokens, attempt, device, params, versions{...}, resumed(bool),
//                  prestarted(bool, optional: it waited as a standby, contract/standby.h)
//   train          step, tokens, loss, lr, grad_norm, tokens_per_s
//   eval           step, tokens, val_loss
//   quant_stats    step, tokens, layer, gemm, operand, relative_error, fraction_saturated,
//                  fraction_flushed, mean_error
//   divergence     step, tokens, reason (nonfinite_loss | nonfinite_grad | loss_spike |
//                  grad_norm_explosion | val_regression), value, severity (warning | fatal)
//   checkpoint     step, tokens, path
//   resume         step, tokens, discard_after_seq: events with seq in (discard_after_seq,
//                  this event's seq) belong to a timeline lost in a crash; readers drop them
//   checkpoint_rejected  step, tokens (where the run resumes), path, reason (one line),
//                  moved_to (where it was set aside, "" if it could not be): a checkpoint that
//                  failed verification on resume; written after that resume event.
//   target_reached step, tokens, val_loss
//   live_target    step, tokens, and val_loss (+ basis) when the run took a target from
//                  RUN_DIR/target.json (contract/target_file.h), or ignored (one line: why the
//                  file was not used; the run trains on as before)
//   projection     step, tokens, target, and either the projection of the validation curve
//                  (curve_projection.h; docs/design.md §4, "Projected outcomes and hopeless
//                  runs"): confidence, points (evaluations fitted), loss_at_budget with _lo/_hi
//                  (the interval at `confidence`), tokens_to_target with _lo/_hi (null: not
//                  within the projection's horizon), not_reaching (this evaluation's verdict),
//                  streak (verdicts in a row); or no_projection (one line: why there is none).
//                  Written at each evaluation while a target is known and not yet reached.
//   run_end        status (converged | budget_exhausted | projected_not_reached | diverged |
//                  failed | interrupted),
//                  step, tokens, wall_s, tokens_per_s, peak_rss_bytes, peak_gpu_bytes, reason?,
//                  and (optional: older logs lack them) setup_s (process start → first step
//                  ready, a standby's wait excluded), standby_s (waited for the slot), train_s,
//                  eval_s, checkpoint_s (disjoint parts of wall_s: checkpoint_s is the training
//                  thread's share, the snapshots and any wait for a write); busy = train_s +
//                  eval_s + checkpoint_s; checkpoint_write_s (optional: the checkpoint writer's
//                  seconds, mostly beside training, so not a part of wall_s's split),
//                  graphed_steps (optional: steps replayed from a captured CUDA graph)
//
// Durability: the writer flushes and fsyncs at eval, checkpoint and run_end boundaries, so a
// crash loses at most the sampled train events since the last of those. A torn final line (no
// newline) is never consumed by the reader, and the writer truncates it away when it reopens.
// What makes a line an event (types, ranges, seq order) is event_line.h: a new kind is added
// there too, or readers skip its lines as bad (trainer_rules_test checks every kind RunEvents
// writes against it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/contract/event_line.h"

namespace mxablate::contract {

namespace event_kind {
inline constexpr const char* kRunStart = "run_start";
inline constexpr const char* kTrain = "train";
inline constexpr const char* kEval = "eval";
inline constexpr const char* kQuantStats = "quant_stats";
inline constexpr const char* kDivergence = "divergence";
inline constexpr const char* kCheckpoint = "checkpoint";
inline constexpr const char* kResume = "resume";
inline constexpr const char* kCheckpointRejected = "checkpoint_rejected";
inline constexpr const char* kTargetReached = "target_reached";
// A target fixed while the run trains, or a target file it could not use (target_file.h).
inline constexpr const char* kLiveTarget = "live_target";
// The blocks' GEMM precisions changed (precision_schedule): phase i from the i-th switch on.
inline constexpr const char* kPrecisionSwitch = "precision_switch";
// The projection of the validation curve towards the target at an evaluation.
inline constexpr const char* kProjection = "projection";
inline constexpr const char* kRunEnd = "run_end";
}  // namespace event_kind

namespace run_status {
inline constexpr const char* kConverged = "converged";
inline constexpr const char* kBudgetExhausted = "budget_exhausted";
// Stopped early: projected, with the configured confidence, not to reach its target within its
// budget (target.stop_hopeless). Neither a failure nor a divergence; final, never re-run.
inline constexpr const char* kProjectedNotReached = "projected_not_reached";
inline constexpr const char* kDiverged = "diverged";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kInterrupted = "interrupted";
}  // namespace run_status

// Appends events. Opening an existing log continues its seq after the last line a reader accepts
// as an event (event_line.h).
class EventWriter {
 public:
  explicit EventWriter(const std::string& path);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Adds seq, kind and time to `fields` and appends the line; returns the seq it was given.
  // `durable` flushes and fsyncs after writing.
  int64_t append(const std::string& kind, nlohmann::json fields, bool durable = false);
  void sync();
  int64_t last_seq() const { return last_seq_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t last_seq_ = 0;
};

// How far a log has been consumed, and how to recognise that log again: the orchestrator keeps
// it in the results store with what it ingested, so a log that was truncated, replaced or
// deleted meanwhile is noticed instead of being read from the wrong offset.
struct LogPosition {
  int64_t offset = 0;  // bytes of complete lines consumed
  int64_t lines = 0;   // lines consumed (for line numbers in warnings)
  EventLineState state;
  // FNV-1a 64 of bytes [0, offset) and of the last consumed line (newline included).
  uint64_t prefix_hash = 0xcbf29ce484222325ull;
  uint64_t tail_hash = 0xcbf29ce484222325ull;
  int64_t tail_bytes = 0;
  bool hashes_known = true;  // false: only the offset is known (an older store); adopt on read
  uint64_t device = 0, inode = 0;  // the file last read (0: none yet)

  nlohmann::json to_json() const;
  // Throws std::invalid_argument when `j` is not a position.
  static LogPosition from_json(const nlohmann::json& j);
};

struct BadLine {
  int64_t line = 0;  // 1-based line number in the log
  std::string reason;
};

// Incremental reader: each poll returns the complete lines appended since the last poll,
// checked by parse_event_line; a bad line is reported (and skipped), never returned.
class EventReader {
 public:
  explicit EventReader(std::string path, LogPosition start = {});
  // Only an offset (no identity, no line count): the first poll adopts what is there.
  EventReader(std::string path, int64_t start_offset);

  struct Batch {
    std::vector<nlohmann::json> events;  // checked, in file order
    std::vector<BadLine> bad_lines;
    // Set when the log is not the one consumed so far (shorter, replaced, gone): the position
    // was reset and `events` are read from its start. Says what was found.
    std::optional<std::string> restarted;
    bool more = false;  // stopped at the per-poll byte limit; poll again
  };
  // Missing file with nothing consumed: an empty batch (the run may not have started yet).
  Batch poll();
  int64_t offset() const { return pos_.offset; }  // byte offset just past the last consumed line
  const LogPosition& position() const { return pos_; }

  static constexpr int64_t kMaxBytesPerPoll = int64_t{8} << 20;

 private:
  std::optional<std::string> identity_mismatch(int fd, int64_t size, uint64_t device,
                                               uint64_t inode);

  std::string path_;
  LogPosition pos_;
  bool verified_ = false;  // the whole consumed prefix was compared once in this process
};

// Reads a whole log and applies `resume` events: returns the events of the surviving timeline.
std::vector<nlohmann::json> read_effective_events(const std::string& path);

}  // namespace mxablate::contract
