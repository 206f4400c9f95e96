// SwiGLU's per-element formulas (ATen's silu and silu_backward, operation for operation), shared
// by the fused SwiGLU kernels (fused_swiglu.cu) and the producers that quantize SwiGLU's results as
// they make them (produce_quantize.cu): one definition, so that a fused producer's h, dg and du
// are the plain kernels' bits. Compiled like every kernel here, without FMA contraction.
#pragma once

#include "gpu_runtime.h"

namespace mxablate::kernels::gpu::detail {

__device__ __forceinline__ float swiglu_h(float gv, float uv) { return (gv / (1.0f + expf(-gv))) * uv; }

__device__ __forceinline__ void swiglu_grads(float d, float gv, float uv, float& dg, float& du) {
  const float e = 1.0f + expf(-gv);
  const float sig = 1.0f / e;
  dg = ((d * uv) * sig) * (1.0f + gv * (1.0f - sig));
  du = d * (gv / e);
}

}  // namespace mxablate::kernels::gpu::detail
