// CUDA tensors -> the raw fused kernels, on LibTorch's current stream (docs/design.md §4).
#include "fused_ops_cuda.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "mxablate/kernels/gpu/fused_ops_gpu.h"
#include "mxablate/kernels/gpu/produce_quantize_gpu.h"
#include "torch_compat.h"

namespace mxablate::kernels::detail {
namespace {

gpu::FloatType float_type(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? gpu::FloatType::kFloat32 : gpu::FloatType::kBFloat16;
}
gpu::FloatType float_type(at::ScalarType t) {
  return t == at::kFloat ? gpu::FloatType::kFloat32 : gpu::FloatType::kBFloat16;
}

std::vector<int64_t> rows_shape(const at::Tensor& x) {
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().end() - 1);
}

// ---- Fused producers ----

bool bf16_aligned(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 && t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

uint16_t* bf16_bits(const at::Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); }

// Whether the fused kernel takes every quantization asked for of rows x cols tensors, all
// rounding alike (it is compiled per rounding).
bool producer_takes(std::initializer_list<const ProducedAxes*> tensors, int64_t rows, int64_t cols) {
  std::optional<Rounding> rounding;
  for (const ProducedAxes* t : tensors) {
    for (const auto& [axis, q] : {std::pair{Axis::kRows, t->rows}, std::pair{Axis::kCols, t->cols}}) {
      if (q == nullptr) continue;
      if (!gpu::produced_axis_problem(q->spec, axis, rows, cols).empty() || q->delayed.window != nullptr) return false;
      if (rounding && *rounding != q->spec.rounding) return false;
      rounding = q->spec.rounding;
    }
  }
  return true;
}

// The inputs as the kernel reads them, or nullopt where it cannot (another dtype, shape or
// alignment, or a row length that is not a multiple of 8).
std::optional<std::vector<at::Tensor>> producer_inputs(std::initializer_list<at::Tensor> inputs) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : inputs) {
    if (t.dim() < 1 || t.sizes() != inputs.begin()->sizes() || t.device() != inputs.begin()->device() ||
        t.numel() == 0 || t.size(-1) % 8 != 0)
      return std::nullopt;
    out.push_back(t.contiguous());
    if (!bf16_aligned(out.back())) return std::nullopt;
  }
  return out;
}

// The outputs of one produced tensor and its part of the kernel's job.
struct ProducedJob {
  gpu::AxisJob rows, cols;
  gpu::ProducedTensor tensor;
};

void prepare(const ProducedAxes& axes, const at::Tensor& like, Produced& p, ProducedJob& job) {
  const int64_t cols = like.size(-1), rows = like.numel() / cols;
  p.tensor = at::empty(like.sizes(), like.options());
  p.one_pass = true;
  job.tensor.out = bf16_bits(p.tensor);
  const auto axis = [&](const AxisQuantization* q, at::Tensor& values, gpu::AxisJob& axis_job, const gpu::AxisJob*& slot) {
    if (q == nullptr) return;
    values = at::empty({rows, cols}, like.options());
    axis_job = gpu::AxisJob{q->spec, q->key, {}, {}};
    axis_job.out.dequant_bf16 = bf16_bits(values);
    slot = &axis_job;
  };
  axis(axes.rows, p.rows, job.rows, job.tensor.along_rows);
  axis(axes.cols, p.cols, job.cols, job.tensor.down_cols);
}

}  // namespace

std::optional<Produced> swiglu_forward_quantized_cuda(const at::Tensor& g, const at::Tensor& u,
                                                      at::ScalarType out_dtype, const ProducedAxes& h,
                                                      at::ScalarType values_dtype) {
  if (out_dtype != at::kBFloat16 || values_dtype != at::kBFloat16) return std::nullopt;
  const std::optional<std::vector<at::Tensor>> in = producer_inputs({g, u});
  if (!in) return std::nullopt;
  const int64_t cols = g.size(-1), rows = g.numel() / cols;
  if (!producer_takes({&h}, rows, cols)) return std::nullopt;
  const c10::cuda::CUDAGuard guard(g.device());
  Produced out;
  ProducedJob job;
  prepare(h, (*in)[0], out, job);
  gpu::SwiGluQuantizeJob k;
  k.g = bf16_bits((*in)[0]);
  k.u = bf16_bits((*in)[1]);
  k.rows = rows;
  k.cols = cols;
  k.h = job.tensor;
  gpu::swiglu_forward_quantize(k, compat::current_stream((*in)[0]));
  return out;
}

