// Which blocks recompute (trainer/plan recompute_plan.h; docs/design.md §4, "Recompute chosen by
// the memory plan"): the memory plan of every count between none and all, `auto`'s choice and its
// refusal, and the FLOPs recompute adds.
#include <chrono>

#include "catch.h"
#include "memory_plan_fixtures.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/recompute_plan.h"
#include "mxablate/trainer/plan/run_fit.h"

using namespace mxablate::trainer;
using mxablate::contract::Device;
using mxablate::contract::ModelChoice;
using mxablate::contract::ModelDims;
using mxablate::contract::Recompute;
using mxablate::contract::RunConfig;
using mxablate::contract::ShardLevel;
using Mode = Recompute::Mode;

namespace {

using mxablate::test::kVocab8b;

// The 8B shape at seq 8192 on 4 ranks (memory_plan_fixtures.h) with sharded gradients.
RunConfig eight_b() {
  RunConfig c = mxablate::test::eight_b();
  c.parallel.shard = ShardLevel::kGradients;
  return c;
}

MemoryPlan plan_with(RunConfig c, Recompute r) {
  c.train.activation_checkpointing = r;
  return plan_memory(c, kVocab8b);
}

}  // namespace

TEST_CASE("recompute settings count blocks: false none, true all, N the first N, auto all until resolved") {
  CHECK(recomputed_blocks({}, 32) == 0);
  CHECK(recomputed_blocks({Mode::kAll, 0}, 32) == 32);
  CHECK(recomputed_blocks({Mode::kFirstBlocks, 5}, 32) == 5);
  CHECK(recomputed_blocks({Mode::kAuto, 0}, 32) == 32);
  CHECK(recompute_of_blocks(0, 32) == Recompute{});
  CHECK(recompute_of_blocks(5, 32) == Recompute{Mode::kFirstBlocks, 5});
  CHECK(recompute_of_blocks(32, 32) == Recompute{Mode::kAll, 0});
  // Selective recompute counts its whole blocks alike.
  CHECK(recomputed_blocks({Mode::kNone, 0, true}, 32) == 0);
  CHECK(recomputed_blocks({Mode::kFirstBlocks, 5, true}, 32) == 5);
  CHECK(selective_recompute({Mode::kNone, 0, true}));
  CHECK_FALSE(selective_recompute({Mode::kAuto, 0}));  // its least: every block whole
  CHECK_FALSE(selective_recompute({Mode::kAll, 0}));
  CHECK_FALSE(selective_recompute({}));
  CHECK(recompute_of_blocks(0, 32, true) == Recompute{Mode::kNone, 0, true});
  CHECK(recompute_of_blocks(5, 32, true) == Recompute{Mode::kFirstBlocks, 5, true});
  CHECK(recompute_of_blocks(32, 32, true) == Recompute{Mode::kAll, 0});  // no block left to be selective
}

TEST_CASE("selective recompute keeps neither norm output nor SwiGLU's product, and the largest, made again, joins the working set") {
  // Per token and block at the 8B shape (d 4096, ffn 14336): the attention norm's and the MLP
  // norm's BF16 outputs (8192 bytes each) and SwiGLU's product (28672) are no longer saved.
  const RunConfig c = eight_b();
  const Recompute selective{Mode::kNone, 0, true};
  const MemoryPlan none = plan_with(c, {});
  const MemoryPlan sel = plan_with(c, selective);
  CHECK(none.activations - sel.activations == int64_t{32} * 45056 * 8192);
  CHECK(sel.working - none.working == int64_t{28672} * 8192);  // h made again (a plain BF16 Wgrad reads it)
  CHECK(sel.weight_operands == none.weight_operands);
  CHECK(sel.total() < none.total());
  // MXFP4 with deterministic rounding: the same three are gone (q, k, v shared one Q(X), as did
  // gate and up); the backward holds h and its Q(h).
  RunConfig mx = c;
  mx.precision = {mxablate::contract::GemmPrecision::kMXFP4, mxablate::contract::GemmPrecision::kMXFP4,
                  mxablate::contract::GemmPrecision::kMXFP4};
  CHECK(plan_with(mx, {}).activations - plan_with(mx, selective).activations == int64_t{32} * 45056 * 8192);
  CHECK(plan_with(mx, selective).working - plan_with(mx, {}).working == int64_t{2} * 28672 * 8192);
  // Under OCC every linear keeps its clamped X: nothing is made again, nothing spared.
  mx.quant.occ = mxablate::contract::OccConfig{0.99};
  CHECK(plan_with(mx, {}).activations == plan_with(mx, selective).activations);
  // With whole blocks besides, each block recomputed whole spares its (smaller) saved tensors.
  CHECK(plan_with(c, {Mode::kFirstBlocks, 8, true}).total() < plan_with(c, {Mode::kFirstBlocks, 8}).total());
  CHECK(plan_with(c, {Mode::kFirstBlocks, 8, true}).total() < sel.total());
}

