// The paper-style table: one row per arm with its GEMM precisions, interventions, extra-token
// cost (median, the interval with its kind — "range, 3 seeds" or "95 % CI (order statistics),
// 8 seeds" —, the sign-flip test's p and n), final validation loss and divergence counts, in
// Markdown, LaTeX, CSV or HTML. Every cell that can hold text from the data goes through the
// format's escaping function (escape.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxablate/analysis/extra_tokens.h"
#include "mxablate/contract/quant_settings.h"

namespace mxablate::analysis {

struct ArmSummary {
  std::string arm;
  contract::PrecisionConfig precision;  // the blocks' GEMM precisions (before schedule/overrides)
  // Every other setting that differs from its baseline row's (contract/settings_difference.h);
  // "-" when none.
  std::string interventions = "-";
  // The figure of the reference paper (arXiv 2605.09825, docs/design.md §1) when the arm's
  // numerics equal one of its arms exactly.
  std::optional<std::string> paper;
  bool is_baseline = false;
  ExtraTokenCost cost;
  std::optional<double> final_val_loss;  // median over the arm's runs
  std::optional<double> best_val_loss;   // median over the arm's runs of each run's lowest
  int seeds = 0;
  int converged = 0;    // reached the target
  int diverged = 0;
  int not_reached = 0;  // finished the budget without reaching the target
  std::string first_divergence_reason;
  std::string model;              // the runs' model (its own CSV column)
  std::optional<int64_t> params;  // the model's parameter count (run_start), when recorded
};

enum class TableFormat { kMarkdown, kLatex, kCsv, kHtml };  // kHtml: a <table> for the report
// What the loss column shows: the final validation loss, or the final and best perplexity
// (exp of the median final / best loss; for an odd number of seeds that is the median perplexity).
enum class TableMetric { kLoss, kPerplexity };

// How the extra-token figures were computed: paired by seed or not, what the interval is below and
// from min_values_for_interval() seeds, the paired test and when it can reach significance, what
// "≥" means, pairs left out. The table's and the report's captions end with it.
std::string cost_method_note(const std::vector<ArmSummary>& arms);

// `caption` says what the target was (e.g. "target val loss 4.213 (fp8 at 80 % of budget)").
std::string render_table(const std::vector<ArmSummary>& arms, TableFormat format,
                         const std::string& caption, TableMetric metric = TableMetric::kLoss);

}  // namespace mxablate::analysis