std::optional<ProducedGrads> swiglu_backward_quantized_cuda(const at::Tensor& dh, const at::Tensor& g,
                                                            const at::Tensor& u, const ProducedAxes& dg,
                                                            const ProducedAxes& du, at::ScalarType values_dtype) {
  if (values_dtype != at::kBFloat16) return std::nullopt;
  const std::optional<std::vector<at::Tensor>> in = producer_inputs({dh, g, u});
  if (!in) return std::nullopt;
  const int64_t cols = g.size(-1), rows = g.numel() / cols;
  if (!producer_takes({&dg, &du}, rows, cols)) return std::nullopt;
  const c10::cuda::CUDAGuard guard(g.device());
  ProducedGrads out;
  ProducedJob dg_job, du_job;
  prepare(dg, (*in)[1], out.dg, dg_job);
  prepare(du, (*in)[1], out.du, du_job);
  gpu::SwiGluBackwardQuantizeJob k;
  k.dh = bf16_bits((*in)[0]);
  k.g = bf16_bits((*in)[1]);
  k.u = bf16_bits((*in)[2]);
  k.rows = rows;
  k.cols = cols;
  k.dg = dg_job.tensor;
  k.du = du_job.tensor;
  gpu::swiglu_backward_quantize(k, compat::current_stream((*in)[1]));
  return out;
}

namespace {

// The norm of x, or of x + branch (then h gets that sum) when branch is defined.
RmsNormOutput launch_rms_norm_forward(const at::Tensor& in, const at::Tensor& branch, const at::Tensor& h,
                                      const at::Tensor& weight, double eps, at::ScalarType out_dtype) {
  const at::Tensor w = weight.contiguous();
  RmsNormOutput out{at::empty(in.sizes(), in.options().dtype(out_dtype)),
                    at::empty(rows_shape(in), in.options().dtype(at::kFloat))};
  gpu::RmsNormForwardJob job;
  job.x = in.data_ptr();
  job.x_type = float_type(in);
  job.weight = w.data_ptr<float>();
  job.cols = in.size(-1);
  job.rows = in.numel() / job.cols;
  job.eps = static_cast<float>(eps);
  job.y = out.y.data_ptr();
  job.y_type = float_type(out_dtype);
  job.rstd = out.rstd.data_ptr<float>();
  if (branch.defined()) {
    job.branch = branch.data_ptr();
    job.branch_type = float_type(branch);
    job.h = h.data_ptr<float>();
  }
  gpu::rmsnorm_forward(job, compat::current_stream(in));
  return out;
}

}  // namespace

RmsNormOutput rms_norm_forward_cuda(const at::Tensor& x, const at::Tensor& weight, double eps,
                                    at::ScalarType out_dtype) {
  const c10::cuda::CUDAGuard guard(x.device());
  return launch_rms_norm_forward(x.contiguous(), at::Tensor(), at::Tensor(), weight, eps, out_dtype);
}

AddRmsNormOutput add_rms_norm_forward_cuda(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                           double eps, at::ScalarType out_dtype) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous(), b = branch.contiguous();
  AddRmsNormOutput out;
  out.h = at::empty(in.sizes(), in.options().dtype(at::kFloat));
  out.norm = launch_rms_norm_forward(in, b, out.h, weight, eps, out_dtype);
  return out;
}

RmsNormGrads rms_norm_backward_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& rstd, const at::Tensor& dres,
                                    std::optional<at::ScalarType> branch_dtype) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor d = dy.contiguous(), in = x.contiguous(), w = weight.contiguous(), r = rstd.contiguous();
  const int64_t cols = in.size(-1), rows = in.numel() / cols;
  RmsNormGrads out{at::empty(in.sizes(), in.options().dtype(at::kFloat)),
                   at::empty({cols}, in.options().dtype(at::kFloat)), at::Tensor()};
  const auto bytes = static_cast<int64_t>(gpu::rmsnorm_backward_workspace_bytes(rows, cols));
  const at::Tensor workspace = at::empty({bytes / static_cast<int64_t>(sizeof(float))}, in.options().dtype(at::kFloat));
  gpu::RmsNormBackwardJob job;
  job.dy = d.data_ptr();
  job.dy_type = float_type(d);
  job.x = in.data_ptr();
  job.x_type = float_type(in);
  job.weight = w.data_ptr<float>();
  job.rstd = r.data_ptr<float>();
  job.rows = rows;
  job.cols = cols;
  job.dx = out.dx.data_ptr<float>();
  job.dweight = out.dweight.data_ptr<float>();
  job.workspace = workspace.data_ptr();
  const at::Tensor other = dres.defined() ? dres.contiguous() : at::Tensor();
  if (other.defined()) job.dres = other.data_ptr<float>();
  if (branch_dtype) {
    out.dbranch = at::empty(in.sizes(), in.options().dtype(*branch_dtype));
    job.dbranch = out.dbranch.data_ptr();
    job.dbranch_type = float_type(*branch_dtype);
  }
  gpu::rmsnorm_backward(job, compat::current_stream(in));
  return out;
}

at::Tensor residual_add_cuda(const at::Tensor& x, const at::Tensor& branch) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous(), b = branch.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options().dtype(at::kFloat));
  gpu::ResidualAddJob job;
  job.x = in.data_ptr<float>();
  job.branch = b.data_ptr();
  job.branch_type = float_type(b);
  job.n = in.numel();
  job.out = out.data_ptr<float>();
  gpu::residual_add(job, compat::current_stream(in));
  return out;
}

