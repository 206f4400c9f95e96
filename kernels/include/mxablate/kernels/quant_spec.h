// What to quantize to and how: the vocabulary shared by the CPU reference, the GPU kernels, the
// trainer's MXLinear and the recipe validator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mxablate/kernels/hadamard.h"
#include "mxablate/kernels/block_scaling.h"

namespace mxablate::kernels {

enum class QuantFormat : uint8_t {
  kFP32 = 0,     // identity (a GEMM that is not quantized at all)
  kBF16 = 1,     // round to bf16
  kFP8E4M3 = 2,  // per-tensor current scaling, E4M3 (forward operands in the FP8 baseline)
  kFP8E5M2 = 3,  // per-tensor current scaling, E5M2 (gradients in the FP8 baseline)
  kMXFP4 = 4,    // OCP MX: E2M1 elements, E8M0 scale per 32 elements
  kNVFP4 = 5,    // E2M1 elements, E4M3 scale per 16 elements, FP32 per-tensor scale
};

enum class Rounding : uint8_t { kNearest = 0, kStochastic = 1 };

// kRows: blocks run along a row (the contiguous dimension of a row-major tensor);
// kCols: blocks run down a column.
enum class Axis : uint8_t { kRows = 0, kCols = 1 };

// k1D: a scale per block of consecutive elements along the quantization axis. k2D: a scale per
// square tile (32 x 32 MXFP4, 16 x 16 NVFP4), so quantizing along rows or along columns gives the
// same values — W in Fprop and Wᵀ in Dgrad agree (docs/design.md §3).
enum class BlockShape : uint8_t { k1D = 0, k2D = 1 };

struct QuantSpec {
  QuantFormat format = QuantFormat::kMXFP4;
  ScaleRule scale_rule = ScaleRule::kFloor;  // MXFP4; kMse also NVFP4 (four over six)
  Rounding rounding = Rounding::kNearest;
  HadamardMode hadamard = HadamardMode::kNone;
  int hadamard_size = 16;
  BlockShape blocks = BlockShape::k1D;
  // In (0, 1]. Under stochastic rounding the operand is multiplied by it before rounding, so SR
  // never saturates (3/4 with the floor rule); dequantized outputs hold Q(prescale * x) and the
  // GEMM divides the factor back out (docs/design.md §3). Ignored under round-to-nearest.
  float sr_prescale = 1.0f;
};

// The factor elements are multiplied by before they are rounded: sr_prescale under stochastic
// rounding, 1 under round-to-nearest. Block and tensor scales are still chosen from the values
// themselves, so with the floor rule and 3/4 a block's largest value lands in [3, 6) and nothing
// saturates; codes and dequantized values hold Q(p x), and a GEMM multiplies its result by
// 1 / (pa pb) (docs/design.md §3).
MX_HD float effective_sr_prescale(const QuantSpec& spec) {
  return spec.rounding == Rounding::kStochastic ? spec.sr_prescale : 1.0f;
}

// The range of sr_prescale: finite, in [2^-24, 1]. The lower bound keeps a GEMM's 1 / (pa pb)
// a finite float32 far from overflow; useful values are near 3/4.
inline constexpr float kMinSrPrescale = 5.9604644775390625e-8f;  // 2^-24

// Empty when `p` is a valid sr_prescale, otherwise one sentence saying why not.
std::string check_sr_prescale(float p);

// Elements sharing one scale: 32 for MXFP4, 16 for NVFP4, 0 for per-tensor or unscaled formats.
int block_size(QuantFormat format);
// True for the formats whose codes are E2M1 nibbles.
bool is_fp4(QuantFormat format);
// Element format of the codes (E2M1, E4M3, E5M2); nullopt for FP32/BF16.
std::optional<MinifloatFormat> element_format(QuantFormat format);
// Side of the square tile that shares one scale under `spec` (docs/design.md §3): the block size
// (32 MXFP4, 16 NVFP4) when spec.blocks is k2D, 0 otherwise (1-D blocks, or a format without
// block scales, which ignores `blocks`).
int block_2d_tile(const QuantSpec& spec);

std::string_view to_string(QuantFormat v);
std::string_view to_string(ScaleRule v);
std::string_view to_string(Rounding v);
std::string_view to_string(HadamardMode v);
std::string_view to_string(Axis v);
std::string_view to_string(GemmKind v);
std::string_view to_string(BlockShape v);

// Parsers accept exactly the names to_string produces (e.g. "mxfp4", "fp8-e4m3", "floor",
// "stochastic", "per-step-random", "rows", "wgrad", "2d"); nullopt otherwise.
std::optional<QuantFormat> parse_quant_format(std::string_view s);
std::optional<ScaleRule> parse_scale_rule(std::string_view s);
std::optional<Rounding> parse_rounding(std::string_view s);
std::optional<HadamardMode> parse_hadamard_mode(std::string_view s);
std::optional<Axis> parse_axis(std::string_view s);
std::optional<GemmKind> parse_gemm_kind(std::string_view s);
std::optional<BlockShape> parse_block_shape(std::string_view s);

// The comma-separated list of accepted names, for error messages ("one of: a, b, c").
std::string quant_format_names();
std::string scale_rule_names();
std::string rounding_names();
std::string hadamard_mode_names();
std::string block_shape_names();
std::string gemm_kind_names();
std::string axis_names();

// Checks that `spec` can quantize a rows x cols tensor along `axis`: the Hadamard size is valid,
// both it and the block size divide the length of the quantization axis, and sr_prescale is in
// range (check_sr_prescale, whatever the rounding). Returns an empty
// string when it can, otherwise one sentence saying what is wrong.
std::string check_shape(const QuantSpec& spec, int64_t rows, int64_t cols, Axis axis);
// With 2-D blocks, check_shape also requires the tile side to divide both dimensions, no
// Hadamard rotation, and a scale rule other than mse (which chooses per 1-D block; not
// implemented over a tile).

}  // namespace mxablate::kernels
