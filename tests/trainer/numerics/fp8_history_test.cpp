// FP8 delayed scaling in the trainer (fp8_history.h, docs/design.md §3): the window is the
// maximum of the last N steps' records, empty until a step has recorded; MXLinear's FP8 operands
// take their instance's window and record their amax there; the memo never lends one layer's
// delayed-scaled operand to another.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "catch.h"
#include "mxablate/kernels/block_scaling.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/trainer/numerics/fp8_history.h"
#include "mxablate/trainer/numerics/mx_linear.h"

using namespace mxablate;
using namespace mxablate::trainer;
using kernels::Axis;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

int32_t bits_of(float x) {
  int32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

int32_t at_instance(const at::Tensor& t, int layer, GemmKind g, Operand o) {
  return t[Fp8AmaxHistory::instance(layer, g, o)].item<int32_t>();
}

float abs_max(const at::Tensor& t) { return t.abs().max().item<float>(); }

}  // namespace

TEST_CASE("The FP8 amax window is the maximum of the last N steps' records", "[trainer][fp8_delayed]") {
  Fp8AmaxHistory h(2, 3, 0, at::kCPU);
  std::set<int64_t> instances;
  for (int layer : {0, 1})
    for (GemmKind g : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad})
      for (Operand o : {Operand::kA, Operand::kB}) instances.insert(Fp8AmaxHistory::instance(layer, g, o));
  CHECK(instances.size() == 12);
  CHECK(*instances.rbegin() == 11);
  const kernels::Fp8DelayedScale d = h.scale_of(1, GemmKind::kDgrad, Operand::kB);
  CHECK(*d.window == kernels::kNoAmax);  // empty: the first step scales as current scaling does
  // Two records a step (two micro-batches): the step's entry is their maximum.
  const float amax[] = {5.0f, 1.0f, 2.0f, 0.5f, 0.25f, 3.0f};
  const float window_after[] = {5.0f, 5.0f, 5.0f, 2.0f, 2.0f, 3.0f};
  for (int step = 0; step < 6; ++step) {
    h.begin_step();
    CHECK(*d.record == kernels::kNoAmax);
    *d.record = std::max(*d.record, bits_of(amax[step] / 2));
    *d.record = std::max(*d.record, bits_of(amax[step]));
    h.end_step(step);
    INFO("step " << step);
    CHECK(*d.window == bits_of(window_after[step]));
  }
  // Instances that never recorded stay empty.
  CHECK(at_instance(h.window(), 1, GemmKind::kDgrad, Operand::kA) == kernels::kNoAmax);
  CHECK(at_instance(h.window(), 0, GemmKind::kDgrad, Operand::kB) == kernels::kNoAmax);
  // A step that records nothing for the instance (its GEMM was not FP8 then) adds nothing.
  h.begin_step();
  h.end_step(6);
  CHECK(*d.window == bits_of(3.0f));
  // A non-finite amax is the window's maximum while it is in the window: the scales are NaN.
  h.begin_step();
  *d.record = kernels::kNonfiniteAmax;
  h.end_step(7);
  CHECK(*d.window == kernels::kNonfiniteAmax);
  CHECK(std::isnan(kernels::fp8_delayed_scale(*d.window, 1.0f, false, 0, kernels::kE4M3)));
}

TEST_CASE("A restored FP8 amax history gets its window back", "[trainer][fp8_delayed]") {
  Fp8AmaxHistory h(1, 4, 2, at::kCPU);
  CHECK(h.margin() == 2);
  CHECK(h.scale_of(0, GemmKind::kFprop, Operand::kA).margin == 2);
  at::Tensor restored = h.history().clone();
  restored[Fp8AmaxHistory::instance(0, GemmKind::kWgrad, Operand::kA)][2] = bits_of(7.0f);
  h.history().copy_(restored);  // as a checkpoint's load copies into the buffer
  CHECK(at_instance(h.window(), 0, GemmKind::kWgrad, Operand::kA) == kernels::kNoAmax);
  h.refresh();
  CHECK(at_instance(h.window(), 0, GemmKind::kWgrad, Operand::kA) == bits_of(7.0f));
}

