#include "mxablate/trainer/model/model.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/utils.h>

#include <cmath>

#include "mxablate/trainer/model/block_checkpoint.h"
#include "mxablate/trainer/model/chunked_loss.h"
#include "mxablate/trainer/plan/loss_chunks.h"
#include "mxablate/trainer/torch/libtorch_compat.h"

namespace mxablate::trainer {


RMSNormImpl::RMSNormImpl(int64_t dim, double eps, const at::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}, options));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  if (use_fused(fused_ops_, x.device())) return fused_rms_norm(x, weight, eps_, gemm_input_dtype(x.device()));
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight;
}

ResidualNormed RMSNormImpl::forward_residual(const at::Tensor& x, const at::Tensor& branch) {
  if (use_fused(fused_ops_, x.device()))
    return fused_residual_rms_norm(x, branch, weight, eps_, gemm_input_dtype(x.device()));
  const at::Tensor stream = branch.defined() ? x + branch : x;
  return {stream, forward(stream)};
}

at::Tensor RotaryEmbedding::apply(const at::Tensor& x) {
  const int64_t t = x.size(2);
  auto key = std::make_pair(t, x.device().str());
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    // Frequencies in float64 on the CPU, then float32 on the device: identical on every device.
    const int64_t half = head_dim_ / 2;
    const at::Tensor inv_freq =
        at::pow(theta_, -at::arange(0, half, at::kDouble) * 2.0 / static_cast<double>(head_dim_));
    const at::Tensor angles = at::outer(at::arange(0, t, at::kDouble), inv_freq);
    it = cache_.emplace(key, std::make_pair(angles.cos().to(at::kFloat).to(x.device()),
                                            angles.sin().to(at::kFloat).to(x.device())))
             .first;
  }
  const at::Tensor& cos = it->second.first;
  const at::Tensor& sin = it->second.second;
  if (use_fused(fused_ops_, x.device())) return fused_rope(x, cos, sin);
  const int64_t half = head_dim_ / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half);
  const at::Tensor x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

AttentionImpl::AttentionImpl(const ModelShape& s, int first_layer, const LinearPlan& plan,
                             const std::shared_ptr<QuantSession>& session,
                             std::shared_ptr<RotaryEmbedding> rope, at::Device device)
    : n_heads_(s.n_heads), n_kv_heads_(s.n_kv_heads), head_dim_(s.head_dim()),
      rope_(std::move(rope)) {
  q = register_module("q", MXLinear(s.d_model, s.d_model, first_layer + 0, plan, session, device));
  k = register_module("k", MXLinear(s.d_model, s.kv_dim(), first_layer + 1, plan, session, device));
  v = register_module("v", MXLinear(s.d_model, s.kv_dim(), first_layer + 2, plan, session, device));
  o = register_module("o", MXLinear(s.d_model, s.d_model, first_layer + 3, plan, session, device));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, std::shared_ptr<RebuiltInput> rebuilt) {
  const int64_t b = x.size(0), t = x.size(1);
  const auto heads = [&](const at::Tensor& y, int64_t n) {
    return y.view({b, t, n, head_dim_}).transpose(1, 2);  // (B, n, T, D)
  };
  const at::Tensor qh = rope_->apply(heads(q->forward(x, rebuilt), n_heads_));
  const at::Tensor kh = rope_->apply(heads(k->forward(x, rebuilt), n_kv_heads_));
  const at::Tensor vh = heads(v->forward(x, rebuilt), n_kv_heads_);
  // Grouped-query attention: each K/V head serves n_heads / n_kv_heads query heads; the compat
  // header repeats them only where the kernel cannot take them as they are.
  const at::Tensor out = compat::causal_attention_bf16(qh, kh, vh);
  return o->forward(out.transpose(1, 2).reshape({b, t, n_heads_ * head_dim_}));
}

SwiGLUImpl::SwiGLUImpl(const ModelShape& s, int first_layer, const LinearPlan& plan,
                       const std::shared_ptr<QuantSession>& session, at::Device device) {
  gate = register_module("gate", MXLinear(s.d_model, s.ffn_hidden, first_layer + 0, plan, session, device));
  up = register_module("up", MXLinear(s.d_model, s.ffn_hidden, first_layer + 1, plan, session, device));
  down = register_module("down", MXLinear(s.ffn_hidden, s.d_model, first_layer + 2, plan, session, device));
}

at::Tensor SwiGLUImpl::forward(const at::Tensor& x, std::shared_ptr<RebuiltInput> rebuilt) {
  const at::Tensor g = gate->forward(x, rebuilt);
  const at::Tensor u = up->forward(x, rebuilt);
  // Selective recompute: h from g and u, which SwiGLU's backward keeps anyway.
  const bool rebuild_h = rebuilt && at::GradMode::is_enabled();
  std::shared_ptr<RebuiltInput> rebuilt_h;
  if (rebuild_h) {
    auto self = std::static_pointer_cast<const SwiGLUImpl>(shared_from_this());
    rebuilt_h = std::make_shared<RebuiltInput>(
        std::vector<at::Tensor>{g, u}, [self](const std::vector<at::Tensor>& gu) { return self->product(gu[0], gu[1]); });
  }
  return down->forward(product(g, u, made_ahead(x, rebuild_h)), std::move(rebuilt_h));
}

