// The fused producers' adapters: the fused kernel where it takes the job (fused_ops_cuda.cpp),
// else the plain op and fake_quantize, which is what the kernel is tested against.
#include "mxablate/kernels/torch/produced_operands.h"

#include <optional>

#include "fused_ops_cuda.h"

namespace mxablate::kernels {
namespace {

at::Tensor as_matrix(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

// Q(t) as the quantizer makes it, for the axes asked for: one pass for both.
void quantize_after(Produced& p, const ProducedAxes& axes, at::ScalarType values_dtype) {
  const at::Tensor m = as_matrix(p.tensor);
  if (axes.rows && axes.cols) {
    BothAxes both = fake_quantize_both(m, *axes.rows, *axes.cols, nullptr, nullptr, values_dtype);
    p.rows = std::move(both.rows);
    p.cols = std::move(both.cols);
    return;
  }
  if (axes.rows) p.rows = fake_quantize(m, Axis::kRows, *axes.rows, nullptr, values_dtype);
  if (axes.cols) p.cols = fake_quantize(m, Axis::kCols, *axes.cols, nullptr, values_dtype);
}

}  // namespace

Produced swiglu_forward_quantized(const at::Tensor& g, const at::Tensor& u, at::ScalarType out_dtype,
                                  const ProducedAxes& h, at::ScalarType values_dtype) {
#if MXABLATE_KERNELS_TORCH_CUDA
  if (g.is_cuda() && h.any()) {
    std::optional<Produced> fused = detail::swiglu_forward_quantized_cuda(g, u, out_dtype, h, values_dtype);
    if (fused) return *std::move(fused);
  }
#endif
  Produced p;
  p.tensor = swiglu_forward(g, u, out_dtype);
  quantize_after(p, h, values_dtype);
  return p;
}

ProducedGrads swiglu_backward_quantized(const at::Tensor& dh, const at::Tensor& g, const at::Tensor& u,
                                        const ProducedAxes& dg, const ProducedAxes& du,
                                        at::ScalarType values_dtype) {
#if MXABLATE_KERNELS_TORCH_CUDA
  if (g.is_cuda() && (dg.any() || du.any())) {
    std::optional<ProducedGrads> fused = detail::swiglu_backward_quantized_cuda(dh, g, u, dg, du, values_dtype);
    if (fused) return *std::move(fused);
  }
#endif
  SwiGluGrads grads = swiglu_backward(dh, g, u);
  ProducedGrads out;
  out.dg.tensor = std::move(grads.dg);
  out.du.tensor = std::move(grads.du);
  quantize_after(out.dg, dg, values_dtype);
  quantize_after(out.du, du, values_dtype);
  return out;
}

}  // namespace mxablate::kernels
