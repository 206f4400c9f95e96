// The FP8 arm's cast at memory speed: per-tensor current or delayed scaling (docs/design.md §3,
// "FP8, per-tensor current scaling" and "… delayed scaling") of a rows x cols tensor into FP8 codes along rows and/or down
// columns, written by two kernels instead of the general quantizer's tile pipeline:
//
//   1. amax: one vectorized read of the input, the largest |x| as float bits (a NaN or an
//      infinity anywhere makes it >= 0x7F800000: the tensor is non-finite);
//   2. cast: one more read; each code computed once and stored twice, along rows with 16-byte
//      stores and, through a shared-memory transpose, down columns with 16-byte stores. The
//      rounding is the hardware conversion (cvt.rn.satfinite to E4M3/E5M2) where the device has
//      one (sm_89+), the reference's encoder elsewhere; the division x / d is the reference's.
//
// The codes and decode scales are bit-identical to the general quantizer's and the CPU
// reference's (tests/gpu check it, exhaustively over BF16 inputs). It takes only what the FP8
// baseline needs: FP8 formats, round-to-nearest, no rotation, no telemetry, both dimensions
// multiples of 16 and a 16-byte-aligned input; fp8_cast_unsupported_reason says why not for
// anything else, and the caller then runs the general quantizer. Nothing here synchronizes with
// the host, so it can be captured in a CUDA graph. Single source for CUDA and HIP.
#pragma once

#include <cstdint>
#include <string>

#include "mxablate/kernels/gpu/quantize_gpu.h"

namespace mxablate::kernels::gpu {

struct Fp8CastAxis {
  QuantSpec spec;                // fp8-e4m3 or fp8-e5m2, round to nearest, no rotation
  uint8_t* codes = nullptr;      // lines x length codes (line-major), 16-byte aligned
  float* decode_scale = nullptr; // one float: d = amax / max_finite (NaN for a non-finite tensor)
  // Delayed scaling (docs/design.md §3; device pointers): d from *delayed.window instead, and
  // the tensor's amax max-ed into *delayed.record by the cast itself, so that neither needs the
  // host and a captured graph reads each replay's window from memory. Null window: current scaling.
  Fp8DelayedScale delayed;
};

struct Fp8CastJob {
  const void* input = nullptr;  // rows x cols, row-major, contiguous, 16-byte aligned
  InputType input_type = InputType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  const Fp8CastAxis* along_rows = nullptr;  // codes (rows x cols); may be null
  const Fp8CastAxis* down_cols = nullptr;   // codes of the transpose (cols x rows); may be null
  // Device scratch of fp8_cast_workspace_bytes(); its contents on entry do not matter.
  void* workspace = nullptr;
};

constexpr size_t fp8_cast_workspace_bytes() { return 16; }

// Empty when fp8_cast can run `job`, else one sentence saying why not (the caller's cue to use
// the general quantizer, quantize_gpu.h, which computes the same bits).
std::string fp8_cast_unsupported_reason(const Fp8CastJob& job);

// Enqueues the two kernels on `stream` and returns without waiting. Throws std::invalid_argument
// with fp8_cast_unsupported_reason's sentence for a job it cannot run, std::runtime_error when
// the GPU runtime reports an error.
void fp8_cast(const Fp8CastJob& job, void* stream);

}  // namespace mxablate::kernels::gpu