at::Tensor SwiGLUImpl::product(const at::Tensor& g, const at::Tensor& u,
                               std::shared_ptr<const SwiGluMadeAhead> ahead) const {
  if (!use_fused(fused_ops_, g.device())) return at::silu(g) * u;
  return fused_swiglu(g, u, gemm_input_dtype(g.device()), std::move(ahead));
}

std::shared_ptr<const SwiGluMadeAhead> SwiGLUImpl::made_ahead(const at::Tensor& x, bool h_rebuilt) const {
  if (!use_fused(fused_ops_, x.device())) return nullptr;
  const std::shared_ptr<QuantSession>& session = gate->state()->session;
  if (!session || !session->fused_producers) return nullptr;
  // As MXLinear decides what its backward wants (want_dx, want_dw): from the grad mode and what
  // requires a gradient. gate and up read x; down reads h, which requires one when x does.
  const bool grad = at::GradMode::is_enabled();
  const bool want_dx = grad && x.requires_grad();
  auto ahead = std::make_shared<SwiGluMadeAhead>();
  ahead->session = session;
  ahead->h = input_made_ahead(*down->state(), grad && down->weight.requires_grad() && !h_rebuilt);
  ahead->dg = output_grad_made_ahead(*gate->state(), want_dx, grad && gate->weight.requires_grad());
  ahead->du = output_grad_made_ahead(*up->state(), want_dx, grad && up->weight.requires_grad());
  if (!ahead->any()) return nullptr;
  return ahead;
}

BlockImpl::BlockImpl(const ModelShape& s, int index, const LinearPlan& plan,
                     const std::shared_ptr<QuantSession>& session,
                     std::shared_ptr<RotaryEmbedding> rope, at::Device device, bool checkpointed,
                     bool selective)
    : session_(session), checkpointed_(checkpointed), selective_(selective) {
  const int first = index * 7;  // q, k, v, o, gate, up, down (model_presets.h linear_layers)
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  attn_norm = register_module("attn_norm", RMSNorm(s.d_model, s.norm_eps, f32));
  attn = register_module("attn", Attention(s, first, plan, session, std::move(rope), device));
  mlp_norm = register_module("mlp_norm", RMSNorm(s.d_model, s.norm_eps, f32));
  mlp = register_module("mlp", SwiGLU(s, first + 4, plan, session, device));
}

at::Tensor BlockImpl::forward(const at::Tensor& x) {
  if (!checkpointed_) return compute(x);
  // The autograd node keeps the block alive until its backward has recomputed it.
  auto self = std::static_pointer_cast<BlockImpl>(shared_from_this());
  return checkpointed([self](const at::Tensor& in) { return self->compute(in); }, x, parameters(),
                      session_);
}

at::Tensor BlockImpl::compute(const at::Tensor& x) {
  // The residual stream goes through the norms, which on the fused path add the attention's
  // output into it and sum its gradients (docs/design.md §4, "The residual stream's glue"): the
  // same arithmetic as x + attn(norm(x)), then h + mlp(norm(h)).
  // Selective recompute makes the norms' outputs again from the streams, which the norms keep.
  const ResidualNormed in = attn_norm->forward_residual(x, at::Tensor());
  const ResidualNormed h =
      mlp_norm->forward_residual(in.stream, attn->forward(in.normed, rebuilt_norm(attn_norm, in.stream)));
  const at::Tensor out = mlp->forward(h.normed, rebuilt_norm(mlp_norm, h.stream));
  return use_fused(fused_ops_, x.device()) ? fused_residual_add(h.stream, out) : h.stream + out;
}

std::shared_ptr<RebuiltInput> BlockImpl::rebuilt_norm(const RMSNorm& norm, const at::Tensor& stream) const {
  // Without grad nothing is kept for a backward, so there is nothing to spare.
  if (!selective_ || !at::GradMode::is_enabled()) return nullptr;
  // norm(stream) gives forward_residual's `normed` bit for bit, fused or not (fused_ops.h).
  return std::make_shared<RebuiltInput>(std::vector<at::Tensor>{stream},
                                        [impl = norm.ptr()](const std::vector<at::Tensor>& s) { return impl->forward(s[0]); });
}

void BlockImpl::set_fused_ops(FusedOps mode) {
  fused_ops_ = mode;
  attn_norm->set_fused_ops(mode);
  mlp_norm->set_fused_ops(mode);
  mlp->set_fused_ops(mode);
}

