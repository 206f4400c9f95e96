// The batch script of one submission: a job array whose task i runs mxablate-train for the i-th
// run directory. It is written into the sweep directory (RUNS_DIR/<sweep>/slurm/array-NNNN.sh),
// readable by a person and re-submittable with a plain `sbatch` (every option is an #SBATCH line).
//
// Each task appends the trainer's output to RUN_DIR/stdout.log and stderr.log (as the local
// executor does), forwards SIGTERM/SIGINT to the trainer (so `--signal=B:TERM@120` and scancel
// both let it checkpoint), and writes the trainer's exit status to slurm/<job>_<task>.exit, so
// the exit code is known even after Slurm has forgotten the job.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mxablate::orchestrator {

// What `mxablate run --executor slurm` asks of Slurm for every run.
struct SlurmSubmitOptions {
  std::string partition;                 // empty: the cluster's default partition
  int gpus_per_run = 0;                  // --gres=gpu:G (per rank: a run of N ranks asks N × G)
  std::string time_limit;                // Slurm's format (e.g. 2:00:00, 1-12:00:00); empty: default
  int max_parallel = 0;                  // the array throttle %K; 0: no limit
  std::vector<std::string> sbatch_args;  // further #SBATCH options, e.g. --account=abc
                                         // (--cpus-per-task: per rank, like the GPUs)
};

// A Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, INFINITE or UNLIMITED.
bool is_slurm_time_limit(std::string_view text);

// Throws std::invalid_argument with one line naming the option when something cannot work
// (a malformed time, an --sbatch-arg mxablate sets itself, a line break in a value).
void validate_slurm_submit_options(const SlurmSubmitOptions& options);

// The CPUs per task that --sbatch-arg sets (--cpus-per-task=C or -cC, the last one given);
// nullopt when none does. Throws std::invalid_argument when its value is not a whole number ≥ 1.
std::optional<int> sbatch_cpus_per_task(const std::vector<std::string>& sbatch_args);

struct ArrayTask {
  std::string run_id;
  std::filesystem::path run_dir;
  int attempt = 1;
  bool resume = false;
};

struct ArrayScript {
  std::string sweep;
  int submission = 1;                 // numbers the script files of a sweep
  std::filesystem::path path;         // where the script is written (for its header)
  std::string job_name;               // slurm_job_name(): how a sweep's jobs are found by name
  std::filesystem::path slurm_dir;    // RUNS_DIR/<sweep>/slurm: logs, exit files, the journal
  std::filesystem::path trainer;      // absolute; must exist on the compute nodes
  SlurmSubmitOptions options;
  // The ranks of every run of the array (parallel.data; one array, one rank count): its one task
  // asks for ranks × --gpus-per-run GPUs and ranks × --cpus-per-task CPUs (1 when not given), and
  // each rank gets the task's CPUs / ranks as OMP_NUM_THREADS. The trainer starts the ranks.
  int ranks = 1;
  std::vector<ArrayTask> tasks;
  std::string written_at;             // a timestamp for the header comment
};

// "0-3%2", "0-3", "0"; throttle 0 or >= tasks: no %.
std::string array_spec(size_t tasks, int throttle);

// The script's text; `spec` is the --array it is submitted with (also written as #SBATCH).
std::string render_array_script(const ArrayScript& script, const std::string& spec);

// "mxablate-<sweep>-<8 hex digits of the sweep directory's path>": unique per sweep directory, so
// two sweeps of one name in different runs directories never see each other's jobs.
std::string slurm_job_name(const std::string& sweep, const std::filesystem::path& sweep_dir);

// 'text' for bash, with embedded single quotes escaped.
std::string shell_quote(std::string_view text);

}  // namespace mxablate::orchestrator
