// The kernels' parameters, passed by value at launch. Plain data shared by the host launcher
// and the device code.
#pragma once

#include <cstdint>

#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "mxablate/kernels/hadamard.h"
#include "mxablate/kernels/quant_spec.h"

namespace mxablate::kernels::gpu::detail {

// Everything one axis of a launch needs, by value in the kernel parameters.
struct AxisParams {
  bool enabled = false;
  Axis axis = Axis::kRows;
  QuantSpec spec;
  RngKey key;
  HadamardSigns signs{{0, 0, 0, 0}};
  AxisOutputs out;
  unsigned int* amax_slot = nullptr;  // workspace: [float bits of |max|, non-finite flag]
  Fp8DelayedScale delayed;            // FP8 delayed scaling (AxisJob::delayed)
  // The dequantized output of the input's own type (bf16 for bf16 input, float32 for float32)
  // is asked for and goes through shared memory (quantize_kernels.cuh, write_dequant).
  bool staged = false;
};

struct KernelParams {
  const void* input = nullptr;
  int64_t rows = 0, cols = 0;
  bool vector_loads = false;  // 16-byte loads are aligned (cols and the pointer allow it)
  bool input_is_bf16 = false;
  unsigned int* workspace = nullptr;  // the job's workspace (holds both axes' amax slots)
  AxisParams axes[2];
};

// Which compiled variant of the fused kernel an axis needs.
struct KernelVariant {
  bool telemetry = false;
  bool stochastic = false;
  bool codes = false;  // packed or FP8 codes are written (always with telemetry)
  bool operator==(const KernelVariant&) const = default;
};

// bf16 travels as its 16-bit pattern.
using Bf16Bits = uint16_t;

}  // namespace mxablate::kernels::gpu::detail
