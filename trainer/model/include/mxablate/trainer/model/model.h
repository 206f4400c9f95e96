// The Llama 3.1 architecture at any preset size (docs/design.md §4): token embedding, n blocks of
// [RMSNorm -> grouped-query attention with RoPE -> residual, RMSNorm -> SwiGLU MLP -> residual],
// final RMSNorm, untied LM head; no biases. Every linear (the LM head too) is an MXLinear with
// its own per-GEMM plan (linear_plan.h resolves each layer's settings: by default the blocks run
// the run's precisions and the LM head plain BF16); attention's two batched matmuls run on BF16
// operands (compat header).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <map>
#include <memory>
#include <utility>

#include "mxablate/trainer/numerics/fused_model_ops.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/model_presets.h"
#include "mxablate/trainer/numerics/mx_linear.h"

namespace mxablate::trainer {

struct ModelOptions {
  ModelShape shape;
  int64_t vocab_size = 0;
  // One plan per linear_layers() entry (model order, LM head last); empty: all plain BF16.
  std::vector<LinearPlan> layer_plans;
  std::shared_ptr<QuantSession> session = std::make_shared<QuantSession>();
  // Parameters are created here; "meta" builds the shapes without memory (the 8B shape check).
  at::Device device = at::kCPU;
  uint64_t init_seed = 1;  // initialization is drawn on the CPU, so it is device-independent
  // Blocks 0 … recomputed_blocks-1 keep only their input and are recomputed in the backward
  // (block_checkpoint.h; recompute_plan.h says how many): less memory, the same bits.
  int64_t recomputed_blocks = 0;
  // Selective recompute in every block not recomputed whole (docs/design.md §4): the norms'
  // outputs and SwiGLU's product are made again in the backward for their Wgrad readers instead
  // of being kept (mx_linear.h, RebuiltInput): less memory, the same bits.
  bool selective_recompute = false;
  // RMSNorm, RoPE, SwiGLU's silu*mul and the loss through the fused kernels (fused_ops.h): by
  // default on CUDA only, so CPU results keep the unfused expressions' bits.
  FusedOps fused_ops = FusedOps::kOnCuda;
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, const at::TensorOptions& options);
  // Fused: the output is gemm_input_dtype (its consumer is a GEMM), the gradient float32.
  at::Tensor forward(const at::Tensor& x);
  // The residual stream x (+ branch, when defined) and its norm; fused: fused_residual_rms_norm,
  // whose kernels also do the stream's add, gradient sum and the branch's cast (fused_ops.h).
  ResidualNormed forward_residual(const at::Tensor& x, const at::Tensor& branch);
  void set_fused_ops(FusedOps mode) { fused_ops_ = mode; }
  at::Tensor weight;

 private:
  double eps_;
  FusedOps fused_ops_ = FusedOps::kOnCuda;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding (rotate-half layout), cos/sin cached per (length, device).
class RotaryEmbedding {
 public:
  RotaryEmbedding(int64_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}
  // x: (B, H, T, head_dim), any strides; fused: the result in x's dtype and layout (fused_ops.h).
  at::Tensor apply(const at::Tensor& x);
  void set_fused_ops(FusedOps mode) { fused_ops_ = mode; }

 private:
  int64_t head_dim_;
  double theta_;
  FusedOps fused_ops_ = FusedOps::kOnCuda;
  std::map<std::pair<int64_t, std::string>, std::pair<at::Tensor, at::Tensor>> cache_;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelShape& shape, int first_layer, const LinearPlan& plan,
                const std::shared_ptr<QuantSession>& session, std::shared_ptr<RotaryEmbedding> rope,
                at::Device device);
  // (B, T, d) -> (B, T, d); `rebuilt`: x as the backward can make it again, for q, k and v.
  at::Tensor forward(const at::Tensor& x, std::shared_ptr<RebuiltInput> rebuilt = nullptr);
  MXLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  std::shared_ptr<RotaryEmbedding> rope_;
};
TORCH_MODULE(Attention);

