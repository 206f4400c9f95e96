// The one place that knows whether we compile for CUDA or HIP.
//
// Kernels and launchers use the gpu* names and helpers below. Nothing else may include a vendor
// header or assume a warp width: NVIDIA warps have 32 lanes, AMD CDNA wavefronts 64, so every
// shuffle names its width and every reduction loops over the runtime warpSize.
#pragma once

#include <stdexcept>
#include <string>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define MXABLATE_GPU_HIP 1
#else
#include <cuda_runtime.h>
#define MXABLATE_GPU_HIP 0
#endif

namespace mxablate::kernels::gpu {

#if MXABLATE_GPU_HIP
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
inline constexpr gpuError_t gpuSuccess = hipSuccess;
inline const char* gpuGetErrorString(gpuError_t e) { return hipGetErrorString(e); }
inline gpuError_t gpuGetLastError() { return hipGetLastError(); }
inline gpuError_t gpuGetDeviceCount(int* n) { return hipGetDeviceCount(n); }
inline gpuError_t gpuMemsetAsync(void* p, int v, size_t n, gpuStream_t s) {
  return hipMemsetAsync(p, v, n, s);
}
inline gpuError_t gpuMalloc(void** p, size_t n) { return hipMalloc(p, n); }
inline gpuError_t gpuFree(void* p) { return hipFree(p); }
inline gpuError_t gpuMemcpyToDevice(void* d, const void* h, size_t n) {
  return hipMemcpy(d, h, n, hipMemcpyHostToDevice);
}
inline gpuError_t gpuMemcpyToHost(void* h, const void* d, size_t n) {
  return hipMemcpy(h, d, n, hipMemcpyDeviceToHost);
}
inline gpuError_t gpuDeviceSynchronize() { return hipDeviceSynchronize(); }
template <typename Kernel>
gpuError_t gpuSetMaxDynamicSharedMemory(Kernel kernel, int bytes) {
  return hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
inline constexpr const char* kGpuRuntimeName = "HIP";
#else
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
inline constexpr gpuError_t gpuSuccess = cudaSuccess;
inline const char* gpuGetErrorString(gpuError_t e) { return cudaGetErrorString(e); }
inline gpuError_t gpuGetLastError() { return cudaGetLastError(); }
inline gpuError_t gpuGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline gpuError_t gpuMemsetAsync(void* p, int v, size_t n, gpuStream_t s) {
  return cudaMemsetAsync(p, v, n, s);
}
inline gpuError_t gpuMalloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline gpuError_t gpuFree(void* p) { return cudaFree(p); }
inline gpuError_t gpuMemcpyToDevice(void* d, const void* h, size_t n) {
  return cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
}
inline gpuError_t gpuMemcpyToHost(void* h, const void* d, size_t n) {
  return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
}
inline gpuError_t gpuDeviceSynchronize() { return cudaDeviceSynchronize(); }
template <typename Kernel>
gpuError_t gpuSetMaxDynamicSharedMemory(Kernel kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
inline constexpr const char* kGpuRuntimeName = "CUDA";
#endif

// Throws std::runtime_error("CUDA error in <what>: <message>") on failure.
inline void check(gpuError_t e, const char* what) {
  if (e != gpuSuccess)
    throw std::runtime_error(std::string(kGpuRuntimeName) + " error in " + what + ": " +
                             gpuGetErrorString(e));
}

#if defined(__CUDACC__) || defined(__HIPCC__)

// Butterfly exchange among groups of `width` consecutive lanes (width a power of two, at most
// the warp size). All lanes of the warp must call it together.
template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int lane_mask, int width) {
#if MXABLATE_GPU_HIP
  return __shfl_xor(v, lane_mask, width);
#else
  return __shfl_xor_sync(0xFFFFFFFFu, v, lane_mask, width);
#endif
}

// The value of lane `src` (an index within the warp). All lanes of the warp must call it.
template <typename T>
__device__ __forceinline__ T shfl_from(T v, int src) {
#if MXABLATE_GPU_HIP
  return __shfl(v, src, warpSize);
#else
  return __shfl_sync(0xFFFFFFFFu, v, src, warpSize);
#endif
}

// True when `b` holds in every lane of the warp. All lanes must call it.
__device__ __forceinline__ bool warp_all(bool b) {
#if MXABLATE_GPU_HIP
  return __all(b) != 0;
#else
  return __all_sync(0xFFFFFFFFu, b) != 0;
#endif
}

// A barrier for one warp's lanes that also orders their shared-memory accesses: what a lane wrote
// before it is visible to every lane of the warp after it. All lanes must call it. HIP 5 has no
// __syncwarp; a wavefront runs in lockstep, so fences at wavefront scope around the compiler's wave
// barrier give the same guarantee.
__device__ __forceinline__ void warp_barrier() {
#if MXABLATE_GPU_HIP
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp();
#endif
}

// Sum over the whole warp, whatever its width; every lane gets the result.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) v += shfl_xor(v, offset, warpSize);
  return v;
}

#endif

}  // namespace mxablate::kernels::gpu
