// The per-step quantization memo (quant_memo.h, docs/design.md §4): layers that consume the same
// input (q, k, v; gate, up) reuse its deterministic quantizations. Reuse must change no bit of
// any output, gradient or telemetry record; a spec whose result depends on the random key
// (stochastic rounding, random Hadamard signs) must never be reused; an input changed in place,
// or a new step, must be quantized afresh.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <memory>
#include <tuple>
#include <vector>

#include "catch.h"
#include "mxablate/trainer/model/model.h"
#include "mxablate/trainer/numerics/mx_linear.h"

using namespace mxablate;
using namespace mxablate::trainer;
using kernels::Axis;
using kernels::GemmKind;
using kernels::HadamardMode;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;
using kernels::Rounding;

namespace {

constexpr int64_t kM = 96, kK = 64, kN = 128;  // tokens, in features, out features
constexpr int kConsumers = 3;                 // like q, k and v

LinearPlan uniform_plan(const QuantSpec& spec) {
  LinearPlan plan = plain_bf16_plan();
  for (auto& g : plan.gemm) g.operand = {spec, spec};
  return plan;
}

// X in Fprop (along rows) and in Wgrad (down columns) get their own specs.
LinearPlan plan_with_x(const QuantSpec& fprop_x, const QuantSpec& wgrad_x) {
  LinearPlan plan = uniform_plan(QuantSpec{QuantFormat::kMXFP4});
  plan.gemm[static_cast<size_t>(GemmKind::kFprop)].operand[0] = fprop_x;
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand[1] = wgrad_x;
  return plan;
}

struct Shared {
  std::vector<at::Tensor> y, dw;
  at::Tensor dx;
  std::vector<QuantSession::Record> records;
  int64_t hits = 0;
};

// kConsumers layers with their own weights, all fed the same x, through forward and backward.
Shared run_shared(const LinearPlan& plan, bool memo) {
  auto session = std::make_shared<QuantSession>();
  session->seed = 9;
  session->step = 4;
  session->collect_telemetry = true;
  session->memo.enabled = memo;
  at::Generator gen = at::detail::createCPUGenerator(21);
  at::Tensor x = (at::randn({kM, kK}, gen) * at::exp(at::randn({kM, kK}, gen))).requires_grad_(true);
  std::vector<at::Tensor> w;
  at::Tensor total = at::zeros({}, at::kFloat);
  Shared out;
  for (int layer = 0; layer < kConsumers; ++layer) {
    w.push_back(at::randn({kN, kK}, gen).requires_grad_(true));
    const auto state = std::make_shared<const LinearState>(LinearState{layer, plan, session});
    const at::Tensor y = mx_linear(x, w.back(), state);
    out.y.push_back(y.detach());
    total = total + (y * at::randn({kM, kN}, gen)).sum();
  }
  total.backward();
  out.dx = x.grad();
  for (const at::Tensor& wi : w) out.dw.push_back(wi.grad());
  out.records = session->take_records();
  out.hits = session->memo.hits();
  return out;
}

void require_identical(const Shared& a, const Shared& b) {
  for (int i = 0; i < kConsumers; ++i) {
    INFO("layer " << i);
    CHECK(at::equal(a.y[i], b.y[i]));
    CHECK(at::equal(a.dw[i], b.dw[i]));
  }
  CHECK(at::equal(a.dx, b.dx));
  REQUIRE(a.records.size() == b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    const auto& ra = a.records[i];
    const auto& rb = b.records[i];
    INFO("record " << i << ": layer " << ra.layer);
    CHECK(ra.layer == rb.layer);
    CHECK(ra.gemm == rb.gemm);
    CHECK(ra.operand == rb.operand);
    CHECK(ra.telemetry.elements == rb.telemetry.elements);
    CHECK(ra.telemetry.nonzero_inputs == rb.telemetry.nonzero_inputs);
    CHECK(ra.telemetry.saturated == rb.telemetry.saturated);
    CHECK(ra.telemetry.flushed == rb.telemetry.flushed);
    CHECK(ra.telemetry.sum_sq_error == rb.telemetry.sum_sq_error);
    CHECK(ra.telemetry.sum_sq_input == rb.telemetry.sum_sq_input);
    CHECK(ra.telemetry.sum_error == rb.telemetry.sum_error);
  }
}

}  // namespace

