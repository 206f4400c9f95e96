// A sweep over several models, read one model at a time: each model is a block with its own
// target (a `from_arm` target is the baseline arm's runs *of that model* at their fraction of the
// budget: one loss cannot be a fair target for a 20 M and a 350 M model at once), and every row
// is compared with the baseline arm's row of the same model. `mxablate table` prints one block
// per model and the report plots extra tokens against the model's parameter count
// (docs/design.md §6, §7). A sweep of one model is one block: the sweep as it is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/analysis/report.h"
#include "mxablate/analysis/sweep_analysis.h"

namespace mxablate::analysis {

struct ModelBlock {
  std::string model;
  // The trainer's count from run_start, the same for every run of the model: the count most of
  // its runs recorded (notes say when they differ). nullopt before any run has started.
  std::optional<int64_t> params;
  std::string heading;  // "model llama-20m (22.1 M parameters)"; empty for a sweep of one model
  std::vector<std::string> notes;
  // The model's runs. With several models, rows are named by the arm and the grid settings that
  // vary within the model (the model, and settings linked to it, are the heading), and a target
  // stored with the sweep is not used: it cannot be every model's.
  SweepData sweep;
};

// "22.1 M", "1.32 B", "812 k": a parameter count for headings and notes.
std::string params_text(int64_t params);

// One block per model, ordered by parameter count when every model has one, else in the order
// the models first appear in the plan (the recipe's order).
std::vector<ModelBlock> split_by_model(const SweepData& sweep);

struct BlockTable {
  ModelBlock block;
  ResolvedTarget target;
  std::vector<ArmSummary> table;  // each row's model and params filled in
};

// Every block's target and table. `baseline` as for baseline_group (a row or arm name; empty:
// the target's from_arm, else the first row), looked up in each block. Throws
// std::invalid_argument naming the model when a block lacks it.
std::vector<BlockTable> analyze_by_model(const SweepData& sweep, const std::string& baseline);

// The figure "extra tokens to target vs parameters": one series per non-baseline arm, a point
// per model with a parameter count and a finite cost; everything left out is named in `skipped`,
// and `omitted` says why there is no figure at all (fewer than two models, or counts).
ScaleFigure scale_figure(const std::vector<BlockTable>& blocks);

// `mxablate table` for a sweep over several models: in Markdown a heading and a table per model,
// in LaTeX one table per model with the model in its caption; in CSV one table (the model and
// params columns tell the blocks apart). Every text from the data goes through the format's
// escaping function (escape.h).
std::string render_blocks(const std::string& sweep, const std::vector<BlockTable>& blocks,
                          TableFormat format, TableMetric metric);

// The report's data: a sweep of one model as report_data(); over several models, one table per
// model (`blocks`), no single target line, and the scale figure.
ReportData report_data(const SweepData& sweep, const std::vector<BlockTable>& blocks);

}  // namespace mxablate::analysis
