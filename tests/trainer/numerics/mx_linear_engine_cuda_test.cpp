// MXLinear on the tensor-core engines (docs/design.md §3), on CUDA: with FP8 GEMMs routed to
// fp8-tensorwise its three products are, bit for bit, the FP8 codes' products as the trainer
// computed them before the seam (fp8_quantize, fp8_tensorwise_mm with the SR fold, BF16 out);
// with MXFP4 GEMMs routed to hopper-fp8 they are quantized_gemm's hopper-fp8 products widened to
// float32 (the pre-seam trainer's call), agree with the emulated engine to BF16 rounding with an
// SR pre-scale folded back out, and leave one telemetry record per operand.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "catch.h"
#include "linear_test_util.h"
#include "mxablate/kernels/torch/fp8_gemm.h"
#include "mxablate/kernels/torch/quantized_gemm.h"
#include "mxablate/trainer/numerics/mx_linear.h"

using namespace mxablate;
using namespace mxablate::trainer;
using test::Result;
using test::run;
using test::session_with;
using kernels::Axis;
using kernels::GemmKind;
using kernels::GemmRoute;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

// The step and seed this file's sessions key their layers with.
constexpr uint32_t kSessionStep = 3;
constexpr uint64_t kSessionSeed = 7;

// ‖a − b‖ / ‖b‖ in float64: BF16 products against float32 ones.
double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / b.to(at::kDouble).norm().item<double>();
}

}  // namespace

TEST_CASE("MXLinear on the fp8-tensorwise engine multiplies the FP8 codes as before the seam",
          "[trainer][mx_linear][cuda][engine]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device");
  const at::Device cuda(at::kCUDA, 0);
  const std::string why = kernels::gemm_route_unavailable_reason(GemmRoute::kFP8Tensorwise, cuda);
  if (!why.empty()) MXABLATE_SKIP("fp8-tensorwise not run: " << why);
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({64, 128}, gen).to(cuda).to(at::kBFloat16);
  const at::Tensor w = at::randn({96, 128}, gen).to(cuda);
  const at::Tensor g = at::randn({64, 96}, gen).to(cuda).to(at::kBFloat16);
  const QuantSpec e4m3{QuantFormat::kFP8E4M3};
  QuantSpec e5m2_sr{QuantFormat::kFP8E5M2};
  e5m2_sr.rounding = kernels::Rounding::kStochastic;
  e5m2_sr.sr_prescale = 0.75f;
  LinearPlan plan = plain_bf16_plan();
  for (GemmPlan& gp : plan.gemm) {
    gp.precision = GemmPrecision::kFP8;
    gp.operand = {e4m3, e4m3};
  }
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand[0] = e5m2_sr;
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand[0] = e5m2_sr;
  auto state = std::make_shared<const LinearState>(
      LinearState{1, plan, session_with(GemmPrecision::kFP8, GemmRoute::kFP8Tensorwise, kSessionStep, kSessionSeed)});
  for (GemmKind k : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad})
    REQUIRE(state->engine(k).route() == GemmRoute::kFP8Tensorwise);
  const Result r = run(x, w, g, state);

  const auto q = [&](GemmKind k, Operand o) {
    return kernels::AxisQuantization{plan[k].operand[static_cast<size_t>(o)], state->key(k, o)};
  };
  const auto fold = [&](GemmKind k) { return kernels::sr_prescale_fold(plan[k].operand[0], plan[k].operand[1]); };
  const auto xf = q(GemmKind::kFprop, Operand::kA), xw = q(GemmKind::kWgrad, Operand::kB);
  const auto wf = q(GemmKind::kFprop, Operand::kB), wd = q(GemmKind::kDgrad, Operand::kB);
  const auto gd = q(GemmKind::kDgrad, Operand::kA), gw = q(GemmKind::kWgrad, Operand::kA);
  const kernels::Fp8Codes cx = kernels::fp8_quantize(x, &xf, &xw);
  const kernels::Fp8Codes cw = kernels::fp8_quantize(w, &wf, &wd);
  const kernels::Fp8Codes cg = kernels::fp8_quantize(g, &gd, &gw);
  const at::Tensor y = kernels::fp8_tensorwise_mm(cx.rows, cx.rows_scale, cw.rows, cw.rows_scale, at::kBFloat16,
                                                  fold(GemmKind::kFprop));
  const at::Tensor dx = kernels::fp8_tensorwise_mm(cg.rows, cg.rows_scale, cw.cols, cw.cols_scale, at::kBFloat16,
                                                   fold(GemmKind::kDgrad));
  const at::Tensor dw = kernels::fp8_tensorwise_mm(cg.cols, cg.cols_scale, cx.cols, cx.cols_scale, at::kBFloat16,
                                                   fold(GemmKind::kWgrad));
  CHECK(r.y.scalar_type() == at::kBFloat16);
  CHECK(at::equal(r.y, y));
  CHECK(at::equal(r.dx, dx));
  CHECK(at::equal(r.dw, dw.to(at::kFloat)));
  // The SR pre-scale is folded back out: the gradients estimate dY W, not 3/4 of it.
  CHECK(rel_err(r.dx, at::mm(g.to(at::kFloat), w)) < 0.15);
}

