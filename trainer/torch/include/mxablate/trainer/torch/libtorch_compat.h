// What differs in the trainer's ATen, optimizer and CUDA calls between the LibTorch versions it
// builds against lives here: Debian 12's libtorch 1.13.1 (CPU only; dev/CI machine) and torch
// 2.11 + CUDA (the GPU machine). torch.distributed's differences are c10d_compat.h's: one small
// header per area (docs/design.md §8). MXABLATE_TRAINER_CUDA is set by trainer/torch/CMakeLists.txt when LibTorch has CUDA.
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if MXABLATE_TRAINER_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <optional>

#define MXABLATE_TRAINER_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// CUDA graphs with a capture mode and private pools as used here: CUDA LibTorch >= 2.0.
#if MXABLATE_TRAINER_CUDA && MXABLATE_TRAINER_TORCH_AT_LEAST(2, 0)
#define MXABLATE_TRAINER_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#else
#define MXABLATE_TRAINER_CUDA_GRAPHS 0
#endif

// OpenBLAS keeps its own thread pool, which at::set_num_threads does not size; where the
// library is OpenBLAS (Debian's LibTorch) this weak symbol resolves and we size it too.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace mxablate::trainer::compat {

inline void set_blas_threads(int n) {
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

inline const char* torch_version() { return TORCH_VERSION; }
inline constexpr bool kHasCuda = MXABLATE_TRAINER_CUDA != 0;

// Total memory of a CUDA device in bytes; 0 where this build has no CUDA.
inline int64_t device_memory_bytes(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA
  if (device.is_cuda())
    return static_cast<int64_t>(
        at::cuda::getDeviceProperties(device.index() < 0 ? at::cuda::current_device() : device.index())->totalGlobalMem);
#endif
  (void)device;
  return 0;
}

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

// The key of a parameter's entry in a torch::optim optimizer's state(): its TensorImpl's address
// as text in LibTorch 1.13, the address itself in 2.x (deduced from the map, as the optimizer
// itself computes it).
template <typename Optimizer>
auto optimizer_state_key(const Optimizer& optimizer, c10::TensorImpl* impl) {
  using Key = std::remove_cv_t<std::remove_reference_t<decltype(optimizer.state().begin()->first)>>;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << impl;
    return os.str();
  } else {
    return Key(impl);
  }
}

// ATen's multi-tensor optimizer kernels (_fused_adamw_, _foreach_norm, _foreach_mul_ by a
// tensor): CUDA LibTorch >= 2.1. Elsewhere the trainer keeps LibTorch's per-parameter reference.
inline bool has_multi_tensor_kernels(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA && MXABLATE_TRAINER_TORCH_AT_LEAST(2, 1)
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

// One AdamW update (decoupled weight decay, no AMSGrad, minimizing) of every tensor of `params`
// in one multi-tensor launch. `steps`: one float32 scalar per parameter on its device, already
// counting this step (the kernel reads them; the caller counts).
inline void fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1,
                        double beta2, double weight_decay, double eps) {
#if MXABLATE_TRAINER_CUDA && MXABLATE_TRAINER_TORCH_AT_LEAST(2, 1)
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1,
                    beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false,
                    /*grad_scale=*/std::nullopt, /*found_inf=*/std::nullopt);
#else
  (void)params;
  (void)grads;
  (void)exp_avgs;
  (void)exp_avg_sqs;
  (void)steps;
  (void)lr;
  (void)beta1;
  (void)beta2;
  (void)weight_decay;
  (void)eps;
  throw std::logic_error("fused AdamW needs a CUDA LibTorch >= 2.1");
#endif
}

// The L2 norm of each tensor (0-dim, float32): one launch where the kernels exist.
inline std::vector<at::Tensor> norms(at::TensorList tensors) {
#if MXABLATE_TRAINER_CUDA && MXABLATE_TRAINER_TORCH_AT_LEAST(2, 1)
  if (!tensors.empty() && has_multi_tensor_kernels(tensors.front().device()))
    return at::_foreach_norm(tensors, 2);
#endif
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(t.norm(2));
  return out;
}

