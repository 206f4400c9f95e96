// `mxablate ingest --sweep NAME RUN_DIR…`: stores run directories the trainer wrote outside a
// sweep (a script started mxablate-train on them) in the results database, as runs of the sweep
// NAME, so that `mxablate query`, `status`, `table` and `report` answer for them as for a sweep's
// runs. Each directory holds config.json (the resolved run config) and events.jsonl; the log goes
// through the same ingestion as a sweep's (results/run_log.h), so its train_steps, evals,
// quant_stats, events and runs rows are the ones a sweep run gets.
//
// Everything is checked before anything is written: every config.json through the contract's
// reader, every line of every events.jsonl through the event-log contract (a line cut short at
// the end, a writer killed mid-line, is left unread, as the sweep's ingestion leaves it), and the
// database for a sweep of that name made by `mxablate run` or a run already stored from another
// directory or sweep. A refusal is one line naming the file, key or line (exit 2), and the
// database is left as it was. Ingesting a directory again stores what its log gained since; the
// same directory twice changes nothing.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/contract/event_log.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/run_id.h"
#include "mxablate/results/run_log.h"
#include "mxablate/results/store.h"
#include "write_database.h"

namespace mxablate::cli {
namespace {

namespace fs = std::filesystem;

struct IngestOptions {
  std::string db = "mxablate.db";
  std::string sweep;
  std::vector<std::string> run_dirs;
};

// One run directory, checked.
struct RunDirectory {
  fs::path dir;  // absolute, symbolic links resolved: what runs.run_dir holds
  fs::path events;
  std::string run_id;
  std::string arm;
  results::PlannedRun planned;
};

// Every line of the log through the event-log contract; a bad one is refused with its number.
// A line without its newline at the end is not read (the reader never consumes it).
void check_event_log(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st))
    throw InputError(fmt::format("{}: does not exist (a run directory holds the trainer's "
                                 "config.json and events.jsonl)",
                                 path.string()));
  if (!fs::is_regular_file(st)) throw InputError(path.string() + ": not a regular file");
  // The reader treats a log it cannot open as one not written yet; here that is an error.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw InputError(fmt::format("{}: cannot read it ({})", path.string(),
                                 std::error_code(errno, std::generic_category()).message()));
  ::close(fd);
  contract::EventReader reader(path.string());
  for (bool more = true; more;) {
    const contract::EventReader::Batch batch = reader.poll();
    if (!batch.bad_lines.empty()) {
      const contract::BadLine& bad = batch.bad_lines.front();
      throw InputError(fmt::format("{}: line {}: {}", path.string(), bad.line, bad.reason));
    }
    more = batch.more;
  }
}

RunDirectory check_run_directory(const std::string& given) {
  std::error_code ec;
  const fs::file_status st = fs::status(given, ec);
  if (!fs::exists(st)) throw InputError(given + ": no such run directory");
  if (!fs::is_directory(st)) throw InputError(given + ": not a directory");
  RunDirectory r;
  r.dir = fs::canonical(given, ec);
  if (ec) throw InputError(fmt::format("{}: {}", given, ec.message()));
  r.events = r.dir / "events.jsonl";

  const std::string config_path = (r.dir / "config.json").string();
  contract::RunConfig config;
  try {
    config = contract::read_run_config(config_path);
  } catch (const contract::ConfigError& e) {
    throw InputError(e.what());  // names the file and the key or byte
  }
  // The run's id: the one its config carries (`mxablate plan` writes it; the trainer reports it
  // in run_start), else the planner's hash of the config, as `mxablate run` would name it.
  nlohmann::json json = contract::to_json(config);
  r.run_id = config.run_id.empty() ? orchestrator::compute_run_id(json) : config.run_id;
  json["run_id"] = r.run_id;
  // The arm its config names; a config without one is named by its directory.
  r.arm = config.arm.empty() ? r.dir.filename().string() : config.arm;
  check_event_log(r.events);

  r.planned.run_id = r.run_id;
  r.planned.arm = r.arm;
  r.planned.config_json = json.dump();
  r.planned.run_dir = r.dir.string();
  r.planned.max_tokens = config.train.max_tokens;
  r.planned.interventions.clear();  // no recipe, no baseline run to describe it against
  r.planned.model = contract::model_label(config.model);
  return r;
}