at::Tensor widen_bf16_cuda(const at::Tensor& t) {
  const c10::cuda::CUDAGuard guard(t.device());
  const at::Tensor in = t.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options().dtype(at::kFloat));
  if (in.numel() == 0) return out;
  gpu::WidenJob job;
  job.in = static_cast<const uint16_t*>(in.data_ptr());
  job.n = in.numel();
  job.out = out.data_ptr<float>();
  gpu::widen_bf16(job, compat::current_stream(in));
  return out;
}

at::Tensor swiglu_forward_cuda(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype) {
  const c10::cuda::CUDAGuard guard(g.device());
  const at::Tensor gc = g.contiguous(), uc = u.contiguous();
  at::Tensor h = at::empty(gc.sizes(), gc.options().dtype(out_dtype));
  gpu::SwiGluForwardJob job;
  job.g = gc.data_ptr();
  job.u = uc.data_ptr();
  job.in_type = float_type(gc);
  job.n = gc.numel();
  job.h = h.data_ptr();
  job.h_type = float_type(out_dtype);
  gpu::swiglu_forward(job, compat::current_stream(gc));
  return h;
}

SwiGluGrads swiglu_backward_cuda(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u) {
  const c10::cuda::CUDAGuard guard(g.device());
  const at::Tensor dc = dh.contiguous(), gc = g.contiguous(), uc = u.contiguous();
  SwiGluGrads out{at::empty(gc.sizes(), gc.options()), at::empty(gc.sizes(), gc.options())};
  gpu::SwiGluBackwardJob job;
  job.dh = dc.data_ptr();
  job.dh_type = float_type(dc);
  job.g = gc.data_ptr();
  job.u = uc.data_ptr();
  job.in_type = float_type(gc);
  job.n = gc.numel();
  job.dg = out.dg.data_ptr();
  job.du = out.du.data_ptr();
  job.grad_type = float_type(gc);
  gpu::swiglu_backward(job, compat::current_stream(gc));
  return out;
}

void rope_cuda(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse,
               const at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(x.device());
  // The kernel reads any (batch, heads, seq) strides but needs head_dim contiguous.
  const at::Tensor in = x.stride(3) == 1 ? x : x.contiguous();
  const at::Tensor c = cos.contiguous(), s = sin.contiguous();
  gpu::RopeJob job;
  job.x = in.data_ptr();
  job.x_type = float_type(in);
  job.y = out.data_ptr();
  job.y_type = float_type(out);
  for (int k = 0; k < 3; ++k) {
    job.x_strides[k] = in.stride(k);
    job.y_strides[k] = out.stride(k);
  }
  job.batch = in.size(0);
  job.heads = in.size(1);
  job.seq = in.size(2);
  job.head_dim = in.size(3);
  job.cos = c.data_ptr<float>();
  job.sin = s.data_ptr<float>();
  job.inverse = inverse;
  gpu::rope(job, compat::current_stream(in));
}

CrossEntropyOutput cross_entropy_forward_cuda(const at::Tensor& logits, const at::Tensor& targets) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor l = logits.contiguous(), t = targets.contiguous();
  const at::TensorOptions f32 = l.options().dtype(at::kFloat);
  CrossEntropyOutput out{at::empty({l.size(0)}, f32), at::empty({l.size(0)}, f32)};
  gpu::CrossEntropyForwardJob job;
  job.logits = l.data_ptr();
  job.logits_type = float_type(l);
  job.targets = t.data_ptr<int64_t>();
  job.rows = l.size(0);
  job.vocab = l.size(1);
  job.loss = out.loss.data_ptr<float>();
  job.lse = out.lse.data_ptr<float>();
  gpu::cross_entropy_forward(job, compat::current_stream(l));
  return out;
}

at::Tensor cross_entropy_backward_cuda(const at::Tensor& grad, const at::Tensor& logits,
                                       const at::Tensor& targets, const at::Tensor& lse) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor l = logits.contiguous(), t = targets.contiguous(), s = lse.contiguous();
  const at::Tensor g = grad.to(at::kFloat).contiguous();
  at::Tensor dlogits = at::empty(l.sizes(), l.options());
  gpu::CrossEntropyBackwardJob job;
  job.logits = l.data_ptr();
  job.logits_type = float_type(l);
  job.targets = t.data_ptr<int64_t>();
  job.lse = s.data_ptr<float>();
  job.grad = g.data_ptr<float>();
  job.rows = l.size(0);
  job.vocab = l.size(1);
  job.dlogits = dlogits.data_ptr();
  gpu::cross_entropy_backward(job, compat::current_stream(l));
  return dlogits;
}

}  // namespace mxablate::kernels::detail