// Multiplies every tensor in place by the 0-dim tensor `factor` (on their device).
inline void scale_in_place(at::TensorList tensors, const at::Tensor& factor) {
#if MXABLATE_TRAINER_CUDA && MXABLATE_TRAINER_TORCH_AT_LEAST(2, 1)
  if (!tensors.empty() && has_multi_tensor_kernels(tensors.front().device())) {
    at::_foreach_mul_(tensors, factor);
    return;
  }
#endif
  for (const at::Tensor& t : tensors) const_cast<at::Tensor&>(t).mul_(factor);
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

// train.deterministic on a CUDA device (docs/design.md §4, "Runs that repeat bit for bit"), for
// the whole process, before its first CUDA kernel:
//   - LibTorch's deterministic mode: FlashAttention's backward then sums dQ in a fixed order
//     instead of with atomics, and an op without a deterministic kernel throws instead of
//     running;
//   - attention kept off cuDNN's and the memory-efficient kernels, whose backward passes are not
//     deterministic, so that SDPA takes FlashAttention;
//   - cuBLAS with a fixed workspace configuration (LibTorch refuses deterministic mode without
//     one; a user's own setting is kept).
inline void use_deterministic_cuda_kernels() {
#if MXABLATE_TRAINER_CUDA
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  at::globalContext().setSDPUseMemEfficient(false);
#if MXABLATE_TRAINER_TORCH_AT_LEAST(2, 4)
  at::globalContext().setSDPUseCuDNN(false);
#endif
#endif
}

inline constexpr bool kHasCudaGraphs = MXABLATE_TRAINER_CUDA_GRAPHS != 0;

// A side stream of `device` made this thread's current stream while the object lives: CUDA
// graphs are captured on a stream other than the default one, and a run whose steps are graphed
// runs all its work on that stream, so that the eager steps before a capture warm up exactly
// what the capture records (cuBLAS's per-stream workspace included).
class SideStream {
 public:
  explicit SideStream(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA_GRAPHS
    guard_.emplace(c10::cuda::getStreamFromPool(false, device.index()));
#else
    (void)device;
    throw std::logic_error("CUDA graphs need a CUDA LibTorch >= 2.0");
#endif
  }

 private:
#if MXABLATE_TRAINER_CUDA_GRAPHS
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
#endif
};

// One captured CUDA graph: the work queued on the current stream between begin() and end(),
// replayed by replay() with the same kernels on the same memory (a private pool keeps what the
// capture allocated). Capture is thread-local: another thread's CUDA calls (a checkpoint writer)
// cannot invalidate it.
class CapturedGraph {
 public:
  void begin() {
#if MXABLATE_TRAINER_CUDA_GRAPHS
    graph_.emplace();
    graph_->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
    throw std::logic_error("CUDA graphs need a CUDA LibTorch >= 2.0");
#endif
  }
  void end() {
#if MXABLATE_TRAINER_CUDA_GRAPHS
    graph_->capture_end();
#endif
  }
  void replay() {
#if MXABLATE_TRAINER_CUDA_GRAPHS
    graph_->replay();
#endif
  }
  // Ends a capture that failed part-way (ignoring what ending it reports) and drops the graph.
  void abandon() noexcept {
#if MXABLATE_TRAINER_CUDA_GRAPHS
    if (!graph_) return;
    try {
      graph_->capture_end();
    } catch (...) {
    }
    graph_.reset();
#endif
  }
  void reset() {
#if MXABLATE_TRAINER_CUDA_GRAPHS
    graph_.reset();
#endif
  }

 private:
#if MXABLATE_TRAINER_CUDA_GRAPHS
  std::optional<at::cuda::CUDAGraph> graph_;
#endif
};

inline void synchronize(const at::Device& device) {
#if MXABLATE_TRAINER_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#endif
  (void)device;
}

}  // namespace mxablate::trainer::compat
