// Host side of the raw GPU quantizer: checks a job against the contract, then launches the
// per-tensor amax pass (NVFP4, FP8) and the fused quantization kernel.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu_runtime.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "quantize_dispatch.h"
#include "tile_layout.h"

namespace mxablate::kernels::gpu {
namespace {

using detail::AxisParams;
using detail::axis_params;
using detail::KernelParams;
using detail::kThreads;
using detail::kTile;
using detail::KernelVariant;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string axis_name(Axis axis) { return axis == Axis::kRows ? "along rows" : "down columns"; }

void check_axis_job(const AxisJob& job, Axis axis, int64_t rows, int64_t cols) {
  const std::string where = "quantize " + axis_name(axis) + ": ";
  const std::string problem = check_shape(job.spec, rows, cols, axis);
  if (!problem.empty()) throw std::invalid_argument(where + problem);
  const QuantFormat f = job.spec.format;
  const AxisOutputs& o = job.out;
  const bool has_codes = element_format(f).has_value();
  if ((o.packed || o.tensor_scale) && !has_codes)
    throw std::invalid_argument(where + std::string(to_string(f)) + " has no packed codes");
  if (o.scales && block_size(f) == 0)
    throw std::invalid_argument(where + std::string(to_string(f)) + " has no block scales");
  const std::string delayed = fp8_delayed_problem(job.delayed, f);
  if (!delayed.empty()) throw std::invalid_argument(where + delayed);
  const bool any_fp8 = o.fp8_codes || o.fp8_scales || o.fp8_inexact_chunks;
  if (any_fp8 && f != QuantFormat::kMXFP4)
    throw std::invalid_argument(where + "the E4M3 re-expression needs mxfp4, got " + std::string(to_string(f)));
  if (any_fp8 && (!o.fp8_codes || !o.fp8_scales))
    throw std::invalid_argument(where + "fp8_codes and fp8_scales must be asked for together");
  const int64_t length = axis == Axis::kRows ? cols : rows;
  if (any_fp8 && length % kFp8ChunkSize != 0)
    throw std::invalid_argument(where + "the E4M3 re-expression needs a line length that is a multiple of 128, got " +
                                std::to_string(length));
  for (const void* p : {static_cast<const void*>(o.dequant), static_cast<const void*>(o.dequant_bf16),
                        static_cast<const void*>(o.packed), static_cast<const void*>(o.fp8_codes)})
    if (p && !aligned16(p)) throw std::invalid_argument(where + "output pointers must be 16-byte aligned");
}

void check_job(const QuantizeJob& job) {
  if (job.input == nullptr) throw std::invalid_argument("quantize: the input pointer is null");
  if (job.rows <= 0 || job.cols <= 0)
    throw std::invalid_argument("quantize: the tensor is empty (" + std::to_string(job.rows) + " x " +
                                std::to_string(job.cols) + ")");
  if (!job.along_rows && !job.down_cols) throw std::invalid_argument("quantize: no axis asked for");
  if ((job.rows + kTile - 1) / kTile > 65535)
    throw std::invalid_argument("quantize: more than 65535 * 128 rows");
  if (job.along_rows) check_axis_job(*job.along_rows, Axis::kRows, job.rows, job.cols);
  if (job.down_cols) check_axis_job(*job.down_cols, Axis::kCols, job.rows, job.cols);
  for (const AxisJob* a : {job.along_rows, job.down_cols})
    if (a && detail::is_per_tensor(a->spec.format) && job.workspace == nullptr)
      throw std::invalid_argument("quantize: per-tensor formats (nvfp4, fp8) need the workspace");
}

// Both axes of one launch can share one per-tensor amax when neither is rotated: they then
// reduce the same values (an FP8 or NVFP4 tensor quantized along rows and down columns, as X
// and W are for Fprop and Wgrad/Dgrad), so the amax pass runs once instead of twice.
bool shares_amax(const AxisParams& rows, const AxisParams& cols) {
  return rows.enabled && cols.enabled && rows.amax_slot != nullptr && cols.amax_slot != nullptr &&
         rows.spec.hadamard == HadamardMode::kNone && cols.spec.hadamard == HadamardMode::kNone;
}

KernelVariant variant_of(const AxisParams& a) {
  KernelVariant v;
  v.telemetry = a.out.telemetry != nullptr;
  v.stochastic = a.spec.rounding == Rounding::kStochastic;
  v.codes = v.telemetry || a.out.packed != nullptr || a.out.fp8_codes != nullptr;
  return v;
}

template <typename InT>
void launch_format_of(QuantFormat f, const KernelParams& p, dim3 grid, KernelVariant v, gpuStream_t stream) {
  using detail::launch_format;
  switch (f) {
    case QuantFormat::kFP32: return launch_format<InT, QuantFormat::kFP32>(p, grid, v, stream);
    case QuantFormat::kBF16: return launch_format<InT, QuantFormat::kBF16>(p, grid, v, stream);
    case QuantFormat::kFP8E4M3: return launch_format<InT, QuantFormat::kFP8E4M3>(p, grid, v, stream);
    case QuantFormat::kFP8E5M2: return launch_format<InT, QuantFormat::kFP8E5M2>(p, grid, v, stream);
    case QuantFormat::kMXFP4: return launch_format<InT, QuantFormat::kMXFP4>(p, grid, v, stream);
    case QuantFormat::kNVFP4: return launch_format<InT, QuantFormat::kNVFP4>(p, grid, v, stream);
  }
  throw std::invalid_argument("quantize: unknown format");
}

template <typename InT>
void run(const KernelParams& p, bool per_tensor, gpuStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.cols + kTile - 1) / kTile),
                  static_cast<unsigned>((p.rows + kTile - 1) / kTile));
  if (per_tensor) detail::launch_amax<InT>(p, grid, stream);
  const AxisParams& first = p.axes[0].enabled ? p.axes[0] : p.axes[1];
  launch_format_of<InT>(first.spec.format, p, grid, variant_of(first), stream);
}

