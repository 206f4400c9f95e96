// The raw fused kernels of the trainer's common path (docs/design.md §4): RMSNorm, SwiGLU, RoPE
// and cross-entropy, forward and backward. Device pointers in, device pointers out, on a given
// stream (a cudaStream_t / hipStream_t as void*; null = the default stream), like quantize_gpu.h.
// Torch-free: kernels/torch/fused_ops.h adapts them to at::Tensor and holds their CPU references.
//
// Every kernel reads its inputs once (RMSNorm: its forward reads a row again for the output, from
// cache; its backward also reads the dweight partials) and does all arithmetic in
// float32 without FMA contraction (--fmad=false), whatever the storage type; a bf16 output is the
// float32 result rounded to nearest-even (minifloat.h float_to_bf16_bits). No float atomics
// anywhere: two calls with the same inputs give the same bits, which the trainer's kill/resume
// equality needs (docs/design.md §4). Single source for CUDA and HIP; nothing assumes 32 lanes.
// Any element-aligned pointer is accepted; 16-byte aligned ones (what every allocator returns)
// let SwiGLU, RoPE and RMSNorm's backward use 16-byte loads and stores, with the same bits.
//
// Each entry point throws std::invalid_argument (one sentence) when a job does not fit its
// contract and std::runtime_error when the GPU runtime reports an error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxablate::kernels::gpu {

// Storage type of an activation (math is float32 either way).
enum class FloatType : uint8_t { kFloat32 = 0, kBFloat16 = 1 };

// ---- RMSNorm: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), per row --------------

struct RmsNormForwardJob {
  const void* x = nullptr;  // rows x cols, row-major, contiguous
  FloatType x_type = FloatType::kFloat32;
  const float* weight = nullptr;  // cols
  int64_t rows = 0;
  int64_t cols = 0;
  float eps = 0.0f;
  void* y = nullptr;  // rows x cols, contiguous
  FloatType y_type = FloatType::kFloat32;
  float* rstd = nullptr;  // rows: saved for backward
  // The residual add fused in front (optional; both or neither): the kernel normalizes
  // h = x + branch instead of x and writes h (float32, the residual stream's dtype, what the
  // backward reads as its x). Needs x float32; h = float32(x) + float32(branch), one rounding,
  // the unfused add's bits.
  const void* branch = nullptr;  // rows x cols, contiguous
  FloatType branch_type = FloatType::kFloat32;
  float* h = nullptr;  // rows x cols, overlapping neither x nor branch
};

void rmsnorm_forward(const RmsNormForwardJob& job, void* stream);

// The largest row length rmsnorm_backward takes: a block keeps one dweight partial per column in
// shared memory, within the 48 KiB every GPU grants without opt-in (Llama 70B's d is 8192).
inline constexpr int64_t kRmsNormMaxCols = 8192;

struct RmsNormBackwardJob {
  const void* dy = nullptr;  // rows x cols, contiguous
  FloatType dy_type = FloatType::kFloat32;
  const void* x = nullptr;  // the forward's input
  FloatType x_type = FloatType::kFloat32;
  const float* weight = nullptr;
  const float* rstd = nullptr;  // the forward's
  int64_t rows = 0;
  int64_t cols = 0;
  float* dx = nullptr;       // rows x cols float32 (the residual stream's dtype)
  float* dweight = nullptr;  // cols
  // Device scratch of rmsnorm_backward_workspace_bytes(rows, cols): per-block dweight partials,
  // summed afterwards in a fixed order (deterministic, no atomics). Its contents on entry do not
  // matter.
  void* workspace = nullptr;
  // The residual stream's gradient sums fused behind (each optional; both need x float32):
  // dres, the gradient that reaches the normalized tensor from its other readers, is added
  // to the norm's own (dx = dres + norm's dx, one float32 add: the bits of autograd's sum), and
  // dbranch gets dx in its storage type (the gradient of the branch a fused forward added).
  const float* dres = nullptr;  // rows x cols
  void* dbranch = nullptr;      // rows x cols
  FloatType dbranch_type = FloatType::kFloat32;
};

// The number of dweight partials depends on the shape only, so the summation order (and the
// bits) are the same on every GPU model.
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols);

void rmsnorm_backward(const RmsNormBackwardJob& job, void* stream);

// ---- The residual add: out = x + branch, elementwise ------------------------------------------