TEST_CASE("Layers sharing an input reuse its deterministic quantizations, changing no bit",
          "[trainer][quant_memo]") {
  QuantSpec hadamard{QuantFormat::kMXFP4};
  hadamard.hadamard = HadamardMode::kDeterministic;
  for (const LinearPlan& plan :
       {uniform_plan(QuantSpec{QuantFormat::kMXFP4}), plain_bf16_plan(),
        uniform_plan(hadamard),
        uniform_plan(QuantSpec{QuantFormat::kFP8E4M3})}) {
    const Shared with = run_shared(plan, true);
    const Shared without = run_shared(plan, false);
    require_identical(with, without);
    // Layers 1 and 2 reuse layer 0's X along rows (Fprop) and down columns (Wgrad).
    CHECK(with.hits == 2 * (kConsumers - 1));
    CHECK(without.hits == 0);
  }
  // Telemetry is still one record per layer and operand.
  const Shared mx = run_shared(uniform_plan(QuantSpec{QuantFormat::kMXFP4}), true);
  CHECK(mx.records.size() == static_cast<size_t>(kConsumers * 6));
}

TEST_CASE("A spec that depends on the random key is never reused", "[trainer][quant_memo]") {
  QuantSpec sr{QuantFormat::kMXFP4};
  sr.rounding = Rounding::kStochastic;
  QuantSpec per_step{QuantFormat::kMXFP4};
  per_step.hadamard = HadamardMode::kPerStepRandom;
  QuantSpec fixed_random{QuantFormat::kMXFP4};
  fixed_random.hadamard = HadamardMode::kFixedRandom;  // signs keyed by layer: differ per layer
  const QuantSpec plain{QuantFormat::kMXFP4};
  for (const QuantSpec& random : {sr, per_step, fixed_random}) {
    INFO("rounding " << to_string(random.rounding) << ", hadamard " << to_string(random.hadamard));
    CHECK_FALSE(QuantMemo::memoizable(random));
    // Random on both uses of X: nothing is reused.
    const Shared both = run_shared(plan_with_x(random, random), true);
    require_identical(both, run_shared(plan_with_x(random, random), false));
    CHECK(both.hits == 0);
    // Random in Fprop only: Wgrad's deterministic X is still reused, Fprop's never.
    const Shared fprop = run_shared(plan_with_x(random, plain), true);
    require_identical(fprop, run_shared(plan_with_x(random, plain), false));
    CHECK(fprop.hits == kConsumers - 1);
  }
}

