// Checkpoints make resume exact (DESIGN §4, §10): model, optimizer (AdamW moments and step
// counts), RNG state, data position, step, tokens, and the divergence detector's running
// statistics. One directory per checkpoint, RUN_DIR/checkpoints/step-00000050/, written under a
// temporary name, fsynced, then renamed: a directory with the final name is always complete.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mxablate::trainer {

struct TrainerState {
  int64_t step = 0;            // optimizer steps done
  int64_t tokens = 0;          // training tokens consumed
  int64_t samples = 0;         // training sequences consumed (the data position)
  bool target_reached = false;
  nlohmann::json divergence = nlohmann::json::object();  // DivergenceDetector::state()
  int64_t events_seq = 0;      // last event seq written before this checkpoint
};

// Sections of the run config that determine the trajectory; a resume under a config that
// differs in any of them is refused.
nlohmann::json trajectory_config(const nlohmann::json& run_config);

// Writes RUN_DIR/checkpoints/step-XXXXXXXX and returns its path.
std::string save_checkpoint(const std::string& run_dir, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, const TrainerState& state,
                            const nlohmann::json& run_config);

// The newest complete checkpoint directory, if any.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// Restores model and optimizer in place and returns the state. Throws contract::ConfigError
// naming the differing key if the checkpoint was written under another trajectory config.
TrainerState load_checkpoint(const std::string& path, torch::nn::Module& model,
                             torch::optim::Optimizer& optimizer, const nlohmann::json& run_config);

// Deletes all but the newest `keep` checkpoints (and leftovers of interrupted writes).
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace mxablate::trainer
