#include "mxablate/kernels/quant_spec.h"

#include <cstdio>

#include "mxablate/kernels/name_table.h"

namespace mxablate::kernels {
namespace {

constexpr NameTable<QuantFormat, 6> kFormatNames{{{QuantFormat::kFP32, "fp32"},
                                                  {QuantFormat::kBF16, "bf16"},
                                                  {QuantFormat::kFP8E4M3, "fp8-e4m3"},
                                                  {QuantFormat::kFP8E5M2, "fp8-e5m2"},
                                                  {QuantFormat::kMXFP4, "mxfp4"},
                                                  {QuantFormat::kNVFP4, "nvfp4"}}};
constexpr NameTable<ScaleRule, 4> kRuleNames{{{ScaleRule::kFloor, "floor"},
                                              {ScaleRule::kCeil, "ceil"},
                                              {ScaleRule::kEven, "even"},
                                              {ScaleRule::kMse, "mse"}}};
constexpr NameTable<Rounding, 2> kRoundingNames{
    {{Rounding::kNearest, "nearest"}, {Rounding::kStochastic, "stochastic"}}};
constexpr NameTable<HadamardMode, 4> kHadamardNames{
    {{HadamardMode::kNone, "none"},
     {HadamardMode::kDeterministic, "deterministic"},
     {HadamardMode::kFixedRandom, "fixed-random"},
     {HadamardMode::kPerStepRandom, "per-step-random"}}};
constexpr NameTable<Axis, 2> kAxisNames{{{Axis::kRows, "rows"}, {Axis::kCols, "cols"}}};
constexpr NameTable<BlockShape, 2> kBlockShapeNames{
    {{BlockShape::k1D, "1d"}, {BlockShape::k2D, "2d"}}};
constexpr NameTable<GemmKind, 3> kGemmNames{
    {{GemmKind::kFprop, "fprop"}, {GemmKind::kDgrad, "dgrad"}, {GemmKind::kWgrad, "wgrad"}}};

// 2-D blocks (docs/design.md §3) cut the tensor into square tiles, so both dimensions must be
// multiples of the tile side, whatever the axis. They exist so that W and Wᵀ share values; a
// Hadamard rotation runs along the quantization axis and would make the two differ, so the two
// are not combined. Formats without block scales ignore the shape.
std::string check_2d_blocks(const QuantSpec& spec, int64_t rows, int64_t cols) {
  const int tile = block_2d_tile(spec);
  if (tile == 0) return {};
  if (spec.scale_rule == ScaleRule::kMse)
    return "the mse scale rule is not available with 2-D blocks (it chooses a scale per 1-D block); "
           "use floor, ceil or even";
  if (spec.hadamard != HadamardMode::kNone)
    return "2-D blocks cannot be combined with a Hadamard rotation (it runs along the quantization "
           "axis, so rows and columns would no longer share values)";
  for (const auto& [n, dim] : {std::pair{rows, "rows"}, std::pair{cols, "columns"}})
    if (n % tile != 0)
      return std::string("the number of ") + dim + " (" + std::to_string(n) +
             ") is not a multiple of the " + std::string(to_string(spec.format)) +
             " 2-D block size " + std::to_string(tile) + " (2-D blocks tile both dimensions)";
  return {};
}

}  // namespace

int block_size(QuantFormat format) {
  switch (format) {
    case QuantFormat::kMXFP4: return kMXBlockSize;
    case QuantFormat::kNVFP4: return kNVBlockSize;
    default: return 0;
  }
}

bool is_fp4(QuantFormat format) {
  return format == QuantFormat::kMXFP4 || format == QuantFormat::kNVFP4;
}

std::optional<MinifloatFormat> element_format(QuantFormat format) {
  switch (format) {
    case QuantFormat::kMXFP4:
    case QuantFormat::kNVFP4: return kE2M1;
    case QuantFormat::kFP8E4M3: return kE4M3;
    case QuantFormat::kFP8E5M2: return kE5M2;
    default: return std::nullopt;
  }
}

int block_2d_tile(const QuantSpec& spec) {
  return spec.blocks == BlockShape::k2D ? block_size(spec.format) : 0;
}

std::string_view to_string(QuantFormat v) { return name_of(kFormatNames, v); }
std::string_view to_string(ScaleRule v) { return name_of(kRuleNames, v); }
std::string_view to_string(Rounding v) { return name_of(kRoundingNames, v); }
std::string_view to_string(HadamardMode v) { return name_of(kHadamardNames, v); }
std::string_view to_string(Axis v) { return name_of(kAxisNames, v); }
std::string_view to_string(GemmKind v) { return name_of(kGemmNames, v); }
std::string_view to_string(BlockShape v) { return name_of(kBlockShapeNames, v); }

std::optional<QuantFormat> parse_quant_format(std::string_view s) { return parse_from(kFormatNames, s); }
std::optional<ScaleRule> parse_scale_rule(std::string_view s) { return parse_from(kRuleNames, s); }
std::optional<Rounding> parse_rounding(std::string_view s) { return parse_from(kRoundingNames, s); }
std::optional<HadamardMode> parse_hadamard_mode(std::string_view s) { return parse_from(kHadamardNames, s); }
std::optional<Axis> parse_axis(std::string_view s) { return parse_from(kAxisNames, s); }
std::optional<GemmKind> parse_gemm_kind(std::string_view s) { return parse_from(kGemmNames, s); }
std::optional<BlockShape> parse_block_shape(std::string_view s) { return parse_from(kBlockShapeNames, s); }

std::string quant_format_names() { return names_of(kFormatNames); }
std::string scale_rule_names() { return names_of(kRuleNames); }
std::string rounding_names() { return names_of(kRoundingNames); }
std::string hadamard_mode_names() { return names_of(kHadamardNames); }
std::string block_shape_names() { return names_of(kBlockShapeNames); }
std::string gemm_kind_names() { return names_of(kGemmNames); }
std::string axis_names() { return names_of(kAxisNames); }

std::string check_sr_prescale(float p) {
  // NaN fails both comparisons.
  if (p >= kMinSrPrescale && p <= 1.0f) return {};
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.9g", static_cast<double>(p));
  return "sr_prescale " + std::string(shown) + " is not a finite number in [2^-24, 1]";
}

std::string check_shape(const QuantSpec& spec, int64_t rows, int64_t cols, Axis axis) {
  if (const std::string p = check_sr_prescale(spec.sr_prescale); !p.empty()) return p;
  if (rows <= 0 || cols <= 0)
    return "the tensor is empty (" + std::to_string(rows) + " x " + std::to_string(cols) + ")";
  if (std::string problem = check_2d_blocks(spec, rows, cols); !problem.empty()) return problem;
  const int64_t length = axis == Axis::kRows ? cols : rows;
  const std::string dim = axis == Axis::kRows ? "columns" : "rows";
  const int block = block_size(spec.format);
  if (block != 0 && length % block != 0)
    return "the number of " + dim + " (" + std::to_string(length) + ") is not a multiple of the " +
           std::string(to_string(spec.format)) + " block size " + std::to_string(block);
  if (spec.hadamard != HadamardMode::kNone) {
    if (!is_valid_hadamard_size(spec.hadamard_size))
      return "Hadamard size " + std::to_string(spec.hadamard_size) +
             " is not one of 16, 32, 64, 128";
    if (length % spec.hadamard_size != 0)
      return "the number of " + dim + " (" + std::to_string(length) +
             ") is not a multiple of the Hadamard size " + std::to_string(spec.hadamard_size);
  }
  return {};
}

}  // namespace mxablate::kernels