TEST_CASE("An input changed in place, or a new step, is quantized afresh", "[trainer][quant_memo]") {
  const LinearPlan plan = uniform_plan(QuantSpec{QuantFormat::kMXFP4});
  auto session = std::make_shared<QuantSession>();
  session->step = 2;
  at::Generator gen = at::detail::createCPUGenerator(5);
  at::Tensor x = at::randn({kM, kK}, gen);
  const at::Tensor w = at::randn({kN, kK}, gen);
  const auto state0 = std::make_shared<const LinearState>(LinearState{0, plan, session});
  const auto state1 = std::make_shared<const LinearState>(LinearState{1, plan, session});
  torch::NoGradGuard no_grad;
  (void)mx_linear(x, w, state0);
  x.mul_(2);  // same storage, new version
  const at::Tensor after = mx_linear(x, w, state1);
  CHECK(session->memo.hits() == 0);
  auto fresh_session = std::make_shared<QuantSession>();
  fresh_session->step = 2;
  fresh_session->memo.enabled = false;
  const auto fresh = std::make_shared<const LinearState>(LinearState{1, plan, fresh_session});
  CHECK(at::equal(after, mx_linear(x, w, fresh)));
  // The same tensor again in the same step is reused; after the step changes it is not.
  (void)mx_linear(x, w, state0);
  CHECK(session->memo.hits() == 1);
  session->step = 3;
  (void)mx_linear(x, w, state0);
  CHECK(session->memo.hits() == 1);
  // A view of the same storage with other strides is another operand.
  const QuantSpec spec{QuantFormat::kMXFP4};
  using Form = mxablate::kernels::QuantizedOperand::Form;
  session->memo.store(3, x, Axis::kRows, spec, Form::kValues, at::kFloat,
                      {mxablate::kernels::QuantizedOperand::values(x, Axis::kRows, spec, {}), std::nullopt});
  CHECK(session->memo.find(3, x, Axis::kRows, spec, Form::kValues, at::kFloat, false).has_value());
  CHECK_FALSE(session->memo.find(3, x.t(), Axis::kRows, spec, Form::kValues, at::kFloat, false).has_value());
  CHECK_FALSE(session->memo.find(3, x, Axis::kCols, spec, Form::kValues, at::kFloat, false).has_value());
  // Another engine's form (FP8 codes) is another result.
  CHECK_FALSE(session->memo.find(3, x, Axis::kRows, spec, Form::kFP8Tensorwise, at::kFloat, false).has_value());
  // An entry is keyed by the form its engine multiplies, not by what it holds: mxfp4-as-fp8's
  // values of an operand E4M3 could not hold are found again by that engine (once per step, not
  // once per micro-batch), and by no other.
  const at::Tensor y = x + 1;
  session->memo.store(3, y, Axis::kRows, spec, Form::kFP8Rowwise, at::kFloat,
                      {mxablate::kernels::QuantizedOperand::values(y, Axis::kRows, spec, {}), std::nullopt});
  const auto found = session->memo.find(3, y, Axis::kRows, spec, Form::kFP8Rowwise, at::kFloat, false);
  REQUIRE(found.has_value());
  CHECK(found->operand.form == Form::kValues);
  CHECK_FALSE(session->memo.find(3, y, Axis::kRows, spec, Form::kValues, at::kFloat, false).has_value());
  CHECK_FALSE(session->memo.find(3, x, Axis::kRows, spec, Form::kValues, at::kFloat, /*need_telemetry=*/true).has_value());
  CHECK_FALSE(session->memo.find(4, x, Axis::kRows, spec, Form::kValues, at::kFloat, false).has_value());
}

TEST_CASE("A whole model's loss and gradients are the same bits with and without the memo",
          "[trainer][quant_memo]") {
  // smoke: d_model 64, two blocks, GQA (4 heads, 2 K/V heads), FFN 192; 2 x 48 tokens.
  const ModelShape shape = *find_model_preset("smoke");
  const int64_t vocab = 96;
  const LinearPlan mx = uniform_plan(QuantSpec{QuantFormat::kMXFP4});
  for (const bool checkpointing : {false, true}) {
    INFO("activation checkpointing " << checkpointing);
    std::vector<at::Tensor> grads[2];
    double losses[2] = {0, 0};
    int64_t hits[2] = {0, 0};
    for (const bool memo : {false, true}) {
      ModelOptions o;
      o.shape = shape;
      o.vocab_size = vocab;
      o.layer_plans.assign(static_cast<size_t>(shape.n_layers * 7), mx);
      o.layer_plans.push_back(plain_bf16_plan());  // the LM head
      o.recomputed_blocks = checkpointing ? shape.n_layers : 0;
      o.session->step = 1;
      o.session->memo.enabled = memo;
      LlamaModel model(o);
      at::Generator gen = at::detail::createCPUGenerator(3);
      const at::Tensor tokens = at::randint(vocab, {2, 48}, gen);
      const at::Tensor targets = at::randint(vocab, {2, 48}, gen);
      const at::Tensor loss = model->loss(tokens, targets);
      loss.backward();
      losses[memo] = loss.item<double>();
      for (const at::Tensor& p : model->parameters()) grads[memo].push_back(p.grad());
      hits[memo] = o.session->memo.hits();
    }
    CHECK(losses[0] == losses[1]);
    REQUIRE(grads[0].size() == grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) CHECK(at::equal(grads[0][i], grads[1][i]));
    CHECK(hits[0] == 0);
    // Per block: k and v reuse q's X (Fprop and Wgrad), up reuses gate's: 6 per forward pass,
    // and a checkpointed block's forward runs twice (the recompute keeps X for Wgrad only then).
    CHECK(hits[1] >= 6 * shape.n_layers);
  }
}

