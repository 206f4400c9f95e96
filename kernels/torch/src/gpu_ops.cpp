// CUDA tensors -> the raw GPU quantizer, on LibTorch's current stream.
#include "gpu_ops.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "mxablate/kernels/gpu/fp8_cast_gpu.h"
#include "mxablate/kernels/gpu/mx_as_fp8_gpu.h"
#include "mxablate/kernels/gpu/mx_to_fp8.h"
#include "mxablate/kernels/gpu/quantize_gpu.h"
#include "torch_compat.h"

namespace mxablate::kernels::detail {
namespace {

gpu::InputType input_type_of(const at::Tensor& x) {
  return x.scalar_type() == at::kFloat ? gpu::InputType::kFloat32 : gpu::InputType::kBFloat16;
}

// Device scratch for one call: the quantizer's workspace, and the telemetry and counter
// accumulators, which must start at zero (so they are only allocated, zeroed, when asked for).
struct Scratch {
  at::Tensor workspace;
  at::Tensor counters;  // [telemetry rows][telemetry cols][inexact rows][inexact cols]
  gpu::DeviceTelemetry* telemetry(int axis) const {
    return reinterpret_cast<gpu::DeviceTelemetry*>(static_cast<uint8_t*>(counters.data_ptr()) +
                                                   axis * sizeof(gpu::DeviceTelemetry));
  }
  unsigned long long* inexact(int axis) const {
    return reinterpret_cast<unsigned long long*>(static_cast<uint8_t*>(counters.data_ptr()) +
                                                 2 * sizeof(gpu::DeviceTelemetry)) + axis;
  }
};

Scratch make_scratch(const at::Tensor& like, bool need_counters) {
  const at::TensorOptions bytes = like.options().dtype(at::kByte);
  Scratch s;
  s.workspace = at::empty({static_cast<int64_t>(gpu::workspace_bytes())}, bytes);
  if (need_counters)
    s.counters = at::zeros({static_cast<int64_t>(2 * sizeof(gpu::DeviceTelemetry) + 2 * sizeof(unsigned long long))}, bytes);
  return s;
}

struct HostCounters {
  gpu::DeviceTelemetry telemetry[2];
  unsigned long long inexact[2];
};

HostCounters read_counters(const Scratch& s) {
  const at::Tensor host = s.counters.cpu();  // synchronizes with the stream
  HostCounters c;
  static_assert(sizeof(HostCounters) == 2 * sizeof(gpu::DeviceTelemetry) + 2 * sizeof(unsigned long long));
  std::memcpy(&c, host.data_ptr(), sizeof c);
  return c;
}

// The telemetry each axis asked for, from the device counters (synchronizes with the stream).
void read_telemetry(const Scratch& scratch, QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry) {
  if (!rows_telemetry && !cols_telemetry) return;
  const HostCounters c = read_counters(scratch);
  if (rows_telemetry) *rows_telemetry = gpu::to_quant_telemetry(c.telemetry[0]);
  if (cols_telemetry) *cols_telemetry = gpu::to_quant_telemetry(c.telemetry[1]);
}

// The output of fake quantization in `dtype` (float32 or bfloat16), wired into `out`.
at::Tensor dequant_output(const at::Tensor& x, at::ScalarType dtype, gpu::AxisOutputs& out) {
  at::Tensor result = at::empty(x.sizes(), x.options().dtype(dtype).memory_format(at::MemoryFormat::Contiguous));
  if (dtype == at::kFloat) {
    out.dequant = result.data_ptr<float>();
  } else {
    out.dequant_bf16 = reinterpret_cast<uint16_t*>(result.data_ptr<at::BFloat16>());
  }
  return result;
}

gpu::QuantizeJob job_for(const at::Tensor& contiguous, const Scratch& s) {
  gpu::QuantizeJob job;
  job.input = contiguous.data_ptr();
  job.input_type = input_type_of(contiguous);
  job.rows = contiguous.size(0);
  job.cols = contiguous.size(1);
  job.workspace = s.workspace.data_ptr();
  return job;
}

// Empty when `device` has compute capability major.minor or later, else "<needs> compute
// capability M.m or later, <name> has X.y": the one check behind each tensor-core route's reason.
std::string capability_problem(const at::Device& device, int major, int minor, const std::string& needs) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index() < 0 ? at::cuda::current_device() : device.index());
  if (prop->major * 10 + prop->minor >= major * 10 + minor) return {};
  return needs + " compute capability " + std::to_string(major) + "." + std::to_string(minor) + " or later, " +
         std::string(prop->name) + " has " + std::to_string(prop->major) + "." + std::to_string(prop->minor);
}

}  // namespace