// The block's last add (the one no norm follows inside the block), float32 out; the bits of
// float32(x) + float32(branch) with one rounding.
struct ResidualAddJob {
  const float* x = nullptr;  // n elements, contiguous
  const void* branch = nullptr;
  FloatType branch_type = FloatType::kFloat32;
  int64_t n = 0;
  float* out = nullptr;  // n elements, not overlapping x or branch
};

void residual_add(const ResidualAddJob& job, void* stream);

// ---- Widening bf16 to float32, elementwise (exact) --------------------------------------------

struct WidenJob {
  const uint16_t* in = nullptr;  // n bf16 elements, contiguous
  int64_t n = 0;
  float* out = nullptr;  // n elements, not overlapping in
};

void widen_bf16(const WidenJob& job, void* stream);

// ---- SwiGLU: h = silu(g) * u, silu(g) = g / (1 + exp(-g)), elementwise ----------------------

struct SwiGluForwardJob {
  const void* g = nullptr;  // n elements, contiguous
  const void* u = nullptr;  // n elements, contiguous
  FloatType in_type = FloatType::kFloat32;  // of g and u
  int64_t n = 0;
  void* h = nullptr;
  FloatType h_type = FloatType::kFloat32;
};

void swiglu_forward(const SwiGluForwardJob& job, void* stream);

// dg = dh * u * silu'(g), du = dh * silu(g), in one pass.
struct SwiGluBackwardJob {
  const void* dh = nullptr;
  FloatType dh_type = FloatType::kFloat32;
  const void* g = nullptr;
  const void* u = nullptr;
  FloatType in_type = FloatType::kFloat32;
  int64_t n = 0;
  void* dg = nullptr;
  void* du = nullptr;
  FloatType grad_type = FloatType::kFloat32;  // of dg and du
};

void swiglu_backward(const SwiGluBackwardJob& job, void* stream);

// ---- RoPE, rotate-half layout -----------------------------------------------------------------
// For each (b, h, t) and i < head_dim/2, with x1 = x[..., i], x2 = x[..., i + head_dim/2]:
//   forward:  y1 = x1 cos - x2 sin,  y2 = x1 sin + x2 cos    (rotation by +angle)
//   inverse:  y1 = x1 cos + x2 sin,  y2 = x2 cos - x1 sin    (by -angle: the forward's backward)
// Input and output are strided (batch, heads, seq) with unit stride along head_dim, so the
// input may be a (B, T, H, D) projection viewed as (B, H, T, D) and the output the contiguous
// (B, H, T, D) attention reads (or, in backward, the input's own layout).
struct RopeJob {
  const void* x = nullptr;
  FloatType x_type = FloatType::kFloat32;
  int64_t x_strides[3] = {0, 0, 0};  // elements, for (batch, heads, seq)
  void* y = nullptr;
  FloatType y_type = FloatType::kFloat32;
  int64_t y_strides[3] = {0, 0, 0};
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;  // head_dim even
  const float* cos = nullptr;  // seq x head_dim/2, contiguous
  const float* sin = nullptr;  // seq x head_dim/2, contiguous
  bool inverse = false;
};

void rope(const RopeJob& job, void* stream);

// ---- Cross-entropy over rows of logits with int64 targets ------------------------------------
// Every target must lie in [0, vocab). The kernels cannot throw: a row whose target is out of
// range gets loss NaN (and NaN gradients) and nothing outside the row is read; the adapters check
// the range on the host where that costs no device synchronization (CPU tensors).

struct CrossEntropyForwardJob {
  const void* logits = nullptr;  // rows x vocab, row-major, contiguous
  FloatType logits_type = FloatType::kFloat32;
  const int64_t* targets = nullptr;  // rows
  int64_t rows = 0;
  int64_t vocab = 0;
  float* loss = nullptr;  // rows: logsumexp(row) - row[target]
  float* lse = nullptr;   // rows: saved for backward
};

void cross_entropy_forward(const CrossEntropyForwardJob& job, void* stream);

// dlogits = (softmax(row) - onehot(target)) * (grad / rows): the gradient of the mean loss.
struct CrossEntropyBackwardJob {
  const void* logits = nullptr;
  FloatType logits_type = FloatType::kFloat32;  // dlogits has the same type
  const int64_t* targets = nullptr;
  const float* lse = nullptr;   // the forward's
  const float* grad = nullptr;  // one float on the device: d(loss)/d(mean loss)
  int64_t rows = 0;
  int64_t vocab = 0;
  void* dlogits = nullptr;  // rows x vocab, contiguous
};

void cross_entropy_backward(const CrossEntropyBackwardJob& job, void* stream);

}  // namespace mxablate::kernels::gpu
