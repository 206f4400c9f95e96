#include "slurm_run.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>

#include "cli_errors.h"
#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/orchestrator/text_table.h"
#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/store.h"

namespace mxablate::cli {

using namespace mxablate::orchestrator;

namespace {
constexpr const char* kGroup = "Slurm (with --executor slurm)";
constexpr const char* kOptions[] = {"--partition", "--gpus-per-run", "--time", "--max-parallel",
                                    "--sbatch-arg", "--slurm-poll"};
}  // namespace

bool SlurmRunOptions::any_given(const CLI::App* cmd) const {
  for (const char* name : kOptions)
    if (cmd->count(name) > 0) return true;
  return false;
}

void add_slurm_run_options(CLI::App* cmd, SlurmRunOptions& o) {
  cmd->add_option("--partition", o.partition, "Slurm partition for every run")->group(kGroup);
  cmd->add_option("--gpus-per-run", o.gpus_per_run,
                  "GPUs each run asks for (--gres=gpu:G), per rank: a run of parallel.data N asks "
                  "for N × G")
      ->group(kGroup);
  cmd->add_option("--time", o.time,
                  "Slurm time limit per attempt, e.g. 4:00:00 or 1-00:00:00; a run that reaches "
                  "it resumes from its checkpoint in a new attempt")
      ->group(kGroup);
  cmd->add_option("--max-parallel", o.max_parallel,
                  "at most K of the sweep's runs at once (the job array's %K); 0: no limit")
      ->capture_default_str()
      ->group(kGroup);
  // One value per occurrence, so that `--sbatch-arg=--qos=high recipe.yaml` leaves the recipe
  // alone; the '=' form is needed because the value starts with '-'.
  cmd->add_option("--sbatch-arg", o.sbatch_args,
                  "one more sbatch option for every run, written with '=': "
                  "--sbatch-arg=--account=abc (repeatable)")
      ->allow_extra_args(false)
      ->take_all()
      ->group(kGroup);
  cmd->add_option("--slurm-poll", o.poll, "how often squeue is asked about the sweep's jobs")
      ->capture_default_str()
      ->group(kGroup);
}

SlurmExecutorOptions slurm_executor_options(const SlurmRunOptions& o) {
  SlurmExecutorOptions options;
  options.submit = {o.partition, o.gpus_per_run, o.time, o.max_parallel, o.sbatch_args};
  try {
    validate_slurm_submit_options(options.submit);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  long long poll_ms = 0;
  try {
    poll_ms = parse_duration_ms(o.poll);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("--slurm-poll: {}", e.what()));
  }
  if (poll_ms < 100) throw InputError("--slurm-poll: must be at least 100ms");
  options.poll = std::chrono::milliseconds(poll_ms);
  return options;
}

std::unique_ptr<SlurmExecutor> make_slurm_executor(const SlurmRunOptions& o,
                                                   const std::string& sweep,
                                                   const std::filesystem::path& sweep_dir) {
  SlurmExecutorOptions options = slurm_executor_options(o);
  options.sweep = sweep;
  options.sweep_dir = sweep_dir;
  // A SLURM_CONF that names no file makes every Slurm command retry for a minute first.
  if (const char* conf = std::getenv("SLURM_CONF"); conf && *conf && !std::filesystem::exists(conf))
    throw std::runtime_error(fmt::format(
        "--executor slurm: SLURM_CONF names {}, which does not exist", conf));
  for (const char* program : {"sbatch", "squeue", "scancel", "scontrol"})
    if (!find_program(program))
      throw std::runtime_error(fmt::format(
          "--executor slurm: {} is not on PATH — run mxablate on a host where the Slurm commands "
          "work (a login node)",
          program));
  return std::make_unique<SlurmExecutor>(std::move(options), make_slurm_command_client());
}

void refuse_local_run_over_slurm_jobs(results::ResultsStore& store, const std::string& sweep) {
  results::Statement st(store.db(),
                        "SELECT COUNT(*) FROM attempts a JOIN runs r USING (run_id) "
                        "JOIN sweeps s USING (sweep_id) "
                        "WHERE s.name = ?1 AND a.executor = 'slurm' AND a.ended_at IS NULL");
  st.bind(1, sweep);
  const int64_t open = st.step() ? st.get_int(0) : 0;
  if (open > 0)
    throw InputError(fmt::format(
        "sweep {} has {} Slurm task(s) recorded as queued or running: continue it with "
        "--executor slurm (which re-attaches to them), or cancel them first with `mxablate cancel "
        "--sweep {}`",
        sweep, open, sweep));
}

std::string detached_message(size_t tasks, const std::string& sweep) {
  return fmt::format(
      "{} Slurm task(s) keep running; run the same command again to re-attach to them, or "
      "`mxablate cancel --sweep {}` to cancel them",
      tasks, sweep);
}

}  // namespace mxablate::cli
