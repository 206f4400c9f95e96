// Definitions of the launchers declared in quantize_dispatch.h, for the translation units that
// instantiate them.
#pragma once

#include "gpu_runtime.h"
#include "quantize_dispatch.h"
#include "quantize_kernels.cuh"

namespace mxablate::kernels::gpu::detail {

template <typename Kernel>
void launch_tile_kernel(Kernel kernel, int smem, const KernelParams& p, dim3 grid, gpuStream_t stream,
                        const char* what) {
  // More than 48 KB of dynamic shared memory (the float32 tile) must be opted into per kernel.
  check(gpuSetMaxDynamicSharedMemory(kernel, smem), what);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  check(gpuGetLastError(), what);
}

template <typename InT, QuantFormat F>
void launch_format(const KernelParams& p, dim3 grid, bool telemetry, gpuStream_t stream) {
  constexpr int smem = kTile * kTile * sizeof(InT);
  if (telemetry) {
    launch_tile_kernel(quantize_kernel<InT, F, true>, smem, p, grid, stream, "launching the quantize kernel");
  } else {
    launch_tile_kernel(quantize_kernel<InT, F, false>, smem, p, grid, stream, "launching the quantize kernel");
  }
}

template <typename InT>
void launch_amax(const KernelParams& p, dim3 grid, gpuStream_t stream) {
  constexpr int smem = kTile * kTile * sizeof(InT);
  launch_tile_kernel(amax_kernel<InT>, smem, p, grid, stream, "launching the amax kernel");
}

}  // namespace mxablate::kernels::gpu::detail
