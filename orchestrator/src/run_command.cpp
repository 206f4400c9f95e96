// `mxablate run RECIPE`: registers the sweep and its runs in the results store, skips runs that
// already have their result, and runs the rest in slots (N CPU slots, or K per GPU), retrying
// crashed runs from their checkpoints. Ctrl-C / SIGTERM stops it cleanly; running the same
// command again continues the sweep.
#include <algorithm>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/sweep_analysis.h"
#include "mxablate/contract/gpu_memory_env.h"
#include "mxablate/orchestrator/executor_local.h"
#include "mxablate/orchestrator/gpu_memory.h"
#include "mxablate/orchestrator/slot_handover.h"
#include "mxablate/orchestrator/launch_checks.h"
#include "mxablate/orchestrator/recipe_error.h"
#include "mxablate/orchestrator/progress.h"
#include "mxablate/orchestrator/signal_watcher.h"
#include "mxablate/orchestrator/sweep_runner.h"
#include "mxablate/orchestrator/text_table.h"
#include "mxablate/orchestrator/trainer_locator.h"
#include "mxablate/results/database_file.h"
#include "mxablate/results/sqlite_db.h"
#include "mxablate/results/store.h"
#include "recipe_input.h"
#include "slurm_run.h"
#include "write_database.h"

namespace mxablate::cli {
namespace {

namespace fs = std::filesystem;
using namespace mxablate::orchestrator;

struct RunOptions {
  std::string recipe;
  std::string db = "mxablate.db";
  std::string runs_dir = "runs";
  std::string gpus;
  int cpu = 0;
  int per_gpu = 1;
  std::optional<std::string> trainer;
  int max_attempts = 3;
  std::string timeout = "0";
  std::string grace = "60s";
  std::string backfill = "10m";
  std::string order = "plan";
  int poll_ms = 200;
  std::string progress = "auto";
  std::string executor = "local";
  bool no_prestart = false;
  std::string gpu_memory;  // --gpu-memory SIZE; not given: what nvidia-smi reports
  bool gpu_memory_given = false;  // an empty SIZE is an error, not the option left out
  SlurmRunOptions slurm;
  const CLI::App* command = nullptr;
};

std::vector<int> parse_gpu_list(const std::string& text) {
  std::vector<int> gpus;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int id = -1;
    try {
      id = std::stoi(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || id < 0)
      throw InputError(fmt::format("--gpus: '{}' is not a GPU index (expected e.g. 0,1,2)", item));
    if (std::find(gpus.begin(), gpus.end(), id) != gpus.end())
      throw InputError(fmt::format("--gpus: GPU {} is listed twice", id));
    gpus.push_back(id);
  }
  if (gpus.empty()) throw InputError("--gpus: empty list");
  return gpus;
}

int visible_nvidia_gpus() {
  std::error_code ec;
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

std::vector<Slot> choose_slots(const RunOptions& o, const Plan& plan) {
  const bool needs_gpu = std::any_of(plan.runs.begin(), plan.runs.end(),
                                     [](const RunSpec& r) { return r.config.device == contract::Device::kCUDA; });
  if (!o.gpus.empty() && o.cpu > 0) throw InputError("--gpus and --cpu exclude each other");
  if (o.per_gpu < 1) throw InputError("--per-gpu: must be at least 1");
  if (o.per_gpu > 1 && o.gpus.empty() && !needs_gpu)
    throw InputError("--per-gpu needs --gpus");
  if (!o.gpus.empty()) return gpu_slots(parse_gpu_list(o.gpus), o.per_gpu);
  if (needs_gpu) {
    if (o.cpu > 0)
      throw InputError("the recipe's runs use device cuda; give GPUs with --gpus, not --cpu");
    const int n = visible_nvidia_gpus();
    if (n == 0)
      throw InputError("the recipe's runs use device cuda but no NVIDIA GPU is visible; pass "
                       "--gpus LIST");
    std::vector<int> all(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    return gpu_slots(all, o.per_gpu);
  }
  if (o.cpu < 0) throw InputError("--cpu: must be at least 1");
  return cpu_slots(o.cpu > 0 ? o.cpu : 1);
}

// What the chosen slots can give one run, in the words of the options that chose them.
RankLimit rank_limit(const RunOptions& o, const std::vector<Slot>& slots) {
  RankLimit limit;
  limit.max_ranks = max_ranks_of(slots);
  const bool gpus = std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.gpu.has_value(); });
  if (gpus) {
    limit.unit = "distinct GPUs";
    limit.source = o.gpus.empty() ? "the visible GPUs" : "--gpus " + o.gpus;
    limit.hint = "give more GPUs with --gpus (--per-gpu adds slots on the same GPUs, which the "
                 "ranks of one run cannot share), or lower parallel.data";
  } else {
    limit.unit = "CPU slots";
    limit.source = o.cpu > 0 ? fmt::format("--cpu {}", o.cpu) : "the default --cpu 1";
    limit.hint = "raise --cpu, or lower parallel.data";
  }
  return limit;
}

// The GPU memory CUDA runs are checked against before launch (gpu_memory.h): --gpu-memory, else
// what this machine's GPUs report; nullopt (with a note on stderr) when neither is known.
std::optional<GpuMemory> gpu_memory_to_check(const RunOptions& o, bool on_slurm) {
  if (o.gpu_memory_given) {
    try {
      return GpuMemory{parse_memory_size(o.gpu_memory), "--gpu-memory " + o.gpu_memory};
    } catch (const std::invalid_argument& e) {
      throw InputError(std::string("--gpu-memory: ") + e.what());
    }
  }
  std::string why = "the runs go to Slurm's GPUs, not this machine's";
  if (!on_slurm)
    if (const std::optional<int64_t> bytes = query_gpu_memory(&why))
      return GpuMemory{*bytes, "the GPUs here (nvidia-smi)"};
  std::cerr << "mxablate: note: the runs' predicted GPU memory is not checked (" << why
            << "); give --gpu-memory SIZE to check it\n";
  return std::nullopt;
}

ProgressMode parse_progress(const std::string& s) {
  if (s == "auto") return ProgressMode::kAuto;
  if (s == "terminal") return ProgressMode::kTerminal;
  if (s == "plain") return ProgressMode::kPlain;
  if (s == "none") return ProgressMode::kNone;
  throw InputError("--progress: expected auto, terminal, plain or none, got '" + s + "'");
}

// A target derived from the baseline arm is stored with the sweep once that arm has finished:
// later tables, reports and SQL views (run_tokens_to_target) then all use the same number.
void store_resolved_target(results::ResultsStore& store, const std::string& sweep) {
  const std::optional<double> target = analysis::target_to_store(analysis::load_sweep(store.db(), sweep));
  if (target && store.store_resolved_target(sweep, *target))
    std::cout << fmt::format("sweep {}: target val loss {:.4f} resolved on the baseline arm and "
                             "stored with the sweep\n",
                             sweep, *target);
}

void run_sweep(const RunOptions& o) {
  long long timeout_ms = 0, grace_ms = 0, backfill_ms = 0;
  try {
    timeout_ms = parse_duration_ms(o.timeout);
    grace_ms = parse_duration_ms(o.grace);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("--timeout/--grace: {}", e.what()));
  }
  try {
    backfill_ms = parse_duration_ms(o.backfill);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("--backfill: {}", e.what()));
  }
  LaunchOrder order = LaunchOrder::kPlan;
  if (o.order == "longest-first")
    order = LaunchOrder::kLongestFirst;
  else if (o.order != "plan")
    throw InputError("--order: expected plan or longest-first, got '" + o.order + "'");
  if (o.max_attempts < 1) throw InputError("--max-attempts: must be at least 1");
  if (o.poll_ms < 1 || o.poll_ms > 60000) throw InputError("--poll-ms: must be in [1, 60000]");
  const ProgressMode mode = parse_progress(o.progress);