namespace {

struct MicroBatches {
  std::vector<at::Tensor> y, dx;
  at::Tensor dw;
  std::vector<QuantSession::Record> records;
  int64_t weight_hits = 0;
};

// One layer over three micro-batches of one step (gradients accumulated into W), then, when
// `update`, W changed in place and one more micro-batch of the same step.
MicroBatches run_micro_batches(const LinearPlan& plan, bool cache, bool update) {
  auto session = std::make_shared<QuantSession>();
  session->seed = 5;
  session->step = 2;
  session->cache_weight_operands = cache;
  at::Generator gen = at::detail::createCPUGenerator(31);
  at::Tensor w = at::randn({kN, kK}, gen).requires_grad_(true);
  const auto state = std::make_shared<const LinearState>(LinearState{0, plan, session});
  MicroBatches out;
  const int batches = update ? 4 : 3;
  for (int b = 0; b < batches; ++b) {
    if (update && b == 3) {
      const torch::NoGradGuard no_grad;
      w.mul_(1.5);  // an optimizer's in-place update: a new version of W
    }
    session->collect_telemetry = b == 0;
    at::Tensor x = at::randn({kM, kK}, gen).requires_grad_(true);
    const at::Tensor y = mx_linear(x, w, state);
    (y * at::randn({kM, kN}, gen)).sum().backward();
    out.y.push_back(y.detach());
    out.dx.push_back(x.grad());
  }
  out.dw = w.grad();
  out.records = session->take_records();
  out.weight_hits = state->weight_memo->hits();
  return out;
}

}  // namespace

TEST_CASE("A layer quantizes its weight once per step for all its micro-batches, changing no bit",
          "[trainer][quant_memo][weight_cache]") {
  QuantSpec sr{QuantFormat::kMXFP4};
  sr.rounding = Rounding::kStochastic;  // keyed by the step: the same bits for every micro-batch
  QuantSpec random_rotation{QuantFormat::kMXFP4};
  random_rotation.hadamard = HadamardMode::kPerStepRandom;
  for (const LinearPlan& plan : {uniform_plan(QuantSpec{QuantFormat::kMXFP4}), plain_bf16_plan(), uniform_plan(sr),
                                 uniform_plan(random_rotation), uniform_plan(QuantSpec{QuantFormat::kFP8E4M3})}) {
    for (const bool update : {false, true}) {
      INFO("W updated in place before the last micro-batch: " << update);
      const MicroBatches with = run_micro_batches(plan, true, update);
      const MicroBatches without = run_micro_batches(plan, false, update);
      for (size_t b = 0; b < with.y.size(); ++b) {
        INFO("micro-batch " << b);
        CHECK(at::equal(with.y[b], without.y[b]));
        CHECK(at::equal(with.dx[b], without.dx[b]));
      }
      CHECK(at::equal(with.dw, without.dw));
      REQUIRE(with.records.size() == without.records.size());
      for (size_t i = 0; i < with.records.size(); ++i)
        CHECK(with.records[i].telemetry.sum_sq_error == without.records[i].telemetry.sum_sq_error);
      // Micro-batches 1 and 2 reuse W along rows (Fprop) and down columns (Dgrad); the new
      // version of W is quantized again.
      CHECK(with.weight_hits == 4);
      CHECK(without.weight_hits == 0);
    }
  }
}

