// The fused cross-entropy of the trainer's common path (docs/design.md §4), forward (loss and
// logsumexp, online max and sum) and backward, with their host-side contract checks and launchers.
// API and numerics contract: mxablate/kernels/gpu/fused_ops_gpu.h; shared helpers and conventions:
// fused_common.cuh; the running logsumexp: online_lse.h.
#include <cstdint>
#include <string>

#include "fused_common.cuh"
#include "online_lse.h"

namespace mxablate::kernels::gpu {
namespace {

using namespace fused;  // fused_common.cuh

// One block per row (grid-stride over rows): one read of the row, online max and sum.
template <typename LT>
__global__ void cross_entropy_forward_kernel(const LT* __restrict__ logits, const int64_t* __restrict__ targets,
                                             int64_t rows, int64_t vocab, float* __restrict__ loss,
                                             float* __restrict__ lse) {
  __shared__ float sm[kMaxWarps], ss[kMaxWarps];
  const int warp = static_cast<int>(threadIdx.x / warpSize), lane = static_cast<int>(threadIdx.x % warpSize);
  const int warps = static_cast<int>(blockDim.x / warpSize);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const LT* row = logits + r * vocab;
    OnlineLse acc;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) acc.add(to_float(row[j]));
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
      const float m2 = shfl_xor(acc.m, offset, warpSize), s2 = shfl_xor(acc.s, offset, warpSize);
      acc.merge(m2, s2);
    }
    __syncthreads();  // the previous row's readers are done with sm/ss
    if (lane == 0) {
      sm[warp] = acc.m;
      ss[warp] = acc.s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      OnlineLse total;
      for (int w = 0; w < warps; ++w) total.merge(sm[w], ss[w]);
      const float l = total.value();
      const int64_t t = targets[r];
      lse[r] = l;
      loss[r] = (t >= 0 && t < vocab) ? l - to_float(row[t]) : NAN;
    }
  }
}

// One block per row: dlogits = (exp(v - lse) - onehot) * (grad / rows), one read and one write.
template <typename LT>
__global__ void cross_entropy_backward_kernel(const LT* __restrict__ logits, const int64_t* __restrict__ targets,
                                              const float* __restrict__ lse, const float* __restrict__ grad,
                                              int64_t rows, int64_t vocab, LT* __restrict__ dlogits) {
  const float scale = grad[0] / static_cast<float>(rows);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const LT* row = logits + r * vocab;
    const int64_t t = targets[r];
    const bool valid = t >= 0 && t < vocab;
    const float l = lse[r];
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float p = expf(to_float(row[j]) - l);
      const float d = valid ? (j == t ? p - 1.0f : p) * scale : NAN;
      store(dlogits, r * vocab + j, d);
    }
  }
}

// The shape and dtype checks both cross-entropy launchers make.
void require_logits(int64_t rows, int64_t vocab, FloatType type, const std::string& where) {
  require(rows > 0 && vocab > 0, where,
          "the logits are empty (" + std::to_string(rows) + " x " + std::to_string(vocab) + ")");
  require_type(type, where, "logits");
}

}  // namespace

void cross_entropy_forward(const CrossEntropyForwardJob& job, void* stream) {
  const std::string where = "cross_entropy_forward";
  require(job.logits && job.targets && job.loss && job.lse, where, "a pointer is null");
  require_logits(job.rows, job.vocab, job.logits_type, where);
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.rows, 1);
  with_type(job.logits_type, [&](auto lt) {
    using LT = decltype(lt);
    cross_entropy_forward_kernel<LT><<<grid, kThreads, 0, s>>>(static_cast<const LT*>(job.logits), job.targets,
                                                               job.rows, job.vocab, job.loss, job.lse);
  });
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(const CrossEntropyBackwardJob& job, void* stream) {
  const std::string where = "cross_entropy_backward";
  require(job.logits && job.targets && job.lse && job.grad && job.dlogits, where, "a pointer is null");
  require_logits(job.rows, job.vocab, job.logits_type, where);
  const auto s = static_cast<gpuStream_t>(stream);
  const unsigned grid = blocks_for(job.rows, 1);
  with_type(job.logits_type, [&](auto lt) {
    using LT = decltype(lt);
    cross_entropy_backward_kernel<LT><<<grid, kThreads, 0, s>>>(static_cast<const LT*>(job.logits), job.targets,
                                                                job.lse, job.grad, job.rows, job.vocab,
                                                                static_cast<LT*>(job.dlogits));
  });
  check_launch("cross_entropy_backward");
}

}  // namespace mxablate::kernels::gpu