  const bool on_slurm = o.executor == "slurm";
  if (!on_slurm && o.executor != "local")
    throw InputError("--executor: expected local or slurm, got '" + o.executor + "'");
  if (!on_slurm && o.slurm.any_given(o.command))
    throw InputError("--partition, --gpus-per-run, --time, --max-parallel, --sbatch-arg and "
                     "--slurm-poll need --executor slurm");
  if (on_slurm && (!o.gpus.empty() || o.cpu > 0 || o.per_gpu != 1 || timeout_ms > 0 ||
                   o.no_prestart))
    throw InputError("--gpus, --cpu, --per-gpu, --timeout and --no-prestart are for the local "
                     "executor; with --executor slurm use --gpus-per-run, --max-parallel and "
                     "--time");
  if (on_slurm) slurm_executor_options(o.slurm);  // option errors first
  if (o.gpu_memory_given) gpu_memory_to_check(o, on_slurm);  // option errors first
  const RecipeInput input = load_checked_recipe_input(o.recipe);
  std::vector<Slot> slots = on_slurm ? std::vector<Slot>{} : choose_slots(o, input.plan);
  if (!on_slurm) {
    try {
      check_ranks(input.recipe, input.plan, rank_limit(o, slots));
    } catch (const RecipeError& e) {
      throw InputError(e.what());
    }
  }
  // CUDA runs that cannot fit their GPUs are refused here, not after a launch (docs/design.md §4).
  std::optional<GpuMemory> gpu;
  if (std::any_of(input.plan.runs.begin(), input.plan.runs.end(),
                  [](const RunSpec& r) { return r.config.device == contract::Device::kCUDA; }))
    if ((gpu = gpu_memory_to_check(o, on_slurm))) {
      try {
        check_gpu_memory(input.recipe, input.plan, input.vocabularies, *gpu);
      } catch (const RecipeError& e) {
        throw InputError(e.what());
      }
    }
  // The memory each GPU slot's trainer plans `auto` recompute into (gpu_memory_env.h): its share
  // of the GPU, the figure the handover rule below and `plan --gpu-memory` use.
  if (gpu)
    for (Slot& slot : slots)
      if (slot.gpu) slot.env[contract::kGpuMemoryEnv] = std::to_string(gpu->bytes / std::max(1, o.per_gpu));
  fs::path trainer;
  try {
    trainer = find_trainer(o.trainer);
  } catch (const TrainerNotFound& e) {
    throw InputError(e.what());
  }
  // The runs directory first: if it cannot be written, nothing else should be created.
  const fs::path sweep_dir = fs::absolute(o.runs_dir) / input.plan.sweep;
  {
    std::error_code ec;
    fs::create_directories(sweep_dir, ec);
    if (ec)
      throw std::runtime_error(fmt::format("cannot create the runs directory {}: {}",
                                           sweep_dir.string(), ec.message()));
  }
  // Writes past a file-size limit must fail with an error we can report, not kill us.
  std::signal(SIGXFSZ, SIG_IGN);
  // The database's writer lock before anything else is written: a second `mxablate run` on the
  // same database (from any directory, with any runs directory) stops here.
  auto store = open_results_for_writing(o.db);
  std::unique_ptr<SlurmExecutor> slurm =
      on_slurm ? make_slurm_executor(o.slurm, input.plan.sweep, sweep_dir) : nullptr;
  if (!on_slurm) refuse_local_run_over_slurm_jobs(*store, input.plan.sweep);

