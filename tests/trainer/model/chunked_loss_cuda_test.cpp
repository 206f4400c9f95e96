// The chunked LM head and loss on CUDA (chunked_loss.h, docs/design.md §4): BF16 hidden rows (the
// fused final norm's output), the BF16 LM-head GEMM and the fused cross-entropy kernel, chunked
// against whole, and repeated bit for bit (exact resume relies on deterministic kernels).
//
// Tolerances: the loss as on the CPU (its math is float32), relative 1e-5. The gradients are
// BF16 here: the logits' gradient comes back in BF16, so the other rounding of its scale (see
// chunked_loss_test.cpp) can flip an element's BF16 rounding (2^-8 of it): d hidden normwise
// about 1e-3 (bound 1e-2). dW is each chunk's BF16 GEMM result (rounded to 2^-9 of the chunk's
// sum) summed in float32, against the whole sum rounded once: 2^-9 of the sum of the chunks'
// magnitudes, a few 1e-3 normwise (bound 2e-2).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <memory>

#include "catch.h"
#include "mxablate/trainer/model/chunked_loss.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/model/model.h"
#include "unfused_ops.h"

using namespace mxablate::trainer;
using mxablate::test::rel_error;

namespace {

struct CudaHeadPass {
  at::Tensor loss, dhidden, dweight;
};

CudaHeadPass cuda_head_pass(int64_t chunk) {
  const at::Device cuda(at::kCUDA, 0);
  const int64_t rows = 300, d = 128, vocab = 1000;
  at::Generator gen = at::detail::createCPUGenerator(13);
  MXLinear head(d, vocab, /*layer=*/0, plain_bf16_plan(), std::make_shared<QuantSession>(), cuda);
  const at::Tensor w0 = at::randn({vocab, d}, gen) * 0.1;
  {
    torch::NoGradGuard no_grad;
    head->weight.copy_(w0.to(cuda));
  }
  const at::Tensor hidden = at::randn({rows, d}, gen).to(cuda).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor targets = at::randint(0, vocab, {rows}, gen).to(cuda);
  const at::Tensor loss = chunked_lm_head_loss(hidden, head, targets, chunk, /*fused=*/true);
  loss.backward();
  return {loss.detach().cpu(), hidden.grad().cpu(), head->weight.grad().cpu()};
}

}  // namespace

TEST_CASE("On CUDA the chunked LM head and fused loss give the whole loss and gradients",
          "[trainer][chunked_loss][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the BF16 GEMM and fused loss cannot run here");
  const CudaHeadPass whole = cuda_head_pass(300);
  for (const int64_t chunk : {int64_t{7}, int64_t{64}, int64_t{299}}) {
    INFO("chunk " << chunk);
    const CudaHeadPass chunked = cuda_head_pass(chunk);
    CHECK(chunked.dhidden.scalar_type() == at::kBFloat16);
    CHECK(chunked.dweight.scalar_type() == at::kFloat);
    CHECK(chunked.loss.item<double>() == Approx(whole.loss.item<double>()).epsilon(1e-5));
    INFO("d hidden " << rel_error(chunked.dhidden, whole.dhidden) << ", dW "
                     << rel_error(chunked.dweight, whole.dweight));
    CHECK(rel_error(chunked.dhidden, whole.dhidden) < 1e-2);
    CHECK(rel_error(chunked.dweight, whole.dweight) < 2e-2);
    const CudaHeadPass again = cuda_head_pass(chunk);
    CHECK(at::equal(again.loss, chunked.loss));
    CHECK(at::equal(again.dhidden, chunked.dhidden));
    CHECK(at::equal(again.dweight, chunked.dweight));
  }
}

TEST_CASE("On CUDA the fused model's chunked loss gives the whole loss", "[trainer][chunked_loss][cuda]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device: the fused model cannot run here");
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = 96;
  o.init_seed = 5;
  o.device = at::Device(at::kCUDA, 0);
  at::Generator gen = at::detail::createCPUGenerator(9);
  const at::Tensor tokens = at::randint(0, 96, {2, 32}, gen).to(o.device);
  const at::Tensor targets = at::randint(0, 96, {2, 32}, gen).to(o.device);
  LlamaModel whole(o), chunked(o);
  const at::Tensor lw = whole->loss(tokens, targets);
  lw.backward();
  const at::Tensor lc = chunked->loss(tokens, targets, 10);
  lc.backward();
  CHECK(lc.item<double>() == Approx(lw.item<double>()).epsilon(1e-5));
  const auto pw = whole->named_parameters(), pc = chunked->named_parameters();
  for (const auto& item : pw) {
    INFO(item.key() << ": " << rel_error(pc[item.key()].grad(), item.value().grad()));
    CHECK(rel_error(pc[item.key()].grad(), item.value().grad()) < 2e-2);
  }
}
