// Host/device portability for the numeric core.
//
// The scalar numerics (minifloat encoding, Philox, Hadamard butterflies) are written once and
// compiled three ways: by the host compiler for the CPU reference, by nvcc for CUDA and by
// hipcc for HIP. Sharing one definition is what makes the GPU kernels bit-exact with the CPU
// reference by construction; the tests then check it on real hardware.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MX_HD __host__ __device__ __forceinline__
#define MX_DEVICE_COMPILER 1
#else
#define MX_HD inline
#define MX_DEVICE_COMPILER 0
#endif

namespace mxablate::kernels {

// Bit casts that work in device code too (std::bit_cast is not available to nvcc's device pass
// on every version we build with).
MX_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

MX_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

MX_HD int count_leading_zeros32(uint32_t x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __clz(static_cast<int>(x));
#else
  return x == 0 ? 32 : __builtin_clz(x);
#endif
}

}  // namespace mxablate::kernels
