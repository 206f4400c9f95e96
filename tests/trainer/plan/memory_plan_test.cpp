// The memory plan (docs/design.md §4, "Memory planned before launch"): every part computed by
// hand from the shapes, for the 8B shape of the reference paper at seq 8192 on 4 ranks and for
// llama-125m; which settings make a run fit; the trainer's out-of-memory line.
#include <string>

#include "catch.h"
#include "memory_plan_fixtures.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/run_fit.h"

using namespace mxablate::trainer;
using mxablate::test::eight_b;
using mxablate::test::kVocab8b;
using mxablate::contract::Device;
using mxablate::contract::GemmPrecision;
using mxablate::contract::OperandClass;
using mxablate::contract::RunConfig;
using mxablate::contract::ShardLevel;

namespace {

constexpr int64_t kVocabSmall = 4096;  // the default corpus's

// llama-125m (d 768, 12 layers, 12/12 heads, FFN 3072), one micro-batch of 8192 tokens.
RunConfig small() {
  RunConfig c;
  c.model = "llama-125m";
  c.data.seq_len = 1024;
  c.train.global_batch_tokens = 8192;
  c.device = Device::kCUDA;
  return c;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TEST_CASE("the 8B shape on 4 ranks, unsharded: 16 bytes a parameter before any activation") {
  const RunConfig c = eight_b();
  const MemoryPlan m = plan_memory(c, kVocab8b);
  // Parameters: per block q, o 4096² each, k, v 4096·1024 each, gate, up, down 4096·14336 each,
  // two norms 4096: 33554432 + 8388608 + 176160768 + 8192 = 218112000; × 32 = 6979584000, plus
  // the final norm 4096; embedding and LM head 2 · 128256 · 4096 = 1050673152.
  CHECK(m.parameters == 6979584000 + 4096 + 1050673152);  // 8030261248
  CHECK(m.weights == 4 * int64_t{8030261248});             // 32121044992
  CHECK(m.gradients == 4 * int64_t{8030261248});
  CHECK(m.optimizer == 8 * int64_t{8030261248});            // 64242089984
  // 16 B/param = 128.5 GB: more than an 80 GB GPU holds before a single activation.
  CHECK(m.weights + m.gradients + m.optimizer == 16 * int64_t{8030261248});
  // Saved per token per block: residual x and h 2·4·4096 = 32768, two rstd 8, q/k/v after RoPE
  // 2·(4096 + 1024 + 1024) = 12288, logsumexp 4·32 = 128, gate and up outputs 2·2·14336 = 57344,
  // Wgrad inputs (plain BF16: the tensors themselves) attn-norm out 8192, SDPA out 8192, MLP-norm
  // out 8192, SwiGLU out 2·14336 = 28672: 155784. After the blocks: final norm input 16384, rstd
  // 4, its BF16 output 8192 = 24580. (32 · 155784 + 24580) · 8192 = 5009668 · 8192.
  CHECK(m.tokens == 8192);
  CHECK(m.activations == int64_t{5009668} * 8192);  // 41039200256 (38.2 GiB)
  // Dgrad's BF16 copies of every weight: 2 · (32 · 218103808 + 4096 · 128256) = 2 · 7504658432.
  CHECK(m.weight_operands == 2 * int64_t{7504658432});  // 15009316864
  // One block's backward: residual gradients 2·4·4096 + SwiGLU's three 2·14336 = 118784 a token,
  // and one FP32 dW of 4096·14336: 8192 · 118784 + 4 · 58720256.
  CHECK(m.working == int64_t{8192} * 118784 + 4 * int64_t{58720256});  // 1207959552
  // Logits: 256 MiB / (128256 · 4) = 523 tokens, rounded down to a multiple of 32: 512 tokens a
  // chunk; 512 · 128256 · (2 + 4) bytes.
  CHECK(m.logits_tokens == 512);
  CHECK(m.logits == int64_t{512} * 128256 * 6);  // 394002432
  CHECK(m.communication == 512 * kMiB);
  CHECK(m.workspace == kGiB);
  // 10 % of activations + operands + working + logits = 57650479104 / 10.
  CHECK(m.fragmentation == int64_t{5765047910});
  CHECK(m.total() == int64_t{193510319718});  // 180.2 GiB
  CHECK(format_bytes(m.total()) == "180.2 GiB");
}

TEST_CASE("the 8B shape fits 80 GB with sharded gradients and activation checkpointing") {
  RunConfig c = eight_b();
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kAll, 0};
  const MemoryPlan unsharded = plan_memory(c, kVocab8b);
  // Checkpointing keeps each block's FP32 input (32 · 16384 a token), the tail (24580) and one
  // block being recomputed (155784 less its input 16384): (524288 + 24580 + 139400) · 8192.
  CHECK(unsharded.activations == int64_t{688268} * 8192);  // 5638291456
  // One block's operands 2 · 218103808 and the LM head's 2 · 525336576.
  CHECK(unsharded.weight_operands == 2 * (int64_t{218103808} + 525336576));  // 1486880768
  CHECK(unsharded.total() == int64_t{139694640332});                          // 130.1 GiB

  c.parallel.shard = ShardLevel::kGradients;
  const MemoryPlan sharded = plan_memory(c, kVocab8b);
  // Gradients: 32121044992 / 4 = 8030261248 plus the 512 MiB of staged buckets in flight;
  // AdamW 64242089984 / 4.
  CHECK(sharded.gradients == int64_t{8030261248} + 512 * kMiB);  // 8567132160
  CHECK(sharded.optimizer == int64_t{16060522496});
  // What the ranks replicate (working_copies.h): the linears' weights (the LM head's too), which
  // the GEMMs read only rounded to BF16, are BF16 working copies (2 B) beside their float32
  // masters sharded over 4 ranks (1 B); the embedding and the norms stay float32 on every rank:
  // (8030261248 - 7504658432) · 4 + 7504658432 · (2 + 1).
  CHECK(sharded.weights == int64_t{525602816} * 4 + int64_t{7504658432} * 3);  // 24616386560
  // Dgrad reads those working copies themselves: no operand copies.
  CHECK(sharded.weight_operands == 0);
  // 10 % of activations 5638291456 + working 1207959552 + logits 394002432.
  CHECK(sharded.fragmentation == int64_t{724025344});
  CHECK(sharded.total() == int64_t{58818932736});  // 54.8 GiB < 80e9 bytes (74.5 GiB)
  CHECK(sharded.total() < int64_t{80'000'000'000});

  // A quantized arm's quantizers read the float32 block weights: only the LM head (plain BF16 in
  // every arm) is kept in BF16, 525336576 · (4 - 3) bytes fewer.
  c.precision = {GemmPrecision::kMXFP4, GemmPrecision::kMXFP4, GemmPrecision::kMXFP4};
  CHECK(plan_memory(c, kVocab8b).weights == 4 * int64_t{8030261248} - 525336576);
}

TEST_CASE("the settings that make the 8B run fit are computed through the same model") {
  const int64_t gpu = 80'000'000'000;
  RunConfig c = eight_b();
  // Unsharded without checkpointing (180.2 GiB): no single change fits (sharded gradients 113.4
  // GiB, checkpointing 130.1 GiB, and seq 8192 leaves no smaller micro-batch); sharded gradients
  // with recompute does (auto: selective and 13 of 32 blocks whole, 70.5 GiB: the block linears'
  // BF16 working copies are what Dgrad reads, so a kept block holds no operand copies), sharded
  // optimizer state with it does not.
  std::vector<MemoryFix> fixes = memory_fixes(c, model_shape(c.model), kVocab8b, gpu);
  REQUIRE(fixes.size() == 1);
  CHECK(fixes[0].text() ==
        "parallel.shard: gradients and train.activation_checkpointing: auto (predicted 70.5 GiB "
        "per rank)");
  std::string key;
  const std::string why =
      memory_refusal(c, model_shape(c.model), kVocab8b, gpu, "--gpu-memory 80GB", &key);
  CHECK(key == "parallel.shard");
  CHECK(why ==
        "predicted 180.2 GiB of GPU memory per rank (weights 29.9 GiB, gradients 29.9 GiB, "
        "optimizer 59.8 GiB, activations 38.2 GiB, weight operands 14.0 GiB, working 1.1 GiB, "
        "logits 376 MiB, communication 512 MiB, workspace 1.0 GiB, fragmentation 5.4 GiB), more "
        "than the 74.5 GiB of --gpu-memory 80GB; set parallel.shard: gradients and "
        "train.activation_checkpointing: auto (predicted 70.5 GiB per rank)");

  // With checkpointing already on, sharding the gradients alone is the fix.
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kAll, 0};
  fixes = memory_fixes(c, model_shape(c.model), kVocab8b, gpu);
  REQUIRE(fixes.size() == 1);
  CHECK(fixes[0].text() == "parallel.shard: gradients (predicted 54.8 GiB per rank)");

  // With sharded gradients and no checkpointing (113.4 GiB), recompute is: auto's selective
  // recompute and 13 of 32 blocks whole (recompute_plan_test.cpp).
  c.train.activation_checkpointing = {};
  c.parallel.shard = ShardLevel::kGradients;
  fixes = memory_fixes(c, model_shape(c.model), kVocab8b, gpu);
  REQUIRE(fixes.size() == 1);
  CHECK(fixes[0].text() == "train.activation_checkpointing: auto (predicted 70.5 GiB per rank)");

  // On one rank nothing can be sharded: no setting makes 8B fit.
  c.parallel = {};
  c.train.global_batch_tokens = 8192;
  CHECK(memory_fixes(c, model_shape(c.model), kVocab8b, gpu).empty());
  memory_refusal(c, model_shape(c.model), kVocab8b, gpu, "--gpu-memory 80GB", &key);
  CHECK(key == "model");
}

TEST_CASE("llama-125m: a small run, part by part") {
  const MemoryPlan m = plan_memory(small(), kVocabSmall);
  // 12 · (4 · 768² + 3 · 768 · 3072 + 2 · 768) + 768 = 113265408; embeddings 2 · 4096 · 768.
  CHECK(m.parameters == 113265408 + 6291456);  // 119556864
  CHECK(m.weights == 478227456);
  CHECK(m.gradients == 478227456);  // one rank: nothing to shard
  CHECK(m.optimizer == 956454912);
  // Per token per block: 8·768 + 8 + 2·(3·768) + 4·12 + 4·3072 + 3·(2·768) + 2·3072 = 33848;
  // tail 6·768 + 4 = 4612: (12 · 33848 + 4612) · 8192.
  CHECK(m.activations == int64_t{410788} * 8192);  // 3365175296
  // 2 · (12 · (4 · 768² + 3 · 768 · 3072) + 768 · 4096).
  CHECK(m.weight_operands == 2 * (int64_t{12} * 9437184 + 3145728));  // 232783872
  // 8192 · (8 · 768 + 6 · 3072) + 4 · 768 · 3072.
  CHECK(m.working == int64_t{8192} * 24576 + 4 * 2359296);  // 210763776
  // 8192 · 4096 · 4 = 128 MiB of FP32 logits: within 256 MiB, so one chunk of all 8192 tokens.
  CHECK(m.logits_tokens == 8192);
  CHECK(m.logits == int64_t{8192} * 4096 * 6);
  CHECK(m.communication == 0);
  CHECK(m.fragmentation == int64_t{401004953});  // (3365175296 + 232783872 + 210763776 + 201326592) / 10
  CHECK(m.total() == int64_t{7397706137});        // 6.9 GiB
}

TEST_CASE("quantized arms keep their own BF16 copies of X, deterministic ones shared") {
  RunConfig c = small();
  const MemoryPlan bf16 = plan_memory(c, kVocabSmall);
  c.precision = {GemmPrecision::kMXFP4, GemmPrecision::kMXFP4, GemmPrecision::kMXFP4};
  c.quant.stochastic_rounding.add(OperandClass::kGrad);
  const MemoryPlan mxfp4 = plan_memory(c, kVocabSmall);
  // Q(X) down columns replaces the norms' and SwiGLU's outputs (same size), but o's copy comes on
  // top of SDPA's output, which SDPA keeps: + 2 · 768 bytes a token in each of 12 blocks.
  CHECK(mxfp4.activations - bf16.activations == int64_t{8192} * 12 * 1536);
  // The backward copies gate's dY for Dgrad and for Wgrad: + 2 · 2 · 3072 a token.
  CHECK(mxfp4.working - bf16.working == int64_t{8192} * 4 * 3072);
  CHECK(mxfp4.weight_operands == bf16.weight_operands);  // emulated: BF16 Q(W) either way

  // Stochastic rounding on X: no two layers may share a quantization. q, k, v keep three copies
  // (two more than one), gate and up two (one more): + (2 + 1) · 2 · 768 a token and block.
  c.quant.stochastic_rounding.add(OperandClass::kActivation);
  const MemoryPlan sr = plan_memory(c, kVocabSmall);
  CHECK(sr.activations - mxfp4.activations == int64_t{8192} * 12 * 3 * 1536);
}

TEST_CASE("a smaller micro-batch or checkpointing: the fewest changes, cheapest first") {
  RunConfig c = small();
  c.train.global_batch_tokens = 65536;  // one micro-batch of 65536 tokens: 32.7 GiB
  const int64_t gpu = 16 * kGiB;
  CHECK(plan_memory(c, kVocabSmall).total() == int64_t{35081229926});
  // Micro-batches of 32768 tokens need 18.1 GiB, of 16384 10.7 GiB; recomputing every block 9.7
  // GiB, and auto recomputes the fewest blocks within 95 % of the 16 GiB.
  const std::vector<MemoryFix> fixes = memory_fixes(c, model_shape(c.model), kVocabSmall, gpu);
  REQUIRE(fixes.size() == 2);
  CHECK(fixes[0].text() == "train.micro_batch_tokens: 16384 (predicted 10.7 GiB per rank)");
  CHECK(fixes[1].text() == "train.activation_checkpointing: auto (predicted 13.9 GiB per rank)");
}

TEST_CASE("the out-of-memory line: what was tried, the prediction, the setting to change") {
  const std::string old_torch =
      "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; 75.01 "
      "GiB already allocated; 1.2 GiB free; 77.0 GiB reserved in total by PyTorch)";
  const std::string new_torch =
      "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB "
      "of which 3.12 MiB is free.";
  const OutOfMemoryMessage a = parse_out_of_memory(old_torch);
  CHECK(a.tried == 2 * kGiB);
  CHECK(a.capacity == int64_t{84986665370});  // round(79.15 · 2^30)
  const OutOfMemoryMessage b = parse_out_of_memory(new_torch);
  CHECK(b.tried == 20 * kMiB);
  CHECK(b.capacity == int64_t{84932978278});  // round(79.10 · 2^30)
  const OutOfMemoryMessage none = parse_out_of_memory("CUDA error: an illegal memory access");
  CHECK_FALSE(none.tried);
  CHECK_FALSE(none.capacity);

  CHECK(out_of_memory_line(old_torch, nullptr, 0) ==
        "out of GPU memory: tried to allocate 2.0 GiB on a GPU of 79.2 GiB; no prediction (the "
        "run was not set up yet): see `mxablate plan` for the predicted memory per rank");
  RunConfig c = eight_b();
  c.train.activation_checkpointing = {mxablate::contract::Recompute::Mode::kAll, 0};
  const std::string line = out_of_memory_line(old_torch, &c, kVocab8b);
  CHECK(starts_with(line, "out of GPU memory: tried to allocate 2.0 GiB on a GPU of 79.2 GiB; "
                          "predicted 130.1 GiB per rank (weights 29.9 GiB, "));
  // Sharding the optimizer's state now fits (the block linears' masters are sharded with it).
  CHECK(ends_with(line, "; set parallel.shard: optimizer (predicted 76.7 GiB per rank)"));
  CHECK(line.find('\n') == std::string::npos);
}
