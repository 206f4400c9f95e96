// `mxablate report`: one self-contained HTML page per sweep — validation loss vs tokens per arm
// (median and min-max band over seeds, the target line, divergence events marked), a zoom on
// the late stage, quantization telemetry per GEMM over training, and the table.
//
// The page is built from plain data (ReportData), so it can be tested without a database; the
// results store fills ReportData for the real command.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/analysis/arm_table.h"
#include "mxablate/analysis/curves.h"

namespace mxablate::analysis {

struct DivergenceMark {
  std::string arm;
  uint64_t seed = 0;
  int64_t step = 0;
  double tokens = 0;
  std::string reason;
  std::string severity;  // warning | fatal
  double value = 0;
};

struct RunCurve {
  std::string arm;
  uint64_t seed = 0;
  Curve evals;
};

// Relative quantization error of one (GEMM, operand) over training, averaged over layers.
struct TelemetryPoint {
  std::string arm;
  std::string gemm;     // fprop | dgrad | wgrad
  std::string operand;  // a | b
  double tokens = 0;
  double relative_error = 0;
};

// Outlier clamping and compensation (docs/trainer.md): the share of Fprop's X compensated, per
// arm (table row), averaged over every telemetry record that carried one (layers, sampled
// steps, seeds).
struct OccShare {
  std::string arm;
  double mean_fraction = 0;
  int64_t records = 0;
};

// The extra-token cost of one arm at one model (in percent against the baseline arm at that
// model): median over seeds and the table's interval, whatever its kind (the range below 6 seeds;
// both ends equal the median when there is none, e.g. one seed). `lower_bound`: a run never reached the target.
struct ScalePoint {
  double params = 0;
  double median_pct = 0;
  double low_pct = 0;
  double high_pct = 0;
  bool lower_bound = false;
  int seeds = 0;  // the arm's runs at that model; 1: drawn hollow and named "single seed"
};

struct ScaleSeries {
  std::string arm;
  std::vector<ScalePoint> points;  // by parameter count
};

// A model of the figure below: where it stands in tokens per parameter (its baseline's token
// budget over its parameter count), shown on the figure's second x axis.
struct ScaleModel {
  std::string model;
  double params = 0;
  double tokens_per_param = 0;
};

// The figure "extra tokens to target vs parameters" (model_blocks.h makes it).
struct ScaleFigure {
  std::vector<ScaleSeries> series;
  std::vector<ScaleModel> models;    // by parameter count
  std::string omitted;               // why there is no figure; empty when there is one
  std::vector<std::string> skipped;  // points left out, each with its reason
};

// One table per model for a sweep over several models.
struct ReportBlock {
  std::string heading;
  std::string caption;
  std::vector<ArmSummary> table;
};

struct ReportData {
  std::string sweep;
  std::string caption;            // what the target was
  std::optional<double> target;   // validation-loss target line
  std::vector<std::string> arms;  // in recipe order
  // What each row of `arms` is, for the figures (parallel to `arms`; empty: each row is its own
  // arm, of one model): the arm within its model (its colour, the same in every figure, docs/
  // design.md §6 "Figures") and the model (its dash type and marker).
  struct RowKey {
    std::string arm;
    std::string model;
  };
  std::vector<RowKey> row_keys;
  std::vector<ArmSummary> table;
  std::vector<RunCurve> runs;
  std::vector<DivergenceMark> divergences;
  std::vector<TelemetryPoint> telemetry;
  std::vector<OccShare> occ;  // arms that ran with OCC, in table order; empty: no section
  // A sweep over several models: one table per model (in place of `table`), and the figure of
  // extra tokens against parameters.
  std::vector<ReportBlock> blocks;
  ScaleFigure scale;
};

// Median and min-max of an arm's runs at each evaluated token count (runs that stopped early
// contribute where they have data).
struct BandPoint {
  double tokens;
  double median;
  double min;
  double max;
  int runs;
};
std::vector<BandPoint> arm_band(const std::vector<RunCurve>& runs, const std::string& arm);

struct ReportResult {
  std::string html_path;
  int plots = 0;          // SVG plots embedded
  std::string warning;    // gnuplot missing: gnuplot_missing_message(); the page has no plots
};

// The gnuplot program `program` names: a path when it holds a '/' (it must be an executable
// file), else the first executable of that name on PATH; nullopt when there is none.
std::optional<std::string> find_gnuplot(const std::string& program);

// One line: the plots were skipped because `program` was not found, the rest of the report is
// written, and how to get the plots (install gnuplot, or run the report where gnuplot is).
std::string gnuplot_missing_message(const std::string& program);

// Writes OUT_DIR/index.html (creating OUT_DIR; the figures' scripts, data and SVGs go to
// OUT_DIR/plots). `gnuplot` is the program to run; when it cannot be found the page still holds
// every table, and a notice stands where the figures would be. Nothing from `data` is ever
// written into a gnuplot script or into HTML markup (see escape.h).
ReportResult write_report(const ReportData& data, const std::string& out_dir,
                          const std::string& gnuplot = "gnuplot");

}  // namespace mxablate::analysis
