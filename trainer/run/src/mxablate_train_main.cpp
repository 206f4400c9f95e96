// mxablate-train: one training run in RUN_DIR (see trainer.h). Exit codes: 0 success, 1 internal
// failure, 2 bad config, 3 diverged, 4 interrupted (checkpointed).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "mxablate/contract/run_config.h"
#include "mxablate/contract/standby.h"
#include "mxablate/trainer/run/trainer.h"
#include "step_profiler.h"

int main(int argc, char** argv) {
  using namespace mxablate::trainer;
  // Two process-wide settings that libraries read once, when they load (before main), so they
  // are set here and the program re-executes itself once with them (same arguments); a value
  // the user set is kept.
  // - OMP_WAIT_POLICY=PASSIVE: GNU OpenMP by default spins before sleeping. On a shared 2-core
  //   machine that turned a 2-thread smoke step from ~80 ms into ~2 s.
  // - MALLOC_MMAP_THRESHOLD_=32 MiB (glibc's maximum) and MALLOC_TRIM_THRESHOLD_=256 MiB: every
  //   step allocates and frees the same large activations (the LM head's logits and their
  //   gradient are tokens x vocabulary); served by mmap/munmap, or handed back by trimming the
  //   heap, their page faults cost as much system time as the compute.
  // The re-exec loads the shared libraries twice (~0.5 s), once per run attempt.
  if (std::getenv("MXABLATE_TRAIN_REEXEC") == nullptr) {
    ::setenv("MXABLATE_TRAIN_REEXEC", "1", 1);
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    ::setenv("MALLOC_MMAP_THRESHOLD_", "33554432", 0);
    ::setenv("MALLOC_TRIM_THRESHOLD_", "268435456", 0);
    ::execv("/proc/self/exe", argv);  // returns only on failure: then carry on as we are
  }
  TrainOptions options;
  options.arguments.assign(argv + 1, argv + argc);
  CLI::App app{"mxablate-train: train one model as RUN_DIR/config.json says, logging to RUN_DIR/events.jsonl"};
  app.set_version_flag("--version", "mxablate-train 0.1.0");
  app.add_option("--run-dir", options.run_dir, "Run directory (config.json in, events.jsonl and checkpoints out)")
      ->required();
  app.add_option("--config", options.config_path, "Run config (default: RUN_DIR/config.json)");
  app.add_flag("--resume", options.resume,
               "Continue from the newest intact checkpoint in RUN_DIR (or restart a run that crashed "
               "before one)");
  app.add_flag("--verify-data", options.verify_data,
               "Before training, check every shard's SHA-256 and every token id against the data's "
               "manifest (always done for data under 64 MiB)");
  std::string profile_steps;
  app.add_option("--profile-steps", profile_steps,
                 "Write a Kineto trace (Chrome JSON) of optimizer steps FIRST:LAST (1-based) to "
                 "--profile-trace; scripts/profile-summary.py summarizes it");
  app.add_option("--profile-trace", options.profile_trace, "Where --profile-steps writes its trace");
  // Fault injection for tests (fault_plan.h); not shown in --help.
  FaultPlan faults;
  app.add_option("--debug-inject-nonfinite-at-step", faults.inject_nonfinite_at_step)->group("");
  app.add_option("--debug-signal-at-step", faults.signal_at_step)->group("");
  app.add_option("--debug-crash-at-step", faults.crash_at_step)->group("");
  app.add_option("--debug-crash-writing-checkpoint", faults.crash_writing_checkpoint)->group("");
  app.add_option("--debug-crash-after-checkpoint-published", faults.crash_after_checkpoint_published)->group("");
  app.add_option("--debug-fault-rank", faults.fault_rank)->group("");
  app.add_flag("--debug-synchronous-checkpoints", options.synchronous_checkpoints)->group("");
  app.add_option("--debug-always-verify-data-bytes", options.always_verify_data_bytes)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mxablate-train: " << e.what() << " (see --help)\n";
    return exit_code::kBadConfig;
  }
  if (!profile_steps.empty() || !options.profile_trace.empty()) {
    const auto request = parse_profile_steps(profile_steps, options.profile_trace);
    if (!request || options.profile_trace.empty()) {
      std::cerr << "mxablate-train: --profile-steps \"" << profile_steps
                << "\" needs the form FIRST:LAST (1 <= FIRST <= LAST) and --profile-trace FILE\n";
      return exit_code::kBadConfig;
    }
    options.profile_first_step = request->first_step;
    options.profile_last_step = request->last_step;
  }
  try {
    options.standby_fd = mxablate::contract::standby_fd_from_environment();
  } catch (const mxablate::contract::ConfigError& e) {
    std::cerr << "mxablate-train: " << e.what() << "\n";
    return exit_code::kBadConfig;
  }
  return run_trainer(options, faults);
}
