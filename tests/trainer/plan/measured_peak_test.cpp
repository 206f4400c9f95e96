// The memory plan against GPU peaks measured on an H200 (docs/performance.md, "Memory": llama-1.3b,
// seq 2048, 65,536 tokens a step as 4 micro-batches of 16,384, vocabulary 32,000; 2026-12-03,
// `scripts/gpu-shard-check.sh --parts 7`, whole blocks and selective recompute in two calls). run_end's peak_gpu_bytes is what the caching allocator
// handed out, so the prediction compared with it is the plan's allocator peak, with the weight
// cache in place of the weight operands (the trainer kept the cache in every one of these runs).
// A change to the plan's model that moves any of these rows past 3 % fails here.
#include <cmath>
#include <string>

#include "catch.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/plan/weight_cache.h"
#include "mxablate/trainer/plan/working_copies.h"

using namespace mxablate::trainer;
using mxablate::contract::GemmKind;
using mxablate::contract::GemmPrecision;
using mxablate::contract::HadamardMode;
using mxablate::contract::Recompute;
using mxablate::contract::RunConfig;

namespace {

constexpr int64_t kVocab = 32000;

RunConfig one_point_three_b(bool mxfp4_h16, Recompute recompute) {
  RunConfig c;
  c.model = "llama-1.3b";
  c.device = mxablate::contract::Device::kCUDA;
  c.data.seq_len = 2048;
  c.train.global_batch_tokens = 65536;
  c.train.micro_batch_tokens = 16384;
  c.train.activation_checkpointing = recompute;
  if (mxfp4_h16) {
    c.precision.fprop = c.precision.dgrad = c.precision.wgrad = GemmPrecision::kMXFP4;
    c.quant.hadamard.mode = HadamardMode::kDeterministic;
    c.quant.hadamard.size = 16;
  }
  return c;
}

struct Measured {
  bool mxfp4_h16;
  Recompute recompute;
  double peak_gib;  // run_end's peak_gpu_bytes / 2^30
};

}  // namespace

TEST_CASE("The plan's allocator peak is what run_end measures: the total without context, NCCL and fragmentation",
          "[memory]") {
  RunConfig c = one_point_three_b(false, {});
  c.parallel.data = 2;
  const MemoryPlan m = plan_memory(c, kVocab);
  REQUIRE(m.communication > 0);
  CHECK(m.allocator_peak() == m.weights + m.gradients + m.optimizer + m.activations + m.weight_operands +
                                  m.working + m.logits);
  CHECK(m.allocator_peak() == m.total() - m.workspace - m.communication - m.fragmentation);
  CHECK(allocator_peak_with_weight_cache(m, 123) == m.allocator_peak() - m.weight_operands + 123);
}

TEST_CASE("At llama-1.3b the plan's allocator peak is within 3 % of the H200's measured peaks, at every recompute",
          "[memory]") {
  using Mode = Recompute::Mode;
  const Measured rows[] = {
      {false, {Mode::kNone, 0}, 50.70},         {false, {Mode::kFirstBlocks, 8}, 42.67},
      {false, {Mode::kFirstBlocks, 16}, 34.62}, {false, {Mode::kAll, 0}, 27.46},
      {true, {Mode::kNone, 0}, 54.48},          {true, {Mode::kFirstBlocks, 8}, 45.93},
      {true, {Mode::kFirstBlocks, 16}, 37.39},  {true, {Mode::kAll, 0}, 30.12},
      // Selective recompute (the norms' outputs and SwiGLU's product made again), 2026-12-03.
      {false, {Mode::kNone, 0, true}, 43.68},   {true, {Mode::kNone, 0, true}, 47.46},
  };
  for (const Measured& r : rows) {
    const RunConfig c = one_point_three_b(r.mxfp4_h16, r.recompute);
    INFO((r.mxfp4_h16 ? "FDW+H16" : "bf16") << ", recompute " << mxablate::contract::to_string(r.recompute));
    const ModelShape shape = model_shape(c.model);
    const RunLayerPlans plans = plan_run_layers(c, linear_layers(shape, kVocab), shape.n_layers);
    const MemoryPlan m = plan_memory(c, shape, kVocab, plans);
    const double predicted =
        static_cast<double>(allocator_peak_with_weight_cache(m, weight_cache_bytes(plans, bf16_working_copies(c, plans)))) / static_cast<double>(kGiB);
    INFO("predicted " << predicted << " GiB, measured " << r.peak_gib << " GiB");
    CHECK(std::abs(predicted / r.peak_gib - 1) <= 0.03);
  }
}