TEST_CASE("A layer's cached weight operands are made again in the next step", "[trainer][quant_memo][weight_cache]") {
  auto session = std::make_shared<QuantSession>();
  session->cache_weight_operands = true;
  QuantSpec sr{QuantFormat::kMXFP4};
  sr.rounding = Rounding::kStochastic;
  const auto state = std::make_shared<const LinearState>(LinearState{0, uniform_plan(sr), session});
  at::Generator gen = at::detail::createCPUGenerator(8);
  const at::Tensor w = at::randn({kN, kK}, gen);
  const at::Tensor x = at::randn({kM, kK}, gen);
  session->step = 1;
  const at::Tensor y1 = mx_linear(x, w, state);
  session->step = 2;
  const at::Tensor y2 = mx_linear(x, w, state);
  // Step 2's stochastic rounding of W differs from step 1's: a stale cache would repeat y1.
  CHECK_FALSE(at::equal(y1, y2));
  auto fresh = std::make_shared<QuantSession>();
  fresh->step = 2;
  CHECK(at::equal(y2, mx_linear(x, w, std::make_shared<const LinearState>(LinearState{0, uniform_plan(sr), fresh}))));
  CHECK(state->weight_memo->hits() == 0);
}

TEST_CASE("A new weight generation makes the weight operands again though W's version did not change",
          "[trainer][quant_memo][weight_cache]") {
  // The optimizer's fused kernel and a checkpoint restore write W in place without bumping its
  // version counter, as a write through W.data() does here: only the generation says so.
  auto session = std::make_shared<QuantSession>();
  session->cache_weight_operands = true;
  session->step = 3;
  const LinearPlan plan = uniform_plan(QuantSpec{QuantFormat::kMXFP4});
  const auto state = std::make_shared<const LinearState>(LinearState{0, plan, session});
  at::Generator gen = at::detail::createCPUGenerator(12);
  at::Tensor w = at::randn({kN, kK}, gen);
  const at::Tensor x = at::randn({kM, kK}, gen);
  const at::Tensor before = mx_linear(x, w, state);
  const int64_t version = w._version();
  w.data().mul_(2.0);
  REQUIRE(w._version() == version);
  // Same generation: the memo cannot tell (what the trainer's bumps are for).
  CHECK(at::equal(mx_linear(x, w, state), before));
  ++session->weights_generation;
  auto fresh = std::make_shared<QuantSession>();
  fresh->step = 3;
  const at::Tensor want = mx_linear(x, w, std::make_shared<const LinearState>(LinearState{0, plan, fresh}));
  CHECK_FALSE(at::equal(want, before));
  CHECK(at::equal(mx_linear(x, w, state), want));
}

