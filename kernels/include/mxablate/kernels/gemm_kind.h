// The three GEMMs of a linear layer and their two operands: what a quantization is for, in the
// random streams' keys (philox.h) and in the routes' rules (gemm_route.h).
#pragma once

#include <cstdint>

namespace mxablate::kernels {

// Fprop Y = X Wᵀ, Dgrad dX = dY W, Wgrad dW = dYᵀ X (docs/design.md §3).
enum class GemmKind : uint8_t { kFprop = 0, kDgrad = 1, kWgrad = 2 };

// Which operand of a GEMM a tensor is: Fprop (X, W), Dgrad (dY, W), Wgrad (dY, X).
enum class Operand : uint8_t { kA = 0, kB = 1 };

}  // namespace mxablate::kernels
