// Checkpoints make resume exact: model, optimizer (AdamW moments and step counts), RNG state,
// data position, step, tokens, and the divergence detector's running statistics. One directory
// per checkpoint, RUN_DIR/checkpoints/step-00000050/, written under a temporary name, fsynced,
// then renamed: a directory with the final name is always complete.
//
// A checkpoint is verified before anything is restored from it (checkpoint_state.h for
// state.json): each tensor file's size and SHA-256 against state.json, then every tensor's name,
// shape and dtype against the model and the optimizer, and the RNG state's size. A checkpoint
// that fails is rejected with one line saying why, and the model and optimizer are untouched.
//
// Saving has two halves (docs/design.md §4, "Checkpoints and exact resume"): snapshot_checkpoint
// copies everything into host memory on the training thread; write_checkpoint serializes, writes,
// fsyncs and publishes it, on the checkpoint writer's thread (checkpoint_writer.h) while training
// goes on, or right away (save_checkpoint). Both give the same files.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/trainer/rules/checkpoint_state.h"

namespace mxablate::trainer {

class HostBuffers;  // host copies kept between checkpoints (host_buffers.h)

// This rank's optimizer state as a checkpoint holds it, copied to host memory. write() may run on
// another thread than the training loop's and touches nothing training changes (a sharded run's
// snapshot meets the other ranks' through the c10d store, never through a collective).
class OptimizerSnapshot {
 public:
  virtual ~OptimizerSnapshot() = default;
  // Writes this rank's optimizer files into `dir` (a directory all ranks see), fsynced, and
  // returns on rank 0 every rank's files (it gathers them), on the others their own.
  virtual std::vector<CheckpointFile> write(const std::filesystem::path& dir) = 0;
};

// What a checkpoint needs of the run's optimizer, in two halves so that the writing is off the
// training thread (docs/design.md §4, "Checkpoints and exact resume"). The step engines
// (parallel/step_engine.h) implement it; checkpoints know nothing else of them.
class CheckpointedOptimizer {
 public:
  virtual ~CheckpointedOptimizer() = default;
  // snapshot_optimizer, on the training thread, copies this rank's optimizer state into `host` (the copies are complete once
  // host.end() has synchronized) and returns what writes it; the snapshot's write() then runs on
  // the checkpoint writer's thread. load_optimizer restores from the files of a verified
  // checkpoint taken after `step` steps; throws CheckpointRejected when they do not fit this run's
  // optimizer (with nothing changed) and contract::ConfigError when the checkpoint's layout is one
  // this engine cannot take (a replicated checkpoint into a sharded run, or the reverse).
  virtual std::unique_ptr<OptimizerSnapshot> snapshot_optimizer(int64_t step, HostBuffers& host) = 0;
  virtual void load_optimizer(const std::filesystem::path& dir, const std::vector<CheckpointFile>& files,
                              int64_t step) = 0;

  // Master weights kept apart from the model (docs/design.md §4, "What the ranks replicate"): a
  // sharded run may keep a parameter as a BF16 working copy whose float32 master is sharded over
  // the ranks. model.pt holds the float32 masters either way, so a checkpoint is the same file
  // whatever the engine kept. keeps_master: whether `param` is such a working copy.
  virtual bool keeps_master(const at::Tensor& /*param*/) const { return false; }
  // Every rank at the same step, on the training thread (the masters are gathered): host copies
  // of the kept masters, by parameter, on `root` (complete once host.end() has synchronized);
  // empty elsewhere.
  virtual std::unordered_map<const c10::TensorImpl*, at::Tensor> snapshot_masters(HostBuffers& /*host*/,
                                                                                 bool /*root*/) {
    return {};
  }
  // The float32 values of a verified model.pt, by parameter: the kept masters take theirs.
  virtual void load_masters(const std::unordered_map<const c10::TensorImpl*, at::Tensor>& /*saved*/) {}
};

// A checkpoint as of one step, in host memory: what write_checkpoint writes. Holds nothing the
// training loop changes afterwards, so it can be written while the loop trains on.
struct CheckpointSnapshot {
  CheckpointSnapshot();
  ~CheckpointSnapshot();
  CheckpointSnapshot(CheckpointSnapshot&&) noexcept;
  CheckpointSnapshot& operator=(CheckpointSnapshot&&) noexcept;

  std::string run_dir;
  TrainerState state;
  nlohmann::json run_config;
  bool root = false;
  std::unique_ptr<torch::serialize::OutputArchive> model, rng;  // rank 0's: model.pt, rng.pt
  std::unique_ptr<OptimizerSnapshot> optimizer;                  // this rank's optimizer files
};

// Copies the model (parameters, buffers, as Module::save archives them), the CPU generator's
// state and this rank's optimizer state into `host`'s buffers, with one synchronization of the
// model's device. Every rank of a run calls it at the same step; only rank 0 (`root`) copies the
// model and the generator, which it alone writes.
CheckpointSnapshot snapshot_checkpoint(const std::string& run_dir, torch::nn::Module& model, CheckpointedOptimizer& engine,
                                       const TrainerState& state, const nlohmann::json& run_config, bool root,
                                       HostBuffers& host);

// Where a checkpoint's write has got to, for fault injection (TrainOptions): its tensor files are
// in the temporary directory (not yet state.json), or the directory has been published.
enum class CheckpointWriteStage { kFilesWritten, kPublished };
using CheckpointWriteProbe = std::function<void(CheckpointWriteStage)>;

// Writes RUN_DIR/checkpoints/step-XXXXXXXX from `snapshot` and returns its path: rank 0 writes the
// model, the RNG state and state.json and publishes the directory; the optimizer state is the step
// engine's (one file, or one shard per rank written by each rank into the directory rank 0 made).
// Other ranks return "". Throws on any failure (one line), leaving at most a temporary directory.
std::string write_checkpoint(CheckpointSnapshot& snapshot, const CheckpointWriteProbe& probe = {});

// Both halves on the calling thread.
std::string save_checkpoint(const std::string& run_dir, torch::nn::Module& model, CheckpointedOptimizer& engine,
                            const TrainerState& state, const nlohmann::json& run_config, bool root);
// Size and SHA-256 of `name` in `dir`, after it is fsynced: its line in state.json.
CheckpointFile describe_checkpoint_file(const std::filesystem::path& dir, const std::string& name);
// A tensor's shape and dtype as a CheckpointRejected message names them ("[4, 8] Float"): the
// model's checks here and the step engines' checks of their optimizer state.
std::string tensor_shape_text(const at::Tensor& t);
// The complete checkpoint directories (final name, with a state.json), newest first.
std::vector<std::string> checkpoints_newest_first(const std::string& run_dir);

// Verifies the checkpoint at `path` against `expect` and the model and the step engine, then
// restores them and the CPU generator in place and returns the state. Throws CheckpointRejected
// (one line naming the file and the problem) with nothing changed when the checkpoint cannot be
// used, contract::ConfigError when its optimizer layout is not this engine's. `verify_files`:
// check every file's size and checksum (rank 0 does; the ranks it publishes the path to trust it).
TrainerState load_checkpoint(const std::string& path, torch::nn::Module& model, CheckpointedOptimizer& engine,
                             const CheckpointExpectation& expect, bool verify_files = true);
// Renames a rejected checkpoint to step-XXXXXXXX.rejected (replacing an older one of that name),
// so that it is neither resumed from again nor counted among the kept ones, and stays for
// inspection. Returns the new path ("" if it could not be moved).
std::string set_aside_checkpoint(const std::string& path);

// Deletes all but the newest `keep` checkpoints (and leftovers of interrupted writes).
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace mxablate::trainer
