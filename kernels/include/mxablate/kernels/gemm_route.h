// The GEMM routes: which engine multiplies a GEMM's quantized operands (docs/design.md §3). One
// enum and one name table for the kernels (GemmEngine, quantized_gemm) and the run contract
// (contract::GemmRoute is this type; quant.gemm_path, the setting, is contract::GemmPath).
// Here, in the LibTorch-free kernels library, so that the contract can name routes without
// depending on LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "mxablate/kernels/gemm_kind.h"
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

// Why `route` does not take GEMMs of kind `gemm` (the layer then multiplies them on the
// emulation), empty when it does. The one rule: the engines answer with it, and the trainer
// records it in run_start so that a resume can tell which engine each kind's steps ran on
// (contract::gemm_routes_change). Only mxfp4-as-fp8 declines one: Wgrad (dYᵀ X) reduces over
// tokens, so its operands' lines run across tokens, and gradients span more than E4M3's 14
// binades there: at llama-1.3b 7 % of Wgrad's output tiles needed the fix-up against 0.002 % of
// Dgrad's and none of Fprop's, and a recomputed tile of K = 16,384 costs more than the whole FP8
// GEMM (docs/performance.md, "Speed").
constexpr std::string_view route_declines(GemmRoute route, GemmKind gemm) {
  if (route == GemmRoute::kMXFP4AsFP8 && gemm == GemmKind::kWgrad)
    return "the mxfp4-as-fp8 GEMM path takes Fprop and Dgrad: Wgrad's lines run across tokens, whose "
           "gradients span more than one E4M3 scale holds";
  return {};
}

}  // namespace mxablate::kernels