TEST_CASE("MXLinear on the hopper-fp8 engine computes quantized_gemm's hopper-fp8 products",
          "[trainer][mx_linear][cuda][engine]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device");
  const at::Device cuda(at::kCUDA, 0);
  const std::string why = kernels::gemm_route_unavailable_reason(GemmRoute::kHopperFP8, cuda);
  if (!why.empty()) MXABLATE_SKIP("hopper-fp8 not run: " << why);
  at::Generator gen = at::detail::createCPUGenerator(6);
  const at::Tensor x = at::randn({128, 256}, gen).to(cuda).to(at::kBFloat16);
  const at::Tensor w = at::randn({128, 256}, gen).to(cuda);
  const at::Tensor g = at::randn({128, 128}, gen).to(cuda).to(at::kBFloat16);
  const QuantSpec mx{QuantFormat::kMXFP4};
  QuantSpec sr = mx;
  sr.rounding = kernels::Rounding::kStochastic;
  sr.sr_prescale = 0.75f;
  LinearPlan plan = plain_bf16_plan();
  for (GemmPlan& gp : plan.gemm) {
    gp.precision = GemmPrecision::kMXFP4;
    gp.operand = {mx, mx};
  }
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand[0] = sr;
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand[0] = sr;
  auto session = session_with(GemmPrecision::kMXFP4, GemmRoute::kHopperFP8, kSessionStep, kSessionSeed);
  session->collect_telemetry = true;
  auto state = std::make_shared<const LinearState>(LinearState{2, plan, session});
  for (GemmKind k : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad})
    REQUIRE(state->engine(k).route() == GemmRoute::kHopperFP8);
  const Result r = run(x, w, g, state);
  CHECK(session->take_records().size() == 6);  // X, W, dY, W, dY, X

  const auto op = [&](const at::Tensor& t, GemmKind k, Operand o) {
    return kernels::GemmOperand{t, operand_axis(k, o), plan[k].operand[static_cast<size_t>(o)], state->key(k, o)};
  };
  const auto hopper = [](const kernels::GemmOperand& a, const kernels::GemmOperand& b) {
    return kernels::quantized_gemm(a, b, kernels::GemmPath::kHopperFP8).to(at::kFloat);
  };
  CHECK(r.y.scalar_type() == at::kFloat);
  CHECK(at::equal(r.y, hopper(op(x, GemmKind::kFprop, Operand::kA), op(w, GemmKind::kFprop, Operand::kB))));
  CHECK(at::equal(r.dx, hopper(op(g, GemmKind::kDgrad, Operand::kA), op(w, GemmKind::kDgrad, Operand::kB))
                            .to(at::kBFloat16)));
  CHECK(at::equal(r.dw, hopper(op(g, GemmKind::kWgrad, Operand::kA), op(x, GemmKind::kWgrad, Operand::kB))));

  // The emulated engine on the same plan: the same quantized values, so the products agree to
  // BF16 rounding and summation order (a forgotten 3/4 pre-scale would be 33% off).
  auto emulated = std::make_shared<const LinearState>(
      LinearState{2, plan, session_with(GemmPrecision::kMXFP4, GemmRoute::kEmulated, kSessionStep, kSessionSeed)});
  const Result e = run(x, w, g, emulated);
  CHECK(rel_err(r.y, e.y) < 1e-2);
  CHECK(rel_err(r.dx, e.dx) < 1e-2);
  CHECK(rel_err(r.dw, e.dw) < 1e-2);
}

