// MXLinear: each of the three GEMMs must be exactly "quantize both operands along that GEMM's
// reduction dimension with the kernels, then multiply" — checked one GEMM at a time with
// M, N, K all different, so an operand quantized along the wrong axis (or with the wrong key)
// cannot pass. BF16 everywhere must equal torch's linear to BF16 rounding, and a deterministic
// Hadamard rotation without quantization must leave every GEMM unchanged to rounding.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "catch.h"
#include "linear_test_util.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/quantized_gemm.h"
#include "mxablate/trainer/numerics/mx_linear.h"

using namespace mxablate;
using namespace mxablate::trainer;
using namespace mxablate::test;
using kernels::Axis;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

struct Case {
  at::Tensor x, w, g;  // g: the upstream gradient dY
};

Case make_case(uint64_t seed) { return {spread(kM, kK, seed), spread(kN, kK, seed + 1), spread(kM, kN, seed + 2)}; }

Result run(const Case& c, const LinearPlan& plan, uint32_t step = kStep) {
  return test::run(c.x, c.w, c.g, plan, step);
}

at::Tensor fq(const at::Tensor& t, Axis axis, const QuantSpec& spec, GemmKind g, Operand o) {
  return kernels::fake_quantize(t.contiguous(), axis, spec, key(g, o));
}

LinearPlan bf16_except(GemmKind g, const QuantSpec& a, const QuantSpec& b) {
  LinearPlan plan = plain_bf16_plan();
  plan.gemm[static_cast<size_t>(g)].operand = {a, b};
  return plan;
}

const QuantSpec kMx{QuantFormat::kMXFP4};

}  // namespace

TEST_CASE("MXLinear in BF16 equals torch linear", "[trainer][mx_linear]") {
  const Case c = make_case(1);
  const Result r = run(c, plain_bf16_plan());
  // Exactly the BF16-operand products with FP32 accumulation.
  CHECK(at::allclose(r.y, at::linear(bf16(c.x), bf16(c.w)), 1e-5, 1e-6));
  CHECK(at::allclose(r.dx, at::mm(bf16(c.g), bf16(c.w)), 1e-5, 1e-6));
  CHECK(at::allclose(r.dw, at::mm(bf16(c.g).t(), bf16(c.x)), 1e-5, 1e-6));
  // And torch::linear's own float32 forward and gradients, to BF16 rounding.
  at::Tensor x = c.x.clone().requires_grad_(true);
  at::Tensor w = c.w.clone().requires_grad_(true);
  at::Tensor y = at::linear(x, w);
  y.backward(c.g);
  CHECK(rel_err(r.y, y.detach()) < 6e-3);
  CHECK(rel_err(r.dx, x.grad()) < 6e-3);
  CHECK(rel_err(r.dw, w.grad()) < 6e-3);
  CHECK(rel_err(r.y, y.detach()) > 0);  // the operands really were rounded
}

TEST_CASE("MXFP4 Fprop quantizes X and W along K", "[trainer][mx_linear]") {
  const Case c = make_case(2);
  const Result r = run(c, bf16_except(GemmKind::kFprop, kMx, kMx));
  const at::Tensor expected = at::mm(fq(c.x, Axis::kRows, kMx, GemmKind::kFprop, Operand::kA),
                                     fq(c.w, Axis::kRows, kMx, GemmKind::kFprop, Operand::kB).t());
  CHECK(at::equal(r.y, expected));
  // Quantizing W down its columns (along N) instead would be a different product.
  const at::Tensor wrong = at::mm(fq(c.x, Axis::kRows, kMx, GemmKind::kFprop, Operand::kA),
                                  fq(c.w, Axis::kCols, kMx, GemmKind::kFprop, Operand::kB).t());
  CHECK(rel_err(wrong, expected) > 1e-3);
  // The other two GEMMs stayed BF16.
  CHECK(at::allclose(r.dx, at::mm(bf16(c.g), bf16(c.w)), 1e-5, 1e-6));
  CHECK(at::allclose(r.dw, at::mm(bf16(c.g).t(), bf16(c.x)), 1e-5, 1e-6));
}

