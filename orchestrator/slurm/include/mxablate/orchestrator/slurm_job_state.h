// Slurm's job states as squeue prints them (JOB STATE CODES in squeue(1)), and what each means
// for an attempt: still queued, running, or ended — and if ended, whether the trainer's own exit
// decides the outcome or the cluster stopped it (time limit, preemption, node failure, scancel),
// in which case the run resumes from its checkpoint on resubmission, up to the retry limit.
// A pure mapping, unit-tested state by state.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mxablate::orchestrator {

enum class SlurmPhase {
  kQueued,   // waiting to start: PENDING, REQUEUED, held, …
  kRunning,  // started and not ended: RUNNING, COMPLETING, SUSPENDED, …
  kEnded,    // a final state: the task will not run again under this job id
};

// Why an ended task ended, as far as Slurm knows.
enum class SlurmEnd {
  kNone,             // not ended
  kExited,           // COMPLETED / FAILED: the trainer's exit code and run_end event decide
  kTimeLimit,        // TIMEOUT, DEADLINE
  kPreempted,        // PREEMPTED
  kNodeFailure,      // NODE_FAIL, BOOT_FAIL
  kCancelled,        // CANCELLED (scancel; by mxablate cancel or by someone else)
  kOutOfMemory,      // OUT_OF_MEMORY
  kOther,            // SPECIAL_EXIT, REVOKED, …: ended for a reason we do not model
};

struct SlurmJobState {
  std::string name;  // as Slurm printed it, e.g. "TIMEOUT"
  SlurmPhase phase = SlurmPhase::kQueued;
  SlurmEnd end = SlurmEnd::kNone;
  bool ended() const { return phase == SlurmPhase::kEnded; }
};

// Parses a state as printed by squeue -O State / scontrol (long names; "CANCELLED by 0" and
// trailing '+' are accepted). An unknown name is treated as still running: a newer Slurm may add
// transient states, and guessing "ended" would submit the run twice.
SlurmJobState parse_slurm_job_state(std::string_view text);

// One word for the progress display and `mxablate status`: "queued", "running", or the
// lower-case reason it ended ("time limit", "preempted", "node failure", "cancelled", …).
std::string describe_slurm_state(const SlurmJobState& state);

}  // namespace mxablate::orchestrator
