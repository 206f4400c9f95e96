// Everything in the trainer that differs between the LibTorch versions it builds against lives
// here: Debian 12's libtorch 1.13.1 (CPU only; dev/CI machine) and torch 2.11 + CUDA (the GPU
// machine). MXABLATE_TRAINER_CUDA is set by trainer/engine/CMakeLists.txt when LibTorch has CUDA.
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#if MXABLATE_TRAINER_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#define MXABLATE_TRAINER_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// OpenBLAS keeps its own thread pool, which at::set_num_threads does not size; where the
// library is OpenBLAS (Debian's LibTorch) this weak symbol resolves and we size it too.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace mxablate::trainer::compat {

inline void set_blas_threads(int n) {
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

inline const char* torch_version() { return TORCH_VERSION; }
inline constexpr bool kHasCuda = MXABLATE_TRAINER_CUDA != 0;

// Causal attention of q (B, H, T, D) with k, v (B, Hkv, T, D), Hkv dividing H: grouped-query
// attention, query head h using K/V head h / (H / Hkv) (repeat_interleave's order). Every matmul
// runs on BF16 operands with FP32 accumulation and an FP32 softmax.
// CUDA with torch >= 2.0: the fused kernel (scaled_dot_product_attention on bf16), whose BF16
// output is returned as it is (docs/design.md §4: attention runs in BF16); inputs that are BF16
// already are not converted. From 2.5 it takes the K/V heads as they are (enable_gqa), so the
// repeated heads are never materialized; before, they are repeated first.
// Elsewhere (1.13 has no public kernel, and the CPU must emulate BF16) the same computation
// spelled out, K/V heads repeated, operands rounded to BF16, the result float32: the reference.
inline at::Tensor causal_attention_bf16(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v) {
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0 && v.size(1) == k.size(1),
              "attention: ", q.size(1), " query heads cannot share ", k.size(1), " K/V heads");
  const int64_t group = q.size(1) / k.size(1);
#if MXABLATE_TRAINER_TORCH_AT_LEAST(2, 0)
  if (q.is_cuda()) {
    const auto bf16 = [](const at::Tensor& t) {
      return t.scalar_type() == at::kBFloat16 ? t : t.to(at::kBFloat16);
    };
#if MXABLATE_TRAINER_TORCH_AT_LEAST(2, 5)
    return at::scaled_dot_product_attention(bf16(q), bf16(k), bf16(v), {}, 0.0,
                                            /*is_causal=*/true, /*scale=*/std::nullopt,
                                            /*enable_gqa=*/group > 1);
#else
    return at::scaled_dot_product_attention(bf16(q), bf16(k).repeat_interleave(group, 1),
                                            bf16(v).repeat_interleave(group, 1), {}, 0.0,
                                            /*is_causal=*/true);
#endif
  }
#endif
  const auto bf16 = [](const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); };
  const auto heads = [group](const at::Tensor& t) {
    return group > 1 ? t.repeat_interleave(group, 1) : t;
  };
  const int64_t t = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor scores = at::matmul(bf16(q), bf16(heads(k)).transpose(-2, -1)) * scale;
  const at::Tensor future = at::ones({t, t}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(scores, -1);
  return at::matmul(bf16(probs), bf16(heads(v)));
}

// Peak memory the caching allocator has handed out on the device (0 on CPU).
inline int64_t peak_device_bytes(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // StatType::AGGREGATE
  }
#endif
  (void)device;
  return 0;
}

inline std::string device_description(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA
  if (device.is_cuda()) {
    const auto* props = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
    return std::string("cuda:") + std::to_string(device.index() < 0 ? 0 : device.index()) + " " +
           props->name;
  }
#endif
  return device.str();
}

// Makes `device` this thread's current CUDA device (a rank's GPU, for NCCL and the allocator).
inline void set_current_device(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  (void)device;
}

inline void synchronize(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
  (void)device;
}

}  // namespace mxablate::trainer::compat
