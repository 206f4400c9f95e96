// The per-tensor amax pass, instantiated for both input types.
#include "quantize_dispatch.cuh"

namespace mxablate::kernels::gpu::detail {

template void launch_amax<float>(const KernelParams&, dim3, gpuStream_t);
template void launch_amax<Bf16Bits>(const KernelParams&, dim3, gpuStream_t);

}  // namespace mxablate::kernels::gpu::detail
