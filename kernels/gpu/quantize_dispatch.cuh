// Definitions of the launchers declared in quantize_dispatch.h, for the translation units that
// instantiate them.
#pragma once

#include "gpu_runtime.h"
#include "quantize_dispatch.h"
#include "quantize_kernels.cuh"

namespace mxablate::kernels::gpu::detail {

template <typename Kernel, typename Params>
void launch_tile_kernel(Kernel kernel, int smem, const Params& p, dim3 grid, gpuStream_t stream,
                        const char* what) {
  // More than 48 KB of dynamic shared memory (a float32 tile, or two tiles) must be opted into
  // per kernel; ask for the most any launch of it uses.
  check(gpuSetMaxDynamicSharedMemory(kernel, 2 * kTile * kTile * 4), what);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  check(gpuGetLastError(), what);
}

// Shared memory of a launch: the input tile, plus a second tile when both axes run and the rows
// pass stages its output (quantize_kernel).
template <typename InT>
int tile_smem_bytes(const KernelParams& p) {
  const bool second = p.axes[0].enabled && p.axes[1].enabled && p.axes[0].staged;
  return kTile * kTile * static_cast<int>(sizeof(InT)) * (second ? 2 : 1);
}

template <typename InT, QuantFormat F>
void launch_format(const KernelParams& p, dim3 grid, KernelVariant v, gpuStream_t stream) {
  const int smem = tile_smem_bytes<InT>(p);
  constexpr const char* what = "launching the quantize kernel";
  if (v.telemetry) {
    if (v.stochastic) return launch_tile_kernel(quantize_kernel<InT, F, true, true, true>, smem, p, grid, stream, what);
    return launch_tile_kernel(quantize_kernel<InT, F, true, false, true>, smem, p, grid, stream, what);
  }
  if (v.stochastic && v.codes) return launch_tile_kernel(quantize_kernel<InT, F, false, true, true>, smem, p, grid, stream, what);
  if (v.stochastic) return launch_tile_kernel(quantize_kernel<InT, F, false, true, false>, smem, p, grid, stream, what);
  if (v.codes) return launch_tile_kernel(quantize_kernel<InT, F, false, false, true>, smem, p, grid, stream, what);
  launch_tile_kernel(quantize_kernel<InT, F, false, false, false>, smem, p, grid, stream, what);
}

template <typename InT>
void launch_amax(const KernelParams& p, dim3 grid, gpuStream_t stream) {
  const int smem = kTile * kTile * static_cast<int>(sizeof(InT));
  launch_tile_kernel(amax_kernel<InT>, smem, p, grid, stream, "launching the amax kernel");
}

}  // namespace mxablate::kernels::gpu::detail