TEST_CASE("The made-ahead memo keeps two inputs, and a result taken is gone", "[trainer][quant_memo][produce]") {
  using Form = mxablate::kernels::QuantizedOperand::Form;
  QuantSpec sr{QuantFormat::kMXFP4};
  sr.rounding = Rounding::kStochastic;  // a keyed spec: one consumer's own
  QuantMemo memo(/*one_key=*/true, /*inputs=*/2);
  at::Generator gen = at::detail::createCPUGenerator(8);
  const at::Tensor dg = at::randn({kM, kK}, gen), du = at::randn({kM, kK}, gen), next = at::randn({kM, kK}, gen);
  const auto result = [&](const at::Tensor& t) {
    return QuantMemo::Result{mxablate::kernels::QuantizedOperand::values(t * 2, Axis::kRows, sr, {}), std::nullopt};
  };
  const auto take = [&](uint64_t epoch, const at::Tensor& t, Axis axis) {
    return memo.take(epoch, t, axis, sr, Form::kValues, at::kFloat, false);
  };
  memo.store(4, dg, Axis::kRows, sr, Form::kValues, at::kFloat, result(dg));
  memo.store(4, dg, Axis::kCols, sr, Form::kValues, at::kFloat, result(dg));
  memo.store(4, du, Axis::kRows, sr, Form::kValues, at::kFloat, result(du));
  // Both inputs are held: du's result did not push dg's out (a one-input memo would have).
  const auto got = take(4, dg, Axis::kRows);
  REQUIRE(got.has_value());
  CHECK(at::equal(got->operand.data, dg * 2));
  CHECK_FALSE(take(4, dg, Axis::kRows).has_value());  // taken: gone
  CHECK(take(4, dg, Axis::kCols).has_value());
  // dg, with nothing left, was let go: another input fits beside du.
  memo.store(4, next, Axis::kRows, sr, Form::kValues, at::kFloat, result(next));
  CHECK(take(4, du, Axis::kRows).has_value());
  // Two held (next, dg): a third pushes out the oldest.
  memo.store(4, dg, Axis::kRows, sr, Form::kValues, at::kFloat, result(dg));
  memo.store(4, du, Axis::kRows, sr, Form::kValues, at::kFloat, result(du));
  CHECK_FALSE(take(4, next, Axis::kRows).has_value());
  // Another epoch forgets everything.
  memo.store(5, next, Axis::kRows, sr, Form::kValues, at::kFloat, result(next));
  CHECK_FALSE(take(5, dg, Axis::kRows).has_value());
  CHECK_FALSE(take(4, du, Axis::kRows).has_value());
  CHECK(memo.hits() == 3);
  // The shared memo (one input, deterministic specs only) refuses a keyed spec.
  QuantMemo shared;
  shared.store(4, dg, Axis::kRows, sr, Form::kValues, at::kFloat, result(dg));
  CHECK_FALSE(shared.take(4, dg, Axis::kRows, sr, Form::kValues, at::kFloat, false).has_value());
}

TEST_CASE("A plain BF16 weight rounded in a forward without gradients serves the recompute's Dgrad too",
          "[trainer][quant_memo][weight_cache]") {
  // A checkpointed block's first forward runs without gradients, its recompute with them. Where
  // both of W's GEMMs take it plain BF16, the first rounding is kept for Dgrad as well: the
  // recompute finds both operands (one copy, the weight cache's size), with the same bits as a
  // layer without the cache. Where Dgrad quantizes W, nothing is made ahead for it.
  for (const bool plain : {true, false}) {
    INFO("plain BF16: " << plain);
    const LinearPlan plan = plain ? plain_bf16_plan() : uniform_plan(QuantSpec{QuantFormat::kMXFP4});
    const auto run = [&](bool cache) {
      auto session = std::make_shared<QuantSession>();
      session->step = 4;
      session->cache_weight_operands = cache;
      const auto state = std::make_shared<const LinearState>(LinearState{0, plan, session});
      at::Generator gen = at::detail::createCPUGenerator(17);
      const at::Tensor w = at::randn({kN, kK}, gen).requires_grad_(true);
      const at::Tensor x = at::randn({kM, kK}, gen).requires_grad_(true);
      at::Tensor first;
      {
        const torch::NoGradGuard no_grad;
        first = mx_linear(x, w, state);
      }
      const at::Tensor y = mx_linear(x, w, state);
      (y * at::randn({kM, kN}, gen)).sum().backward();
      return std::make_tuple(first, y.detach(), x.grad(), w.grad(), state->weight_memo->hits());
    };
    const auto [first, y, dx, dw, hits] = run(true);
    const auto [first0, y0, dx0, dw0, hits0] = run(false);
    CHECK(at::equal(first, first0));
    CHECK(at::equal(y, y0));
    CHECK(at::equal(dx, dx0));
    CHECK(at::equal(dw, dw0));
    CHECK(hits0 == 0);
    CHECK(hits == (plain ? 2 : 1));
  }
}
