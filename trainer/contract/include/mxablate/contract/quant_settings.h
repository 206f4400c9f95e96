// The run's numerics settings as types (docs/design.md §5, §12): every name a recipe or a
// config.json may spell for a precision, an operand class, a GEMM path, … is parsed here once,
// from one table per setting, and nothing downstream compares strings. The tables also give the
// error messages ("one of: bf16, fp8, mxfp4, nvfp4") and the text printed back (to_string).
//
// Per-layer settings (LayerSettings) are what one linear layer runs with: the run's precision
// and quant sections, then the precision schedule's phase, then the overrides whose pattern
// matches the layer's name, in order (linear_plan.h resolves them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxablate/kernels/hadamard.h"
#include "mxablate/kernels/philox.h"
#include "mxablate/kernels/quant_spec.h"

namespace mxablate::contract {

using kernels::GemmKind;
using kernels::HadamardMode;
using kernels::ScaleRule;

// Precision of one GEMM: both operands rounded to BF16; FP8 with per-tensor current scaling
// (E4M3 for X and W, E5M2 for dY); MXFP4; NVFP4.
enum class GemmPrecision : uint8_t { kBF16, kFP8, kMXFP4, kNVFP4 };
// The three operand tensors of a linear layer: X (activation), W (weight), dY (grad).
enum class OperandClass : uint8_t { kActivation, kWeight, kGrad };
// quant.gemm_path, how GEMMs are computed (gemm_routing.h holds the rule, docs/design.md §3):
// kAuto (the default) runs GEMMs whose two operands are per-tensor FP8 on FP8 tensor cores
// where the device has them (the FP8 baseline is real FP8) and everything else emulated;
// kEmulated forces the exact emulation everywhere; kFP8 demands FP8 tensor cores for FP8 GEMMs
// and the Hopper FP8 path for MXFP4 GEMMs; kFP8WhereExact demands FP8 tensor cores for FP8
// GEMMs and runs MXFP4 GEMMs on them with one E4M3 scale per tensor wherever that is exact
// (the mxfp4-as-fp8 route), the exact emulation elsewhere, decided per GEMM call.
enum class GemmPath : uint8_t { kEmulated, kFP8, kAuto, kFP8WhereExact };
enum class Device : uint8_t { kCPU, kCUDA };
// parallel.shard, what a data-parallel run splits over its ranks besides the batch (docs/design.md
// §4, "Sharded data parallelism"): kNone replicates weights, gradients and AdamW state (DDP);
// kOptimizer gives each rank the AdamW state of its slice only (ZeRO stage 1, Megatron-LM's
// distributed optimizer); kGradients also keeps only the rank's slice of the gradients (ZeRO
// stage 2). The fp32 weights stay whole on every rank: the quantizers read them.
enum class ShardLevel : uint8_t { kNone, kOptimizer, kGradients };
// train.cuda_graphs, whether a CUDA run replays each step's forward and backward passes as one
// captured CUDA graph (docs/design.md §4, "Graphed steps"; trainer/plan step_capture.h holds the
// rule): kAuto where the step is small enough to be bound by kernel launches, kOn wherever it
// can be (a run where it cannot is refused), kOff never. The same bits either way: an execution
// setting.
enum class CudaGraphs : uint8_t { kAuto, kOn, kOff };
// quant.fp8_scaling, where an FP8 operand's per-tensor decode scale comes from (docs/design.md §3,
// "FP8, per-tensor delayed scaling"): kCurrent (the default) from the tensor's own amax; kDelayed
// from the largest amax its operand instance recorded over the previous quant.fp8_amax_history
// steps (TransformerEngine's delayed scaling, amax_compute_algo "max"), times 2^quant.fp8_margin.
// Another baseline than current scaling, so an intervention with its own run ids.
enum class Fp8Scaling : uint8_t { kCurrent, kDelayed };

std::string_view to_string(GemmPrecision v);
std::string_view to_string(OperandClass v);
std::string_view to_string(GemmPath v);
std::string_view to_string(Device v);
std::string_view to_string(ShardLevel v);
std::string_view to_string(CudaGraphs v);
std::string_view to_string(Fp8Scaling v);
std::optional<GemmPrecision> parse_gemm_precision(std::string_view s);
std::optional<OperandClass> parse_operand_class(std::string_view s);
std::optional<GemmPath> parse_gemm_path(std::string_view s);
std::optional<Device> parse_device(std::string_view s);
std::optional<ShardLevel> parse_shard_level(std::string_view s);
std::optional<CudaGraphs> parse_cuda_graphs(std::string_view s);
std::optional<Fp8Scaling> parse_fp8_scaling(std::string_view s);
std::string gemm_precision_names();
std::string operand_class_names();
std::string gemm_path_names();
std::string device_names();
std::string shard_level_names();
std::string cuda_graphs_names();
std::string fp8_scaling_names();

// True for the settings that demand FP8 tensor cores (fp8, fp8-where-exact): a run asking for
// one needs a CUDA device that has them.
bool demands_fp8_tensor_cores(GemmPath p);

// True for the 4-bit formats (E2M1 elements with block scales).
bool is_fp4(GemmPrecision p);

// A set of enum values (an operand-class list, a GEMM list), kept in the table's order.
template <typename E>
class EnumSet {
 public:
  constexpr EnumSet() = default;
  constexpr EnumSet(std::initializer_list<E> values) {
    for (E v : values) add(v);
  }
  constexpr void add(E v) { bits_ |= bit(v); }
  constexpr bool has(E v) const { return (bits_ & bit(v)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool operator==(const EnumSet&) const = default;

 private:
  static constexpr uint32_t bit(E v) { return 1u << static_cast<unsigned>(v); }
  uint32_t bits_ = 0;
};
using OperandClassSet = EnumSet<OperandClass>;
using GemmSet = EnumSet<GemmKind>;

inline constexpr GemmKind kAllGemms[] = {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad};
inline constexpr OperandClass kAllOperandClasses[] = {
    OperandClass::kActivation, OperandClass::kWeight, OperandClass::kGrad};

struct PrecisionConfig {
  GemmPrecision fprop = GemmPrecision::kBF16;
  GemmPrecision dgrad = GemmPrecision::kBF16;
  GemmPrecision wgrad = GemmPrecision::kBF16;

  GemmPrecision of(GemmKind g) const;
  GemmPrecision& of(GemmKind g);
  bool operator==(const PrecisionConfig&) const = default;
};

struct HadamardConfig {
  HadamardMode mode = HadamardMode::kNone;
  int size = 16;  // 16 | 32 | 64 | 128
  GemmSet gemms{GemmKind::kWgrad};
  bool operator==(const HadamardConfig&) const = default;
};

// Differentiable gradient estimator (Wang et al., arXiv 2501.17116): the weight's gradient is
// multiplied by the derivative of a smooth approximation of the E2M1 step, clamped.
struct DgeConfig {
  double k = 5.0;      // sharpness, > 0 (k = 1 is the identity; Wang et al. use 5)
  double clamp = 3.0;  // the derivative's ceiling, > 0 (MS-AMP: 3.0)
  bool operator==(const DgeConfig&) const = default;
};

// Outlier clamping and compensation (Wang et al.): activations clamped at the `quantile` of
// their magnitudes before quantization; the clamped-off residual is multiplied in BF16 and added.
struct OccConfig {
  double quantile = 0.99;  // in (0, 1]
  bool operator==(const OccConfig&) const = default;
};

// What one linear layer runs with, resolved.
struct LayerSettings {
  PrecisionConfig precision;
  ScaleRule scale_rule = ScaleRule::kFloor;
  OperandClassSet stochastic_rounding;  // operand classes rounded stochastically
  HadamardConfig hadamard;
  kernels::BlockShape weight_blocks = kernels::BlockShape::k1D;
  double sr_prescale = 1.0;  // in [2^-24, 1]; 1: none
  std::optional<DgeConfig> dge;
  std::optional<OccConfig> occ;
  bool operator==(const LayerSettings&) const = default;
};

// The keys one override (or one recipe fragment) sets; absent members keep what they were.
struct LayerPatch {
  std::optional<GemmPrecision> fprop, dgrad, wgrad;
  std::optional<ScaleRule> scale_rule;
  std::optional<OperandClassSet> stochastic_rounding;
  std::optional<HadamardMode> hadamard_mode;
  std::optional<int> hadamard_size;
  std::optional<GemmSet> hadamard_gemms;
  std::optional<kernels::BlockShape> weight_blocks;
  std::optional<double> sr_prescale;
  std::optional<std::optional<DgeConfig>> dge;  // set to a config, or set to off (null)
  std::optional<std::optional<OccConfig>> occ;
  bool operator==(const LayerPatch&) const = default;

  void apply_to(LayerSettings& s) const;
};

// `overrides: [{layers: "blocks.0.*", precision: {...}, quant: {...}}]`: a glob over layer names
// (blocks.N.attn.q|k|v|o, blocks.N.mlp.gate|up|down, lm_head), applied in order.
struct LayerOverride {
  std::string layers;
  LayerPatch patch;
  bool operator==(const LayerOverride&) const = default;
};

// `precision_schedule: [{at_fraction: 0.9, precision: {...}}]`: from the first optimizer step
// whose tokens reach at_fraction of the budget, every block's GEMM precisions are these
// (before overrides). Fractions strictly increase, each in (0, 1).
struct PrecisionPhase {
  double at_fraction = 0;
  PrecisionConfig precision;
  bool operator==(const PrecisionPhase&) const = default;
};

// True when `name` matches the glob `pattern` (`*` any run of characters, `?` one character;
// nothing else is special).
bool layer_matches(std::string_view pattern, std::string_view name);

}  // namespace mxablate::contract
