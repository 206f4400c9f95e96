// The run config: everything `mxablate-train` needs to run one training run, written by the
// orchestrator as RUN_DIR/config.json. This and event_log.h are the whole contract between the
// orchestrator and the trainer (docs/design.md §2); both sides include them, nothing else crosses.
//
// The JSON mirrors the recipe's `base` section (docs/design.md §5) after arms, grid axes and defaults are
// resolved, plus the run's identity. Parsing is strict: an unknown key, a wrong type, a number
// that is not finite or does not fit its type, a string that is not UTF-8, or a value outside its
// range is a ConfigError naming the key path and the value (e.g. "train.lr: must be in (0, 10],
// got -1.0"). The ranges live in validate.cpp's validate(), the one definition the trainer
// and the orchestrator's planner share. What each key is to a run's identity, a checkpoint's
// trajectory and an arm's description is config_keys.h's table.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/contract/json_file.h"
#include "mxablate/contract/quant_settings.h"

namespace mxablate::contract {

// kLargestFloatInteger (json_file.h): the largest integer a config may write as a float.

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct DataConfig {
  std::string dataset = "default";  // "default" (the corpus built at setup) or a prepared data dir
  int64_t seq_len = 128;
};

// train.activation_checkpointing (docs/design.md §4, "Recompute chosen by the memory plan"): which
// transformer blocks keep only their input in the forward pass and recompute themselves in the
// backward. Recompute never changes a bit of what a run computes, only its memory and time.
struct Recompute {
  enum class Mode : uint8_t {
    kNone,         // false: every block keeps its activations
    kAll,          // true: every block recomputes
    kFirstBlocks,  // N: blocks 0 … N-1 recompute (they hold their activations longest)
    kAuto,         // "auto": the least recompute whose predicted peak fits the GPU the run gets
  };
  Mode mode = Mode::kNone;
  int first_blocks = 0;  // kFirstBlocks: ≥ 1
  // Selective recompute in every block not recomputed whole: the norms' outputs and SwiGLU's
  // product are made again in the backward for the GEMMs that read them, instead of being kept.
  // "selective" is it with no whole block, "selective+N" with blocks 0 … N-1 recomputed whole;
  // `auto` resolves to false, selective or selective+N.
  bool selective = false;
  bool operator==(const Recompute&) const = default;
};

// The setting as a recipe writes it: false, true, "auto", "selective" or the count; and its JSON.
// auto's resolutions that add whole blocks to selective read "selective+N", which a recipe may
// write too (every block whole is `true`: none is left to recompute selectively).
std::string to_string(const Recompute& r);
nlohmann::json recompute_json(const Recompute& r);

struct TrainConfig {
  int64_t global_batch_tokens = 8192;
  int64_t micro_batch_tokens = 0;  // 0: no gradient accumulation (one micro-batch per step)
  double max_tokens = 1e6;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio at max_tokens
  double warmup_tokens = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-5;
  double grad_clip = 1.0;
  uint64_t seed = 1;       // model init, stochastic rounding, random Hadamard signs
  uint64_t data_seed = 0;  // data order; 0 means "same as seed"
  // Which blocks recompute in the backward (Recompute): less memory, up to one more forward of
  // compute, the same bits.
  Recompute activation_checkpointing;
  // Each step's passes as one replayed CUDA graph (quant_settings.h, CudaGraphs): the same bits.
  CudaGraphs cuda_graphs = CudaGraphs::kAuto;
  // SwiGLU's kernels quantize h, dg and du for the linears that consume them as they write them
  // (docs/design.md §4, "Quantization in the producers"): the same bits. Off by default: measured
  // slower than the plain kernels followed by the quantizer (docs/performance.md).
  bool fused_producers = false;
  // A CUDA run that repeats itself bit for bit (docs/design.md §4, "Runs that repeat bit for
  // bit"): attention on a kernel whose backward sums in a fixed order, LibTorch's deterministic
  // mode. Other bits than the default's (another attention kernel), so part of the trajectory.
  // CPU runs repeat themselves either way.
  bool deterministic = false;
};

struct EvalConfig {
  double every_tokens = 1e5;
  double tokens = 2e4;  // size of the fixed validation set
};

// Delayed FP8 scaling's window (docs/design.md §3): TransformerEngine's default length, and the
// longest a run may ask for (the trainer keeps 6 instances x this many int32 per linear layer).
inline constexpr int kDefaultFp8AmaxHistory = 1024;
inline constexpr int kMaxFp8AmaxHistory = 16384;
// The largest margin, the kernels' (block_scaling.h: it keeps every decode scale finite).
inline constexpr int kMaxFp8Margin = kernels::kMaxFp8Margin;

// The numerics of every transformer-block linear (quant_settings.h has the types). Per-layer
// keys (all but gemm_path and the bf16_* shorthands) may also be set by an override.
struct QuantConfig {
  ScaleRule scale_rule = ScaleRule::kFloor;  // floor | ceil | even | mse
  // Operand classes rounded stochastically (grad: dY in Dgrad and Wgrad; activation: X; weight:
  // W). Empty: round-to-nearest-even everywhere.
  OperandClassSet stochastic_rounding;
  HadamardConfig hadamard;
  kernels::BlockShape weight_blocks = kernels::BlockShape::k1D;  // 2d: W and Wᵀ share values
  double sr_prescale = 1.0;  // [2^-24, 1]: operands under SR scaled by it first (0.75)
  std::optional<DgeConfig> dge;
  std::optional<OccConfig> occ;
  // auto: FP8 GEMMs on FP8 tensor cores where the device has them; emulated: the exact
  // emulation everywhere; fp8: FP8 and MXFP4 GEMMs on FP8 tensor cores (gemm_routing.h).
  GemmPath gemm_path = GemmPath::kAuto;
  // Where FP8 operands' decode scales come from (quant_settings.h, Fp8Scaling; docs/design.md §3):
  // current (the tensor's own amax) or delayed (the largest amax of the operand instance's last
  // fp8_amax_history steps, times 2^fp8_margin). The two numbers apply only to delayed.
  Fp8Scaling fp8_scaling = Fp8Scaling::kCurrent;
  int fp8_amax_history = kDefaultFp8AmaxHistory;  // [1, kMaxFp8AmaxHistory] steps
  int fp8_margin = 0;                             // [0, kMaxFp8Margin]: d is multiplied by 2^margin
  int bf16_first_blocks = 0;  // shorthand for an override keeping these first blocks in BF16
  int bf16_last_blocks = 0;   // and these last ones
};

struct TargetConfig {
  std::optional<double> val_loss;  // resolved target; absent when derived later by analysis
  bool stop_at_target = false;
  // End the run once its projection says, at this confidence, that it will not reach the target
  // within its budget (docs/design.md §4, "Projected outcomes and hopeless runs"). Off by
  // default: a wrong stop turns a measurement into a lower bound.
  bool stop_hopeless = false;
  double hopeless_confidence = 0.95;  // in (0.5, 1)
};

struct DivergenceConfig {
  double loss_spike_factor = 1.5;     // loss > factor * running mean: a spike (warning)
  double grad_norm_factor = 10.0;     // grad norm > factor * running mean: explosion (warning)
  double val_regression = 0.05;       // val loss > best + this: regression (warning)
  int fatal_after_spikes = 0;         // 0: spikes never end the run; N: the N-th is fatal
};

struct CheckpointConfig {
  int64_t every_steps = 50;
  int keep = 2;
};

struct TelemetryConfig {
  int64_t train_every_steps = 10;  // sampled train events
  int64_t quant_every_steps = 50;  // quantization telemetry (0: never)
};

// The model a run trains (docs/design.md §4): a preset's name, or a shape given key by key. The
// vocabulary is always the data's. The contract holds the plain fields and their ranges; the
// trainer (trainer/plan model_presets.h, run_fit.h) resolves a choice to a ModelShape and checks
// what a shape must satisfy (head counts, RoPE's even head dimension, GEMM blocks).
inline constexpr std::string_view kModelKey = "model";  // its config path
inline constexpr double kDefaultRopeTheta = 10000;
inline constexpr double kDefaultNormEps = 1e-5;
// The largest width (d_model, ffn_hidden, heads) and depth a shape may give: with these every
// parameter count fits int64 with room to spare (run_fit.h refuses sizes no machine holds).
inline constexpr int64_t kMaxModelWidth = int64_t{1} << 20;
inline constexpr int64_t kMaxModelLayers = 4096;

struct ModelDims {
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_hidden = 0;
  double rope_theta = kDefaultRopeTheta;
  double norm_eps = kDefaultNormEps;
  bool operator==(const ModelDims&) const = default;
};

struct ModelChoice {
  std::string preset = "smoke";  // the preset's name; empty when `custom` is set
  std::optional<ModelDims> custom;

