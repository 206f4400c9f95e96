// `mxablate cancel [--sweep NAME]`: cancels the Slurm jobs of a sweep (or of every sweep in the
// database). The database is only read (the orchestrator stays its single writer); the cancel is
// recorded in the sweep directory, where a running orchestrator notices it, records the
// cancelled attempts as interrupted and exits. Re-running the sweep continues it from the
// checkpoints the trainers wrote when Slurm sent them SIGTERM.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <memory>
#include <vector>

#include "cli_errors.h"
#include "mxablate/analysis/escape.h"
#include "read_database.h"
#include "commands.h"
#include "mxablate/orchestrator/command_runner.h"
#include "mxablate/orchestrator/executor_local.h"
#include "mxablate/orchestrator/slurm_cancel.h"
#include "mxablate/orchestrator/slurm_sweep_files.h"
#include "mxablate/results/query.h"

namespace mxablate::cli {
namespace {

namespace fs = std::filesystem;
using namespace mxablate::orchestrator;
using results::Statement;

struct CancelOptions {
  std::string db = "mxablate.db";
  std::string sweep;
};

struct SweepRow {
  int64_t id = 0;
  std::string name;
  fs::path dir;
  std::vector<std::string> open_refs;
};

std::string who() {
  const char* user = std::getenv("USER");
  return fmt::format("{}@{}", user && *user ? user : std::to_string(::getuid()),
                     local_host_name());
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

void cancel(const CancelOptions& o) {
  std::vector<SweepRow> sweeps;
  try {
    auto db = open_results_for_reading(o.db);
    Statement st(*db, "SELECT sweep_id, name, runs_dir FROM sweeps WHERE ?1 = '' OR name = ?1 "
                      "ORDER BY created_at");
    st.bind(1, o.sweep);
    while (st.step())
      sweeps.push_back({st.get_int(0), st.get_text(1), fs::path(st.get_text(2)) / st.get_text(1), {}});
    for (SweepRow& s : sweeps) {
      Statement refs(*db,
                     "SELECT a.executor_ref FROM attempts a JOIN runs r USING (run_id) "
                     "WHERE r.sweep_id = ?1 AND a.executor = 'slurm' AND a.ended_at IS NULL "
                     "AND a.executor_ref IS NOT NULL");
      refs.bind(1, s.id);
      while (refs.step()) s.open_refs.push_back(refs.get_text(0));
    }
  } catch (const results::SqliteError& e) {
    throw std::runtime_error(e.what());
  }
  if (sweeps.empty()) {
    if (!o.sweep.empty()) throw InputError(fmt::format("{}: no sweep named '{}'", o.db, o.sweep));
    std::cout << fmt::format("{}: no sweeps yet\n", escape::terminal(o.db));
    return;
  }
  // Sweeps that never used Slurm have nothing to cancel (and need no squeue).
  std::vector<SweepRow*> slurm_sweeps;
  for (SweepRow& s : sweeps) {
    std::error_code ec;
    if (!s.open_refs.empty() || fs::exists(SlurmSweepFiles(s.dir).dir() / "submissions.jsonl", ec))
      slurm_sweeps.push_back(&s);
    else if (!o.sweep.empty())
      std::cout << fmt::format("sweep {}: no Slurm jobs (it did not run with --executor slurm)\n",
                               escape::terminal(s.name));
  }
  if (slurm_sweeps.empty()) {
    if (o.sweep.empty()) std::cout << fmt::format("{}: no sweep ran with --executor slurm\n",
                                                   escape::terminal(o.db));
    return;
  }
  if (!find_program("squeue") || !find_program("scancel"))
    throw std::runtime_error("squeue/scancel are not on PATH — run mxablate cancel where the Slurm "
                             "commands work (a login node)");
  auto slurm = make_slurm_command_client();
  for (SweepRow* s : slurm_sweeps) {
    SlurmCancelReport r;
    try {
      r = cancel_sweep_jobs(*slurm, s->name, s->dir, s->open_refs, who());
    } catch (const SlurmError& e) {
      throw std::runtime_error(fmt::format("sweep {}: {}", s->name, e.what()));
    }
    if (!r.warning.empty()) std::cerr << fmt::format("mxablate: warning: sweep {}: {}\n",
                                                   escape::terminal(s->name),
                                                   escape::terminal(r.warning));
    if (r.job_ids.empty()) {
      std::cout << fmt::format("sweep {}: no Slurm jobs queued or running\n",
                               escape::terminal(s->name));
      continue;
    }
    std::cout << fmt::format(
        "sweep {}: cancelled {} Slurm task(s) ({} running, {} queued) in job(s) {}; running "
        "trainers checkpoint before they stop — run the sweep again to continue it\n",
        escape::terminal(s->name), r.running + r.queued, r.running, r.queued, join(r.job_ids));
  }
}

}  // namespace

void register_cancel_command(CLI::App& app) {
  auto o = std::make_shared<CancelOptions>();
  CLI::App* cmd = app.add_subcommand(
      "cancel", "Cancel a sweep's Slurm jobs (queued and running); a running `mxablate run` of "
                "the sweep then records them as interrupted and exits");
  cmd->add_option("--db", o->db, "results database (SQLite)")->capture_default_str();
  cmd->add_option("--sweep", o->sweep, "only this sweep (default: every sweep in the database)");
  cmd->callback([o] { cancel(*o); });
}

}  // namespace mxablate::cli
