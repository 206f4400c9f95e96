// `mxablate table` and `mxablate report`: the answers a user came for, regenerated from the
// results store (read-only, so they never disturb a running sweep).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/analysis/model_blocks.h"
#include "mxablate/analysis/sweep_analysis.h"
#include "mxablate/results/sqlite_db.h"
#include "read_database.h"

namespace mxablate::cli {
namespace {

struct AnalysisOptions {
  std::string db = "mxablate.db";
  std::string sweep;
  std::string baseline;
  std::string format = "md";
  std::string metric = "loss";
  std::string out = "report";
  std::string gnuplot = "gnuplot";
};

// One block per model (a sweep of one model is one block): model_blocks.h.
struct LoadedSweep {
  analysis::SweepData data;
  std::vector<analysis::BlockTable> blocks;
};

LoadedSweep load(const AnalysisOptions& o) {
  const std::unique_ptr<results::Database> db = open_results_for_reading(o.db);
  LoadedSweep s;
  try {
    s.data = analysis::load_sweep(*db, o.sweep);
    s.blocks = analysis::analyze_by_model(s.data, o.baseline);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  return s;
}

void run_table(const AnalysisOptions& o) {
  analysis::TableFormat format;
  if (o.format == "md" || o.format == "markdown") {
    format = analysis::TableFormat::kMarkdown;
  } else if (o.format == "latex") {
    format = analysis::TableFormat::kLatex;
  } else if (o.format == "csv") {
    format = analysis::TableFormat::kCsv;
  } else {
    throw InputError("--format: '" + o.format + "' is not one of: md, latex, csv");
  }
  analysis::TableMetric metric;
  if (o.metric == "loss") {
    metric = analysis::TableMetric::kLoss;
  } else if (o.metric == "perplexity") {
    metric = analysis::TableMetric::kPerplexity;
  } else {
    throw InputError("--metric: '" + o.metric + "' is not one of: loss, perplexity");
  }
  const LoadedSweep s = load(o);
  const bool perplexity = metric == analysis::TableMetric::kPerplexity;
  if (s.blocks.size() == 1) {
    std::cout << analysis::render_table(s.blocks.front().table, format,
                                        "Sweep " + s.data.name + ": " +
                                            s.blocks.front().target.caption(perplexity),
                                        metric);
    return;
  }
  std::cout << analysis::render_blocks(s.data.name, s.blocks, format, metric);
}

void run_report(const AnalysisOptions& o) {
  // Said first, before any work: where the GPUs are there is often no gnuplot, and a page
  // without figures must not pass for a complete report.
  if (!analysis::find_gnuplot(o.gnuplot)) {
    std::cerr << "mxablate report: "
              << escape::terminal(analysis::gnuplot_missing_message(o.gnuplot)) << std::endl;
  }
  const LoadedSweep s = load(o);
  const auto result =
      analysis::write_report(analysis::report_data(s.data, s.blocks), o.out, o.gnuplot);
  std::cout << "wrote " << escape::terminal(result.html_path) << " (" << result.plots
            << " plots" << (result.warning.empty() ? "" : ", skipped: gnuplot not found") << ")\n";
}

void add_common(CLI::App* cmd, AnalysisOptions& o) {
  cmd->add_option("--db", o.db, "results database")->capture_default_str();
  cmd->add_option("--sweep", o.sweep, "sweep name (default: the most recently updated)");
  cmd->add_option("--baseline", o.baseline,
                  "arm the extra-token cost is measured against (default: the target's from_arm, "
                  "else the first arm)");
}

}  // namespace

void register_analysis_commands(CLI::App& app) {
  auto table = std::make_shared<AnalysisOptions>();
  CLI::App* t = app.add_subcommand(
      "table", "Print the per-arm table: extra tokens to target (median over seeds, the interval "
               "with its kind, the exact sign-flip p), final loss, divergences, and the paper's "
               "figure");
  add_common(t, *table);
  t->add_option("--format", table->format, "md | latex | csv")->capture_default_str();
  t->add_option("--metric", table->metric,
                "loss | perplexity: the final validation loss, or the final / best perplexity "
                "exp(loss), and the target in that unit")
      ->capture_default_str();
  t->callback([table] { run_table(*table); });

  auto report = std::make_shared<AnalysisOptions>();
  CLI::App* r = app.add_subcommand(
      "report", "Write one self-contained HTML page: loss curves per arm, late-stage zoom, "
                "divergence events, quantization telemetry, and the table");
  add_common(r, *report);
  r->add_option("--out", report->out, "output directory (index.html goes there)")
      ->capture_default_str();
  r->add_option("--gnuplot", report->gnuplot,
                "gnuplot program: a path, or a name looked up on PATH (without it the report has "
                "no plots, and says so)")
      ->envname("MXABLATE_GNUPLOT")
      ->capture_default_str();
  r->callback([report] { run_report(*report); });
}

}  // namespace mxablate::cli
