// The launchers of the fused kernels, one explicit instantiation per (input type, format) in its
// own generated translation unit (instance.cu.in), so the heavy device code compiles in parallel.
// Host-only declarations: the dispatcher (quantize_launch.cu) needs no kernel code.
#pragma once

#include "gpu_runtime.h"
#include "kernel_params.h"

namespace mxablate::kernels::gpu::detail {

// Enqueues the quantization kernel for format F, in `variant` (shared by the enabled axes).
template <typename InT, QuantFormat F>
void launch_format(const KernelParams& p, dim3 grid, KernelVariant variant, gpuStream_t stream);

// Enqueues the per-tensor amax pass (NVFP4, FP8) that the format kernels read.
// The kernel parameters of one axis of a job (disabled for a null job); `amax_slot` is used by
// the per-tensor formats only. Shared by the quantizer and the fused producers.
AxisParams axis_params(const AxisJob* job, Axis axis, unsigned int* amax_slot);

template <typename InT>
void launch_amax(const KernelParams& p, dim3 grid, gpuStream_t stream);

}  // namespace mxablate::kernels::gpu::detail
