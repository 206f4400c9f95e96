// The loss without the logits (chunked_loss.h, docs/design.md §4): the LM head and the
// cross-entropy taken a chunk of tokens at a time give the whole expression's loss and gradients
// (d hidden, the LM head's dW, and through them every parameter's) up to float32 summation order;
// a micro-batch within one chunk is the whole expression, bit for bit.
//
// Tolerances (a wiring mistake — a chunk's gradient scaled by the wrong share, a chunk missed or
// counted twice, the wrong plan — is off by order one):
//   - loss, relative 1e-6: each chunk's mean times its rows, summed over a handful of chunks, then
//     divided, against one mean: a few float32 roundings (6e-8 each) more.
//   - d hidden, normwise 1e-5: each row's gradient is the same product; only the scale of the
//     logits' gradient is rounded differently (upstream · n/rows / n against upstream / rows: two
//     roundings), and a GEMM may block rows of another count differently.
//   - dW, normwise 1e-5: each entry sums its rows' terms chunk by chunk instead of in one GEMM
//     reduction; reassociating a float32 sum of ≤ 64 terms moves it by ≤ 64 · 6e-8 of the sum of
//     their magnitudes (4e-6).
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <memory>
#include <string>
#include <vector>

#include "catch.h"
#include "mxablate/trainer/model/chunked_loss.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/loss_chunks.h"
#include "mxablate/trainer/model/model.h"
#include "unfused_ops.h"

using namespace mxablate;
using namespace mxablate::trainer;
using mxablate::test::rel_error;

namespace {

constexpr int64_t kRows = 70, kDModel = 64, kVocab = 96;

struct HeadPass {
  at::Tensor loss, dhidden, dweight;
};

// One forward and backward of the LM head and the loss, `chunk` rows at a time.
HeadPass head_pass(int64_t chunk, bool fused, const LinearPlan& plan = plain_bf16_plan(),
                   const std::shared_ptr<QuantSession>& session = std::make_shared<QuantSession>()) {
  at::Generator gen = at::detail::createCPUGenerator(11);
  MXLinear head(kDModel, kVocab, /*layer=*/0, plan, session);
  {
    torch::NoGradGuard no_grad;
    head->weight.normal_(0.0, 0.2, gen);
  }
  const at::Tensor hidden = at::randn({kRows, kDModel}, gen).requires_grad_(true);
  const at::Tensor targets = at::randint(0, kVocab, {kRows}, gen);
  const at::Tensor loss = chunked_lm_head_loss(hidden, head, targets, chunk, fused);
  loss.backward();
  return {loss.detach(), hidden.grad(), head->weight.grad()};
}

void check_close(const HeadPass& chunked, const HeadPass& whole) {
  CHECK(chunked.loss.item<double>() == Approx(whole.loss.item<double>()).epsilon(1e-6));
  INFO("d hidden: " << rel_error(chunked.dhidden, whole.dhidden) << ", dW: "
                    << rel_error(chunked.dweight, whole.dweight));
  CHECK(rel_error(chunked.dhidden, whole.dhidden) < 1e-5);
  CHECK(rel_error(chunked.dweight, whole.dweight) < 1e-5);
}

ModelOptions smoke_options(FusedOps fused) {
  ModelOptions o;
  o.shape = *find_model_preset("smoke");
  o.vocab_size = kVocab;
  o.init_seed = 5;
  o.fused_ops = fused;
  return o;
}

}  // namespace

TEST_CASE("The chunk rule takes fitting logits whole and cuts the 8B shape's", "[trainer][chunked_loss]") {
  CHECK(logits_chunk_tokens(64, kVocab) == 64);
  CHECK(logits_chunk_tokens(8192, 4096) == 8192);  // 128 MiB of float32 logits: whole
  // Llama 3's 128256-token vocabulary at seq 8192: 4 GiB whole; 523 tokens fit 256 MiB, and a
  // chunk is a whole number of 32-token blocks (a block-format Wgrad of the LM head): 512.
  CHECK(logits_chunk_tokens(8192, 128256) == 512);
  CHECK(523 * 128256 * 4 <= kLogitsChunkBytes);
  CHECK(524 * 128256 * 4 > kLogitsChunkBytes);
  // A vocabulary so large that fewer than 32 tokens fit: no rounding to 0.
  CHECK(logits_chunk_tokens(64, int64_t{4} << 20) == 16);
}

