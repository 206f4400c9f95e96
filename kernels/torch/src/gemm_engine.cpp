// The GEMM engines (gemm_engine.h): emulated on any device; fp8-tensorwise, hopper-fp8 and
// mxfp4-as-fp8 on CUDA.
#include "mxablate/kernels/torch/gemm_engine.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "mxablate/kernels/torch/fp8_gemm.h"
#include "torch_compat.h"
#if MXABLATE_KERNELS_TORCH_CUDA
#include "gpu_ops.h"
#endif

namespace mxablate::kernels {
namespace {

using Form = QuantizedOperand::Form;

QuantizedOperand make_operand(Form form, const at::Tensor& data, const at::Tensor& scale, Axis axis,
                              const AxisQuantization& q) {
  QuantizedOperand op;
  op.form = form;
  op.data = data;
  op.scale = scale;
  op.axis = axis;
  op.spec = q.spec;
  op.key = q.key;
  return op;
}

// multiply() is only ever given operands of its own engine's form: anything else is a caller
// that mixed engines, said in one sentence rather than multiplied as garbage.
void check_forms(const GemmEngine& engine, const QuantizedOperand& a, const QuantizedOperand& b) {
  if (a.form != engine.form() || b.form != engine.form())
    throw std::invalid_argument("the " + std::string(to_string(engine.route())) +
                                " GEMM engine was given operands quantized by another engine");
}

// The MXFP4 routes' operand_problem: both operands MXFP4.
std::string mxfp4_operands_problem(const GemmEngine& engine, const QuantSpec& a, const QuantSpec& b) {
  for (const QuantSpec* s : {&a, &b})
    if (s->format != QuantFormat::kMXFP4)
      return "the " + std::string(to_string(engine.route())) + " GEMM path needs MXFP4 operands, got " +
             std::string(to_string(s->format));
  return {};
}

class EmulatedEngine final : public GemmEngine {
 public:
  GemmRoute route() const override { return GemmRoute::kEmulated; }
  Form form() const override { return Form::kValues; }
  std::string operand_problem(const QuantSpec&, const QuantSpec&) const override { return {}; }
  std::string shape_problem(int64_t, int64_t, int64_t) const override { return {}; }

  QuantizedAxes quantize(const at::Tensor& t, const AxisQuantization* rows, const AxisQuantization* cols,
                         QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry,
                         at::ScalarType values_dtype) const override {
    QuantizedAxes out;
    if (rows && cols) {  // one pass over memory on CUDA
      const BothAxes both = fake_quantize_both(t, *rows, *cols, rows_telemetry, cols_telemetry, values_dtype);
      out.rows = QuantizedOperand::values(both.rows, Axis::kRows, rows->spec, rows->key);
      out.cols = QuantizedOperand::values(both.cols, Axis::kCols, cols->spec, cols->key);
      return out;
    }
    if (rows)
      out.rows = QuantizedOperand::values(fake_quantize(t, Axis::kRows, *rows, rows_telemetry, values_dtype),
                                          Axis::kRows, rows->spec, rows->key);
    if (cols)
      out.cols = QuantizedOperand::values(fake_quantize(t, Axis::kCols, *cols, cols_telemetry, values_dtype),
                                          Axis::kCols, cols->spec, cols->key);
    return out;
  }

  at::Tensor multiply(const QuantizedOperand& a, const QuantizedOperand& b, std::optional<at::ScalarType> out_dtype,
                      const at::Tensor*) const override {
    check_forms(*this, a, b);
    const at::Tensor c = folded_mm(a.data, b.data.t(), sr_prescale_fold(a.spec, b.spec));
    return out_dtype ? c.to(*out_dtype) : c;
  }
};

// Both operands per-tensor FP8: codes along the axis that runs along K are the (M or N) x K
// operand itself, so one code tensor per layout serves every GEMM (fp8_gemm.h).
class Fp8TensorwiseEngine final : public GemmEngine {
 public:
  GemmRoute route() const override { return GemmRoute::kFP8Tensorwise; }
  Form form() const override { return Form::kFP8Tensorwise; }

