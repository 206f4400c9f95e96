// The Slurm commands the executor needs — sbatch, scontrol release, squeue, scancel — behind an
// interface, so the executor's logic is unit-tested against an in-memory cluster everywhere and
// the real commands (run with Boost.Process, each with a time limit) only where Slurm is.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxablate/orchestrator/slurm_squeue.h"

namespace mxablate::orchestrator {

// A Slurm command failed; what() is one line with the command and what it printed.
// `transient`: the controller was unreachable or slow (worth trying again later).
struct SlurmError : std::runtime_error {
  SlurmError(const std::string& message, bool transient_)
      : std::runtime_error(message), transient(transient_) {}
  bool transient;
};

class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  // sbatch --parsable [--hold] --array=SPEC SCRIPT; returns the job id.
  virtual std::string submit(const std::filesystem::path& script, const std::string& array_spec,
                             bool hold) = 0;
  // scontrol release JOB (lets a job submitted with --hold start).
  virtual void release(const std::string& job_id) = 0;
  // squeue -h -r --states=all for these jobs: one status per array task, ended tasks included
  // while Slurm remembers them. Jobs Slurm does not know (any more) are simply absent.
  virtual std::vector<SlurmTaskStatus> query_jobs(const std::vector<std::string>& job_ids) = 0;
  // The same for every job of this name.
  virtual std::vector<SlurmTaskStatus> query_name(const std::string& job_name) = 0;
  // scancel IDS (jobs "12" or tasks "12_3"): pending tasks are removed, running ones get
  // SIGTERM and, KillWait seconds later, SIGKILL. With `kill_now`: SIGKILL at once.
  virtual void cancel(const std::vector<std::string>& ids, bool kill_now = false) = 0;
  // The cluster's MaxArraySize (task indices must stay below it); 0 when it cannot be read.
  virtual int max_array_size() = 0;
};

// The real commands, found on PATH (a missing one is a SlurmError naming it); each call is
// given `timeout` before it is killed and reported as a transient error.
std::unique_ptr<SlurmClient> make_slurm_command_client(
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Whether a Slurm command's message means "try again later" (controller down, timeouts).
bool is_transient_slurm_message(const std::string& text);

}  // namespace mxablate::orchestrator
