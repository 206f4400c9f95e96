// The reader's side of the event-log contract (event_log.h): when is one line of events.jsonl
// an event. Every rule lives here, so the orchestrator's ingestion, the trainer's resume and the
// fuzzer all agree on what is data and what is a bad line.
//
// A line is an event when it is one JSON object (at most kMaxEventLineBytes, nesting at most
// kMaxEventDepth, every string at most kMaxEventStringBytes, valid UTF-8, no NUL) with
//   seq    an integer in [1, kMaxEventSeq], greater than the seq of the event before it (a gap
//          is allowed: a damaged line may have taken the number in between);
//   kind   one of event_kind (a kind this build does not know is a bad line: the trainer and
//          the orchestrator come from one build);
//   time   a finite number >= 0;
//   step, tokens  integers in [0, kMaxEventSeq];
// and the fields its kind requires, of the right type (see the table in event_line.cpp).
// Durations (run_end's setup_s, train_s, eval_s, checkpoint_s, standby_s, checkpoint_write_s)
// are never null: a negative, non-finite or huge one makes the line bad, and so do train_s +
// eval_s + checkpoint_s beyond wall_s (they are disjoint parts of it).
// Measurements (losses, norms, rates) may be null: that is how the writer records NaN/Inf, and
// a non-finite loss is a divergence, i.e. data. A number that does not fit a double (1e999) is
// not something the writer produces and makes the line bad.
//
// Curve events (train, eval, quant_stats, target_reached) may not go back in step or tokens;
// resume and run_start begin a timeline at their own step (a resumed attempt restarts from its
// checkpoint).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mxablate::contract {

inline constexpr int64_t kMaxEventSeq = int64_t{1} << 53;  // exact as a double; far from wrapping
inline constexpr size_t kMaxEventLineBytes = size_t{1} << 20;
inline constexpr size_t kMaxEventStringBytes = 4096;
inline constexpr int kMaxEventDepth = 16;
// Durations (run_end's setup_s, train_s, eval_s, checkpoint_s, standby_s): at most ~3 years;
// their parts of wall_s may exceed it by rounding only (kEventSecondsSlack).
inline constexpr double kMaxEventSeconds = 1e8;
inline constexpr double kEventSecondsSlack = 1e-3;

// What the lines accepted so far establish for the next one.
struct EventLineState {
  int64_t last_seq = 0;
  int64_t step_floor = 0;
  int64_t tokens_floor = 0;
};

struct ParsedEventLine {
  std::optional<nlohmann::json> event;  // set when the line is an event
  std::string error;                    // otherwise: why not, in one short phrase
};

// Checks one complete line (without its newline). Advances `state` only when it is an event.
ParsedEventLine parse_event_line(std::string_view line, EventLineState& state);

}  // namespace mxablate::contract
