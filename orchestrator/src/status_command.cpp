// `mxablate status`: one line per sweep (how many runs ended how) and a table of its runs. Opens
// the database read-only, so it can be run in a loop while a sweep writes.
#include <algorithm>
#include <CLI/CLI.hpp>
#include <ctime>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <memory>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/orchestrator/busy_time.h"
#include "mxablate/orchestrator/progress.h"
#include "mxablate/orchestrator/text_table.h"
#include "mxablate/results/query.h"
#include "mxablate/results/schema.h"
#include "mxablate/results/store.h"
#include "read_database.h"
#include "slurm_status.h"

namespace mxablate::cli {
namespace {

using namespace mxablate::orchestrator;
using results::Statement;

struct StatusOptions {
  std::string db = "mxablate.db";
  std::string sweep;
  bool all = false;
};

std::string local_time(double unix_s) {
  const auto t = static_cast<std::time_t>(unix_s);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

std::string opt_loss(const Statement& st, int col) {
  return st.is_null(col) ? "-" : fmt::format("{:.4f}", st.get_double(col));
}

// An axis value as the table shows it: a JSON string's text, any other JSON compact, and
// anything that is not JSON as the text it is (the table escapes what a terminal must not see).
std::string axis_value_text(const std::string& stored) {
  const auto v = nlohmann::json::parse(stored, nullptr, false);
  if (v.is_discarded()) return stored;
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string percent(std::optional<double> fraction) {
  return fraction ? fmt::format("{:.1f}%", 100.0 * *fraction) : std::string("-");
}

// Attempts keep their timings from schema version 5 on (results/schema.cpp).
constexpr int kTimingsSchema = 5;

// Every attempt of the sweep with its span and run_end timings, by run id (in launch order).
std::map<std::string, std::vector<AttemptSpan>> attempt_spans(results::Database& db,
                                                              int64_t sweep_id) {
  std::map<std::string, std::vector<AttemptSpan>> by_run;
  if (results::schema_version(db) < kTimingsSchema) return by_run;
  Statement st(db,
               "SELECT a.run_id, a.slot, a.launched_at, a.ended_at, a.prestarted, a.setup_s, "
               "a.standby_s, a.train_s, a.eval_s, a.checkpoint_s FROM attempts a "
               "JOIN runs r USING (run_id) WHERE r.sweep_id = ?1 ORDER BY a.launched_at");
  st.bind(1, sweep_id);
  const auto opt = [&](int col) {
    return st.is_null(col) ? std::nullopt : std::optional<double>(st.get_double(col));
  };
  while (st.step()) {
    if (st.is_null(2)) continue;
    AttemptSpan a;
    a.slot = st.is_null(1) ? "?" : st.get_text(1);
    a.launched_at = st.get_double(2);
    a.ended_at = opt(3);
    a.timings.prestarted = !st.is_null(4) && st.get_int(4) != 0;
    a.timings.setup_s = opt(5);
    a.timings.standby_s = opt(6);
    a.timings.train_s = opt(7);
    a.timings.eval_s = opt(8);
    a.timings.checkpoint_s = opt(9);
    by_run[st.get_text(0)].push_back(std::move(a));
  }
  return by_run;
}

// Busy slots (docs/design.md §9): per slot and over all, the busy time (busy_time.h: training,
// evaluation, checkpoints) over the sweep's wall time so far, then where each slot's wall time
// went. An older store, without timings, shows nothing.
void print_busy(const std::map<std::string, std::vector<AttemptSpan>>& by_run) {
  std::vector<AttemptSpan> spans;
  for (const auto& [run_id, attempts] : by_run)
    spans.insert(spans.end(), attempts.begin(), attempts.end());
  if (spans.empty()) return;
  // Slots are listed by first use.
  std::stable_sort(spans.begin(), spans.end(), [](const AttemptSpan& a, const AttemptSpan& b) {
    return a.launched_at < b.launched_at;
  });
  const BusySummary b = summarize_busy(spans, results::unix_now());
  std::string per_slot;
  for (const SlotTime& t : b.slots)
    per_slot += fmt::format("{}{} {}", per_slot.empty() ? "" : ", ", escape::terminal(t.slot),
                            percent(b.fraction(t.slot)));
  std::cout << fmt::format("  busy: {}; all slots {} of {} (train + eval + checkpoint time over "
                           "the sweep's wall time so far){}\n",
                           per_slot, percent(b.overall()), format_duration(b.wall_s),
                           (b.open > 0 ? fmt::format("; {} running attempt(s) count once they "
                                                     "end",
                                                     b.open)
                                       : std::string()) +
                               (b.untimed > 0 ? fmt::format("; {} ended attempt(s) without "
                                                            "timings count as idle",
                                                            b.untimed)
                                              : std::string()));
  if (b.wall_s <= 0) return;
  // Where the wall time went: the first six columns add up to it; a prestarted run's setup and
  // its wait for the slot overlapped the run before it and are shown apart.
  const auto share = [&](double s) { return fmt::format("{:.1f}%", 100.0 * s / b.wall_s); };
  TextTable table({"slot", "train", "eval", "checkpoint", "setup", "idle", "busy",
                   "overlapped setup", "standby wait"});
  SlotTime all{"all"};
  double idle = 0;
  for (const SlotTime& t : b.slots) {
    table.add_row({t.slot, share(t.train_s), share(t.eval_s), share(t.checkpoint_s),
                   share(t.setup_s), share(b.idle_s(t)), percent(b.fraction(t.slot)),
                   share(t.overlapped_setup_s), share(t.standby_s)});
    for (auto m : {&SlotTime::train_s, &SlotTime::eval_s, &SlotTime::checkpoint_s,
                   &SlotTime::setup_s, &SlotTime::overlapped_setup_s, &SlotTime::standby_s})
      all.*m += t.*m;
    idle += b.idle_s(t);
  }
  if (b.slots.size() > 1) {
    const double n = static_cast<double>(b.slots.size());
    table.add_row({"all", share(all.train_s / n), share(all.eval_s / n),
                   share(all.checkpoint_s / n), share(all.setup_s / n), share(idle / n),
                   percent(b.overall()), share(all.overlapped_setup_s / n),
                   share(all.standby_s / n)});
  }
  std::cout << fmt::format("  time per slot, as shares of the {} of wall time (busy = train + "
                           "eval + checkpoint):\n",
                           format_duration(b.wall_s))
            << table.render(4);
}

void print_sweep(results::Database& db, int64_t sweep_id, const std::string& name,
                 const std::string& recipe, double updated, bool all) {
  Statement counts(db,
                   "SELECT status, COUNT(*) FROM runs WHERE sweep_id = ?1 AND "
                   "(?2 OR plan_index IS NOT NULL) GROUP BY status");
  counts.bind(1, sweep_id).bind(2, all ? 1 : 0);
  std::map<std::string, int64_t> by_status;
  int64_t total = 0;
  while (counts.step()) {
    by_status[counts.get_text(0)] = counts.get_int(1);
    total += counts.get_int(1);
  }
  std::string summary;
  for (const char* s : {"pending", "running", "converged", "budget_exhausted",
                        "projected_not_reached", "diverged", "failed", "interrupted"})
    if (by_status.count(s)) summary += fmt::format(", {} {}", by_status[s], s);
  // Names come from the database: shown through escape::terminal, as every table cell is.
  std::cout << fmt::format("sweep {}: {} runs{} (recipe {}, updated {})\n", escape::terminal(name),
                           total, summary, escape::terminal(recipe), local_time(updated));

  std::vector<std::string> axes;
  Statement axis_names(db,
                       "SELECT a.axis FROM run_axes a JOIN runs r USING (run_id) WHERE "
                       "r.sweep_id = ?1 GROUP BY a.axis ORDER BY MIN(a.position), a.axis");
  axis_names.bind(1, sweep_id);
  while (axis_names.step()) axes.push_back(axis_names.get_text(0));

  // Every run's axis values, read as stored: a value another program wrote need not be JSON,
  // nor UTF-8, and must not stop `status` (SQLite's json() would refuse the whole query).
  std::map<std::string, std::map<std::string, std::string>> axis_values;
  Statement values(db,
                   "SELECT a.run_id, a.axis, a.value FROM run_axes a JOIN runs r USING (run_id) "
                   "WHERE r.sweep_id = ?1");
  values.bind(1, sweep_id);
  while (values.step()) axis_values[values.get_text(0)][values.get_text(1)] = values.get_text(2);

  const SlurmColumn slurm = slurm_column(db, sweep_id);
  std::vector<std::string> headers{"run_id", "arm"};
  headers.insert(headers.end(), axes.begin(), axes.end());
  for (const char* h :
       {"status", "att", "step", "tokens", "val_loss", "best", "wall", "busy", "note"})
    headers.push_back(h);
  if (!slurm.by_run.empty()) headers.insert(headers.end() - 1, "slurm");
  TextTable table(headers);
  const std::map<std::string, std::vector<AttemptSpan>> spans = attempt_spans(db, sweep_id);
  Statement runs(db,
                 "SELECT run_id, arm, status, attempts, step, tokens, max_tokens, final_val_loss, "
                 "best_val_loss, COALESCE(wall_s, CASE WHEN started_at IS NOT NULL THEN "
                 "COALESCE(finished_at, (julianday('now') - 2440587.5) * 86400.0) - started_at END), error "
                 "FROM runs WHERE sweep_id = ?1 AND (?2 OR plan_index IS NOT NULL) "
                 "ORDER BY plan_index IS NULL, plan_index, arm_index");
  runs.bind(1, sweep_id).bind(2, all ? 1 : 0);
  while (runs.step()) {
    std::vector<std::string> row{runs.get_text(0), runs.get_text(1)};
    const auto run_axes = axis_values.find(row[0]);
    for (const auto& a : axes) {
      if (run_axes == axis_values.end() || !run_axes->second.count(a)) {
        row.push_back("-");
        continue;
      }
      row.push_back(axis_value_text(run_axes->second.at(a)));
    }
    row.push_back(runs.get_text(2));
    row.push_back(std::to_string(runs.get_int(3)));
    row.push_back(runs.is_null(4) ? "-" : std::to_string(runs.get_int(4)));
    row.push_back(fmt::format("{}/{}", runs.is_null(5) ? "0" : format_count(runs.get_double(5)),
                              runs.is_null(6) ? "?" : format_count(runs.get_double(6))));
    row.push_back(opt_loss(runs, 7));
    row.push_back(opt_loss(runs, 8));
    row.push_back(runs.is_null(9) ? "-" : format_duration(runs.get_double(9)));
    // The run's own busy fraction (a prestarted attempt's span starts when it was released).
    const auto own = spans.find(row[0]);
    row.push_back(own == spans.end() ? "-" : percent(run_busy_fraction(own->second)));
    if (!slurm.by_run.empty()) {
      const auto it = slurm.by_run.find(runs.get_text(0));
      row.push_back(it == slurm.by_run.end() || it->second.empty() ? "-" : it->second);
    }
    // Cut by code points after escaping, so that a cut never splits a character.
    row.push_back(escape::clip(escape::terminal(runs.is_null(10) ? "" : runs.get_text(10)), 70));
    table.add_row(row);
  }
  std::cout << table.render(2);
  print_busy(spans);
  if (!slurm.note.empty()) std::cout << "  " << escape::terminal(slurm.note) << "\n";
}

void show_status(const StatusOptions& o) {
  const std::unique_ptr<results::Database> db = open_results_for_reading(o.db);
  try {
    Statement sweeps(*db,
                     "SELECT sweep_id, name, recipe_path, updated_at FROM sweeps "
                     "WHERE ?1 = '' OR name = ?1 ORDER BY created_at");
    sweeps.bind(1, o.sweep);
    bool any = false;
    while (sweeps.step()) {
      if (any) std::cout << "\n";
      any = true;
      print_sweep(*db, sweeps.get_int(0), sweeps.get_text(1), sweeps.get_text(2),
                  sweeps.get_double(3), o.all);
    }
    if (!any) {
      if (!o.sweep.empty())
        throw InputError(fmt::format("{}: no sweep named '{}'", o.db, o.sweep));
      std::cout << fmt::format("{}: no sweeps yet\n", o.db);
    }
  } catch (const results::SqliteError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace

void register_status_command(CLI::App& app) {
  auto o = std::make_shared<StatusOptions>();
  CLI::App* cmd = app.add_subcommand(
      "status", "Show each sweep's runs and their state (read-only; safe while a sweep runs)");
  cmd->add_option("--db", o->db, "results database (SQLite)")->capture_default_str();
  cmd->add_option("--sweep", o->sweep, "only this sweep");
  cmd->add_flag("--all", o->all, "also runs that the current recipe no longer plans");
  cmd->callback([o] { show_status(*o); });
}

}  // namespace mxablate::cli
