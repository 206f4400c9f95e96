// The paper-style table: one row per arm with its GEMM precisions, interventions, extra-token
// cost, final validation loss and divergence counts, in Markdown, LaTeX, CSV or HTML. Every cell
// that can hold text from the data goes through the format's escaping function (escape.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxablate/analysis/extra_tokens.h"

namespace mxablate::analysis {

struct ArmSummary {
  std::string arm;
  std::string fprop, dgrad, wgrad;   // bf16 | fp8 | mxfp4 | nvfp4
  std::string stochastic_rounding;   // operand classes, e.g. "grad"; empty when off
  std::string hadamard_mode;         // none | deterministic | fixed-random | per-step-random
  int hadamard_size = 16;
  std::string hadamard_gemms;        // e.g. "wgrad"
  bool is_baseline = false;
  ExtraTokenCost cost;
  std::optional<double> final_val_loss;  // median over the arm's runs
  int seeds = 0;
  int converged = 0;    // reached the target
  int diverged = 0;
  int not_reached = 0;  // finished the budget without reaching the target
  std::string first_divergence_reason;
};

enum class TableFormat { kMarkdown, kLatex, kCsv, kHtml };  // kHtml: a <table> for the report

// The reference paper's figure for an arm with these settings (DESIGN §1), or nullopt when the
// arm is not one of the paper's.
std::optional<std::string> paper_figure(const ArmSummary& arm);

// One sentence on how the extra-token figures were computed (paired by seed or not, pairs left
// out); the table's and the report's captions end with it.
std::string cost_method_note(const std::vector<ArmSummary>& arms);

// `caption` says what the target was (e.g. "target val loss 4.213 (fp8 at 80 % of budget)").
std::string render_table(const std::vector<ArmSummary>& arms, TableFormat format,
                         const std::string& caption);

}  // namespace mxablate::analysis