TEST_CASE("MXFP4 Dgrad quantizes dY along N and W down its columns", "[trainer][mx_linear]") {
  const Case c = make_case(3);
  const Result r = run(c, bf16_except(GemmKind::kDgrad, kMx, kMx));
  const at::Tensor expected = at::mm(fq(c.g, Axis::kRows, kMx, GemmKind::kDgrad, Operand::kA),
                                     fq(c.w, Axis::kCols, kMx, GemmKind::kDgrad, Operand::kB));
  CHECK(at::equal(r.dx, expected));
  const at::Tensor w_along_k = at::mm(fq(c.g, Axis::kRows, kMx, GemmKind::kDgrad, Operand::kA),
                                      fq(c.w, Axis::kRows, kMx, GemmKind::kDgrad, Operand::kB));
  CHECK(rel_err(w_along_k, expected) > 1e-3);
  CHECK(at::allclose(r.y, at::linear(bf16(c.x), bf16(c.w)), 1e-5, 1e-6));
  CHECK(at::allclose(r.dw, at::mm(bf16(c.g).t(), bf16(c.x)), 1e-5, 1e-6));
}

TEST_CASE("With 2-D weight blocks W in Fprop and Wᵀ in Dgrad are the same values, SR included",
          "[trainer][mx_linear]") {
  const Case c = make_case(11);  // W is 160 x 64: whole 32 x 32 tiles
  QuantSpec w2d = kMx;
  w2d.blocks = kernels::BlockShape::k2D;
  w2d.rounding = kernels::Rounding::kStochastic;
  const QuantSpec bf16_spec{QuantFormat::kBF16};
  LinearPlan plan = plain_bf16_plan();
  plan.gemm[static_cast<size_t>(GemmKind::kFprop)].operand = {bf16_spec, w2d};
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand = {bf16_spec, w2d};
  const Result r = run(c, plan);
  // The values Fprop used: W along its rows with Fprop's key.
  const at::Tensor wq = fq(c.w, Axis::kRows, w2d, GemmKind::kFprop, Operand::kB);
  CHECK(at::equal(r.y, at::mm(bf16(c.x), wq.t())));
  CHECK(at::equal(r.dx, at::mm(bf16(c.g), wq)));  // Dgrad: the very same W
  // With 1-D blocks the two differ (blocks along other axes, and their own random streams).
  QuantSpec w1d = w2d;
  w1d.blocks = kernels::BlockShape::k1D;
  plan.gemm[static_cast<size_t>(GemmKind::kFprop)].operand = {bf16_spec, w1d};
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand = {bf16_spec, w1d};
  const Result one_d = run(c, plan);
  const at::Tensor wq_rows = fq(c.w, Axis::kRows, w1d, GemmKind::kFprop, Operand::kB);
  CHECK_FALSE(at::equal(one_d.dx, at::mm(bf16(c.g), wq_rows)));
}

TEST_CASE("MXFP4 Wgrad quantizes dY and X along the tokens", "[trainer][mx_linear]") {
  const Case c = make_case(4);
  const Result r = run(c, bf16_except(GemmKind::kWgrad, kMx, kMx));
  const at::Tensor expected = at::mm(fq(c.g, Axis::kCols, kMx, GemmKind::kWgrad, Operand::kA).t(),
                                     fq(c.x, Axis::kCols, kMx, GemmKind::kWgrad, Operand::kB));
  CHECK(at::equal(r.dw, expected));
  const at::Tensor along_features = at::mm(fq(c.g, Axis::kRows, kMx, GemmKind::kWgrad, Operand::kA).t(),
                                           fq(c.x, Axis::kRows, kMx, GemmKind::kWgrad, Operand::kB));
  CHECK(rel_err(along_features, expected) > 1e-3);
  CHECK(at::allclose(r.y, at::linear(bf16(c.x), bf16(c.w)), 1e-5, 1e-6));
  CHECK(at::allclose(r.dx, at::mm(bf16(c.g), bf16(c.w)), 1e-5, 1e-6));
}

