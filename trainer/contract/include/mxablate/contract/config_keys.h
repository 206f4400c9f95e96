// What each run config key is to the code that reads configs as JSON trees (docs/design.md §2,
// "Identity and resumption"; §12, "How settings flow"): the one table the run's identity
// (to_json), the checkpoint's trajectory (trainer/rules checkpoint_state.h trajectory_config) and an arm's
// description (settings_difference) all read. A key added to the contract gets its row here;
// tests/contract/config_keys_test.cpp pins every key of config_key_tree() to its row.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace mxablate::contract {

// The traits a key may have; a row holds any of them (none: the run's name, or the target).
enum KeyTrait : unsigned {
  // Written to the identity JSON (to_json, whose hash is the run id) only when it differs from
  // its default: keys added after the first release, so that runs planned before them keep
  // their ids.
  kWrittenWhenSet = 1u << 0,
  // Part of the trajectory a checkpoint must match to be resumed.
  kTrajectory = 1u << 1,
  // Describes an arm: an arm is shown by how these differ from its baseline's.
  kDescribesArm = 1u << 2,
  // Where and how a run executes, not one bit of what it computes (device, threads, ranks,
  // recomputation): never an arm, never part of the trajectory.
  kExecution = 1u << 3,
};

struct ConfigKey {
  // A key's JSON path ("train.lr"); a section's ("train") covers every key under it that has
  // no row of its own.
  std::string_view path;
  unsigned traits;
  constexpr bool has(KeyTrait t) const { return (traits & t) != 0; }
};

// Each key of config.json (or section), in the order config_key_tree() shows them.
inline constexpr ConfigKey kConfigKeys[] = {
    // The run's name, set by the orchestrator.
    {"run_id", 0},
    {"sweep", 0},
    {"arm", 0},
    // What a run trains.
    {"model", kTrajectory | kDescribesArm},
    {"model.rope_theta", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"model.norm_eps", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"data", kTrajectory | kDescribesArm},
    {"train", kTrajectory | kDescribesArm},
    // Seeds pair the runs of arms; they do not describe one.
    {"train.seed", kTrajectory},
    {"train.data_seed", kTrajectory},
    // Recomputes each block in the backward: the same bits, less memory.
    {"train.activation_checkpointing", kWrittenWhenSet | kExecution},
    // Replays each step as a captured CUDA graph: the same bits, fewer launches.
    {"train.cuda_graphs", kWrittenWhenSet | kExecution},
    {"train.fused_producers", kWrittenWhenSet | kExecution},
    // Deterministic kernels on CUDA: other attention bits than the default's, so a trajectory
    // setting, in the identity only when on.
    {"train.deterministic", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"eval", kDescribesArm},
    {"precision", kTrajectory | kDescribesArm},
    {"quant", kTrajectory | kDescribesArm},
    {"quant.weight_blocks", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"quant.sr_prescale", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"quant.dge", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"quant.occ", kWrittenWhenSet | kTrajectory | kDescribesArm},
    // FP8 delayed scaling (docs/design.md §3): another baseline, so an arm's intervention; a
    // checkpoint's amax history belongs to the setting it was recorded under.
    {"quant.fp8_scaling", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"quant.fp8_amax_history", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"quant.fp8_margin", kWrittenWhenSet | kTrajectory | kDescribesArm},
    {"precision_schedule", kWrittenWhenSet | kDescribesArm},
    {"overrides", kWrittenWhenSet | kDescribesArm},
    // One target per sweep: never an arm's difference.
    {"target", 0},
    // When a run is stopped as projected not to reach its target: it changes where a run ends,
    // so it is part of its identity, but only when set (runs planned before it keep their ids).
    {"target.stop_hopeless", kWrittenWhenSet},
    {"target.hopeless_confidence", kWrittenWhenSet},
    {"divergence", kDescribesArm},
    {"checkpoint", kDescribesArm},
    {"telemetry", kDescribesArm},
    // Where a run executes.
    {"device", kExecution},
    {"threads", kExecution},
    {"mllog", kExecution},
    {"parallel", kExecution},
    {"parallel.data", kWrittenWhenSet | kExecution},
    {"parallel.shard", kWrittenWhenSet | kExecution},
};

// The row of a key path: its own, else its nearest section's; nullptr for a path no row covers
// (a key the contract does not have).
const ConfigKey* config_key(std::string_view path);

// The keys of a config's JSON tree whose rows have `trait`, at their values: sections whose keys
// differ in the trait are taken key by key, anything else as a whole. Keys without a row are
// left out.
nlohmann::json keys_with(const nlohmann::json& config, KeyTrait trait);

}  // namespace mxablate::contract
