// The fused SwiGLU of the trainer's common path (docs/design.md §4), forward and backward, with
// their host-side contract checks and launchers. The per-element formulas are swiglu_math.h's
// (ATen's silu and silu_backward), shared with the fused producers (produce_quantize.cu). API and
// numerics contract: mxablate/kernels/gpu/fused_ops_gpu.h; shared helpers and conventions:
// fused_common.cuh.
#include <cstdint>
#include <string>

#include "fused_common.cuh"
#include "swiglu_math.h"

namespace mxablate::kernels::gpu {
namespace {

using namespace fused;  // fused_common.cuh

// ---- SwiGLU (swiglu_math.h: ATen's silu and silu_backward formulas) ----------------------------

using detail::swiglu_grads;
using detail::swiglu_h;

// Elements [0, vec_n) in kVec-element vectors (vec_n a multiple of kVec, 0 when a pointer is not
// 16-byte aligned), then [vec_n, n) one at a time; both grid-stride.
template <typename IT, typename HT>
__global__ void swiglu_forward_kernel(const IT* __restrict__ g, const IT* __restrict__ u, int64_t n, int64_t vec_n,
                                      HT* __restrict__ h) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float gv[kVec], uv[kVec], hv[kVec];
    load_vec(g + v * kVec, gv);
    load_vec(u + v * kVec, uv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) hv[k] = swiglu_h(gv[k], uv[k]);
    store_vec(h + v * kVec, hv);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) store(h, i, swiglu_h(to_float(g[i]), to_float(u[i])));
}

template <typename DT, typename IT, typename GT>
__global__ void swiglu_backward_kernel(const DT* __restrict__ dh, const IT* __restrict__ g,
                                       const IT* __restrict__ u, int64_t n, int64_t vec_n, GT* __restrict__ dg,
                                       GT* __restrict__ du) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float d[kVec], gv[kVec], uv[kVec], dgv[kVec], duv[kVec];
    load_vec(dh + v * kVec, d);
    load_vec(g + v * kVec, gv);
    load_vec(u + v * kVec, uv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) swiglu_grads(d[k], gv[k], uv[k], dgv[k], duv[k]);
    store_vec(dg + v * kVec, dgv);
    store_vec(du + v * kVec, duv);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) {
    float dgi, dui;
    swiglu_grads(to_float(dh[i]), to_float(g[i]), to_float(u[i]), dgi, dui);
    store(dg, i, dgi);
    store(du, i, dui);
  }
}

}  // namespace

void swiglu_forward(const SwiGluForwardJob& job, void* stream) {
  const std::string where = "swiglu_forward";
  require(job.g && job.u && job.h, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.in_type, where, "g/u");
  require_type(job.h_type, where, "h");
  const auto s = static_cast<gpuStream_t>(stream);
  const ElementwiseSplit split = elementwise_split(job.n, {job.g, job.u, job.h});
  with_type(job.in_type, [&](auto it) {
    using IT = decltype(it);
    with_type(job.h_type, [&](auto ht) {
      using HT = decltype(ht);
      swiglu_forward_kernel<IT, HT><<<split.grid, kThreads, 0, s>>>(static_cast<const IT*>(job.g),
                                                                    static_cast<const IT*>(job.u), job.n, split.vec_n,
                                                              static_cast<HT*>(job.h));
    });
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(const SwiGluBackwardJob& job, void* stream) {
  const std::string where = "swiglu_backward";
  require(job.dh && job.g && job.u && job.dg && job.du, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.dh_type, where, "dh");
  require_type(job.in_type, where, "g/u");
  require_type(job.grad_type, where, "dg/du");
  const auto s = static_cast<gpuStream_t>(stream);
  const ElementwiseSplit split = elementwise_split(job.n, {job.dh, job.g, job.u, job.dg, job.du});
  with_type(job.dh_type, [&](auto dt) {
    using DT = decltype(dt);
    with_type(job.in_type, [&](auto it) {
      using IT = decltype(it);
      with_type(job.grad_type, [&](auto gt) {
        using GT = decltype(gt);
        swiglu_backward_kernel<DT, IT, GT><<<split.grid, kThreads, 0, s>>>(
            static_cast<const DT*>(job.dh), static_cast<const IT*>(job.g), static_cast<const IT*>(job.u), job.n,
            split.vec_n, static_cast<GT*>(job.dg), static_cast<GT*>(job.du));
      });
    });
  });
  check_launch("swiglu_backward");
}

}  // namespace mxablate::kernels::gpu
