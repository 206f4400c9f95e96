// Whether this process can use a GPU, in words, so GPU tests can skip saying why.
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"

namespace mxablate::kernels::gpu {

std::string device_unavailable_reason() {
  int count = 0;
  const gpuError_t e = gpuGetDeviceCount(&count);
  if (e != gpuSuccess)
    return std::string("no usable ") + kGpuRuntimeName + " device (" + gpuGetErrorString(e) + ")";
  if (count == 0) return std::string("no ") + kGpuRuntimeName + " device in this machine";
  return {};
}

}  // namespace mxablate::kernels::gpu