TEST_CASE("the memory plan of N recomputed blocks lies between none and all, one block's worth a step") {
  // Unsharded, so that every kept block holds its BF16 operand copies (a sharded run's Dgrad
  // reads the BF16 working copies themselves, working_copies.h: checked at the end).
  RunConfig c = eight_b();
  c.parallel.shard = ShardLevel::kNone;
  const MemoryPlan none = plan_with(c, {});
  const MemoryPlan all = plan_with(c, {Mode::kAll, 0});
  CHECK(plan_with(c, {Mode::kFirstBlocks, 0}).total() == none.total());
  CHECK(plan_with(c, {Mode::kFirstBlocks, 32}).total() == all.total());
  CHECK(plan_with(c, {Mode::kAuto, 0}).total() == all.total());  // unresolved: its least
  // Each block recomputed instead of kept frees its saved tensors less the input the checkpoint
  // keeps, (155784 - 16384) · 8192 bytes, and its BF16 operand copies 2 · 218103808 (until the
  // last, whose recompute-time peak the operands of one block bound).
  for (int k = 1; k < 31; ++k) {
    const MemoryPlan a = plan_with(c, {Mode::kFirstBlocks, k - 1});
    const MemoryPlan b = plan_with(c, {Mode::kFirstBlocks, k});
    INFO(k << " blocks");
    CHECK(a.activations - b.activations == int64_t{139400} * 8192);
    CHECK(a.weight_operands - b.weight_operands == 2 * int64_t{218103808});
    CHECK(b.total() < a.total());
  }
  // The last block kept costs what its recompute would: its saved tensors beside the others'
  // checkpoints at the forward's end are the recompute-time peak of every block recomputed.
  CHECK(plan_with(c, {Mode::kFirstBlocks, 31}).total() == all.total());
  // Sharded: what Dgrad reads are the working copies themselves, however many blocks are kept.
  c.parallel.shard = ShardLevel::kGradients;
  for (const int k : {0, 16, 32}) CHECK(plan_with(c, {Mode::kFirstBlocks, k}).weight_operands == 0);
}