  std::string operand_problem(const QuantSpec& a, const QuantSpec& b) const override {
    for (const QuantSpec* s : {&a, &b})
      if (s->format != QuantFormat::kFP8E4M3 && s->format != QuantFormat::kFP8E5M2)
        return "the fp8-tensorwise GEMM path needs fp8-e4m3 or fp8-e5m2 operands, got " +
               std::string(to_string(s->format));
    if (a.format == QuantFormat::kFP8E5M2 && b.format == QuantFormat::kFP8E5M2)
      return "the fp8-tensorwise GEMM path has no e5m2 x e5m2 kernel";
    return {};
  }

  std::string shape_problem(int64_t m, int64_t n, int64_t k) const override {
    const std::string shape = fp8_tensorwise_shape_problem(m, n, k);
    return shape.empty() ? shape : "the fp8-tensorwise GEMM path: " + shape;
  }

  QuantizedAxes quantize(const at::Tensor& t, const AxisQuantization* rows, const AxisQuantization* cols,
                         QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry,
                         at::ScalarType) const override {
    QuantizedAxes out;
    if (!rows && !cols) return out;
    const Fp8Codes codes = fp8_quantize(t, rows, cols, rows_telemetry, cols_telemetry);
    if (rows) out.rows = make_operand(Form::kFP8Tensorwise, codes.rows, codes.rows_scale, Axis::kRows, *rows);
    if (cols) out.cols = make_operand(Form::kFP8Tensorwise, codes.cols, codes.cols_scale, Axis::kCols, *cols);
    return out;
  }

  at::Tensor multiply(const QuantizedOperand& a, const QuantizedOperand& b, std::optional<at::ScalarType> out_dtype,
                      const at::Tensor*) const override {
    check_forms(*this, a, b);
    const at::ScalarType out = out_dtype.value_or(a.data.is_cuda() ? at::kBFloat16 : at::kFloat);
    return fp8_tensorwise_mm(a.data, a.scale, b.data, b.scale, out, sr_prescale_fold(a.spec, b.spec));
  }
};

// MXFP4 re-expressed as E4M3 with 1x128 FP32 chunk scales (cuBLASLt's blockwise recipe).
class HopperFp8Engine final : public GemmEngine {
 public:
  GemmRoute route() const override { return GemmRoute::kHopperFP8; }
  Form form() const override { return Form::kFP8Chunks; }

  std::string operand_problem(const QuantSpec& a, const QuantSpec& b) const override {
    return mxfp4_operands_problem(*this, a, b);
  }

  std::string shape_problem(int64_t m, int64_t n, int64_t k) const override {
    if (k % 128 != 0)
      return "the hopper-fp8 GEMM path needs K to be a multiple of 128, got " + std::to_string(k);
    if (m % 16 != 0 || n % 16 != 0)
      return "the hopper-fp8 GEMM path needs M and N to be multiples of 16, got " + std::to_string(m) +
             " and " + std::to_string(n);
    return {};
  }

  QuantizedAxes quantize(const at::Tensor& t, const AxisQuantization* rows, const AxisQuantization* cols,
                         QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry,
                         at::ScalarType) const override {
    const std::string unavailable = gemm_route_unavailable_reason(route(), t.device());
    if (!unavailable.empty()) throw std::invalid_argument(unavailable);
#if MXABLATE_KERNELS_TORCH_CUDA && MXABLATE_TORCH_HAS_BLOCKWISE_SCALED_MM
    QuantizedAxes out;
    // One quantizer call per axis; chunk counts come with telemetry (both read back at once).
    const auto one = [&t](Axis axis, const AxisQuantization& q, QuantTelemetry* telemetry) {
      const detail::Fp8Operand f =
          detail::quantize_fp8_operand_gpu(GemmOperand{t, axis, q.spec, q.key}, telemetry, telemetry != nullptr);
      QuantizedOperand op = make_operand(Form::kFP8Chunks, f.codes, f.scales, axis, q);
      op.chunks = f.chunks;
      op.inexact_chunks = f.inexact_chunks;
      return op;
    };
    if (rows) out.rows = one(Axis::kRows, *rows, rows_telemetry);
    if (cols) out.cols = one(Axis::kCols, *cols, cols_telemetry);
    return out;
#else
    (void)rows, (void)cols, (void)rows_telemetry, (void)cols_telemetry;
    throw std::invalid_argument("the hopper-fp8 GEMM path needs CUDA LibTorch >= 2.9 with the GPU kernels; "
                                "this build has LibTorch " + std::string(compat::torch_version()));
#endif
  }

