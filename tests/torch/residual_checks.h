// The residual-stream ops' contract (kernels/torch fused_ops.h), checked alike on the CPU
// (tests/torch) and on CUDA (tests/gpu): each fused op is its composition of the plain ops, bit for
// bit, on the tensors' device.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "catch.h"
#include "mxablate/kernels/torch/fused_ops.h"
#include "test_tensors.h"

namespace mxablate::test {

// x float32, b (x's shape, float32 or bf16), w (x's last dimension): add_rms_norm_forward is
// `x + b` and rms_norm_forward of it for either output dtype; residual_add is `x + b`.
inline void check_add_rms_norm_composes(const at::Tensor& x, const at::Tensor& b, const at::Tensor& w) {
  const at::Tensor sum = x + b;
  CHECK(sum.scalar_type() == at::kFloat);
  for (at::ScalarType out_type : {at::kFloat, at::kBFloat16}) {
    const kernels::AddRmsNormOutput f = kernels::add_rms_norm_forward(x, b, w, 1e-5, out_type);
    const kernels::RmsNormOutput want = kernels::rms_norm_forward(sum, w, 1e-5, out_type);
    CHECK(same_bits(f.h, sum));
    CHECK(same_bits(f.norm.y, want.y));
    CHECK(same_bits(f.norm.rstd, want.rstd));
  }
  CHECK(same_bits(kernels::residual_add(x, b), sum));
}

// h float32 (a norm's input), w, dy, dres (h's shape, float32): residual_rms_norm_backward is
// rms_norm_backward with `dres + dx` and that cast to branch_type; without dres or a branch
// type, the plain dx and no branch gradient. `dres_as_given` is passed in dres's place (a
// misaligned copy sends CUDA to the scalar kernel), with dres's values.
inline void check_residual_backward_composes(const at::Tensor& h, const at::Tensor& w, const at::Tensor& dy,
                                             const at::Tensor& dres, const at::Tensor& dres_as_given,
                                             at::ScalarType branch_type) {
  const at::Tensor rstd = kernels::rms_norm_forward(h, w, 1e-5, at::kFloat).rstd;
  const kernels::RmsNormGrads plain = kernels::rms_norm_backward(dy, h, w, rstd);
  const at::Tensor want_dx = dres + plain.dx;
  const kernels::RmsNormGrads g = kernels::residual_rms_norm_backward(dy, h, w, rstd, dres_as_given, branch_type);
  CHECK(same_bits(g.dx, want_dx));
  CHECK(same_bits(g.dbranch, want_dx.to(branch_type)));
  CHECK(same_bits(g.dweight, plain.dweight));
  const kernels::RmsNormGrads alone = kernels::residual_rms_norm_backward(dy, h, w, rstd, at::Tensor(), std::nullopt);
  CHECK(same_bits(alone.dx, plain.dx));
  CHECK_FALSE(alone.dbranch.defined());
}

// to_float32 on `device`: every bf16 bit pattern (NaNs, infinities, subnormals, both zeros) widens
// to ATen's own conversion bit for bit, from an aligned tensor and from one a 2-byte offset off
// (CUDA's scalar loop), with a length that leaves a partial vector; float32 passes through.
inline void check_to_float32_widens(const at::Device& device) {
  const at::Tensor all = at::arange(-32768, 32768, at::TensorOptions().dtype(at::kInt))
                             .to(at::kShort)
                             .view(at::kBFloat16)
                             .to(device);
  CHECK(same_bits(kernels::to_float32(all), all.to(at::kFloat)));
  const at::Tensor offset = all.narrow(0, 1, all.numel() - 3);
  CHECK(same_bits(kernels::to_float32(offset), offset.to(at::kFloat)));
  const at::Tensor f = all.to(at::kFloat);
  CHECK(kernels::to_float32(f).data_ptr() == f.data_ptr());
}

}  // namespace mxablate::test