TEST_CASE("auto takes the first step of none, selective, selective with 1 … n whole blocks that fits 95 % of the GPU") {
  const RunConfig c = eight_b();
  const mxablate::trainer::ModelShape shape = model_shape(c.model);
  const RunLayerPlans plans = plan_run_layers(c, linear_layers(shape, kVocab8b), shape.n_layers);
  const std::vector<RecomputeStep> ladder = recompute_ladder(c, shape, kVocab8b, plans);
  REQUIRE(ladder.size() == 34);
  CHECK(ladder[0].setting == Recompute{});
  CHECK(ladder[1].setting == Recompute{Mode::kNone, 0, true});
  CHECK(ladder[9].setting == Recompute{Mode::kFirstBlocks, 8, true});
  CHECK(ladder[32].setting == Recompute{Mode::kFirstBlocks, 31, true});
  CHECK(ladder[33].setting == Recompute{Mode::kAll, 0});  // no block left to be selective
  for (const RecomputeStep& step : ladder) CHECK(step.plan.total() == plan_with(c, step.setting).total());
  // 80 GB: 95 % is 76e9 bytes (70.8 GiB). Whole blocks alone need 18; selective recompute,
  // sparing 45,056 bytes a token in every block, needs 11 besides (a kept block holds no BF16
  // weight copies: Dgrad reads the linears' BF16 working copies, working_copies.h).
  const int64_t gpu = 80'000'000'000;
  const RecomputeChoice choice = choose_recompute(c, shape, kVocab8b, plans, gpu);
  CHECK(choice.fits);
  CHECK(choice.setting == Recompute{Mode::kFirstBlocks, 11, true});
  CHECK(choice.blocks == 11);
  CHECK(choice.predicted == plan_with(c, {Mode::kFirstBlocks, 11, true}).total());
  CHECK(static_cast<double>(choice.predicted) <= 0.95 * gpu);
  CHECK(static_cast<double>(plan_with(c, {Mode::kFirstBlocks, 10, true}).total()) > 0.95 * gpu);
  CHECK(static_cast<double>(plan_with(c, {Mode::kFirstBlocks, 18}).total()) <= 0.95 * gpu);
  CHECK(static_cast<double>(plan_with(c, {Mode::kFirstBlocks, 17}).total()) > 0.95 * gpu);
  // resolve_recompute makes it the config's setting; settings other than auto stay as they are.
  RunConfig a = c;
  a.train.activation_checkpointing = {Mode::kAuto, 0};
  CHECK(resolve_recompute(a, shape, kVocab8b, plans, gpu).train.activation_checkpointing ==
        Recompute{Mode::kFirstBlocks, 11, true});
  RunConfig t = c;
  t.train.activation_checkpointing = {Mode::kAll, 0};
  CHECK(resolve_recompute(t, shape, kVocab8b, plans, gpu).train.activation_checkpointing ==
        Recompute{Mode::kAll, 0});
  // A GPU of 141 GB takes it without recompute (113.4 GiB unrecomputed with sharded gradients).
  CHECK(choose_recompute(c, shape, kVocab8b, plans, 141'000'000'000).setting == Recompute{});
  // Where selective recompute alone fits, it is the choice: between its total and none's.
  const int64_t between = (ladder[0].plan.total() + ladder[1].plan.total()) / 2 * 100 / 95;
  CHECK(choose_recompute(c, shape, kVocab8b, plans, between).setting == Recompute{Mode::kNone, 0, true});
  // 40 GB: not even every block recomputed fits; auto says so and takes the least it can.
  const RecomputeChoice tight = choose_recompute(c, shape, kVocab8b, plans, 40'000'000'000);
  CHECK_FALSE(tight.fits);
  // Every block whole: the last block kept, selectively, would cost its rebuilt input's working
  // set more (its saved tensors at the forward's end are the recompute-time peak either way).
  CHECK(tight.setting == Recompute{Mode::kAll, 0});
  CHECK(tight.predicted == plan_with(c, {Mode::kAll, 0}).total());
  CHECK(plan_with(c, {Mode::kFirstBlocks, 31, true}).total() > tight.predicted);
}

TEST_CASE("recompute adds a block's forward per recomputed block: a third of the blocks' share at most") {
  const mxablate::trainer::ModelShape shape = model_shape(eight_b().model);
  CHECK(recompute_flops_fraction(shape, 8192, kVocab8b, 0) == 0.0);
  const double all = recompute_flops_fraction(shape, 8192, kVocab8b, 32);
  // Per token a block's forward: 2 · 218112000 weights + 2 · 8192 · 4096 attention; the head 2 ·
  // 4096 · 128256. The step is three forwards.
  const double block = 2.0 * 218112000 + 2.0 * 8192 * 4096;
  CHECK(all == Approx(32 * block / (3 * (32 * block + 2.0 * 4096 * 128256))));
  CHECK(all == Approx(0.313).margin(0.001));
  CHECK(recompute_flops_fraction(shape, 8192, kVocab8b, 16) == Approx(all / 2));
}

TEST_CASE("auto's choice is the first count within the budget where blocks differ, in bounded time") {
  // Blocks that differ: the first two in BF16 (smaller copies), the rest MXFP4 with stochastic
  // rounding on X (each linear its own copy). The choice is the first count within 95 %.
  RunConfig c = eight_b();
  c.precision = {mxablate::contract::GemmPrecision::kMXFP4, mxablate::contract::GemmPrecision::kMXFP4,
                 mxablate::contract::GemmPrecision::kMXFP4};
  c.quant.stochastic_rounding.add(mxablate::contract::OperandClass::kActivation);
  c.quant.bf16_first_blocks = 2;
  const mxablate::trainer::ModelShape shape = model_shape(c.model);
  const RunLayerPlans plans = plan_run_layers(c, linear_layers(shape, kVocab8b), shape.n_layers);
  for (const int64_t gpu : {int64_t{80'000'000'000}, int64_t{90'000'000'000}, int64_t{110'000'000'000}}) {
    INFO(gpu << " bytes");
    const RecomputeChoice choice = choose_recompute(c, shape, kVocab8b, plans, gpu);
    REQUIRE(choice.fits);
    CHECK(static_cast<double>(plan_with(c, choice.setting).total()) <= 0.95 * static_cast<double>(gpu));
    CHECK(static_cast<double>(plan_with(c, {}).total()) > 0.95 * static_cast<double>(gpu));
    for (int k = 0; k < choice.blocks; ++k)
      CHECK(static_cast<double>(plan_with(c, recompute_of_blocks(k, 32, true)).total()) >
            0.95 * static_cast<double>(gpu));
  }
  // 4,096 thin blocks (the most a model may have): one pass over them, not one per count.
  RunConfig deep;
  deep.model = ModelChoice::shaped(ModelDims{64, 4096, 4, 4, 128});
  deep.data.seq_len = 64;
  deep.train.global_batch_tokens = 1 << 20;
  deep.device = Device::kCUDA;
  deep.train.activation_checkpointing = {Mode::kAuto, 0};
  const mxablate::trainer::ModelShape deep_shape = model_shape(deep.model);
  const RunLayerPlans deep_plans = plan_run_layers(deep, linear_layers(deep_shape, 4096), 4096);
  const auto t0 = std::chrono::steady_clock::now();
  const RecomputeChoice tight = choose_recompute(deep, deep_shape, 4096, deep_plans, 1'000'000'000);
  CHECK_FALSE(tight.fits);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));  // 0.01 s here; 30 s per count before
}