  at::Tensor multiply(const QuantizedOperand& a, const QuantizedOperand& b, std::optional<at::ScalarType> out_dtype,
                      const at::Tensor*) const override {
    check_forms(*this, a, b);
    const std::string shape = shape_problem(a.outer(), b.outer(), a.reduction());
    if (!shape.empty()) throw std::invalid_argument(shape);
#if MXABLATE_KERNELS_TORCH_CUDA && MXABLATE_TORCH_HAS_BLOCKWISE_SCALED_MM
    // The pre-scale fold goes into a's FP32 chunk scales; the GEMM applies them to its FP32
    // partial sums before the one BF16 rounding. Into a copy with the column-major strides
    // cuBLASLt needs: the operand may be saved for backward and must stay as quantized.
    const float fold = sr_prescale_fold(a.spec, b.spec);
    at::Tensor a_scales = a.scale;
    if (fold != 1.0f) {
      a_scales = at::empty_strided(a.scale.sizes(), a.scale.strides(), a.scale.options());
      a_scales.copy_(a.scale);
      a_scales.mul_(fold);
    }
    // cuBLASLt's 1x128 x 1x128 recipe: a (M, K) row-major with scales (M, K/128) column-major;
    // b (K, N) column-major with scales (K/128, N) row-major: b's line-major outputs, transposed.
    const at::Tensor c = at::_scaled_mm(a.data, b.data.t(), a_scales, b.scale.t(), std::nullopt, std::nullopt,
                                        at::kBFloat16, /*use_fast_accum=*/false);
    return c.to(out_dtype.value_or(at::kFloat));
#else
    (void)out_dtype;
    throw std::invalid_argument("the hopper-fp8 GEMM path needs CUDA LibTorch >= 2.9 with the GPU kernels; "
                                "this build has LibTorch " + std::string(compat::torch_version()));
#endif
  }
};

// MXFP4 re-expressed as E4M3 with one scale per line (docs/design.md §3, "mxfp4-as-fp8").
// quantize writes the E4M3 codes and keeps the packed MXFP4 beside them, reading nothing back.
// multiply runs the row-wise scaled FP8 GEMM where the shape fits, then the fix-up, which
// recomputes on the device the output tiles E4M3 did not hold; other shapes multiply the MXFP4
// values as the emulated engine does.
class MxfpAsFp8Engine final : public GemmEngine {
 public:
  GemmRoute route() const override { return GemmRoute::kMXFP4AsFP8; }
  Form form() const override { return Form::kFP8Rowwise; }

  std::string operand_problem(const QuantSpec& a, const QuantSpec& b) const override {
    return mxfp4_operands_problem(*this, a, b);
  }

  std::string shape_problem(int64_t, int64_t, int64_t) const override {
    return {};  // any shape: a GEMM the FP8 kernel does not take multiplies the values
  }