at::Tensor fake_quantize_gpu(const at::Tensor& x, Axis axis, const AxisQuantization& q, QuantTelemetry* telemetry,
                             at::ScalarType out_dtype) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  const Scratch scratch = make_scratch(in, telemetry != nullptr);
  gpu::AxisJob axis_job{q.spec, q.key, {}, q.delayed};
  at::Tensor result = dequant_output(in, out_dtype, axis_job.out);
  if (telemetry) axis_job.out.telemetry = scratch.telemetry(0);
  gpu::QuantizeJob job = job_for(in, scratch);
  (axis == Axis::kRows ? job.along_rows : job.down_cols) = &axis_job;
  gpu::quantize(job, compat::current_stream(in));
  if (telemetry) *telemetry = gpu::to_quant_telemetry(read_counters(scratch).telemetry[0]);
  return result;
}

BothAxes fake_quantize_both_gpu(const at::Tensor& x, const AxisQuantization& rows,
                                const AxisQuantization& cols, QuantTelemetry* rows_telemetry,
                                QuantTelemetry* cols_telemetry, at::ScalarType out_dtype) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  const Scratch scratch = make_scratch(in, rows_telemetry || cols_telemetry);
  gpu::AxisJob rows_job{rows.spec, rows.key, {}, rows.delayed}, cols_job{cols.spec, cols.key, {}, cols.delayed};
  BothAxes result{dequant_output(in, out_dtype, rows_job.out),
                  dequant_output(in, out_dtype, cols_job.out)};
  if (rows_telemetry) rows_job.out.telemetry = scratch.telemetry(0);
  if (cols_telemetry) cols_job.out.telemetry = scratch.telemetry(1);
  gpu::QuantizeJob job = job_for(in, scratch);
  job.along_rows = &rows_job;
  job.down_cols = &cols_job;
  gpu::quantize(job, compat::current_stream(in));
  read_telemetry(scratch, rows_telemetry, cols_telemetry);
  return result;
}

std::string hopper_fp8_unavailable_reason(const at::Device& device) {
  return capability_problem(device, 9, 0, "the hopper-fp8 path (FP8 tensor cores) needs");
}

Fp8Operand quantize_fp8_operand_gpu(const GemmOperand& op, QuantTelemetry* telemetry, bool want_counts) {
#if MXABLATE_TORCH_HAS_FP8
  const c10::cuda::CUDAGuard guard(op.tensor.device());
  const at::Tensor in = op.tensor.contiguous();
  const int64_t lines = op.axis == Axis::kRows ? in.size(0) : in.size(1);
  const int64_t length = op.axis == Axis::kRows ? in.size(1) : in.size(0);
  const Scratch scratch = make_scratch(in, telemetry != nullptr || want_counts);
  Fp8Operand result;
  result.codes = at::empty({lines, length}, in.options().dtype(compat::kFloat8E4M3));
  result.scales = at::empty_strided({lines, length / kFp8ChunkSize}, {1, lines}, in.options().dtype(at::kFloat));
  gpu::AxisJob axis_job{op.spec, op.key, {}, {}};
  axis_job.out.fp8_codes = static_cast<uint8_t*>(result.codes.data_ptr());
  axis_job.out.fp8_scales = result.scales.data_ptr<float>();
  if (telemetry) axis_job.out.telemetry = scratch.telemetry(0);
  if (want_counts) axis_job.out.fp8_inexact_chunks = scratch.inexact(0);
  gpu::QuantizeJob job = job_for(in, scratch);
  (op.axis == Axis::kRows ? job.along_rows : job.down_cols) = &axis_job;
  gpu::quantize(job, compat::current_stream(in));
  if (telemetry || want_counts) {
    const HostCounters c = read_counters(scratch);
    if (telemetry) *telemetry = gpu::to_quant_telemetry(c.telemetry[0]);
    result.chunks = lines * (length / kFp8ChunkSize);
    result.inexact_chunks = static_cast<int64_t>(c.inexact[0]);
  }
  return result;
#else
  (void)op;
  (void)telemetry;
  (void)want_counts;
  throw std::invalid_argument("FP8 tensors need LibTorch >= 2.1, this is " + std::string(compat::torch_version()));
#endif
}

