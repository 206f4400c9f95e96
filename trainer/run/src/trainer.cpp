#include "mxablate/trainer/run/trainer.h"

#include <torch/cuda.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "mxablate/contract/run_config.h"
#include "mxablate/contract/standby.h"
#include "mxablate/data/dataset_location.h"
#include "mxablate/data/manifest.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/rules/process_stats.h"
#include "mxablate/trainer/parallel/ranks.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/run/training_run.h"
#include "mxablate/trainer/parallel/data_parallel.h"
#include "mxablate/trainer/torch/error_line.h"

namespace mxablate::trainer {
namespace {

namespace fs = std::filesystem;
using contract::ConfigError;
using contract::RunConfig;
using Clock = std::chrono::steady_clock;

}  // namespace

std::string resolve_dataset_dir(const std::string& dataset) {
  if (dataset != data::kDefaultDataset) return dataset;
  const std::string dir = data::dataset_dir(dataset);
  if (!fs::exists(fs::path(dir) / data::kManifestFile))
    throw ConfigError("data.dataset: the default corpus is not prepared at " + dir +
                      " (run scripts/build-corpus.sh, or set MXABLATE_DEFAULT_DATASET)");
  return dir;
}

int run_trainer(const TrainOptions& options, const FaultPlan& faults) {
  // Setup is timed from the process's start (before the re-exec and the libraries' loading),
  // as far as /proc tells; from here otherwise.
  const Clock::time_point process_start =
      Clock::now() - std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(process_age_seconds().value_or(0.0)));
  std::unique_ptr<TrainingRun> run;
  std::optional<RunConfig> config_read;  // for the out-of-memory line's prediction
  try {
    if (options.run_dir.empty() || !fs::is_directory(options.run_dir))
      throw ConfigError("--run-dir: \"" + options.run_dir + "\" is not a directory");
    const std::string config_path = options.config_path.empty()
                                        ? (fs::path(options.run_dir) / "config.json").string()
                                        : options.config_path;
    config_read = contract::read_run_config(config_path);
    const RunConfig& config = *config_read;
    // What the config alone decides, refused as `mxablate plan` refuses it (the same function),
    // before the machine, the ranks or the data are looked at (docs/design.md §5, "Validation
    // before anything runs").
    check_runnable(config);
    const int ranks = config.parallel.data;
    if (options.standby_fd && ranks > 1)
      throw ConfigError(std::string(contract::kStandbyFdEnv) + ": a run of " +
                        std::to_string(ranks) +
                        " ranks (parallel.data) cannot wait as a standby; only one-rank runs are "
                        "prestarted");
    const std::optional<RankInfo> rank = rank_from_environment(ranks);
    if (!rank && ranks > 1) {
      // The build's (NCCL, Gloo), not the config's: refused here alone (docs/design.md §5).
      const std::string missing = missing_backend(config.device == contract::Device::kCUDA, ranks);
      if (!missing.empty()) throw ConfigError(missing);
      return launch_ranks(ranks, options.arguments);
    }
    // A rank whose peer has died must see the broken connection as an error, not die of SIGPIPE:
    // the launcher names the rank killed by a signal as the cause of a failure, so a peer's
    // SIGPIPE would be misreported as the run's cause (docs/design.md §4, "Data-parallel runs").
    if (rank) std::signal(SIGPIPE, SIG_IGN);
    if (rank && rank->world != ranks)
      throw ConfigError("parallel.data: " + std::to_string(ranks) + " but this process is rank " +
                        std::to_string(rank->rank) + " of " + std::to_string(rank->world) +
                        " (WORLD_SIZE or SLURM_NTASKS)");
    run = std::make_unique<TrainingRun>(config, options, rank.value_or(RankInfo{}), faults);
    double standby_s = 0;
    if (options.standby_fd) {
      // Ready for the first step: wait for the slot (contract/standby.h); abandoned, nothing has
      // been written and the run stays pending.
      const Clock::time_point waited_from = Clock::now();
      if (contract::wait_for_release(*options.standby_fd) != contract::StandbyRelease::kGo) {
        std::cerr << "mxablate-train: " << contract::abandoned_message() << "\n";
        return exit_code::kInterrupted;
      }
      standby_s = seconds_between(waited_from, Clock::now());
    }
    run->set_setup_timing(process_start, standby_s, options.standby_fd.has_value());
    return run->run();
  } catch (const ConfigError& e) {
    std::cerr << "mxablate-train: " << error_line(e) << "\n";
    return exit_code::kBadConfig;
  } catch (const data::DataError& e) {
    // A token the vocabulary does not have, met while training: bad input, not a crash.
    std::cerr << "mxablate-train: " << error_line(e) << "\n";
    if (run) run->record_failure(error_line(e), exit_code::kBadConfig);
    return exit_code::kBadConfig;
  } catch (const RanksLost& e) {
    // Another rank died: this run is interrupted, not failed (no run_end; it is retried).
    std::cerr << "mxablate-train: " << error_line(e) << "\n";
    return exit_code::kInternal;
  } catch (const c10::OutOfMemoryError& e) {
    const std::string line = out_of_memory_line(  // memory_plan.h: one line, the fix; final
        e.what_without_backtrace(), run ? &run->executed_config() : config_read ? &*config_read : nullptr,
        run ? run->vocab_size() : 0);
    std::cerr << "mxablate-train: " << line << "\n";
    if (run) run->record_failure(line, exit_code::kOutOfMemory);
    return exit_code::kOutOfMemory;
  } catch (const std::exception& e) {
    std::cerr << "mxablate-train: " << error_line(e) << "\n";
    if (run) run->record_failure(error_line(e), exit_code::kInternal);
    return exit_code::kInternal;
  }
}

}  // namespace mxablate::trainer