TEST_CASE("Layers sharing an input reuse its FP8 codes on the fp8-tensorwise engine, changing no bit",
          "[trainer][mx_linear][cuda][engine][quant_memo]") {
  if (!torch::cuda::is_available()) MXABLATE_SKIP("no CUDA device");
  const at::Device cuda(at::kCUDA, 0);
  const std::string why = kernels::gemm_route_unavailable_reason(GemmRoute::kFP8Tensorwise, cuda);
  if (!why.empty()) MXABLATE_SKIP("fp8-tensorwise not run: " << why);
  LinearPlan plan;
  for (auto& gemm : plan.gemm) {
    gemm.precision = GemmPrecision::kFP8;
    gemm.operand = {QuantSpec{QuantFormat::kFP8E4M3}, QuantSpec{QuantFormat::kFP8E4M3}};
  }
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand[0] = QuantSpec{QuantFormat::kFP8E5M2};
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand[0] = QuantSpec{QuantFormat::kFP8E5M2};
  at::Generator gen = at::detail::createCPUGenerator(17);
  const at::Tensor x0 = at::randn({256, 128}, gen).to(cuda).to(at::kBFloat16);
  std::vector<at::Tensor> w0, g;
  for (int layer = 0; layer < 3; ++layer) {  // q, k and v of one block: one input
    w0.push_back(at::randn({64, 128}, gen).to(cuda));
    g.push_back(at::randn({256, 64}, gen).to(cuda).to(at::kBFloat16));
  }
  struct Outcome {
    std::vector<at::Tensor> y, dw;
    at::Tensor dx;
    int64_t hits = 0;
  };
  const auto run_layers = [&](bool memo) {
    auto session = session_with(GemmPrecision::kFP8, GemmRoute::kFP8Tensorwise, kSessionStep, kSessionSeed);
    session->memo.enabled = memo;
    Outcome o;
    at::Tensor x = x0.clone().requires_grad_(true);
    std::vector<at::Tensor> w;
    at::Tensor total = at::zeros({}, at::TensorOptions(cuda).dtype(at::kFloat));
    for (int layer = 0; layer < 3; ++layer) {
      w.push_back(w0[layer].clone().requires_grad_(true));
      const auto state = std::make_shared<const LinearState>(layer, plan, session);
      REQUIRE(state->engine(GemmKind::kFprop).route() == GemmRoute::kFP8Tensorwise);
      const at::Tensor y = mx_linear(x, w.back(), state);
      o.y.push_back(y.detach());
      total = total + (y.to(at::kFloat) * g[layer].to(at::kFloat)).sum();
    }
    total.backward();
    o.dx = x.grad();
    for (const at::Tensor& wi : w) o.dw.push_back(wi.grad());
    o.hits = session->memo.hits();
    return o;
  };
  const Outcome with = run_layers(true), without = run_layers(false);
  for (int layer = 0; layer < 3; ++layer) {
    INFO("layer " << layer);
    CHECK(at::equal(with.y[layer], without.y[layer]));
    CHECK(at::equal(with.dw[layer], without.dw[layer]));
  }
  CHECK(at::equal(with.dx, without.dx));
  // k and v reuse q's codes of X along rows (Fprop) and down columns (Wgrad).
  CHECK(with.hits == 4);
  CHECK(without.hits == 0);
}
