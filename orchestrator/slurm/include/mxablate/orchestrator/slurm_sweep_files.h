// What the Slurm executor keeps in the sweep directory, RUNS_DIR/<sweep>/slurm/ — on the shared
// filesystem, so it is there for the next orchestrator and for `mxablate cancel`, from any host:
//   array-NNNN.sh        the batch script of submission NNNN (slurm_array_script.h)
//   submissions.jsonl    one line per submission: job id, script, and which run each task is.
//                        Appended (and fsync'ed) between `sbatch --hold` and `scontrol release`,
//                        so no task can run that a later orchestrator could not find.
//   cancels.jsonl        one line per `mxablate cancel`: when, by whom, which jobs
//   <job>_<task>.log     Slurm's output for the task (e.g. "CANCELLED ... DUE TO TIME LIMIT")
//   <job>_<task>.exit    the trainer's exit status, written by the task itself
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/orchestrator/slurm_array_script.h"
#include "mxablate/orchestrator/slurm_squeue.h"

namespace mxablate::orchestrator {

struct SlurmSubmission {
  std::string job_id;
  int number = 0;            // array-NNNN.sh
  std::string array_spec;    // "0-3%2"
  double submitted_at = 0;   // Unix seconds
  std::vector<ArrayTask> tasks;  // task index = position
};

struct SlurmCancelRecord {
  double at = 0;
  std::string by;  // user@host
  std::vector<std::string> job_ids;
};

class SlurmSweepFiles {
 public:
  explicit SlurmSweepFiles(const std::filesystem::path& sweep_dir);

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path script_path(int number) const;
  std::filesystem::path exit_file(const SlurmTaskRef& task) const;
  std::filesystem::path log_file(const SlurmTaskRef& task) const;

  // The status the task's script recorded for the trainer (0–255, 128+N after signal N);
  // nullopt when there is none (yet), or it is unreadable.
  std::optional<int> read_exit_status(const SlurmTaskRef& task) const;

  // Every submission recorded so far, in order; a line cut short by a crash is skipped.
  std::vector<SlurmSubmission> read_submissions() const;
  // Creates the directory if needed; the line is on disk when this returns. Throws
  // std::runtime_error naming the file.
  void append_submission(const SlurmSubmission& submission) const;
  // One more than the highest script number used (in the journal or on disk).
  int next_submission_number() const;

  std::vector<SlurmCancelRecord> read_cancels() const;
  void append_cancel(const SlurmCancelRecord& record) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace mxablate::orchestrator
