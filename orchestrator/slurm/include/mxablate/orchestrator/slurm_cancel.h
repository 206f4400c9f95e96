// `mxablate cancel`: finds every queued or running Slurm task of a sweep — through the
// submission journal, the job ids of its open attempts and its job name (which also catches a job
// submitted just before an orchestrator died) — records the cancel in slurm/cancels.jsonl, so a
// running orchestrator records those attempts as interrupted instead of resubmitting them, and
// scancels them. Slurm sends the trainers SIGTERM (they checkpoint), SIGKILL after KillWait.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "mxablate/orchestrator/slurm_client.h"

namespace mxablate::orchestrator {

struct SlurmCancelReport {
  std::vector<std::string> job_ids;  // the arrays cancelled, in order
  size_t running = 0;                // tasks that were running
  size_t queued = 0;                 // tasks that were still waiting
  std::string warning;               // e.g. the cancel could not be recorded; empty if none
};

// `open_refs`: executor_ref of the sweep's open Slurm attempts ("12_3"), as the database has
// them; `by`: who cancels ("user@host"). Throws SlurmError when Slurm cannot be asked or told.
SlurmCancelReport cancel_sweep_jobs(SlurmClient& slurm, const std::string& sweep,
                                    const std::filesystem::path& sweep_dir,
                                    const std::vector<std::string>& open_refs,
                                    const std::string& by);

}  // namespace mxablate::orchestrator