  std::unique_ptr<Executor> executor =
      on_slurm ? std::unique_ptr<Executor>(std::move(slurm))
               : std::make_unique<LocalExecutor>(std::move(slots));
  SignalWatcher signals;
  auto progress = make_progress(mode, stderr);
  auto* slurm_executor = dynamic_cast<SlurmExecutor*>(executor.get());
  std::optional<CancelAwareWaker> cancel_aware;
  if (slurm_executor) {
    slurm_executor->set_notify([&progress](const std::string& line) { progress->message(line); });
    cancel_aware.emplace(signals, *slurm_executor);
  }
  Waker& waker = cancel_aware ? static_cast<Waker&>(*cancel_aware) : signals;
  SweepOptions options;
  options.runs_dir = o.runs_dir;
  options.trainer = trainer;
  options.max_attempts = o.max_attempts;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.grace = std::chrono::milliseconds(grace_ms);
  options.poll = std::chrono::milliseconds(o.poll_ms);
  options.backfill = std::chrono::milliseconds(backfill_ms);
  options.prestart = !o.no_prestart;
  if (order != LaunchOrder::kPlan)
    options.launch_order = launch_order(input.plan, order, input.vocabularies);
  // A slot passes to its standby at run_end where both runs fit its share of the GPU at once
  // (docs/design.md §9, "Busy slots").
  options.handover = make_handover_rule(input.plan, input.vocabularies,
                                        gpu ? std::optional<int64_t>(gpu->bytes) : std::nullopt,
                                        o.per_gpu);
  std::cout << fmt::format("sweep {}: {} runs {}; results in {}, runs in {}\n",
                           input.plan.sweep, input.plan.runs.size(),
                           on_slurm ? fmt::format("as Slurm job arrays{}",
                                                  o.slurm.max_parallel > 0
                                                      ? fmt::format(", at most {} at once",
                                                                    o.slurm.max_parallel)
                                                      : "")
                                    : fmt::format("in {} slot(s)", executor->capacity()),
                           o.db, sweep_dir.string())
            << std::flush;
  SweepRunner runner(input.recipe, input.plan, *store, *executor, waker, *progress, options);
  SweepResult r;
  try {
    r = runner.run();
    store_resolved_target(*store, input.plan.sweep);
  } catch (const results::SqliteError& e) {
    throw std::runtime_error(fmt::format("results database: {}", e.what()));
  }
  // Runs stopped as projected not to reach their target are named only when there are some.
  const std::string projected =
      r.projected_not_reached > 0 ? fmt::format(", {} projected_not_reached", r.projected_not_reached) : "";
  std::cout << fmt::format("sweep {}: {} converged, {} budget_exhausted{}, {} diverged, {} failed, "
                           "{} interrupted, {} not run{}\n",
                           input.plan.sweep, r.converged, r.budget_exhausted, projected, r.diverged, r.failed,
                           r.interrupted, r.unfinished - r.left_running,
                           r.left_running > 0
                               ? fmt::format(", {} still running in {}", r.left_running,
                                             executor->name())
                               : "")
            << std::flush;
  if (r.left_running > 0)
    throw ExitStatus(128 + r.stop_signal, detached_message(r.left_running, input.plan.sweep));
  if (slurm_executor && slurm_executor->cancel_requested())
    throw ExitStatus(kExitFailure, fmt::format("the sweep was cancelled (mxablate cancel); run "
                                               "the same command again to continue it"));
  if (r.stop_signal != 0)
    throw ExitStatus(128 + r.stop_signal,
                     fmt::format("stopped by {}; run the same command again to continue",
                                 r.stop_signal == SIGINT ? "Ctrl-C (SIGINT)" : "SIGTERM"));
  if (r.failed > 0)
    throw ExitStatus(kExitFailure, fmt::format("{} run(s) failed; see `mxablate status --db {}`",
                                               r.failed, o.db));
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a recipe's sweep: register it in the results database, run what is not "
             "finished in parallel slots, retry crashed runs from their checkpoints");
  cmd->add_option("recipe", o->recipe, "recipe file (YAML)")->required();
  cmd->add_option("--db", o->db, "results database (SQLite)")->capture_default_str();
  cmd->add_option("--runs-dir", o->runs_dir, "run directories go in DIR/<sweep>/<run_id>")
      ->capture_default_str();
  cmd->add_option("--gpus", o->gpus,
                  "GPU indices to use, e.g. 0,1,2,3 (one slot each; a run of N ranks takes N "
                  "slots on distinct GPUs)");
  cmd->add_option("--cpu", o->cpu,
                  "N slots on the CPU: N runs at once, a run of N ranks taking N (default 1 for "
                  "CPU recipes)");
  cmd->add_option("--per-gpu", o->per_gpu, "runs per GPU at once (small models)")
      ->capture_default_str();
  cmd->add_option("--trainer", o->trainer,
                  "trainer binary (default: $MXABLATE_TRAINER, else mxablate-train next to "
                  "mxablate)");
  cmd->add_option("--max-attempts", o->max_attempts,
                  "launches per run before it counts as failed (crashes resume from checkpoints)")
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout,
                  "wall-clock limit per attempt, e.g. 90m or 2h (0: none)")
      ->capture_default_str();
  cmd->add_option("--grace", o->grace,
                  "after asking a trainer to stop, kill it if still running after this long")
      ->capture_default_str();
  cmd->add_option("--backfill", o->backfill,
                  "how long later runs may start ahead of a run waiting for more free slots "
                  "(a run of N ranks takes N), e.g. 10m; 0: strictly in plan order")
      ->capture_default_str();
  cmd->add_option("--order", o->order,
                  "plan: runs start in plan order; longest-first: the runs of most tokens × "
                  "parameters first (a sweep over model sizes ends without idle slots waiting "
                  "on its biggest runs); ties in plan order")
      ->capture_default_str();
  cmd->add_option("--poll-ms", o->poll_ms, "how often event logs are ingested, in ms")
      ->capture_default_str();
  cmd->add_option("--progress", o->progress, "auto | terminal | plain | none")
      ->capture_default_str();
  cmd->add_option("--executor", o->executor,
                  "local: runs in slots on this machine; slurm: job arrays on a Slurm cluster "
                  "(runs directory and trainer on a shared filesystem)")
      ->capture_default_str();
  CLI::Option* gpu_memory_option = cmd->add_option("--gpu-memory", o->gpu_memory,
                  "GPU memory per GPU that CUDA runs are checked against before launch (80GB, "
                  "80GiB, 141e9); default: what nvidia-smi reports")
      ->type_name("SIZE");
  cmd->add_flag("--no-prestart", o->no_prestart,
                "start each run only when its slot is free (default: the next run of a busy slot "
                "is prestarted and sets up meanwhile, holding a second copy of its model and "
                "optimizer on the device; turn it off when they do not fit twice)");
  add_slurm_run_options(cmd, o->slurm);
  o->command = cmd;
  cmd->callback([o, gpu_memory_option] {
    o->gpu_memory_given = gpu_memory_option->count() > 0;
    run_sweep(*o);
  });
}

}  // namespace mxablate::cli
