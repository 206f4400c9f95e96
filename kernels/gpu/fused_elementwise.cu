// The plain elementwise passes of the trainer's common path (docs/design.md §4): the residual add
// no norm follows (out = x + branch) and the exact bf16 -> float32 widening, each kVec elements a
// thread through 16-byte accesses where aligned and a scalar loop for the rest; the kernels, their
// host-side contract checks and launchers. API and numerics contract:
// mxablate/kernels/gpu/fused_ops_gpu.h; shared helpers and conventions: fused_common.cuh.
#include <cstdint>
#include <string>

#include "fused_common.cuh"

namespace mxablate::kernels::gpu {
namespace {

using namespace fused;  // fused_common.cuh

// out = float32(in) over n elements: kVec per thread through 16-byte accesses when aligned, the
// scalar loop for the rest.
__global__ void widen_bf16_kernel(const Bf16* __restrict__ in, int64_t n, int64_t vec_n, float* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float f[kVec];
    load_vec(in + v * kVec, f);
    store_vec(out + v * kVec, f);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) out[i] = to_float(in[i]);
}

// out = x + branch over n elements: kVec per thread through 16-byte accesses when aligned, the
// scalar loop for the rest (the same per-element add either way).
template <typename BT>
__global__ void residual_add_kernel(const float* __restrict__ x, const BT* __restrict__ branch, int64_t n,
                                    int64_t vec_n, float* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < vec_n / kVec; v += stride) {
    float xv[kVec], bv[kVec];
    load_vec(x + v * kVec, xv);
    load_vec(branch + v * kVec, bv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) xv[k] = xv[k] + bv[k];
    store_vec(out + v * kVec, xv);
  }
  for (int64_t i = vec_n + tid; i < n; i += stride) out[i] = x[i] + to_float(branch[i]);
}

}  // namespace

void residual_add(const ResidualAddJob& job, void* stream) {
  const std::string where = "residual_add";
  require(job.x && job.branch && job.out, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  require_type(job.branch_type, where, "branch");
  const auto s = static_cast<gpuStream_t>(stream);
  const ElementwiseSplit split = elementwise_split(job.n, {job.x, job.branch, job.out});
  with_type(job.branch_type, [&](auto bt) {
    using BT = decltype(bt);
    residual_add_kernel<BT><<<split.grid, kThreads, 0, s>>>(job.x, static_cast<const BT*>(job.branch), job.n,
                                                            split.vec_n, job.out);
  });
  check_launch("residual_add");
}

void widen_bf16(const WidenJob& job, void* stream) {
  const std::string where = "widen_bf16";
  require(job.in && job.out, where, "a pointer is null");
  require(job.n > 0, where, "the input is empty");
  const ElementwiseSplit split = elementwise_split(job.n, {job.in, job.out});
  widen_bf16_kernel<<<split.grid, kThreads, 0, static_cast<gpuStream_t>(stream)>>>(job.in, job.n, split.vec_n, job.out);
  check_launch("widen_bf16");
}

}  // namespace mxablate::kernels::gpu