class SwiGLUImpl : public torch::nn::Module {
 public:
  SwiGLUImpl(const ModelShape& shape, int first_layer, const LinearPlan& plan,
             const std::shared_ptr<QuantSession>& session, at::Device device);
  // `rebuilt` (selective recompute): x as the backward can make it again, for gate and up; down's
  // input h is then made again from gate's and up's outputs too.
  at::Tensor forward(const at::Tensor& x, std::shared_ptr<RebuiltInput> rebuilt = nullptr);
  void set_fused_ops(FusedOps mode) { fused_ops_ = mode; }
  MXLinear gate{nullptr}, up{nullptr}, down{nullptr};

 private:
  // What the fused SwiGLU makes ahead of the three linears for input x (fused_ops.h), or null:
  // nothing wanted, or the session's fused_producers off. `h_rebuilt`: down's Wgrad reads h made
  // again, so nothing of h is made ahead for it.
  std::shared_ptr<const SwiGluMadeAhead> made_ahead(const at::Tensor& x, bool h_rebuilt) const;
  // silu(g) * u: the product, as the forward and the rebuild make it.
  at::Tensor product(const at::Tensor& g, const at::Tensor& u,
                     std::shared_ptr<const SwiGluMadeAhead> ahead = nullptr) const;

  FusedOps fused_ops_ = FusedOps::kOnCuda;
};
TORCH_MODULE(SwiGLU);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelShape& shape, int index, const LinearPlan& plan,
            const std::shared_ptr<QuantSession>& session, std::shared_ptr<RotaryEmbedding> rope,
            at::Device device, bool checkpointed = false, bool selective = false);
  // Through block_checkpoint.h when the block is checkpointed, else compute(x) directly.
  at::Tensor forward(const at::Tensor& x);
  // x + attention, + MLP: the block's arithmetic.
  at::Tensor compute(const at::Tensor& x);
  // The fused ops for the norms, the MLP and the residual adds.
  void set_fused_ops(FusedOps mode);
  RMSNorm attn_norm{nullptr}, mlp_norm{nullptr};
  Attention attn{nullptr};
  SwiGLU mlp{nullptr};

 private:
  // The norm's output of `stream` as the backward makes it again (selective recompute), or null.
  std::shared_ptr<RebuiltInput> rebuilt_norm(const RMSNorm& norm, const at::Tensor& stream) const;

  std::shared_ptr<QuantSession> session_;
  bool checkpointed_;
  bool selective_;
  FusedOps fused_ops_ = FusedOps::kOnCuda;
};
TORCH_MODULE(Block);

class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const ModelOptions& options);
  // tokens: (B, T) int64 -> logits (B, T, vocab) float32
  at::Tensor forward(const at::Tensor& tokens);
  // The final norm's output (B, T, d_model): the LM head's input.
  at::Tensor final_hidden(const at::Tensor& tokens);
  // The LM head's output in its GEMM's dtype (BF16 on CUDA, float32 on the CPU).
  at::Tensor head_output(const at::Tensor& tokens);
  // Mean next-token cross-entropy of (B, T) inputs against (B, T) targets, the LM head and the
  // loss taken loss_chunks.h's logits_chunk_tokens at a time (chunked_loss.h).
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets);
  // The same, `chunk_tokens` tokens at a time (≥ B·T: whole): tests force small chunks here.
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets, int64_t chunk_tokens);

  const ModelOptions& options() const { return options_; }
  QuantSession& session() { return *options_.session; }
  int64_t parameter_count() const;
  // Every MXLinear in layer order (the `layer` of its keys), LM head last.
  std::vector<MXLinear> linears() const;
  // Gives every linear its plan (one per linears() entry): at construction, and when the
  // precision schedule switches.
  void set_layer_plans(const std::vector<LinearPlan>& plans);

  at::Tensor embedding;  // (vocab, d_model)
  torch::nn::ModuleList blocks;
  RMSNorm final_norm{nullptr};
  MXLinear lm_head{nullptr};

 private:
  void initialize(uint64_t seed);
  ModelOptions options_;
};
TORCH_MODULE(LlamaModel);

}  // namespace mxablate::trainer