  QuantizedAxes quantize(const at::Tensor& t, const AxisQuantization* rows, const AxisQuantization* cols,
                         QuantTelemetry* rows_telemetry, QuantTelemetry* cols_telemetry,
                         at::ScalarType) const override {
    const std::string unavailable = gemm_route_unavailable_reason(route(), t.device());
    if (!unavailable.empty()) throw std::invalid_argument(unavailable);
    QuantizedAxes out;
    if (!rows && !cols) return out;
#if MXABLATE_KERNELS_TORCH_CUDA
    for (const AxisQuantization* q : {rows, cols}) {
      if (!q) continue;
      const std::string problem = operand_problem(q->spec, q->spec);
      if (!problem.empty()) throw std::invalid_argument(problem);
    }
    const detail::MxAsFp8Operands ops = detail::mx_as_fp8_gpu(t, rows, cols, rows_telemetry, cols_telemetry);
    const auto one = [](Axis axis, const AxisQuantization& q, const detail::MxAsFp8Axis& r) {
      QuantizedOperand op = make_operand(Form::kFP8Rowwise, r.codes, r.line_scales, axis, q);
      op.mx = {r.packed, r.block_scales, r.line_inexact, r.status};
      return op;
    };
    if (rows) out.rows = one(Axis::kRows, *rows, ops.rows);
    if (cols) out.cols = one(Axis::kCols, *cols, ops.cols);
    return out;
#else
    (void)rows_telemetry, (void)cols_telemetry;
    throw std::invalid_argument("the mxfp4-as-fp8 GEMM path needs CUDA LibTorch with the GPU kernels");
#endif
  }

