#include "mxablate/orchestrator/slurm_job_state.h"

#include <array>
#include <cctype>
#include <utility>

namespace mxablate::orchestrator {
namespace {

struct Known {
  std::string_view name;
  SlurmPhase phase;
  SlurmEnd end;
};

// squeue(1), JOB STATE CODES (Slurm 22.05; later versions add nothing that ends a job).
constexpr std::array kKnown = {
    Known{"PENDING", SlurmPhase::kQueued, SlurmEnd::kNone},
    Known{"REQUEUED", SlurmPhase::kQueued, SlurmEnd::kNone},
    Known{"REQUEUE_HOLD", SlurmPhase::kQueued, SlurmEnd::kNone},
    Known{"REQUEUE_FED", SlurmPhase::kQueued, SlurmEnd::kNone},
    Known{"RESV_DEL_HOLD", SlurmPhase::kQueued, SlurmEnd::kNone},
    Known{"CONFIGURING", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"RUNNING", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"COMPLETING", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"SUSPENDED", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"STOPPED", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"SIGNALING", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"STAGE_OUT", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"RESIZING", SlurmPhase::kRunning, SlurmEnd::kNone},
    Known{"COMPLETED", SlurmPhase::kEnded, SlurmEnd::kExited},
    Known{"FAILED", SlurmPhase::kEnded, SlurmEnd::kExited},
    Known{"TIMEOUT", SlurmPhase::kEnded, SlurmEnd::kTimeLimit},
    Known{"DEADLINE", SlurmPhase::kEnded, SlurmEnd::kTimeLimit},
    Known{"PREEMPTED", SlurmPhase::kEnded, SlurmEnd::kPreempted},
    Known{"NODE_FAIL", SlurmPhase::kEnded, SlurmEnd::kNodeFailure},
    Known{"BOOT_FAIL", SlurmPhase::kEnded, SlurmEnd::kNodeFailure},
    Known{"CANCELLED", SlurmPhase::kEnded, SlurmEnd::kCancelled},
    Known{"OUT_OF_MEMORY", SlurmPhase::kEnded, SlurmEnd::kOutOfMemory},
    Known{"SPECIAL_EXIT", SlurmPhase::kEnded, SlurmEnd::kOther},
    Known{"REVOKED", SlurmPhase::kEnded, SlurmEnd::kOther},
};

}  // namespace

SlurmJobState parse_slurm_job_state(std::string_view text) {
  // "CANCELLED by 0" (scontrol), "COMPLETED+" (sacct-style): the state is the leading word.
  size_t b = 0;
  while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  size_t e = b;
  while (e < text.size() && (std::isupper(static_cast<unsigned char>(text[e])) || text[e] == '_'))
    ++e;
  std::string name(text.substr(b, e - b));
  for (const Known& k : kKnown)
    if (k.name == name) return {name, k.phase, k.end};
  if (name.empty()) name = std::string(text.substr(b));
  return {name, SlurmPhase::kRunning, SlurmEnd::kNone};
}

std::string describe_slurm_state(const SlurmJobState& s) {
  switch (s.end) {
    case SlurmEnd::kNone: return s.phase == SlurmPhase::kQueued ? "queued" : "running";
    case SlurmEnd::kExited: return s.name == "COMPLETED" ? "completed" : "failed";
    case SlurmEnd::kTimeLimit: return "time limit";
    case SlurmEnd::kPreempted: return "preempted";
    case SlurmEnd::kNodeFailure: return "node failure";
    case SlurmEnd::kCancelled: return "cancelled";
    case SlurmEnd::kOutOfMemory: return "out of memory";
    case SlurmEnd::kOther: break;
  }
  std::string lower;
  for (char c : s.name) lower += c == '_' ? ' ' : static_cast<char>(std::tolower(c));
  return lower;
}

}  // namespace mxablate::orchestrator