std::string fp8_rowwise_unavailable_reason(const at::Device& device) {
  return capability_problem(device, 9, 0, "the mxfp4-as-fp8 path (row-wise scaled FP8 GEMMs) needs");
}

std::string fp8_tensorwise_unavailable_reason(const at::Device& device) {
  return capability_problem(device, 8, 9, "FP8 tensor cores need");
}


Fp8Codes fp8_codes_gpu(const at::Tensor& x, const AxisQuantization* rows, const AxisQuantization* cols,
                       QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry) {
#if MXABLATE_TORCH_HAS_FP8
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  const auto dtype = [](const QuantSpec& spec) {
    return spec.format == QuantFormat::kFP8E5M2 ? compat::kFloat8E5M2 : compat::kFloat8E4M3;
  };
  // Both decode scales in one allocation: [rows scale, pad, pad, pad, cols scale, pad, pad, pad,
  // the fast cast's workspace].
  static_assert(gpu::fp8_cast_workspace_bytes() <= 4 * sizeof(float));
  const at::Tensor scales = at::empty({12}, in.options().dtype(at::kFloat));
  Fp8Codes result;
  if (rows) {
    result.rows = at::empty({in.size(0), in.size(1)}, in.options().dtype(dtype(rows->spec)));
    result.rows_scale = scales.narrow(0, 0, 1);
  }
  if (cols) {
    result.cols = at::empty({in.size(1), in.size(0)}, in.options().dtype(dtype(cols->spec)));
    result.cols_scale = scales.narrow(0, 4, 1);
  }
  if (!rows_telemetry && !cols_telemetry) {
    // The FP8 baseline's common case at memory speed (fp8_cast_gpu.h); the same bits as the
    // general quantizer below, which takes everything else (telemetry, SR, odd shapes).
    gpu::Fp8CastAxis rows_axis, cols_axis;
    gpu::Fp8CastJob cast{in.data_ptr(), input_type_of(in), in.size(0), in.size(1), nullptr, nullptr,
                         scales.data_ptr<float>() + 8};
    if (rows) {
      rows_axis = {rows->spec, static_cast<uint8_t*>(result.rows.data_ptr()), scales.data_ptr<float>(), rows->delayed};
      cast.along_rows = &rows_axis;
    }
    if (cols) {
      cols_axis = {cols->spec, static_cast<uint8_t*>(result.cols.data_ptr()), scales.data_ptr<float>() + 4,
                   cols->delayed};
      cast.down_cols = &cols_axis;
    }
    if (gpu::fp8_cast_unsupported_reason(cast).empty()) {
      gpu::fp8_cast(cast, compat::current_stream(in));
      return result;
    }
  }
  const Scratch scratch = make_scratch(in, rows_telemetry || cols_telemetry);
  gpu::AxisJob rows_job, cols_job;
  gpu::QuantizeJob job = job_for(in, scratch);
  if (rows) {
    rows_job = {rows->spec, rows->key, {}, rows->delayed};
    rows_job.out.packed = static_cast<uint8_t*>(result.rows.data_ptr());
    rows_job.out.tensor_scale = scales.data_ptr<float>();
    if (rows_telemetry) rows_job.out.telemetry = scratch.telemetry(0);
    job.along_rows = &rows_job;
  }
  if (cols) {
    cols_job = {cols->spec, cols->key, {}, cols->delayed};
    cols_job.out.packed = static_cast<uint8_t*>(result.cols.data_ptr());
    cols_job.out.tensor_scale = scales.data_ptr<float>() + 4;
    if (cols_telemetry) cols_job.out.telemetry = scratch.telemetry(1);
    job.down_cols = &cols_job;
  }
  gpu::quantize(job, compat::current_stream(in));
  read_telemetry(scratch, rows_telemetry, cols_telemetry);
  return result;
#else
  (void)x;
  (void)rows;
  (void)cols;
  (void)rows_telemetry;
  (void)cols_telemetry;
  throw std::invalid_argument("FP8 tensors need LibTorch >= 2.1, this is " + std::string(compat::torch_version()));
#endif
}

