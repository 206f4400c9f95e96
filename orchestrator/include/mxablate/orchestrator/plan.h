// Expansion of a recipe into fully resolved runs: every arm (its `extends` chain merged over
// `base`) crossed with every grid axis, minus `exclude`, plus `include`. Each run's config is
// validated by the contract (run_config_from_json) and against its model's GEMM shapes; a
// failure is reported at the recipe position of the value that caused it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/contract/run_config.h"
#include "mxablate/orchestrator/recipe.h"

namespace mxablate::orchestrator {

struct AxisValue {
  std::string axis;  // as written in the recipe ("seed")
  std::string path;  // config path ("train.seed")
  nlohmann::json value;
};

struct RunSpec {
  std::string run_id;
  std::string arm;
  int arm_index = 0;
  std::vector<AxisValue> axes;  // grid axes in recipe order, then include-only settings
  contract::RunConfig config;   // resolved and validated; config.run_id == run_id
  nlohmann::json config_json;   // contract::to_json(config): what config.json holds
  // Where each config path set by the recipe was written (for errors found later, e.g. a
  // missing data directory at launch).
  std::map<std::string, Location> origins;
  Location where(const std::string& config_path) const;  // nearest recorded ancestor
  // How its settings differ from its baseline run's (the baseline arm's run at the same grid
  // point), precisions left out: contract::describe_differences. "-" when none.
  std::string interventions = "-";
};

struct Plan {
  std::string sweep;
  std::vector<RunSpec> runs;  // arms in recipe order, grid combinations in order, includes last
  std::vector<std::string> axis_names;  // every axis any run has, in first-seen order
  nlohmann::json target;                // TargetSpec::as_json()
  std::string baseline_arm;             // target.from_arm, else the first arm
  std::optional<double> target_val_loss;
  double total_tokens() const;
};

Plan expand_recipe(const Recipe& recipe);

// "FDW+H16 seed=2 train.lr=0.001": a run named by its arm and axes, for messages.
std::string run_label(const RunSpec& spec);

// The order `mxablate run --order` launches a plan's runs in: plan order (the default), or
// the longest first, so that the biggest runs of a sweep over model sizes do not start last and
// leave slots idle at its end (a run queued behind them still starts ahead of them when it
// alone fits the free slots, within --backfill).
enum class LaunchOrder { kPlan, kLongestFirst };

// A run's predicted work: its training tokens × its model's parameters — the 6·N·D estimate of
// its FLOPs up to the constant — with the embeddings when its dataset's vocabulary is known
// (`vocab`), else only what lies outside them. Only its order among runs means anything.
double predicted_work(const RunSpec& run, std::optional<int64_t> vocab);

// The plan's run ids in launch order: kPlan as planned; kLongestFirst by predicted_work,
// largest first (the vocabularies by data.dataset as the runs write it), ties in plan order.
std::vector<std::string> launch_order(const Plan& plan, LaunchOrder order,
                                      const std::map<std::string, int64_t>& vocabularies = {});

// The measurable ceiling of a recipe's target (docs/design.md §5, "The measurable ceiling";
// analysis/ceiling.h): per model block, the smallest over the arms of the arm's budget ÷ the
// baseline's tokens to target − 1, the baseline reaching a from_arm target at at_fraction × its
// budget. `lines` are for `plan`'s listing, one per block ("measurable ceiling: +233 % …"; for
// a fixed loss: not known before the runs); `warnings` name the target's FILE:LINE:COL, one per
// block whose ceiling is below target.min_ceiling (kDefaultMinCeiling unless the recipe sets it).
struct CeilingReport {
  std::vector<std::string> lines;
  std::vector<std::string> warnings;
};
CeilingReport ceiling_report(const Recipe& recipe, const Plan& plan);

// An axis value as plans and messages show it: a name bare, a model by its label
// (contract::model_label: "llama-20m", "d512-L6-h8/4-f1408"), anything else as JSON.
std::string axis_text(const RunSpec& spec, const AxisValue& axis);

}  // namespace mxablate::orchestrator
