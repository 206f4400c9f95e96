#include "mxablate/orchestrator/run_outcome.h"

#include <fmt/format.h>

#include "mxablate/results/schema.h"

namespace mxablate::orchestrator {
namespace {

namespace st = results::status;

std::string with_tail(std::string reason, const std::string& tail) {
  if (!tail.empty()) reason += ": " + tail;
  return reason;
}

Outcome retry_or_give_up(const AttemptObservation& o, const std::string& what) {
  if (o.attempts_used < o.max_attempts)
    return {true, "",
            fmt::format("{}; retrying from its last checkpoint (attempt {} of {})", what,
                        o.attempts_used + 1, o.max_attempts)};
  return {false, st::kFailed,
          with_tail(fmt::format("{}; gave up after {} attempts", what, o.attempts_used),
                    o.stderr_tail)};
}

}  // namespace

Outcome decide_outcome(const AttemptObservation& o) {
  const std::string ended = o.how_it_ended.empty() ? "the trainer ended" : o.how_it_ended;
  const std::string timeout =
      fmt::format("timed out after {:.0f} s (the per-run limit; {})", o.timeout_s, ended);
  if (o.run_end_status) {
    const std::string& s = *o.run_end_status;
    // A run stopped as projected not to reach its target is a result like a spent budget (a
    // lower bound), never a failure to retry (docs/design.md §4, "Projected outcomes and hopeless runs").
    if (s == st::kConverged || s == st::kBudgetExhausted || s == st::kDiverged ||
        s == st::kProjectedNotReached)
      return {false, s, ""};
    if (s == st::kFailed)
      return {false, st::kFailed,
              with_tail(fmt::format("the trainer reported failure ({})", ended), o.stderr_tail)};
    if (s == st::kInterrupted) {
      if (o.timed_out) return {false, st::kFailed, timeout};
      if (o.stop_requested)
        return {false, st::kInterrupted, "stopped on request after checkpointing"};
      return retry_or_give_up(o, fmt::format("stopped from outside mxablate ({})", ended));
    }
    return {false, st::kFailed, fmt::format("unknown run_end status \"{}\" ({})", s, ended)};
  }
  if (o.timed_out) return {false, st::kFailed, timeout};
  if (o.stop_requested)
    return {false, st::kInterrupted, fmt::format("stopped on request ({})", ended)};
  if (o.exit_code == trainer_exit::kBadConfig)
    return {false, st::kFailed,
            with_tail("the trainer rejected config.json (exit code 2)", o.stderr_tail)};
  if (o.exit_code == trainer_exit::kOutOfMemory)
    // Memory does not come back on a retry: the trainer's last line says what to change.
    return {false, st::kFailed,
            with_tail("the trainer ran out of GPU memory (exit code 5)", o.stderr_tail)};
  if (o.exit_code == trainer_exit::kDiverged)
    return {false, st::kDiverged, "exit code 3 (diverged) without a run_end event"};
  if (!o.exit_code && !o.signal)
    // Neither an exit code nor a signal: the executor can only say what it saw (an orchestrator
    // restart, a Slurm NODE_FAIL with no exit file); that is the reason to keep.
    return retry_or_give_up(
        o, fmt::format("the trainer was lost ({}) before it wrote a final status", ended));
  return retry_or_give_up(o, fmt::format("{} without a final status", ended));
}

}  // namespace mxablate::orchestrator