MxAsFp8Operands mx_as_fp8_gpu(const at::Tensor& x, const AxisQuantization* rows, const AxisQuantization* cols,
                              QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry) {
#if MXABLATE_TORCH_HAS_FP8
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  const Scratch scratch = make_scratch(in, rows_telemetry || cols_telemetry);
  static_assert(sizeof(Fp8LineStatus) == 16);
  const auto packed_for = [&in](Axis axis, gpu::AxisJob& job, const AxisQuantization& q) {
    MxAsFp8Axis p;
    const int64_t lines = axis == Axis::kRows ? in.size(0) : in.size(1);
    const int64_t length = axis == Axis::kRows ? in.size(1) : in.size(0);
    p.packed = at::empty({lines, length / 2}, in.options().dtype(at::kByte));
    p.block_scales = at::empty({lines, length / kMXBlockSize}, in.options().dtype(at::kByte));
    job = {q.spec, q.key, {}};
    job.out.packed = p.packed.data_ptr<uint8_t>();
    job.out.scales = p.block_scales.data_ptr<uint8_t>();
    return p;
  };
  gpu::AxisJob rows_job, cols_job;
  MxAsFp8Operands result;
  gpu::QuantizeJob job = job_for(in, scratch);
  if (rows) {
    result.rows = packed_for(Axis::kRows, rows_job, *rows);
    if (rows_telemetry) rows_job.out.telemetry = scratch.telemetry(0);
    job.along_rows = &rows_job;
  }
  if (cols) {
    result.cols = packed_for(Axis::kCols, cols_job, *cols);
    if (cols_telemetry) cols_job.out.telemetry = scratch.telemetry(1);
    job.down_cols = &cols_job;
  }
  const auto stream = compat::current_stream(in);
  gpu::quantize(job, stream);
  const auto express = [&](MxAsFp8Axis& out) {
    const int64_t lines = out.packed.size(0), length = out.packed.size(1) * 2;
    out.codes = at::empty({lines, length}, in.options().dtype(compat::kFloat8E4M3));
    out.line_scales = at::empty({lines}, in.options().dtype(at::kFloat));
    out.line_inexact = at::empty({lines}, in.options().dtype(at::kByte));
    out.status = at::empty({4}, in.options().dtype(at::kInt));
    const at::Tensor line_max = at::empty({lines}, in.options().dtype(at::kInt));
    gpu::MxAsFp8Job j{out.packed.data_ptr<uint8_t>(), out.block_scales.data_ptr<uint8_t>(), lines, length,
                      static_cast<uint8_t*>(out.codes.data_ptr()), out.line_scales.data_ptr<float>(),
                      reinterpret_cast<uint32_t*>(line_max.data_ptr<int32_t>()),
                      reinterpret_cast<Fp8LineStatus*>(out.status.data_ptr<int32_t>())};
    j.line_inexact = out.line_inexact.data_ptr<uint8_t>();
    gpu::mx_as_fp8(j, stream);
  };
  if (rows) express(result.rows);
  if (cols) express(result.cols);
  read_telemetry(scratch, rows_telemetry, cols_telemetry);
  return result;
#else
  (void)x, (void)rows, (void)cols, (void)rows_telemetry, (void)cols_telemetry;
  throw std::invalid_argument("FP8 tensors need LibTorch >= 2.1, this is " + std::string(compat::torch_version()));
#endif
}

