// What squeue says about array tasks: the format we ask for and the parser of its lines. We ask
// squeue (not sacct: many clusters, and our test cluster, run no accounting database) with
// `-h -r --states=all -O <squeue_format()>`: one line per array task, '|'-separated, including
// tasks that ended within the last MinJobAge seconds (300 by default), with their exit status.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxablate/orchestrator/slurm_job_state.h"

namespace mxablate::orchestrator {

// One task of a job array, "12_3" (array job id 12, task index 3): how attempts are stored in
// attempts.executor_ref.
struct SlurmTaskRef {
  std::string job_id;
  int task = -1;
  std::string text() const;  // "12_3"
  bool operator==(const SlurmTaskRef&) const = default;
  bool operator<(const SlurmTaskRef& o) const {
    return job_id != o.job_id ? job_id < o.job_id : task < o.task;
  }
};

// "12_3" → {12, 3}; nullopt for anything else (a pid of the local executor, a malformed ref).
std::optional<SlurmTaskRef> parse_slurm_task_ref(std::string_view text);

struct SlurmTaskStatus {
  SlurmTaskRef ref;
  SlurmJobState state;
  std::string reason;            // "None", "JobArrayTaskLimit", "Priority", "Resources", …
  std::optional<int> wait_status;  // squeue's exit_code: a wait(2) status (768 = exit code 3)
  std::string nodes;             // where it runs or ran; empty while pending
  std::string name;              // the job name: a job id Slurm reused for someone else's job
                                 // (after its state was reset) is not ours
};

// The -O argument: ArrayJobID, ArrayTaskID, State, Reason, exit_code, NodeList, Name,
// '|'-separated (the name last: it is the one field that may itself hold a '|').
std::string squeue_format();

struct SqueueParse {
  std::vector<SlurmTaskStatus> tasks;
  size_t skipped = 0;  // lines that were not one array task (a non-array job, a collapsed range)
};

SqueueParse parse_squeue_output(std::string_view text);

// squeue's complaint when none of the requested job ids is known any more (it then exits 1; when
// only some are unknown it lists the others and exits 0).
bool squeue_reports_unknown_jobs(std::string_view stderr_text);

}  // namespace mxablate::orchestrator
