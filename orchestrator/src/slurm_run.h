// The Slurm side of `mxablate run`: its options (--executor slurm, --partition, --gpus-per-run,
// --time, --max-parallel, --sbatch-arg, --slurm-poll), the executor they build, and the checks
// that keep a sweep from being driven by two kinds of executor at once. Kept out of
// run_command.cpp so that file stays about the sweep itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mxablate/orchestrator/executor_slurm.h"

namespace CLI {
class App;
}

namespace mxablate::results {
class ResultsStore;
}

namespace mxablate::cli {

struct SlurmRunOptions {
  std::string partition;
  int gpus_per_run = 0;
  std::string time;
  int max_parallel = 0;
  std::vector<std::string> sbatch_args;
  std::string poll = "5s";
  bool any_given(const CLI::App* cmd) const;  // a Slurm-only option appears on the command line
};

void add_slurm_run_options(CLI::App* cmd, SlurmRunOptions& options);

// The options as the executor takes them; InputError (one line naming the option) when one
// cannot work. Called before anything else is looked at, so a typo costs nothing.
orchestrator::SlurmExecutorOptions slurm_executor_options(const SlurmRunOptions& options);

// Validates the options (InputError) and checks that the Slurm commands exist (an error saying
// where mxablate must run otherwise).
std::unique_ptr<orchestrator::SlurmExecutor> make_slurm_executor(
    const SlurmRunOptions& options, const std::string& sweep,
    const std::filesystem::path& sweep_dir);

// Running a sweep locally while Slurm tasks of it are recorded as running would train those
// runs twice: refuse with a message naming the way out.
void refuse_local_run_over_slurm_jobs(results::ResultsStore& store, const std::string& sweep);

// The line printed when the orchestrator stopped and left tasks running in Slurm.
std::string detached_message(size_t tasks, const std::string& sweep);

}  // namespace mxablate::cli