  at::Tensor multiply(const QuantizedOperand& a, const QuantizedOperand& b, std::optional<at::ScalarType> out_dtype,
                      const at::Tensor* route_tiles) const override {
    check_forms(*this, a, b);
#if MXABLATE_KERNELS_TORCH_CUDA && MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM
    const float fold = sr_prescale_fold(a.spec, b.spec);
    const auto axis_of = [](const QuantizedOperand& op) {
      return detail::MxAsFp8Axis{op.data, op.scale, op.mx.packed, op.mx.block_scales, op.mx.line_inexact,
                                 op.mx.status};
    };
    at::Tensor c;
    if (mxfp4_as_fp8_shape_fits(a.outer(), b.outer(), a.reduction())) {
      // Row-wise scaling: a's scales as an M x 1 column, b's as a 1 x N row; the fold goes into
      // a copy of a's (the operand may be saved for backward and must stay as quantized). The
      // scales multiply the FP32 sums before the one rounding to BF16 (the only output row-wise
      // scaling has). Then the fix-up rewrites the tiles that this could not get right.
      const at::Tensor sa = (fold == 1.0f ? a.scale : a.scale * fold).view({a.outer(), 1});
      c = at::_scaled_mm(a.data, b.data.t(), sa, b.scale.view({1, b.outer()}), std::nullopt, std::nullopt,
                         at::kBFloat16, /*use_fast_accum=*/false);
      detail::mx_rowwise_fixup_gpu(axis_of(a), axis_of(b), fold, c, route_tiles);
    } else {
      // The MXFP4 values from the same packed codes: the emulated engine's operands, bit for bit.
      c = folded_mm(detail::mx_values_gpu(axis_of(a), at::kBFloat16),
                    detail::mx_values_gpu(axis_of(b), at::kBFloat16).t(), fold);
    }
    return out_dtype ? c.to(*out_dtype) : c;
#else
    (void)a, (void)b, (void)out_dtype, (void)route_tiles;
    throw std::invalid_argument("the mxfp4-as-fp8 GEMM path needs CUDA LibTorch >= 2.5 with the GPU kernels");
#endif
  }
};

}  // namespace

bool mxfp4_as_fp8_shape_fits(int64_t m, int64_t n, int64_t k) {
  // at::_scaled_mm with row-wise scales (cuBLASLt outer-vector scaling on sm_90) takes M, N and K
  // multiples of 16.
  return m % 16 == 0 && n % 16 == 0 && k % 16 == 0;
}

QuantizedOperand QuantizedOperand::values(const at::Tensor& q, Axis axis, const QuantSpec& spec,
                                          const RngKey& key) {
  return make_operand(Form::kValues, axis == Axis::kRows ? q : q.t(), {}, axis, {spec, key, {}});
}

QuantizedOperand GemmEngine::quantize_operand(const GemmOperand& op, QuantTelemetry* telemetry,
                                              at::ScalarType values_dtype) const {
  const AxisQuantization q{op.spec, op.key, {}};
  const bool rows = op.axis == Axis::kRows;
  QuantizedAxes both = quantize(op.tensor, rows ? &q : nullptr, rows ? nullptr : &q, rows ? telemetry : nullptr,
                                rows ? nullptr : telemetry, values_dtype);
  return rows ? both.rows : both.cols;
}

const GemmEngine& gemm_engine(GemmRoute route) {
  static const EmulatedEngine emulated;
  static const Fp8TensorwiseEngine fp8_tensorwise;
  static const HopperFp8Engine hopper_fp8;
  static const MxfpAsFp8Engine mxfp4_as_fp8;
  switch (route) {
    case GemmRoute::kMXFP4AsFP8: return mxfp4_as_fp8;
    case GemmRoute::kEmulated: return emulated;
    case GemmRoute::kFP8Tensorwise: return fp8_tensorwise;
    case GemmRoute::kHopperFP8: return hopper_fp8;
  }
  throw std::invalid_argument("gemm_engine: no GEMM route numbered " +
                              std::to_string(static_cast<int>(route)));
}

std::string gemm_route_unavailable_reason(GemmRoute route, const at::Device& device) {
  const bool gpu_kernels_here = device.is_cuda() && compat::kHasCudaKernels;
  switch (route) {
    case GemmRoute::kEmulated:
      if (device.is_cpu() || gpu_kernels_here) return {};
      return "no quantization kernels for " + device.str() + " in this build";
    case GemmRoute::kHopperFP8:
      if (!gpu_kernels_here) return "the hopper-fp8 path needs a CUDA device and the GPU kernels";
      if (!MXABLATE_TORCH_HAS_BLOCKWISE_SCALED_MM)
        return "the hopper-fp8 path needs LibTorch >= 2.9, this is " + std::string(compat::torch_version());
#if MXABLATE_KERNELS_TORCH_CUDA
      return detail::hopper_fp8_unavailable_reason(device);
#else
      return {};
#endif
    case GemmRoute::kMXFP4AsFP8:
      if (!gpu_kernels_here) return "the mxfp4-as-fp8 path needs a CUDA device and the GPU kernels";
      if (!MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM)
        return "the mxfp4-as-fp8 path needs LibTorch >= 2.5, this is " + std::string(compat::torch_version());
#if MXABLATE_KERNELS_TORCH_CUDA
      return detail::fp8_rowwise_unavailable_reason(device);
#else
      return {};
#endif
    case GemmRoute::kFP8Tensorwise:
      if (!gpu_kernels_here)
        return "FP8 tensor cores need a CUDA device and the GPU kernels, this is " + device.str() +
               (compat::kHasCudaKernels ? "" : " in a build without them");
      if (!MXABLATE_TORCH_HAS_TENSORWISE_SCALED_MM)
        return "FP8 tensor-core GEMMs need LibTorch >= 2.5, this is " + std::string(compat::torch_version());
#if MXABLATE_KERNELS_TORCH_CUDA
      return detail::fp8_tensorwise_unavailable_reason(device);
#else
      return {};
#endif
  }
  return "unknown GEMM route";
}

float sr_prescale_fold(const QuantSpec& a, const QuantSpec& b) {
  return 1.0f / (effective_sr_prescale(a) * effective_sr_prescale(b));
}

at::Tensor folded_mm(const at::Tensor& a, const at::Tensor& b, float fold) {
  // The fold multiplies the FP32 result before its one rounding to the output dtype: as cuBLAS's
  // alpha on CUDA (beta = 0: the output's prior contents are ignored, NaN included).
  if (a.is_cuda() && a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16) {
    if (fold == 1.0f) return at::mm(a, b);
    at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
    return at::addmm_out(c, c, a, b, /*beta=*/0, /*alpha=*/fold);
  }
  at::Tensor c = at::mm(a.to(at::kFloat), b.to(at::kFloat));
  if (fold != 1.0f) c.mul_(fold);
  return c;
}

}  // namespace mxablate::kernels