// What the database holds that the runs may not join: a sweep of that name from a recipe, a
// run stored under another sweep or from another directory.
void check_against_store(results::ResultsStore& store, const IngestOptions& o,
                         const std::vector<RunDirectory>& runs) {
  using results::Statement;
  Statement sweep(store.db(), "SELECT recipe_path FROM sweeps WHERE name = ?1");
  sweep.bind(1, o.sweep);
  if (sweep.step() && sweep.get_text(0) != results::kIngestedRecipePath)
    throw InputError(fmt::format("{}: sweep '{}' holds the runs of the recipe {} (mxablate run); "
                                 "ingest into a sweep of another name",
                                 o.db, o.sweep, sweep.get_text(0)));
  sweep.reset();
  Statement run(store.db(),
                "SELECT s.name, r.run_dir FROM runs r JOIN sweeps s USING (sweep_id) "
                "WHERE r.run_id = ?1");
  for (const RunDirectory& r : runs) {
    run.bind(1, r.run_id);
    if (run.step()) {
      const std::string other_sweep = run.get_text(0), other_dir = run.get_text(1);
      if (other_sweep != o.sweep)
        throw InputError(fmt::format("{}: run {} is already in sweep '{}' of {}; a run belongs "
                                     "to one sweep",
                                     r.dir.string(), r.run_id, other_sweep, o.db));
      if (other_dir != r.dir.string())
        throw InputError(fmt::format("{}: run {} (the same config.json) is already ingested from "
                                     "{}; each run has one directory",
                                     r.dir.string(), r.run_id, other_dir));
    }
    run.reset();
  }
}

std::string event_count_text(results::Database& db, const std::string& run_id) {
  results::Statement st(db,
                        "SELECT (SELECT COUNT(*) FROM train_steps WHERE run_id = ?1) + "
                        "(SELECT COUNT(*) FROM evals WHERE run_id = ?1) + "
                        "(SELECT COUNT(*) FROM quant_stats WHERE run_id = ?1) + "
                        "(SELECT COUNT(*) FROM events WHERE run_id = ?1)");
  st.bind(1, run_id);
  st.step();
  const int64_t n = st.get_int(0);
  return fmt::format("{} event{}", n, n == 1 ? "" : "s");
}

void ingest_run_directories(const IngestOptions& o) {
  if (!orchestrator::valid_sweep_name(o.sweep))
    throw InputError(fmt::format("--sweep: \"{}\" is not a valid sweep name (letters, digits, "
                                 "'.', '_', '-'; at most 64)",
                                 o.sweep));
  // Every directory checked before the database is opened (or made).
  std::vector<RunDirectory> runs;
  std::map<std::string, fs::path> dir_of_run;
  for (const std::string& given : o.run_dirs) {
    RunDirectory r = check_run_directory(given);
    const auto [it, added] = dir_of_run.emplace(r.run_id, r.dir);
    if (!added) {
      if (it->second == r.dir) continue;  // the same directory named twice
      throw InputError(fmt::format("{}: run {} (the same config.json) is also {}; each run has "
                                   "one directory",
                                   r.dir.string(), r.run_id, it->second.string()));
    }
    runs.push_back(std::move(r));
  }

  const std::unique_ptr<results::ResultsStore> store = open_results_for_writing(o.db);
  try {
    check_against_store(*store, o, runs);
    results::SweepRecord sweep;
    sweep.name = o.sweep;
    sweep.recipe_path = results::kIngestedRecipePath;
    sweep.runs_dir = "";
    const int64_t sweep_id = store->register_sweep(sweep);
    for (const RunDirectory& r : runs) {
      store->add_run(sweep_id, r.planned);
      results::RunLog log(store->db(), r.run_id, r.events.string());
      const results::RunLog::Update up = log.poll();
      // Lines the log gained after it was checked (a trainer still writing it) that are bad.
      for (const std::string& w : up.warnings)
        std::cerr << fmt::format("mxablate: warning: {}: {}\n", escape::terminal(r.dir.string()),
                                 escape::terminal(w));
      const std::string status = store->settle_status_from_log(r.run_id);
      std::cout << fmt::format("ingested {}: run {} of sweep {}, arm {}: {}, {} ({} new)\n",
                               escape::terminal(r.dir.string()), escape::terminal(r.run_id),
                               escape::terminal(o.sweep), escape::terminal(r.arm), status,
                               event_count_text(store->db(), r.run_id), up.summary.inserted);
    }
  } catch (const results::SqliteError& e) {
    throw std::runtime_error(fmt::format("results database: {}", e.what()));
  }
}

}  // namespace

void register_ingest_command(CLI::App& app) {
  auto o = std::make_shared<IngestOptions>();
  CLI::App* cmd = app.add_subcommand(
      "ingest", "Store run directories the trainer wrote outside a sweep (config.json, "
                "events.jsonl) in the results database as runs of a sweep, for query, status, "
                "table and report; again later, it adds what their logs gained");
  cmd->add_option("run_dirs", o->run_dirs, "run directories (each: config.json, events.jsonl)")
      ->required();
  cmd->add_option("--db", o->db, "results database (SQLite; made if missing)")
      ->capture_default_str();
  cmd->add_option("--sweep", o->sweep,
                  "the sweep they join (made if missing; not one `mxablate run` made)")
      ->required();
  cmd->callback([o] { ingest_run_directories(*o); });
}

}  // namespace mxablate::cli