TEST_CASE("Chunked, the LM head and loss give the whole expression's loss and gradients",
          "[trainer][chunked_loss]") {
  for (const bool fused : {false, true}) {  // the unfused ATen loss; the fused op's CPU reference
    INFO("fused " << fused);
    const HeadPass whole = head_pass(kRows, fused);
    for (const int64_t chunk : {int64_t{1}, int64_t{16}, int64_t{35}, kRows - 1}) {
      INFO("chunk " << chunk);
      check_close(head_pass(chunk, fused), whole);
    }
    // One chunk (any chunk_tokens ≥ rows) is the whole expression itself.
    const HeadPass one = head_pass(kRows + 5, fused);
    CHECK(at::equal(one.loss, whole.loss));
    CHECK(at::equal(one.dhidden, whole.dhidden));
    CHECK(at::equal(one.dweight, whole.dweight));
  }
}

TEST_CASE("The chunks run the LM head's own plan", "[trainer][chunked_loss]") {
  // MXFP4 Fprop quantizes X and W along d_model, row by row: cutting the rows into chunks changes
  // no quantized value, so the chunked loss is the whole one's; a chunk run in plain BF16 would
  // be off by the quantization error (a few percent).
  contract::LayerSettings s;
  s.precision.fprop = contract::GemmPrecision::kMXFP4;
  const LinearPlan mxfp4 = make_linear_plan(s);
  const HeadPass whole = head_pass(kRows, false, mxfp4);
  const HeadPass chunked = head_pass(16, false, mxfp4);
  CHECK(chunked.loss.item<double>() == Approx(whole.loss.item<double>()).epsilon(1e-6));
  CHECK(rel_error(chunked.dhidden, whole.dhidden) < 1e-5);
  CHECK(rel_error(chunked.dweight, whole.dweight) < 1e-5);
  CHECK(std::abs(head_pass(16, false).loss.item<double>() - whole.loss.item<double>()) > 1e-4);
}

TEST_CASE("Chunked, a quantized LM head's telemetry is one chunk's, complete", "[trainer][chunked_loss]") {
  // Fprop and Dgrad in MXFP4 (an MXFP4 Wgrad blocks along the tokens: 70 rows are no whole
  // blocks of 32, and chunks of 16 would not be either).
  contract::LayerSettings s;
  s.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4,
                 contract::GemmPrecision::kBF16};
  const LinearPlan mxfp4 = make_linear_plan(s);
  const auto records = [&](int64_t chunk) {
    auto session = std::make_shared<QuantSession>();
    session->collect_telemetry = true;
    head_pass(chunk, false, mxfp4, session);
    CHECK(session->collect_telemetry);  // restored
    std::vector<std::pair<int, int>> keys;
    for (const QuantSession::Record& r : session->take_records())
      keys.emplace_back(static_cast<int>(r.gemm), static_cast<int>(r.operand));
    return keys;
  };
  const auto whole = records(kRows);
  CHECK(whole.size() == 4);  // X and W for Fprop, dY and W for Dgrad
  CHECK(records(16) == whole);
}

TEST_CASE("The model's chunked loss gives the whole loss and every parameter's gradient",
          "[trainer][chunked_loss]") {
  at::Generator gen = at::detail::createCPUGenerator(9);
  const at::Tensor tokens = at::randint(0, kVocab, {2, 32}, gen);
  const at::Tensor targets = at::randint(0, kVocab, {2, 32}, gen);
  for (const FusedOps fused : {FusedOps::kOnCuda, FusedOps::kAlways}) {
    LlamaModel whole(smoke_options(fused)), chunked(smoke_options(fused));
    // The rule takes these 64 tokens × 96 whole: loss() is the whole expression.
    const at::Tensor lw = whole->loss(tokens, targets);
    lw.backward();
    const at::Tensor lc = chunked->loss(tokens, targets, 10);
    lc.backward();
    CHECK(lc.item<double>() == Approx(lw.item<double>()).epsilon(1e-6));
    const auto pw = whole->named_parameters(), pc = chunked->named_parameters();
    for (const auto& item : pw) {
      INFO(item.key() << ": " << rel_error(pc[item.key()].grad(), item.value().grad()));
      // Upstream of the LM head the gradients carry d hidden's differences on (1e-5) through
      // the blocks' float32 GEMMs: the same order.
      CHECK(rel_error(pc[item.key()].grad(), item.value().grad()) < 1e-4);
    }
    // Evaluation (no grad) takes the same chunks, without an autograd node.
    torch::NoGradGuard no_grad;
    CHECK(chunked->loss(tokens, targets, 10).item<double>() == Approx(lw.item<double>()).epsilon(1e-6));
    CHECK(at::equal(whole->loss(tokens, targets), lw.detach()));
  }
}