// One launch for the axes in `p` (same format and variant when both are enabled).
void launch(KernelParams p, gpuStream_t stream) {
  const bool per_tensor = (p.axes[0].enabled && p.axes[0].amax_slot) || (p.axes[1].enabled && p.axes[1].amax_slot);
  // Both axes' amax slots are the workspace's first 16 bytes; a second launch of a split job
  // clears them again after the first one has used its slot (stream order).
  if (per_tensor) check(gpuMemsetAsync(p.workspace, 0, 4 * sizeof(unsigned int), stream), "clearing the workspace");
  if (p.input_is_bf16) {
    run<detail::Bf16Bits>(p, per_tensor, stream);
  } else {
    run<float>(p, per_tensor, stream);
  }
}

}  // namespace

namespace detail {

AxisParams axis_params(const AxisJob* job, Axis axis, unsigned int* amax_slot) {
  AxisParams a;
  if (job == nullptr) return a;
  a.enabled = true;
  a.axis = axis;
  a.spec = job->spec;
  a.key = job->key;
  a.signs = hadamard_signs(job->spec.hadamard, job->key);
  a.out = job->out;
  a.delayed = job->delayed;
  if (detail::is_per_tensor(job->spec.format)) a.amax_slot = amax_slot;
  return a;
}

}  // namespace detail

void quantize(const QuantizeJob& job, void* stream_handle) {
  check_job(job);
  const auto stream = static_cast<gpuStream_t>(stream_handle);
  unsigned int* slots = static_cast<unsigned int*>(job.workspace);
  KernelParams p;
  p.input = job.input;
  p.rows = job.rows;
  p.cols = job.cols;
  const size_t elem = job.input_type == InputType::kFloat32 ? 4 : 2;
  p.input_is_bf16 = job.input_type == InputType::kBFloat16;
  p.workspace = slots;
  p.vector_loads = aligned16(job.input) && (job.cols * static_cast<int64_t>(elem)) % 16 == 0;
  AxisParams rows = axis_params(job.along_rows, Axis::kRows, slots);
  AxisParams cols = axis_params(job.down_cols, Axis::kCols, slots ? slots + 2 : nullptr);
  // The dequantized output of the input's own type is staged through shared memory.
  for (AxisParams* a : {&rows, &cols})
    a->staged = a->enabled && (p.input_is_bf16 ? a->out.dequant_bf16 != nullptr : a->out.dequant != nullptr);
  // Both axes share one pass over the input when they share a format and kernel variant (the
  // kernel is specialized on both); otherwise each axis gets its own launch.
  if (rows.enabled && cols.enabled &&
      (rows.spec.format != cols.spec.format || !(variant_of(rows) == variant_of(cols)))) {
    KernelParams first = p, second = p;
    first.axes[0] = rows;
    second.axes[1] = cols;
    launch(first, stream);
    launch(second, stream);
    return;
  }
  if (shares_amax(rows, cols)) cols.amax_slot = rows.amax_slot;
  p.axes[0] = rows;
  p.axes[1] = cols;
  launch(p, stream);
}

}  // namespace mxablate::kernels::gpu