LlamaModelImpl::LlamaModelImpl(const ModelOptions& options) : options_(options) {
  const ModelShape& s = options.shape;
  TORCH_CHECK(s.n_heads % s.n_kv_heads == 0 && s.d_model % s.n_heads == 0 && s.head_dim() % 2 == 0,
              "model ", s.name, ": inconsistent head counts");
  TORCH_CHECK(options.vocab_size > 0, "model ", s.name, ": vocabulary size must be > 0");
  // Built on the CPU (and initialized there), then moved; or built on "meta" for shape checks.
  const at::Device build = options.device.is_meta() ? at::Device(at::kMeta) : at::Device(at::kCPU);
  const at::TensorOptions f32 = at::TensorOptions(at::kFloat).device(build);
  auto rope = std::make_shared<RotaryEmbedding>(s.head_dim(), s.rope_theta);
  embedding = register_parameter("embedding", at::empty({options.vocab_size, s.d_model}, f32));
  blocks = register_module("blocks", torch::nn::ModuleList());
  const LinearPlan bf16 = plain_bf16_plan();
  rope->set_fused_ops(options.fused_ops);
  for (int b = 0; b < s.n_layers; ++b) {
    // A block recomputed whole keeps nothing of its norm outputs and SwiGLU product: selective
    // recompute is for the blocks kept.
    const bool whole = b < options.recomputed_blocks;
    Block block(s, b, bf16, options.session, rope, build, whole, options.selective_recompute && !whole);
    block->set_fused_ops(options.fused_ops);
    blocks->push_back(block);
  }
  final_norm = register_module("final_norm", RMSNorm(s.d_model, s.norm_eps, f32));
  final_norm->set_fused_ops(options.fused_ops);
  lm_head = register_module("lm_head", MXLinear(s.d_model, options.vocab_size,
                                                static_cast<int>(s.n_layers * 7), bf16,
                                                options.session, build));
  if (!options.layer_plans.empty()) set_layer_plans(options.layer_plans);
  if (!options.device.is_meta()) {
    initialize(options.init_seed);
    to(options.device);
  }
  // FP8 delayed scaling's history (fp8_history.h) is the model's state too: a buffer, so that
  // checkpoints save and restore it with the weights (docs/design.md §4). Registered after the
  // move: it was made on the run's device, and the quantizers hold its address.
  if (options.session && options.session->fp8_history)
    register_buffer("fp8_amax_history", options.session->fp8_history->history());
}

void LlamaModelImpl::initialize(uint64_t seed) {
  // One CPU generator drawn in parameter order: the same weights on every device and thread
  // count. Residual-branch outputs (attn.o, mlp.down) are scaled down by sqrt(2 * layers) so the
  // residual stream's variance does not grow with depth (GPT-2's rule).
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double std = 0.02;
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(options_.shape.n_layers));
  torch::NoGradGuard no_grad;
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    at::Tensor p = item.value();
    if (p.dim() == 1) continue;  // norm weights stay at one
    const bool residual = name.find("attn.o.") != std::string::npos ||
                          name.find("mlp.down.") != std::string::npos;
    p.normal_(0.0, residual ? residual_std : std, gen);
  }
}

at::Tensor LlamaModelImpl::final_hidden(const at::Tensor& tokens) {
  at::Tensor h = at::embedding(embedding, tokens);
  for (const auto& block : *blocks) h = block->as<BlockImpl>()->forward(h);
  return final_norm->forward(h);
}

at::Tensor LlamaModelImpl::head_output(const at::Tensor& tokens) { return lm_head->forward(final_hidden(tokens)); }

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens) {
  // The LM head's GEMM gives BF16 on CUDA; logits and the loss over them stay float32
  // (docs/design.md §4). On the CPU they are float32 already and this is no copy.
  return head_output(tokens).to(at::kFloat);
}

at::Tensor LlamaModelImpl::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  return loss(tokens, targets, logits_chunk_tokens(tokens.numel(), options_.vocab_size));
}

at::Tensor LlamaModelImpl::loss(const at::Tensor& tokens, const at::Tensor& targets, int64_t chunk_tokens) {
  const at::Tensor h = final_hidden(tokens);
  // Taken chunk_tokens tokens at a time (docs/design.md §4, "The loss without the logits"); a
  // micro-batch within one chunk is the whole expression, bit for bit.
  return chunked_lm_head_loss(h.reshape({-1, h.size(-1)}), lm_head, targets.reshape({-1}), chunk_tokens,
                              use_fused(options_.fused_ops, h.device()));
}

int64_t LlamaModelImpl::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

std::vector<MXLinear> LlamaModelImpl::linears() const {
  std::vector<MXLinear> out;
  for (const auto& block : *blocks) {
    const auto* b = block->as<BlockImpl>();
    for (const MXLinear& l : {b->attn->q, b->attn->k, b->attn->v, b->attn->o, b->mlp->gate,
                              b->mlp->up, b->mlp->down})
      out.push_back(l);
  }
  out.push_back(lm_head);
  return out;
}

void LlamaModelImpl::set_layer_plans(const std::vector<LinearPlan>& plans) {
  const std::vector<MXLinear> all = linears();
  TORCH_CHECK(plans.size() == all.size(), "model ", options_.shape.name, ": ", plans.size(),
              " layer plans for ", all.size(), " linear layers");
  for (size_t i = 0; i < all.size(); ++i) {
    MXLinear layer = all[i];
    layer->set_plan(plans[i]);
  }
}

}  // namespace mxablate::trainer
