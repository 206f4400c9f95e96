#include "mxablate/contract/quant_settings.h"

#include "mxablate/kernels/name_table.h"

namespace mxablate::contract {
namespace {

using kernels::NameTable;
using kernels::name_of;
using kernels::names_of;
using kernels::parse_from;

constexpr NameTable<GemmPrecision, 4> kPrecisionNames{{{GemmPrecision::kBF16, "bf16"},
                                                       {GemmPrecision::kFP8, "fp8"},
                                                       {GemmPrecision::kMXFP4, "mxfp4"},
                                                       {GemmPrecision::kNVFP4, "nvfp4"}}};
constexpr NameTable<OperandClass, 3> kOperandClassNames{{{OperandClass::kActivation, "activation"},
                                                         {OperandClass::kWeight, "weight"},
                                                         {OperandClass::kGrad, "grad"}}};
constexpr NameTable<GemmPath, 4> kGemmPathNames{{{GemmPath::kAuto, "auto"},
                                                 {GemmPath::kEmulated, "emulated"},
                                                 {GemmPath::kFP8, "fp8"},
                                                 {GemmPath::kFP8WhereExact, "fp8-where-exact"}}};
constexpr NameTable<Device, 2> kDeviceNames{{{Device::kCPU, "cpu"}, {Device::kCUDA, "cuda"}}};
constexpr NameTable<ShardLevel, 3> kShardLevelNames{{{ShardLevel::kNone, "none"},
                                                     {ShardLevel::kOptimizer, "optimizer"},
                                                     {ShardLevel::kGradients, "gradients"}}};
constexpr NameTable<CudaGraphs, 3> kCudaGraphsNames{
    {{CudaGraphs::kAuto, "auto"}, {CudaGraphs::kOn, "on"}, {CudaGraphs::kOff, "off"}}};
constexpr NameTable<Fp8Scaling, 2> kFp8ScalingNames{
    {{Fp8Scaling::kCurrent, "current"}, {Fp8Scaling::kDelayed, "delayed"}}};

// Glob match with backtracking over the last `*` (linear in practice for layer names).
bool glob(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0, star = std::string_view::npos, resume = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      resume = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++resume;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace

std::string_view to_string(GemmPrecision v) { return name_of(kPrecisionNames, v); }
std::string_view to_string(OperandClass v) { return name_of(kOperandClassNames, v); }
std::string_view to_string(GemmPath v) { return name_of(kGemmPathNames, v); }
std::string_view to_string(Device v) { return name_of(kDeviceNames, v); }
std::string_view to_string(ShardLevel v) { return name_of(kShardLevelNames, v); }
std::string_view to_string(CudaGraphs v) { return name_of(kCudaGraphsNames, v); }
std::string_view to_string(Fp8Scaling v) { return name_of(kFp8ScalingNames, v); }
std::optional<GemmPrecision> parse_gemm_precision(std::string_view s) {
  return parse_from(kPrecisionNames, s);
}
std::optional<OperandClass> parse_operand_class(std::string_view s) {
  return parse_from(kOperandClassNames, s);
}
std::optional<GemmPath> parse_gemm_path(std::string_view s) { return parse_from(kGemmPathNames, s); }
std::optional<Device> parse_device(std::string_view s) { return parse_from(kDeviceNames, s); }
std::optional<ShardLevel> parse_shard_level(std::string_view s) { return parse_from(kShardLevelNames, s); }
std::optional<CudaGraphs> parse_cuda_graphs(std::string_view s) { return parse_from(kCudaGraphsNames, s); }
std::optional<Fp8Scaling> parse_fp8_scaling(std::string_view s) { return parse_from(kFp8ScalingNames, s); }
std::string gemm_precision_names() { return names_of(kPrecisionNames); }
std::string operand_class_names() { return names_of(kOperandClassNames); }
std::string gemm_path_names() { return names_of(kGemmPathNames); }
std::string device_names() { return names_of(kDeviceNames); }
std::string shard_level_names() { return names_of(kShardLevelNames); }
std::string cuda_graphs_names() { return names_of(kCudaGraphsNames); }
std::string fp8_scaling_names() { return names_of(kFp8ScalingNames); }

bool is_fp4(GemmPrecision p) { return p == GemmPrecision::kMXFP4 || p == GemmPrecision::kNVFP4; }

bool demands_fp8_tensor_cores(GemmPath p) { return p == GemmPath::kFP8 || p == GemmPath::kFP8WhereExact; }

GemmPrecision PrecisionConfig::of(GemmKind g) const {
  switch (g) {
    case GemmKind::kFprop: return fprop;
    case GemmKind::kDgrad: return dgrad;
    case GemmKind::kWgrad: return wgrad;
  }
  return fprop;
}

GemmPrecision& PrecisionConfig::of(GemmKind g) {
  switch (g) {
    case GemmKind::kFprop: return fprop;
    case GemmKind::kDgrad: return dgrad;
    case GemmKind::kWgrad: return wgrad;
  }
  return fprop;
}

void LayerPatch::apply_to(LayerSettings& s) const {
  if (fprop) s.precision.fprop = *fprop;
  if (dgrad) s.precision.dgrad = *dgrad;
  if (wgrad) s.precision.wgrad = *wgrad;
  if (scale_rule) s.scale_rule = *scale_rule;
  if (stochastic_rounding) s.stochastic_rounding = *stochastic_rounding;
  if (hadamard_mode) s.hadamard.mode = *hadamard_mode;
  if (hadamard_size) s.hadamard.size = *hadamard_size;
  if (hadamard_gemms) s.hadamard.gemms = *hadamard_gemms;
  if (weight_blocks) s.weight_blocks = *weight_blocks;
  if (sr_prescale) s.sr_prescale = *sr_prescale;
  if (dge) s.dge = *dge;
  if (occ) s.occ = *occ;
}

bool layer_matches(std::string_view pattern, std::string_view name) { return glob(pattern, name); }

}  // namespace mxablate::contract