TEST_CASE("MXLinear's FP8 operands take their instance's window and record their amax",
          "[trainer][fp8_delayed]") {
  constexpr int64_t kM = 48, kK = 32, kN = 64;
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({kM, kK}, gen) * 1000;
  const at::Tensor w = at::randn({kN, kK}, gen);
  const at::Tensor g = at::randn({kM, kN}, gen);
  const QuantSpec e4{QuantFormat::kFP8E4M3}, e5{QuantFormat::kFP8E5M2};
  LinearPlan plan = plain_bf16_plan();
  plan.gemm[static_cast<size_t>(GemmKind::kFprop)].operand = {e4, e4};
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand = {e5, e4};
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand = {e5, e4};
  auto session = std::make_shared<QuantSession>();
  session->seed = 3;
  session->step = 2;
  session->fp8_history = std::make_shared<Fp8AmaxHistory>(4, 8, 0, at::kCPU);
  Fp8AmaxHistory& h = *session->fp8_history;
  h.begin_step();
  // X's Fprop window says amax 448 (d = 1): X, of scale 1000, saturates at 448.
  const int32_t x_window = bits_of(448.0f);
  h.window()[Fp8AmaxHistory::instance(3, GemmKind::kFprop, Operand::kA)] = x_window;
  const auto state = std::make_shared<const LinearState>(LinearState{3, plan, session});
  const at::Tensor xr = x.clone().requires_grad_(true);
  const at::Tensor wr = w.clone().requires_grad_(true);
  const at::Tensor y = mx_linear(xr, wr, state);
  y.backward(g);

  const auto key = [](GemmKind gemm, Operand o) { return kernels::RngKey{3, 2, 3, gemm, o}; };
  int32_t scratch = kernels::kNoAmax;
  const int32_t empty = kernels::kNoAmax;
  const at::Tensor xq = kernels::fake_quantize(
      x, Axis::kRows, kernels::AxisQuantization{e4, key(GemmKind::kFprop, Operand::kA), {&x_window, &scratch, 0}});
  const at::Tensor wq = kernels::fake_quantize(
      w, Axis::kRows, kernels::AxisQuantization{e4, key(GemmKind::kFprop, Operand::kB), {&empty, &scratch, 0}});
  CHECK(at::equal(y.detach(), at::mm(xq, wq.t())));
  CHECK(xq.abs().max().item<float>() == 448.0f);  // saturated at the window's scale
  // Under current scaling the product differs: the window was used.
  const at::Tensor xc = kernels::fake_quantize(x, Axis::kRows, e4, key(GemmKind::kFprop, Operand::kA));
  CHECK_FALSE(at::equal(xc, xq));
  // Every FP8 operand recorded its tensor's amax in its own instance.
  const at::Tensor& cur = h.current();
  CHECK(at_instance(cur, 3, GemmKind::kFprop, Operand::kA) == bits_of(abs_max(x)));
  CHECK(at_instance(cur, 3, GemmKind::kWgrad, Operand::kB) == bits_of(abs_max(x)));
  CHECK(at_instance(cur, 3, GemmKind::kFprop, Operand::kB) == bits_of(abs_max(w)));
  CHECK(at_instance(cur, 3, GemmKind::kDgrad, Operand::kB) == bits_of(abs_max(w)));
  CHECK(at_instance(cur, 3, GemmKind::kDgrad, Operand::kA) == bits_of(abs_max(g)));
  CHECK(at_instance(cur, 3, GemmKind::kWgrad, Operand::kA) == bits_of(abs_max(g)));
  CHECK(at_instance(cur, 2, GemmKind::kFprop, Operand::kA) == kernels::kNoAmax);
}

TEST_CASE("Layers sharing an input do not share its delayed-scaled FP8 quantization",
          "[trainer][fp8_delayed]") {
  constexpr int64_t kM = 32, kK = 32, kN = 32;
  at::Generator gen = at::detail::createCPUGenerator(8);
  const at::Tensor x = at::randn({kM, kK}, gen);
  const QuantSpec e4{QuantFormat::kFP8E4M3};
  LinearPlan plan = plain_bf16_plan();
  plan.gemm[static_cast<size_t>(GemmKind::kFprop)].operand = {e4, e4};
  auto session = std::make_shared<QuantSession>();
  session->memo.enabled = true;
  session->fp8_history = std::make_shared<Fp8AmaxHistory>(3, 4, 0, at::kCPU);
  session->fp8_history->begin_step();
  // Layer 1 has seen a larger X before: its scale is coarser than layer 0's.
  session->fp8_history->window()[Fp8AmaxHistory::instance(1, GemmKind::kFprop, Operand::kA)] = bits_of(1000.0f);
  std::vector<at::Tensor> y;
  const at::Tensor w = at::randn({kN, kK}, gen);
  for (int layer = 0; layer < 2; ++layer) {
    const auto state = std::make_shared<const LinearState>(LinearState{layer, plan, session});
    torch::NoGradGuard no_grad;
    y.push_back(mx_linear(x, w, state));
  }
  CHECK_FALSE(at::equal(y[0], y[1]));
  CHECK(session->memo.hits() == 0);
  for (int layer = 0; layer < 2; ++layer)
    CHECK(at_instance(session->fp8_history->current(), layer, GemmKind::kFprop, Operand::kA) == bits_of(abs_max(x)));
}
