// The raw GPU quantizer: device pointers in, device pointers out, on a given stream. Torch-free,
// so the trainer's adapters (kernels/torch), the benchmark and the tests share one entry point.
//
// One call reads the input once and can quantize it along rows, down columns, or both (a
// training step needs X row-wise for Fprop and column-wise for Wgrad). Every output follows the
// layout contract of mxablate/kernels/quantize.h and is bit-identical to the CPU reference
// (telemetry sums excepted: see DeviceTelemetry). Single source for CUDA and HIP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxablate/kernels/quantize.h"

namespace mxablate::kernels::gpu {

enum class InputType : uint8_t { kFloat32 = 0, kBFloat16 = 1 };

// Telemetry accumulated on the device. The counters are exact; the three sums are accumulated in
// double with atomics, so they differ from the CPU reference by summation order only (relative
// differences around 1e-15 per term, far below the 1e-9 the tests allow).
struct DeviceTelemetry {
  unsigned long long elements;
  unsigned long long nonzero_inputs;
  unsigned long long saturated;
  unsigned long long flushed;
  unsigned long long nonfinite_blocks;
  unsigned long long dequant_clamped;
  double sum_sq_error;
  double sum_sq_input;
  double sum_error;
};

inline QuantTelemetry to_quant_telemetry(const DeviceTelemetry& d) {
  QuantTelemetry t;
  t.elements = d.elements;
  t.nonzero_inputs = d.nonzero_inputs;
  t.saturated = d.saturated;
  t.flushed = d.flushed;
  t.nonfinite_blocks = d.nonfinite_blocks;
  t.dequant_clamped = d.dequant_clamped;
  t.sum_sq_error = d.sum_sq_error;
  t.sum_sq_input = d.sum_sq_input;
  t.sum_error = d.sum_error;
  return t;
}

// Outputs of one axis; all device pointers, 16-byte aligned; null means "not wanted" and costs
// nothing. Layouts as in quantize.h: dequantized values in the input's layout; codes and scales
// line by line (a line is a row for kRows, a column for kCols).
struct AxisOutputs {
  float* dequant = nullptr;          // rows x cols float32
  uint16_t* dequant_bf16 = nullptr;  // rows x cols bf16 bits
  uint8_t* packed = nullptr;         // FP4: lines x length/2 (element 2i low nibble); FP8: lines x length
  uint8_t* scales = nullptr;         // lines x length/block: E8M0 (MXFP4) or E4M3 (NVFP4)
  float* tensor_scale = nullptr;     // one float: NVFP4 global / FP8 per-tensor decode scale
  // MXFP4 only, for FP8 GEMMs with 1x128 block scales (length % 128 == 0): E4M3 codes
  // (lines x length, line-major) and one float32 scale per 128-chunk stored chunk-major,
  // fp8_scales[chunk * lines + line] (a lines x length/128 column-major matrix). Value =
  // e4m3(code) * scale; equal to the MXFP4 value wherever the chunk's four 32-blocks have
  // exponents within 14 binades. Chunks where that fails are added to *fp8_inexact_chunks.
  uint8_t* fp8_codes = nullptr;
  float* fp8_scales = nullptr;
  unsigned long long* fp8_inexact_chunks = nullptr;  // accumulated into: zero it first
  DeviceTelemetry* telemetry = nullptr;              // accumulated into: zero it first
};

struct AxisJob {
  QuantSpec spec;
  RngKey key;
  AxisOutputs out;
  // FP8 delayed scaling (docs/design.md §3; device pointers): the decode scale from the window,
  // the tensor's amax max-ed into the record, both on the device. Null window: current scaling.
  Fp8DelayedScale delayed;
};

struct QuantizeJob {
  const void* input = nullptr;  // rows x cols, row-major, contiguous
  InputType input_type = InputType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  const AxisJob* along_rows = nullptr;  // quantize along rows (lines = rows); may be null
  const AxisJob* down_cols = nullptr;   // quantize down columns (lines = cols); may be null
  // Device scratch of workspace_bytes(), needed when a per-tensor format (NVFP4, FP8) is asked
  // for; its contents on entry do not matter.
  void* workspace = nullptr;
};

constexpr size_t workspace_bytes() { return 256; }

// Enqueues the quantization on `stream` (a cudaStream_t / hipStream_t; null = default stream)
// and returns without waiting. Throws std::invalid_argument (one sentence) when the job does not
// fit the contract, std::runtime_error when the GPU runtime reports an error.
void quantize(const QuantizeJob& job, void* stream);

// Empty when a GPU is usable from this process, else why not (no device, driver too old…), so
// GPU tests can skip saying why.
std::string device_unavailable_reason();

}  // namespace mxablate::kernels::gpu
