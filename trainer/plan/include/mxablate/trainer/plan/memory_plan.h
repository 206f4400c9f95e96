// Peak GPU memory per rank of a run, predicted before launch (docs/design.md §4, "Memory planned
// before launch"): the one model that `mxablate plan` shows, that `plan --gpu-memory` and `run`
// refuse a run by, and that a trainer which still runs out of memory quotes in its last line.
//
// It models the CUDA path as the trainer runs it (model.cpp, mx_linear.cpp,
// block_checkpoint.cpp, fused_model_ops.cpp, gradient_sync.h): what stays allocated for the
// whole run (FP32 master weights, gradients, AdamW's two moments), what one micro-batch saves
// for its backward pass, the largest working set on top of that, the loss's chunk of logits, and
// fixed allowances for NCCL, the CUDA context and the caching allocator. Every quantized GEMM is
// counted on the emulated route (a BF16 copy of each quantized operand), the most memory any
// route takes: the planner does not know which GPU the run gets. CPU runs are not modelled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/model_presets.h"

namespace mxablate::trainer {

inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr int64_t kMiB = int64_t{1} << 20;

// The CUDA context with the kernels of CUDA, cuBLAS and our fused ops loaded (about 0.5 GiB on an
// H100 with CUDA 12's lazy loading) and cuBLAS/cuBLASLt's workspaces (32 MiB each per stream on
// Hopper): memory nvidia-smi counts that the caching allocator never sees.
inline constexpr int64_t kCudaWorkspaceBytes = kGiB;
// NCCL's buffers for a data-parallel run: per channel and peer NCCL_BUFFSIZE (4 MiB) for each
// protocol, plus c10d's work objects; an allowance, since it depends on the topology NCCL finds.
inline constexpr int64_t kNcclBufferBytes = 512 * kMiB;
// The gradient buckets of a data-parallel run (gradient_sync.h, sharded_step.h read this). With
// `parallel.shard: gradients` a rank keeps only its shard, plus the staged buckets being
// reduce-scattered at once: up to kShardedInFlightBytes (at least two buckets; a bucket larger
// than the window, such as one parameter of vocabulary × d_model, is staged beyond it — the
// measured 8B peak stayed within the prediction, docs/performance.md).
inline constexpr int64_t kGradientBucketBytes = 25 * kMiB;
inline constexpr int64_t kShardedInFlightBytes = 512 * kMiB;
// The caching allocator's holes: tensors freed and reallocated at other sizes every micro-batch
// (activations, operand copies, working sets, logits) leave split blocks that cannot be reused;
// this percentage of them is allowed on top. Tensors that live for the whole run (weights,
// gradients, AdamW state) are allocated once and are not counted.
inline constexpr int64_t kFragmentationPercent = 10;

struct MemoryPlan {
  int64_t parameters = 0;       // with the embeddings of the vocabulary planned at
  int64_t tokens = 0;           // per micro-batch (the rows of every activation)
  int64_t logits_tokens = 0;    // per chunk of the LM head and loss (loss_chunks.h)
  int64_t weights = 0;          // working copies on every rank (working_copies.h) + sharded masters
  int64_t gradients = 0;        // FP32; a shard and bucket buffers under parallel.shard: gradients
  int64_t optimizer = 0;        // AdamW's two FP32 moments; / ranks when sharded
  int64_t activations = 0;      // what one micro-batch saves for its backward pass
  int64_t weight_operands = 0;  // BF16 copies of W (or Q(W)) that Dgrad reads in the backward
  int64_t working = 0;          // the largest block backward's gradients and operand copies
  int64_t logits = 0;           // one chunk of logits: BF16 values and the loss's FP32 math
  int64_t communication = 0;    // NCCL's buffers (data-parallel runs)
  int64_t workspace = 0;        // kCudaWorkspaceBytes
  int64_t fragmentation = 0;    // kFragmentationPercent of the per-micro-batch tensors

