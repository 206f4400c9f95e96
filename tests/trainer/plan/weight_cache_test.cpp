// The weight-cache rule (weight_cache.h, docs/design.md §4): the bytes it holds, computed by hand
// for llama-125m, and the decision on the CPU and against a GPU's memory.
#include <string>

#include "catch.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/weight_cache.h"
#include "mxablate/trainer/plan/working_copies.h"

using namespace mxablate::trainer;
using mxablate::contract::GemmPrecision;
using mxablate::contract::ModelChoice;
using mxablate::contract::RunConfig;

namespace {

RunConfig uniform(GemmPrecision p) {
  RunConfig c;
  c.model = "llama-125m";
  c.precision.fprop = c.precision.dgrad = c.precision.wgrad = p;
  return c;
}

RunLayerPlans plans(const RunConfig& c, const ModelShape& shape, int64_t vocab) {
  return plan_run_layers(c, linear_layers(shape, vocab), shape.n_layers);
}

int64_t cache_bytes(const RunConfig& c, const ModelShape& shape, int64_t vocab) {
  const RunLayerPlans p = plans(c, shape, vocab);
  return weight_cache_bytes(p, bf16_working_copies(c, p));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("The weight cache holds two BF16 operands per quantized weight element, one per plain BF16 one",
          "[weight_cache]") {
  const ModelShape shape = *find_model_preset("llama-125m");
  const int64_t vocab = 4096;
  // Block linears: q, o (d x d), k, v (d x kv), gate, up (d x ffn), down (ffn x d); the LM head
  // (vocab x d) is planned plain BF16 whatever the arm.
  const int64_t d = shape.d_model, kv = d / shape.n_heads * shape.n_kv_heads, f = shape.ffn_hidden;
  const int64_t block = 2 * d * d + 2 * d * kv + 3 * d * f;
  const int64_t head = vocab * d;
  CHECK(cache_bytes(uniform(GemmPrecision::kBF16), shape, vocab) == (shape.n_layers * block + head) * 2);
  CHECK(cache_bytes(uniform(GemmPrecision::kMXFP4), shape, vocab) == shape.n_layers * block * 4 + head * 2);
  CHECK(cache_bytes(uniform(GemmPrecision::kFP8), shape, vocab) == shape.n_layers * block * 4 + head * 2);
  // A sharded run keeps plain BF16 weights (the LM head's in every arm) as BF16 working copies
  // (working_copies.h): each is its own rounding, not cached. Quantized weights keep float32
  // working copies, and their operands are cached as before.
  for (const GemmPrecision p : {GemmPrecision::kBF16, GemmPrecision::kMXFP4}) {
    RunConfig sharded = uniform(p);
    sharded.parallel.data = 4;
    sharded.parallel.shard = mxablate::contract::ShardLevel::kOptimizer;
    CHECK(cache_bytes(sharded, shape, vocab) ==
          (p == GemmPrecision::kBF16 ? 0 : shape.n_layers * block * 4));
  }
}

TEST_CASE("The weight cache is kept on the CPU, and on CUDA where the plan and the cache fit", "[weight_cache]") {
  constexpr int64_t GiB = int64_t{1} << 30;
  CHECK(decide_weight_cache(false, 500 * GiB, 500 * GiB, 0).on);
  const WeightCache fits = decide_weight_cache(true, 20 * GiB, 5 * GiB, 80 * GiB);
  CHECK(fits.on);
  CHECK(contains(fits.reason, "the memory plan (20.0 GiB) plus the cache (5.0 GiB) is within 90% of the GPU's 80.0 GiB"));
  const WeightCache tight = decide_weight_cache(true, 70 * GiB, 3 * GiB, 80 * GiB);
  CHECK_FALSE(tight.on);
  CHECK(contains(tight.reason, "is above 90% of the GPU's 80.0 GiB"));
  // The boundary itself fits.
  CHECK(decide_weight_cache(true, 70 * GiB, 2 * GiB, 80 * GiB).on);
}

TEST_CASE("The least GPU memory that keeps the weight cache is the decision's boundary, to the byte",
          "[weight_cache]") {
  constexpr int64_t GiB = int64_t{1} << 30;
  // 72 GiB is 90% of 80 GiB exactly; the others leave a remainder in either division.
  CHECK(weight_cache_least_device_memory(70 * GiB, 2 * GiB) == 80 * GiB);
  for (const auto& [plan, cache] : {std::pair<int64_t, int64_t>{70 * GiB, 2 * GiB}, {67959160012, 15009316864},
                                    {1, 0}, {0, 0}, {12345678901, 9}, {9, 12345678901}}) {
    INFO(plan << " + " << cache);
    const int64_t least = weight_cache_least_device_memory(plan, cache);
    // The rule as weight_cache.h states it: the plan plus the cache within 90% of the GPU.
    CHECK(plan + cache <= least * 90 / 100);
    if (least > 0) CHECK(plan + cache > (least - 1) * 90 / 100);
    CHECK(decide_weight_cache(true, plan, cache, least).on);
    CHECK(decide_weight_cache(true, plan, cache, least + 1).on);
    if (least > 0) CHECK_FALSE(decide_weight_cache(true, plan, cache, least - 1).on);
  }
}
