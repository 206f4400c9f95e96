// From the results store to the answers: a sweep's runs grouped into table rows (arm plus any
// non-seed grid axes), the resolved target, each row's extra-token cost, and the report data.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/contract/run_config.h"

#include "mxablate/analysis/arm_table.h"
#include "mxablate/analysis/run_projection.h"
#include "mxablate/analysis/report.h"

namespace mxablate::results {
class Database;
}

namespace mxablate::analysis {

struct RunRecord {
  std::string run_id;
  std::string arm;
  int arm_index = 0;
  std::string group;  // the table row: arm, plus "[axis=value …]" for non-seed grid axes
  uint64_t seed = 0;
  std::string pair_key;   // its seed-axis settings: the baseline run it is compared with
  // Its non-seed grid settings as (axis, value text), in the store's order: what `group` lists.
  std::vector<std::pair<std::string, std::string>> settings_axes;
  std::string model;               // its model: the preset's name (else the stored JSON)
  std::optional<int64_t> params;   // the trainer's parameter count (run_start), when recorded
  nlohmann::json config;        // the resolved RunConfig as stored
  contract::RunConfig settings;  // the same, parsed by the contract's one reader
  std::string status;
  double max_tokens = 0;
  double tokens_trained = 0;
  std::optional<double> final_val_loss;
  Curve evals;
  // Its last projection event (run_projection.h): a projection, or why there is none.
  ProjectionRecord projection{std::nullopt, kNoTargetWhileTraining};
  std::vector<DivergenceMark> divergences;
  std::vector<TelemetryPoint> telemetry;
  // OCC telemetry records (quant_stats.occ_fraction) and the sum of their fractions.
  int64_t occ_records = 0;
  double occ_fraction_sum = 0;
};

struct SweepData {
  std::string name;
  nlohmann::json target_spec;                 // the recipe's target section
  std::optional<double> stored_target;        // sweeps.target_val_loss
  std::vector<std::string> groups;            // table rows in recipe order
  std::vector<RunRecord> runs;
};

// Loads a sweep (the most recently updated one when `sweep` is empty). Throws
// std::invalid_argument naming the sweep when it does not exist.
SweepData load_sweep(results::Database& db, const std::string& sweep);

struct ResolvedTarget {
  std::optional<double> val_loss;
  // For captions: "target val loss 3.2995 (perplexity 27.10): median of arm fp8 at 80 % of its
  // budget"; the loss and its perplexity exp(loss) are always both given.
  std::string description;
  std::string basis;  // how a derived target was found (": median of arm …"), or ""
  // The caption with the perplexity first (`mxablate table --metric perplexity`) or the loss.
  std::string caption(bool perplexity_first) const;
};

// The target of docs/design.md §6: a fixed `val_loss`, or `from_arm` + `at_fraction` resolved on the
// baseline arm's curves (or stored with the sweep once it was).
ResolvedTarget resolve_target(const SweepData& sweep);
ResolvedTarget resolve_target_value(const SweepData& sweep);  // without the description

// A `from_arm` target not stored yet, once every run of that arm has ended (so that it will not
// move again): the value to store with the sweep. nullopt otherwise, and for a sweep over
// several models: their targets are one per model (model_blocks.h), which one stored value
// cannot hold.
std::optional<double> target_to_store(const SweepData& sweep);

// The baseline row: `requested` when given (a row, or an arm: its first row), else the target's
// from_arm (its first row when other grid axes split it), else the first row. Throws
// std::invalid_argument for an unknown row.
std::string baseline_group(const SweepData& sweep, const std::string& requested);

// One table row per group. Each row's extra-token cost is against the baseline arm's row with the
// same non-seed grid settings when there is one (else against `baseline`), as the SQL view
// run_extra_tokens pairs runs.
std::vector<ArmSummary> summarize(const SweepData& sweep, const std::string& baseline,
                                  const ResolvedTarget& target);

ReportData report_data(const SweepData& sweep, const std::vector<ArmSummary>& table,
                       const ResolvedTarget& target);

}  // namespace mxablate::analysis
