// What differs in the kernels' LibTorch adapters between the LibTorch versions we build against
// lives here: Debian 12's libtorch 1.13.1 (CPU only, the dev/CI machine) and torch 2.11 + CUDA
// (the GPU machine). Other files ask these macros and helpers instead of testing versions
// themselves; the trainer has its own (one small header per area, docs/design.md §8).
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#define MXABLATE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::_scaled_mm with 1x128 blockwise FP32 scales (cuBLASLt on Hopper) arrived in torch 2.9; the
// Float8 dtypes themselves in 2.1.
#define MXABLATE_TORCH_HAS_FP8 MXABLATE_TORCH_AT_LEAST(2, 1)
#define MXABLATE_TORCH_HAS_BLOCKWISE_SCALED_MM MXABLATE_TORCH_AT_LEAST(2, 9)
// at::_scaled_mm with tensor-wise float32 scales returning one tensor (scales required, the
// argument order used here) since torch 2.5; earlier releases returned (out, amax).
#define MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM MXABLATE_TORCH_AT_LEAST(2, 5)

// MXABLATE_KERNELS_TORCH_CUDA is defined by kernels/torch/CMakeLists.txt when the GPU kernels are
// built and LibTorch has CUDA.
#if MXABLATE_KERNELS_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mxablate::kernels::compat {

inline constexpr bool kHasCudaKernels = MXABLATE_KERNELS_TORCH_CUDA != 0;

// The E4M3 dtype, when this LibTorch has one.
#if MXABLATE_TORCH_HAS_FP8
inline constexpr at::ScalarType kFloat8E4M3 = at::kFloat8_e4m3fn;
inline constexpr at::ScalarType kFloat8E5M2 = at::kFloat8_e5m2;
#endif

#if MXABLATE_KERNELS_TORCH_CUDA
// The stream LibTorch would run an operator on, for the tensor's device, as the opaque handle the
// raw GPU API takes.
inline void* current_stream(const at::Tensor& on) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(on.device().index()).stream());
}
#endif

// A short "1.13.1" style version string, for error messages and benchmark headers.
inline const char* torch_version() { return TORCH_VERSION; }

}  // namespace mxablate::kernels::compat
