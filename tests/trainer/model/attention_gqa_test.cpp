// Grouped-query attention (docs/design.md §4): each K/V head serves n_heads / n_kv_heads
// consecutive query heads. Whatever the kernel (the CPU reference repeats K and V; CUDA with torch
// >= 2.5 passes them unrepeated with enable_gqa), the result must equal multi-head attention whose
// K/V weights are the grouped ones repeated head by head — which also pins the head order.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <memory>

#include "catch.h"
#include "mxablate/trainer/model/model.h"
#include "tensor_test_util.h"

using namespace mxablate::trainer;
using mxablate::test::rel_err;

namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kDModel = 64, kBatch = 2, kTokens = 24;

ModelShape shape(int64_t kv_heads) {
  return shape_from_dims("gqa-test", kDModel, 1, kHeads, kv_heads, 128, 10000.0, 1e-5);
}

Attention make_attention(int64_t kv_heads, at::Device device) {
  const ModelShape s = shape(kv_heads);
  auto rope = std::make_shared<RotaryEmbedding>(s.head_dim(), s.rope_theta);
  return Attention(s, 0, plain_bf16_plan(), std::make_shared<QuantSession>(), rope, device);
}

// (kv_heads * head_dim, d) -> (heads * head_dim, d): K/V head j's rows repeated for each query
// head it serves (query head h uses K/V head h / group).
at::Tensor repeat_heads(const at::Tensor& w, int64_t kv_heads, int64_t group) {
  const int64_t head_dim = w.size(0) / kv_heads;
  return w.view({kv_heads, head_dim, w.size(1)}).repeat_interleave(group, 0).reshape({-1, w.size(1)});
}

// Output of grouped attention and of its multi-head twin on `device`, as float32 on the CPU.
std::pair<at::Tensor, at::Tensor> grouped_and_repeated(at::Device device) {
  at::Generator gen = at::detail::createCPUGenerator(7);
  Attention grouped = make_attention(kKvHeads, at::kCPU);
  Attention repeated = make_attention(kHeads, at::kCPU);
  {
    torch::NoGradGuard no_grad;
    for (MXLinear* l : {&grouped->q, &grouped->k, &grouped->v, &grouped->o})
      (*l)->weight.normal_(0.0, 0.1, gen);
    repeated->q->weight.copy_(grouped->q->weight);
    repeated->o->weight.copy_(grouped->o->weight);
    repeated->k->weight.copy_(repeat_heads(grouped->k->weight, kKvHeads, kHeads / kKvHeads));
    repeated->v->weight.copy_(repeat_heads(grouped->v->weight, kKvHeads, kHeads / kKvHeads));
  }
  grouped->to(device);
  repeated->to(device);
  const at::Tensor x = at::randn({kBatch, kTokens, kDModel}, gen).to(device);
  torch::NoGradGuard no_grad;
  return {grouped->forward(x).to(at::kFloat).cpu(), repeated->forward(x).to(at::kFloat).cpu()};
}

}  // namespace

TEST_CASE("Grouped-query attention equals multi-head attention with repeated K/V heads (CPU)",
          "[trainer][model][gqa]") {
  const auto [grouped, repeated] = grouped_and_repeated(at::kCPU);
  CHECK(grouped.sizes() == at::IntArrayRef({kBatch, kTokens, kDModel}));
  CHECK(rel_err(grouped, repeated) < 1e-6);
}

TEST_CASE("Grouped-query attention on CUDA: the same as repeated heads, and as the CPU reference",
          "[trainer][model][gqa][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the GPU attention path cannot run here");
  const auto [grouped, repeated] = grouped_and_repeated(at::Device(at::kCUDA, 0));
  // The same BF16 kernel family either way; a head mapped to the wrong K/V head differs by O(1).
  CHECK(rel_err(grouped, repeated) < 1e-2);
  const auto [reference, unused] = grouped_and_repeated(at::kCPU);
  (void)unused;
  CHECK(rel_err(grouped, reference) < 2e-2);  // BF16 operands, BF16 output on CUDA
}