TEST_CASE("A full MXFP4 plan with SR on gradients and random Hadamard on Wgrad", "[trainer][mx_linear]") {
  contract::LayerSettings config;
  config.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kMXFP4,
                      contract::GemmPrecision::kMXFP4};
  config.stochastic_rounding = {contract::OperandClass::kGrad};
  config.hadamard = {kernels::HadamardMode::kPerStepRandom, 32, {GemmKind::kWgrad}};
  const LinearPlan plan = make_linear_plan(config);
  const Case c = make_case(5);
  const Result r = run(c, plan, /*step=*/9);
  const auto spec = [&](GemmKind g, Operand o) { return plan[g].operand[static_cast<size_t>(o)]; };
  const auto q = [&](const at::Tensor& t, Axis axis, GemmKind g, Operand o) {
    return kernels::fake_quantize(t.contiguous(), axis, spec(g, o), key(g, o, 9));
  };
  CHECK(at::equal(r.y, at::mm(q(c.x, Axis::kRows, GemmKind::kFprop, Operand::kA),
                              q(c.w, Axis::kRows, GemmKind::kFprop, Operand::kB).t())));
  CHECK(at::equal(r.dx, at::mm(q(c.g, Axis::kRows, GemmKind::kDgrad, Operand::kA),
                               q(c.w, Axis::kCols, GemmKind::kDgrad, Operand::kB))));
  CHECK(at::equal(r.dw, at::mm(q(c.g, Axis::kCols, GemmKind::kWgrad, Operand::kA).t(),
                               q(c.x, Axis::kCols, GemmKind::kWgrad, Operand::kB))));
  // Reproducible for the same (seed, step); the SR stream and rotation change with the step.
  const Result again = run(c, plan, 9);
  CHECK(at::equal(again.dw, r.dw));
  const Result next_step = run(c, plan, 10);
  CHECK(at::equal(next_step.y, r.y));  // Fprop is deterministic (no SR, no rotation)
  CHECK_FALSE(at::equal(next_step.dw, r.dw));
  CHECK_FALSE(at::equal(next_step.dx, r.dx));
  // Still an estimate of the true gradient.
  CHECK(rel_err(r.dw, at::mm(c.g.t(), c.x)) < 0.35);
}

TEST_CASE("A deterministic Hadamard rotation without quantization leaves every GEMM unchanged",
          "[trainer][mx_linear]") {
  const Case c = make_case(6);
  const at::Tensor y_ref = at::mm(c.x, c.w.t());
  const at::Tensor dx_ref = at::mm(c.g, c.w);
  const at::Tensor dw_ref = at::mm(c.g.t(), c.x);
  for (int size : {16, 32}) {  // sizes dividing M = 96, K = 64 and N = 160
    // FP32 "quantization" (identity) with the rotation: cancels to float32 rounding.
    LinearPlan fp32;
    for (auto& g : fp32.gemm) {
      g.rotated = true;
      g.operand[0] = g.operand[1] =
          QuantSpec{QuantFormat::kFP32, kernels::ScaleRule::kFloor, kernels::Rounding::kNearest,
                    kernels::HadamardMode::kDeterministic, size};
    }
    const Result r = run(c, fp32);
    CHECK(rel_err(r.y, y_ref) < 1e-6);
    CHECK(rel_err(r.dx, dx_ref) < 1e-6);
    CHECK(rel_err(r.dw, dw_ref) < 1e-6);
    // BF16 with the rotation (the config's "bf16" precision and hadamard on all GEMMs): BF16
    // rounding of rotated operands, as close to the exact product as plain BF16 is.
    contract::LayerSettings config;
    config.hadamard = {kernels::HadamardMode::kDeterministic, size,
                       {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad}};
    const Result rb = run(c, make_linear_plan(config));
    CHECK(rel_err(rb.y, y_ref) < 6e-3);
    CHECK(rel_err(rb.dx, dx_ref) < 6e-3);
    CHECK(rel_err(rb.dw, dw_ref) < 6e-3);
    CHECK_FALSE(at::equal(rb.y, run(c, plain_bf16_plan()).y));  // the rotation was applied
  }
}

