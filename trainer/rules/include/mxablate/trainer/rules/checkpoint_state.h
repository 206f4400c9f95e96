// The non-tensor half of a checkpoint: RUN_DIR/checkpoints/step-XXXXXXXX/state.json. It holds
// the trainer's counters and the divergence detector's statistics, the run it belongs to, the
// size and SHA-256 of each tensor file beside it, and a SHA-256 of itself, so that a checkpoint
// is verified before anything is restored from it: a damaged or foreign one is rejected with one
// line saying why, and resume falls back to an older one (trainer.cpp).
//
// Torch-free, so that its fuzz target (tests/trainer/rules/checkpoint_state_fuzz) builds without LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mxablate::trainer {

inline constexpr int kCheckpointVersion = 2;
inline constexpr const char* kCheckpointStateFile = "state.json";
// The tensor files of a checkpoint, each listed in its state.json with size and checksum: these
// always, and the optimizer state either as one file (kOptimizerFile, a replicated run's AdamW) or
// as one shard per rank of a sharded run (optimizer_shard_file(r, n) for every r < n; each holds
// its slices of the flat parameter space with their places, so that a resume on another number
// of ranks re-shards them: docs/design.md §4, "Sharded checkpoints").
inline const std::vector<std::string>& checkpoint_tensor_files() {
  static const std::vector<std::string> files{"model.pt", "rng.pt"};
  return files;
}
inline constexpr const char* kOptimizerFile = "optimizer.pt";
inline constexpr int kMaxOptimizerShards = 4096;  // parallel.data's bound
// "optimizer-shard-00001-of-00004.pt" for rank 1 of 4.
std::string optimizer_shard_file(int rank, int shards);
// The rank and shard count a file name says, when it is a well-formed shard name.
std::optional<std::pair<int, int>> parse_optimizer_shard_file(std::string_view name);

struct TrainerState {
  int64_t step = 0;            // optimizer steps done
  int64_t tokens = 0;          // training tokens consumed
  int64_t samples = 0;         // training sequences consumed (the data position)
  bool target_reached = false;
  nlohmann::json divergence = nlohmann::json::object();  // DivergenceDetector::state()
  int64_t events_seq = 0;      // last event seq written before this checkpoint
};

struct CheckpointFile {
  std::string name;  // relative to the checkpoint directory
  int64_t bytes = 0;
  std::string sha256;
};

// Why a checkpoint cannot be resumed from: one line, without the directory (the caller names it).
struct CheckpointRejected : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// An intact checkpoint of another run, or of this run under another config: not damage to fall
// back from but a resume that must not happen (the trainer exits 2 and touches nothing).
struct CheckpointOfAnotherRun : CheckpointRejected {
  using CheckpointRejected::CheckpointRejected;
};

// What a checkpoint of the run being resumed must agree with.
struct CheckpointExpectation {
  std::string run_id;
  nlohmann::json trajectory_config;  // trajectory_config(run config)
  int64_t total_steps = 0;
  int64_t tokens_per_step = 0;
  int64_t samples_per_step = 0;          // training sequences per optimizer step
  std::optional<int64_t> step_in_name;   // the step its directory name says, when known
};

// The keys of the run config that determine the trajectory (contract/config_keys.h: kTrajectory;
// not the run's name, the target, where it runs, nor what changes no result such as activation
// checkpointing); a checkpoint written under a config that differs in any of them is not this
// run's.
nlohmann::json trajectory_config(const nlohmann::json& run_config);

// The text of state.json for `state`, with `files` listed and the whole sealed by its checksum.
std::string checkpoint_state_text(const TrainerState& state, const std::vector<CheckpointFile>& files,
                                  const std::string& run_id, const nlohmann::json& trajectory);

// Replaces (or adds) the "checksum" member of a state object so that it matches the rest.
void seal_checkpoint_state(nlohmann::json& state);

struct CheckpointState {
  TrainerState state;
  std::vector<CheckpointFile> files;  // checkpoint_tensor_files() in that order, then the optimizer's
  int optimizer_shards = 0;           // 0: kOptimizerFile; n: n shard files, in rank order
};

// Parses and verifies state.json: its checksum, every field's type and range, and its agreement
// with the run (run id, trajectory config, step within the budget and equal to the directory
// name, tokens and samples equal to what that many steps consume, a divergence state the
// detector accepts). Throws CheckpointRejected (one line) on the first problem.
CheckpointState parse_checkpoint_state(std::string_view text, const CheckpointExpectation& expect);

}  // namespace mxablate::trainer