void mx_rowwise_fixup_gpu(const MxAsFp8Axis& a, const MxAsFp8Axis& b, float fold, at::Tensor& c,
                          const at::Tensor* tiles) {
  const c10::cuda::CUDAGuard guard(c.device());
  gpu::MxRowwiseFixupJob job;
  job.a_packed = a.packed.data_ptr<uint8_t>();
  job.a_scales = a.block_scales.data_ptr<uint8_t>();
  job.a_inexact = a.line_inexact.data_ptr<uint8_t>();
  job.a_status = reinterpret_cast<const Fp8LineStatus*>(a.status.data_ptr<int32_t>());
  job.b_packed = b.packed.data_ptr<uint8_t>();
  job.b_scales = b.block_scales.data_ptr<uint8_t>();
  job.b_inexact = b.line_inexact.data_ptr<uint8_t>();
  job.b_status = reinterpret_cast<const Fp8LineStatus*>(b.status.data_ptr<int32_t>());
  job.m = a.packed.size(0);
  job.n = b.packed.size(0);
  job.k = a.packed.size(1) * 2;
  job.fold = fold;
  job.fold_log2 = std::log2(static_cast<double>(fold));
  if (c.scalar_type() != at::kBFloat16 || c.dim() != 2 || c.size(0) != job.m || c.size(1) != job.n || c.stride(1) != 1)
    throw std::invalid_argument("the MXFP4 fix-up writes a row-major BF16 m x n output");
  job.c = reinterpret_cast<uint16_t*>(c.data_ptr<at::BFloat16>());
  job.ldc = c.stride(0);
  if (tiles && tiles->defined()) job.tiles = reinterpret_cast<unsigned long long*>(tiles->data_ptr<int64_t>());
  gpu::mx_rowwise_fixup(job, compat::current_stream(c));
}

at::Tensor mx_values_gpu(const MxAsFp8Axis& axis, at::ScalarType dtype) {
  const c10::cuda::CUDAGuard guard(axis.packed.device());
  const int64_t lines = axis.packed.size(0), length = axis.packed.size(1) * 2;
  at::Tensor values = at::empty({lines, length}, axis.packed.options().dtype(dtype));
  gpu::MxDequantizeJob d{axis.packed.data_ptr<uint8_t>(), axis.block_scales.data_ptr<uint8_t>(),
                         lines * (length / kMXBlockSize)};
  if (dtype == at::kFloat) {
    d.f32 = values.data_ptr<float>();
  } else {
    d.bf16 = reinterpret_cast<uint16_t*>(values.data_ptr<at::BFloat16>());
  }
  gpu::mx_dequantize(d, compat::current_stream(values));
  return values;
}

ScaleCodesGpu scale_codes_gpu(const at::Tensor& x, Axis axis, const QuantSpec& spec, const RngKey& key) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  const int64_t lines = axis == Axis::kRows ? in.size(0) : in.size(1);
  const int64_t length = axis == Axis::kRows ? in.size(1) : in.size(0);
  const Scratch scratch = make_scratch(in, false);
  ScaleCodesGpu result;
  result.codes = at::empty({lines, length / block_size(spec.format)}, in.options().dtype(at::kByte));
  result.tensor_scale = at::empty({4}, in.options().dtype(at::kFloat));  // 16 bytes: aligned
  gpu::AxisJob axis_job{spec, key, {}, {}};
  axis_job.out.scales = result.codes.data_ptr<uint8_t>();
  if (spec.format == QuantFormat::kNVFP4) axis_job.out.tensor_scale = result.tensor_scale.data_ptr<float>();
  gpu::QuantizeJob job = job_for(in, scratch);
  (axis == Axis::kRows ? job.along_rows : job.down_cols) = &axis_job;
  gpu::quantize(job, compat::current_stream(in));
  result.tensor_scale = result.tensor_scale.narrow(0, 0, 1);
  return result;
}

}  // namespace mxablate::kernels::detail