  int64_t total() const;  // the sum of every part: the predicted peak per rank
  // What the caching allocator has handed out at that peak: the total without the CUDA context
  // and cuBLAS's workspaces, NCCL's buffers and the fragmentation allowance, which it never
  // counts. run_end's peak_gpu_bytes measures this, so a prediction is checked against it
  // (docs/performance.md, "Memory"); total() is what must fit the GPU.
  int64_t allocator_peak() const;
};

// The plan of `config` at a vocabulary of `vocab_size` tokens on `shape` (run_fit.h resolves a
// config's model to it). Activation sizes are the largest over the precision schedule's phases.
// Recompute as recompute_plan.h's recomputed_blocks and selective_recompute count it: `auto` not
// yet resolved against a GPU (resolve_recompute) is planned at its least, every block recomputed.
MemoryPlan plan_memory(const contract::RunConfig& config, const ModelShape& shape,
                       int64_t vocab_size);
// The same with the layers' plans already derived (plan_run_layers of linear_layers(shape,
// vocab_size)): what the trainer, which holds them, asks.
MemoryPlan plan_memory(const contract::RunConfig& config, const ModelShape& shape,
                       int64_t vocab_size, const RunLayerPlans& plans);

// The plan of `config` for every count k = 0 … n_layers of blocks recomputed whole (index k; the
// config's own count ignored, its selective recompute not: recompute_plan.h's
// selective_recompute), from one pass over the blocks: auto's ladder is made of these
// (recompute_plan.h). plan_memory is its entry for the config's setting.
std::vector<MemoryPlan> plan_memory_by_recompute(const contract::RunConfig& config,
                                                 const ModelShape& shape, int64_t vocab_size,
                                                 const RunLayerPlans& plans);

// The same for a run config whose model the planner has already resolved and checked.
MemoryPlan plan_memory(const contract::RunConfig& config, int64_t vocab_size);

// One way to make a run fit: the settings to change, in recipe words ({"parallel.shard",
// "gradients"}), and the prediction with them.
struct MemoryFix {
  std::vector<std::pair<std::string, std::string>> settings;
  int64_t predicted = 0;
  // "parallel.shard: gradients (predicted 61.2 GiB per rank)"; several settings joined by "and".
  std::string text() const;
};

// The changes of parallel.shard (only with parallel.data ≥ 2), train.activation_checkpointing
// (`auto`, where the setting leaves blocks unrecomputed: the fewest recomputed blocks that fit,
// recompute_plan.h) and train.micro_batch_tokens (the largest that fits, halving, kept valid for
// the contract and the numerics' block sizes) that bring the prediction within `capacity` bytes:
// those with the fewest changed settings, in order of preference (sharding first: it costs no
// compute; then a smaller micro-batch; then recompute). Empty when none does.
std::vector<MemoryFix> memory_fixes(const contract::RunConfig& config, const ModelShape& shape,
                                    int64_t vocab_size, int64_t capacity);

// "61.2 GiB" (from 1 GiB up), else "340 MiB": the one way sizes of GPU memory are written.
std::string format_bytes(int64_t bytes);

// "weights 32.1 GiB, gradients …, …": the parts of a plan, for messages and `plan --memory`.
std::string describe_parts(const MemoryPlan& plan);

// Why a run does not fit and what would: "predicted 93.1 GiB per rank, more than the 74.5 GiB of
// <where_capacity>; set parallel.shard: gradients (predicted 61.2 GiB per rank), or …". `key` is
// set to the config key a recipe error should point at (the first fix's first setting, else
// "model"). The one message the planner and `run` give.
std::string memory_refusal(const contract::RunConfig& config, const ModelShape& shape,
                           int64_t vocab_size, int64_t capacity, std::string_view where_capacity,
                           std::string* key);

// What a c10 out-of-memory message says: "Tried to allocate 2.00 GiB" and the GPU's total
// capacity ("79.15 GiB total capacity" up to torch 2.0, "a total capacity of 79.15 GiB" after).
struct OutOfMemoryMessage {
  std::optional<int64_t> tried;
  std::optional<int64_t> capacity;
};
OutOfMemoryMessage parse_out_of_memory(std::string_view message);

// The one line a trainer that ran out of GPU memory ends with (docs/design.md §4): what it tried
// to allocate, the prediction for `config` (when known: nullptr before the run was set up) and
// the settings that would fit: within the GPU's capacity and at least the failed allocation
// below the prediction.
std::string out_of_memory_line(std::string_view message, const contract::RunConfig* config,
                               int64_t vocab_size);

}  // namespace mxablate::trainer
