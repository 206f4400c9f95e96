// The GEMM routes: which engine multiplies a GEMM's quantized operands (docs/design.md §3). One
// enum and one name table for the kernels (GemmEngine, quantized_gemm) and the run contract
// (contract::GemmRoute is this type; quant.gemm_path, the setting, is contract::GemmPath).
// Here, in the LibTorch-free kernels library, so that the contract can name routes without
// depending on LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "mxablate/kernels/name_table.h"

namespace mxablate::kernels {

enum class GemmRoute : uint8_t {
  // Dequantized operands, FP32 accumulation, any device: the exact reference.
  kEmulated = 0,
  // MXFP4 operands re-expressed as E4M3 with 1x128 FP32 chunk scales on FP8 tensor cores.
  kHopperFP8 = 1,
  // 2 was a native-MXFP4 seam without an engine: removed, its value not reused.
  // Per-tensor FP8 codes with tensor-wise decode scales on FP8 tensor cores.
  kFP8Tensorwise = 3,
  // MXFP4 operands re-expressed as E4M3 with one scale per tensor where that is exact, on the
  // tensor-wise FP8 GEMM; a GEMM with an operand it cannot hold multiplies the MXFP4 values.
  kMXFP4AsFP8 = 4,
};

inline constexpr NameTable<GemmRoute, 4> kGemmRouteNames{{{GemmRoute::kEmulated, "emulated"},
                                                          {GemmRoute::kFP8Tensorwise, "fp8-tensorwise"},
                                                          {GemmRoute::kHopperFP8, "hopper-fp8"},
                                                          {GemmRoute::kMXFP4AsFP8, "mxfp4-as-fp8"}}};

constexpr std::string_view to_string(GemmRoute route) { return name_of(kGemmRouteNames, route); }
constexpr std::optional<GemmRoute> parse_gemm_route(std::string_view s) {
  return parse_from(kGemmRouteNames, s);
}

}  // namespace mxablate::kernels
