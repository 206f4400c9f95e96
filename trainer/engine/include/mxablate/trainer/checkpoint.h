// Checkpoints make resume exact: model, optimizer (AdamW moments and step counts), RNG state,
// data position, step, tokens, and the divergence detector's running statistics. One directory
// per checkpoint, RUN_DIR/checkpoints/step-00000050/, written under a temporary name, fsynced,
// then renamed: a directory with the final name is always complete.
//
// A checkpoint is verified before anything is restored from it (checkpoint_state.h for
// state.json): each tensor file's size and SHA-256 against state.json, then every tensor's name,
// shape and dtype against the model and the optimizer, and the RNG state's size. A checkpoint
// that fails is rejected with one line saying why, and the model and optimizer are untouched.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/trainer/checkpoint_state.h"

namespace mxablate::trainer {

// Writes RUN_DIR/checkpoints/step-XXXXXXXX and returns its path.
std::string save_checkpoint(const std::string& run_dir, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, const TrainerState& state,
                            const nlohmann::json& run_config);

// The complete checkpoint directories (final name, with a state.json), newest first.
std::vector<std::string> checkpoints_newest_first(const std::string& run_dir);

// Verifies the checkpoint at `path` against `expect` and the model and optimizer, then restores
// them and the CPU generator in place and returns the state. Throws CheckpointRejected (one line
// naming the file and the problem) with nothing changed when the checkpoint cannot be used.
TrainerState load_checkpoint(const std::string& path, torch::nn::Module& model,
                             torch::optim::AdamW& optimizer, const CheckpointExpectation& expect);

// Renames a rejected checkpoint to step-XXXXXXXX.rejected (replacing an older one of that name),
// so that it is neither resumed from again nor counted among the kept ones, and stays for
// inspection. Returns the new path ("" if it could not be moved).
std::string set_aside_checkpoint(const std::string& path);

// Deletes all but the newest `keep` checkpoints (and leftovers of interrupted writes).
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace mxablate::trainer