  ModelChoice() = default;
  // A preset by name (`config.model = "llama-20m"`): whether it exists is the trainer's to say.
  ModelChoice(std::string name) : preset(std::move(name)) {}  // NOLINT: implicit on purpose
  ModelChoice(const char* name) : preset(name) {}              // NOLINT: implicit on purpose
  static ModelChoice named(std::string name) { return ModelChoice(std::move(name)); }
  static ModelChoice shaped(const ModelDims& dims) {
    ModelChoice m("");
    m.custom = dims;
    return m;
  }
  bool is_preset() const { return !custom; }
  // A shape is its numbers (whatever `preset` was left holding); a preset is its name.
  bool operator==(const ModelChoice& o) const {
    return custom ? o.custom == custom : !o.custom && o.preset == preset;
  }
};

// The one display label of a model in plans, tables and reports: a preset's name, or
// "d512-L6-h8/4-f1408" for a custom shape (with "-rt500000" / "-eps1e-06" when those differ from
// their defaults).
std::string model_label(const ModelChoice& m);
// The config keys a recipe may set to a name or to a mapping (model): the recipe schema accepts
// either where the key tree shows a mapping.
bool takes_name_or_mapping(std::string_view config_path);
// The config keys whose value may be of several JSON types (train.activation_checkpointing: a
// bool, "auto" or a count): the recipe schema leaves their type to the contract's reader.
bool takes_several_types(std::string_view config_path);

// How one run is spread over processes (docs/design.md §4, "Data-parallel runs"): `data` ranks, each taking its slice
// of every step's micro-batches; gradients are summed over ranks. An execution setting like
// device or threads: the same run on N ranks quantizes exactly as on one rank with N
// micro-batches, so it never describes an arm.
// `shard` splits the optimizer state (and the gradients) over the ranks; it changes the order
// in which gradients are summed and nothing else, so it is an execution setting too.
struct ParallelConfig {
  int data = 1;
  ShardLevel shard = ShardLevel::kNone;
};

struct RunConfig {
  // Identity (set by the orchestrator).
  std::string run_id;
  std::string sweep;
  std::string arm;
  // What to run.
  ModelChoice model;
  DataConfig data;
  TrainConfig train;
  EvalConfig eval;
  PrecisionConfig precision;
  QuantConfig quant;
  std::vector<PrecisionPhase> precision_schedule;  // later phases of the blocks' precisions
  std::vector<LayerOverride> overrides;            // per-layer settings, applied in order
  TargetConfig target;
  DivergenceConfig divergence;
  CheckpointConfig checkpoint;
  TelemetryConfig telemetry;
  // Where to run.
  Device device = Device::kCPU;
  int threads = 0;             // CPU threads for this run; 0: library default (per rank)
  ParallelConfig parallel;
  bool mllog = false;          // print MLPerf-style :::MLLOG lines on stdout
};

// The settings of a transformer-block linear before the schedule and overrides: the precision
// and quant sections as one LayerSettings.
LayerSettings block_settings(const RunConfig& c);
// Sets the precision and quant sections from one layer's settings (the inverse of block_settings).
void set_block_settings(RunConfig& c, const LayerSettings& s);
// The settings the schedule's phase `phase` gives a block linear (0: before the first switch).
LayerSettings block_settings_in_phase(const RunConfig& c, size_t phase);

// Tokens of one forward/backward: train.micro_batch_tokens, or with 0 the whole step
// (train.global_batch_tokens). The rows of every activation operand.
int64_t micro_batch_tokens(const RunConfig& c);
// Micro-batches of one optimizer step over all ranks; each rank takes micro_batches / parallel.data.
int64_t micro_batches_per_step(const RunConfig& c);

// Strict conversion. from_json throws ConfigError naming the offending key path. to_json writes
// keys added after the first release (config_keys.h marks them kWrittenWhenSet: quant.dge,
// parallel.shard, …) only when they differ from their defaults, so a run's id (a hash of this
// JSON) stays the same across releases that add settings.
nlohmann::json to_json(const RunConfig& c);
// Every key at its value (dge: null when off, empty lists): for comparing configs key by key.
nlohmann::json to_json_full(const RunConfig& c);
// Every key a config may hold, each with its default or an example value (lists hold one
// element): the recipe schema's source of keys and types.
nlohmann::json config_key_tree();
RunConfig run_config_from_json(const nlohmann::json& j);

// Reads/writes RUN_DIR/config.json. read throws ConfigError with the file name in the message.
RunConfig read_run_config(const std::string& path);
void write_run_config(const std::string& path, const RunConfig& c);

}  // namespace mxablate::contract
