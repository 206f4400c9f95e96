// An arm described by how its settings differ from its baseline's (docs/design.md §12): the one
// description `mxablate plan`, `table`, `report` and the store's `arm_summary` view all show.
// It is computed from the configs' JSON trees, key by key, so a setting added to the contract
// later appears without any of those knowing it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxablate/contract/run_config.h"

namespace mxablate::contract {

struct SettingDifference {
  std::string key;    // config path, e.g. "quant.scale_rule", "precision.fprop"
  std::string value;  // the run's value as compact text ("ceil", "[grad]", "off")
  nlohmann::json raw;  // the run's value as the config holds it
};

// Every setting of `run` that differs from `reference`, in key order. Left out: the keys that
// do not describe an arm (config_keys.h, kDescribesArm): the run's identity (run_id, sweep, arm),
// the target (one per sweep), seeds (they pair runs, they do not describe arms), where it runs
// (device, threads, mllog, parallel) and how, where that changes no result (activation
// checkpointing). A Hadamard rotation is one setting
// (mode, size and GEMMs together): a rotation is not described by the part that changed. So is
// the model, shown by its label (model_label: "llama-20m", "d512-L6-h8/4-f1408").
std::vector<SettingDifference> settings_difference(const RunConfig& run, const RunConfig& reference);

// The differences as one short line, e.g. "SR(grad) + H16 deterministic (wgrad) + scale_rule mse";
// "-" when there are none. `with_precision` false leaves out precision.fprop/dgrad/wgrad (the
// tables show those in their own columns).
std::string describe_differences(const std::vector<SettingDifference>& differences,
                                 bool with_precision);

// The reference paper's figure (docs/design.md §1) for an arm whose numerics equal one of the
// paper's arms exactly, against a baseline whose numerics equal the paper's FP8 baseline;
// nullopt otherwise. Only the numerics count (precisions, quantization, schedule, overrides).
std::optional<std::string> paper_figure(const RunConfig& arm, const RunConfig& baseline);

}  // namespace mxablate::contract