TEST_CASE("MXLinear collects telemetry only for low-precision operands, only when asked",
          "[trainer][mx_linear]") {
  const Case c = make_case(7);
  contract::LayerSettings config;
  config.precision = {contract::GemmPrecision::kMXFP4, contract::GemmPrecision::kFP8,
                      contract::GemmPrecision::kBF16};
  auto session = std::make_shared<QuantSession>();
  auto state = std::make_shared<const LinearState>(LinearState{2, make_linear_plan(config), session});
  const auto pass = [&] {
    at::Tensor x = c.x.clone().requires_grad_(true);
    at::Tensor w = c.w.clone().requires_grad_(true);
    mx_linear(x, w, state).backward(c.g);
  };
  pass();
  CHECK(session->take_records().empty());
  session->collect_telemetry = true;
  pass();
  const auto records = session->take_records();
  REQUIRE(records.size() == 4);  // Fprop X, W (MXFP4) and Dgrad dY, W (FP8); Wgrad is BF16
  int fprop = 0, dgrad = 0;
  for (const auto& rec : records) {
    CHECK(rec.layer == 2);
    CHECK(rec.gemm != GemmKind::kWgrad);
    (rec.gemm == GemmKind::kFprop ? fprop : dgrad) += 1;
    CHECK(rec.telemetry.relative_error() > 0);
    CHECK(rec.telemetry.relative_error() < (rec.gemm == GemmKind::kFprop ? 0.3 : 0.1));
  }
  CHECK(fprop == 2);
  CHECK(dgrad == 2);
}

TEST_CASE("MXLinear under NoGradGuard computes only the forward", "[trainer][mx_linear]") {
  const Case c = make_case(8);
  auto state = std::make_shared<const LinearState>(
      LinearState{0, bf16_except(GemmKind::kFprop, kMx, kMx), std::make_shared<QuantSession>()});
  state->session->collect_telemetry = true;
  at::Tensor w = c.w.clone().requires_grad_(true);
  torch::NoGradGuard no_grad;
  const at::Tensor y = mx_linear(c.x, w, state);
  CHECK_FALSE(y.requires_grad());
  CHECK(state->session->take_records().size() == 2);
}

TEST_CASE("An SR pre-scale is divided back out of every emulated GEMM, as quantized_gemm does",
          "[trainer][mx_linear]") {
  // dY under stochastic rounding with Quartet's 3/4 pre-scale in Dgrad and Wgrad, X and W in
  // plain MXFP4: the quantizers hold Q(3/4 · dY), so the products must be multiplied by 4/3.
  // (Before the fix MXLinear multiplied the pre-scaled values as they were: gradients 3/4 too
  // small, hidden by Adam's scale invariance.)
  const Case c = make_case(12);
  QuantSpec sr = kMx;
  sr.rounding = kernels::Rounding::kStochastic;
  sr.sr_prescale = 0.75f;
  LinearPlan plan = plain_bf16_plan();
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand = {sr, kMx};
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand = {sr, kMx};
  const Result r = run(c, plan);
  const auto gemm = [&](GemmKind g, const at::Tensor& a, Axis aa, const at::Tensor& b, Axis ba) {
    return kernels::quantized_gemm({a, aa, sr, key(g, Operand::kA)}, {b, ba, kMx, key(g, Operand::kB)},
                                   kernels::GemmPath::kEmulated);
  };
  // Dgrad: dX = dY · W, reducing over N (dY along rows, W down its columns).
  CHECK(at::equal(r.dx, gemm(GemmKind::kDgrad, c.g, Axis::kRows, c.w, Axis::kCols)));
  // Wgrad: dW = dYᵀ · X, reducing over M (both down their columns).
  CHECK(at::equal(r.dw, gemm(GemmKind::kWgrad, c.g, Axis::kCols, c.x, Axis::kCols)));
  // And the gradients estimate the unscaled product, not 3/4 of it (SR's noise is large on these
  // heavy-tailed values, but its mean is the product: the norms agree, 3/4 would be far off).
  CHECK(std::abs((r.dx.norm() / at::mm(c.g, c.w).norm()).item<double>() - 1.0) < 0.1);
}
