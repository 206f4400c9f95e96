// What an attempt's end means for its run: a result (converged, budget_exhausted, diverged), a
// failure, an interruption the user asked for, or a retry from the last checkpoint. A pure
// function of what was observed, so the whole decision table is unit-tested.
//
// Trainer exit codes (the contract with mxablate-train): 0 success, 1 internal failure, 2 bad
// config, 3 diverged, 4 interrupted (SIGTERM/SIGINT: checkpointed and stopped), 5 out of GPU
// memory (final: the same run on the same GPUs runs out again; docs/design.md §4). The run_end
// event, when present, is authoritative; the exit code covers a trainer that never wrote one.
#pragma once

#include <optional>
#include <string>

namespace mxablate::orchestrator {

namespace trainer_exit {
inline constexpr int kOk = 0;
inline constexpr int kInternalFailure = 1;
inline constexpr int kBadConfig = 2;
inline constexpr int kDiverged = 3;
inline constexpr int kInterrupted = 4;
inline constexpr int kOutOfMemory = 5;
}  // namespace trainer_exit

struct AttemptObservation {
  std::optional<int> exit_code;  // both empty: the process was lost (orchestrator restarted)
  std::optional<int> signal;
  std::string how_it_ended;                   // "exit code 1", "killed by signal 9 (SIGKILL)"
  std::optional<std::string> run_end_status;  // the trainer's run_end in this attempt
  bool stop_requested = false;                // we asked it to stop (Ctrl-C / SIGTERM)
  bool timed_out = false;                     // it ran past the per-run timeout
  double timeout_s = 0;
  int attempts_used = 1;  // by this invocation, this one included
  int max_attempts = 3;
  std::string stderr_tail;  // the last line the trainer wrote to stderr
};

struct Outcome {
  bool retry = false;
  std::string status;  // a run status when !retry (results::status::*)
  std::string reason;  // one line for the runs table / the user; empty for a clean result
};

Outcome decide_outcome(const AttemptObservation& o);

}  // namespace mxablate::orchestrator
