// The interventions of Wang et al. (arXiv 2501.17116) in MXLinear. DGE: its derivative against a
// central difference of its own smooth function, its clamp, its conventions (grid points, poles,
// saturation, k = 1), and MXLinear's dW with DGE equal to the plain dW times the derivative at W
// over the block scales (computed independently for MXFP4). OCC: the nearest-rank threshold, the
// compensated count for a constructed X, identity when nothing is clamped, exactness when
// quantization is the identity, and the forward/backward against a hand-built reference.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch.h"
#include "linear_test_util.h"
#include "mxablate/kernels/torch/block_scales.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/trainer/numerics/dge.h"
#include "mxablate/trainer/numerics/mx_linear.h"
#include "mxablate/trainer/numerics/occ.h"
#include "mxablate/trainer/plan/plan_rules.h"

using namespace mxablate;
using namespace mxablate::trainer;
using namespace mxablate::test;
using kernels::Axis;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

LinearPlan fp4_plan(QuantFormat f) {
  LinearPlan plan = plain_bf16_plan();
  for (GemmKind g : {GemmKind::kFprop, GemmKind::kWgrad})
    plan.gemm[static_cast<size_t>(g)].operand = {QuantSpec{f}, QuantSpec{f}};
  plan.gemm[0].precision = f == QuantFormat::kMXFP4 ? GemmPrecision::kMXFP4 : GemmPrecision::kNVFP4;
  return plan;
}

#define CHECK_CONTAINS(text, part)                \
  do {                                            \
    const std::string text_ = (text);             \
    INFO("text: " << text_);                      \
    CHECK(text_.find(part) != std::string::npos); \
  } while (0)

// The E2M1 magnitude intervals [q, q + δ].
const std::vector<std::pair<double, double>> kIntervals{
    {0, 0.5}, {0.5, 0.5}, {1, 0.5}, {1.5, 0.5}, {2, 1}, {3, 1}, {4, 2}};

}  // namespace

TEST_CASE("DGE's derivative is the central difference of its smooth function", "[trainer][dge]") {
  for (double k : {2.0, 3.5, 5.0}) {
    const contract::DgeConfig config{k, 1e9};  // no clamp: the bare derivative
    std::vector<double> us, expected;
    for (const auto& [q, delta] : kIntervals) {
      for (double tau = 0.03; tau < 0.975; tau += 0.0125) {
        if (std::fabs(tau - 0.5) < 0.06) continue;  // away from the pole at mid-interval
        for (double sign : {1.0, -1.0}) {
          const double u = sign * (q + tau * delta);
          const double h = 1e-6 * delta;
          const double fd = (dge_smooth(u + h, k) - dge_smooth(u - h, k)) / (2 * h);
          INFO("k " << k << " u " << u);
          CHECK(dge_derivative(u, config) == Approx(fd).epsilon(1e-6));
          us.push_back(u);
          expected.push_back(dge_derivative(u, config));
        }
      }
    }
    // The tensor function (float32) agrees with the scalar twin.
    const at::Tensor u = at::tensor(us, at::kDouble).to(at::kFloat);
    const at::Tensor d = dge_derivative(u, config).to(at::kDouble);
    const at::Tensor e = at::tensor(expected, at::kDouble);
    CHECK(((d - e).abs() / e).max().item<double>() < 1e-5);
  }
}

TEST_CASE("DGE's smooth function passes through the grid and its interval midpoints",
          "[trainer][dge]") {
  for (const auto& [q, delta] : kIntervals) {
    CHECK(dge_smooth(q, 5) == Approx(q).margin(1e-12));
    CHECK(dge_smooth(q + delta, 5) == Approx(q + delta).margin(1e-12));
    CHECK(dge_smooth(q + delta / 2, 5) == Approx(q + delta / 2).margin(1e-12));
    CHECK(dge_smooth(-(q + delta / 4), 5) == Approx(-dge_smooth(q + delta / 4, 5)));
  }
  CHECK(dge_smooth(7.5, 5) == 6.0);  // saturated
  CHECK(dge_smooth(-9, 5) == -6.0);
}

TEST_CASE("DGE's derivative: clamp, grid points, poles, saturation, k = 1", "[trainer][dge]") {
  const contract::DgeConfig config{5, 3};
  std::vector<double> us;
  for (double u = -7; u <= 7; u += 1.0 / 1024) us.push_back(u);
  const at::Tensor u = at::tensor(us, at::kDouble).to(at::kFloat);
  const at::Tensor d = dge_derivative(u, config);
  CHECK(d.max().item<double>() == 3.0);  // the pole is reached and clamped
  CHECK(d.min().item<double>() == 0.0);  // saturated values
  for (size_t i = 0; i < us.size(); ++i) {
    const double v = us[i];
    INFO("u " << v);
    REQUIRE(dge_derivative(v, config) <= 3.0);
    if (std::fabs(v) > 6) REQUIRE(dge_derivative(v, config) == 0.0);
  }
  for (const auto& [q, delta] : kIntervals) {
    for (double sign : {1.0, -1.0}) {
      CHECK(dge_derivative(sign * q, config) == Approx(0.2));                // grid: 1/k
      CHECK(dge_derivative(sign * (q + delta / 2), config) == 3.0);         // pole: clamp
      CHECK(dge_derivative(sign * (q + delta / 2), {5, 1e300}) == 1e300);  // pole: +inf, clamped
    }
  }
  CHECK(dge_derivative(6.0, config) == Approx(0.2));
  CHECK(dge_derivative(6.001, config) == 0.0);
  // k = 1 is the straight-through estimator inside the range.
  const at::Tensor inside = u.index({u.abs() <= 6});
  CHECK(at::equal(dge_derivative(inside, {1, 3}), at::ones_like(inside)));
  for (double v : {0.0, 0.25, 1.3, -2.5, 5.99}) CHECK(dge_derivative(v, {1, 3}) == 1.0);
  // A NaN is propagated, not hidden.
  CHECK(std::isnan(dge_derivative(std::nan(""), config)));
  CHECK(std::isnan(dge_derivative(at::full({1}, std::nanf("")), config).item<float>()));
}

TEST_CASE("MXLinear's dW under DGE is the plain dW times the derivative at W / s",
          "[trainer][dge][mx_linear]") {
  const at::Tensor x = spread(kM, kK, 1), w = spread(kN, kK, 2), g = spread(kM, kN, 3);
  SECTION("MXFP4, scales computed here from the floor rule") {
    LinearPlan plan = fp4_plan(QuantFormat::kMXFP4);
    const Result plain = run(x, w, g, plan);
    plan.dge = contract::DgeConfig{5, 3};
    const Result dge = run(x, w, g, plan);
    CHECK(at::equal(dge.y, plain.y));
    CHECK(at::equal(dge.dx, plain.dx));
    const at::Tensor amax = w.reshape({kN, kK / 32, 32}).abs().amax(-1, true);
    const at::Tensor s = at::exp2(at::floor(at::log2(amax)) - 2).expand({kN, kK / 32, 32}).reshape({kN, kK});
    const at::Tensor factor = dge_derivative(w / s, *plan.dge);
    CHECK(at::equal(dge.dw, plain.dw * factor));
    CHECK_FALSE(at::equal(dge.dw, plain.dw));
    // Floor-rule block maxima above 6 are saturated: their gradient is zero.
    CHECK((factor == 0).sum().item<int64_t>() > 0);
    CHECK(((w / s).abs() > 6).equal(factor == 0));
  }
  SECTION("NVFP4: block scale times global scale") {
    LinearPlan plan = fp4_plan(QuantFormat::kNVFP4);
    const Result plain = run(x, w, g, plan);
    plan.dge = contract::DgeConfig{3, 2.5};
    const Result dge = run(x, w, g, plan);
    const at::Tensor s = kernels::element_scales(w, Axis::kRows, QuantSpec{QuantFormat::kNVFP4},
                                                 key(GemmKind::kFprop, Operand::kB));
    CHECK(at::equal(dge.dw, plain.dw * dge_derivative(w / s, *plan.dge)));
    CHECK(dge.dw.abs().max().item<double>() > 0);
  }
}

TEST_CASE("check_dge and check_occ say why a plan cannot carry them, MXLinear refuses it",
          "[trainer][dge][occ]") {
  LinearPlan plan = fp4_plan(QuantFormat::kMXFP4);
  CHECK(check_dge(plan).empty());  // no DGE: nothing to check
  plan.dge = contract::DgeConfig{};
  CHECK(check_dge(plan).empty());
  LinearPlan nv = fp4_plan(QuantFormat::kNVFP4);
  nv.dge = contract::DgeConfig{};
  CHECK(check_dge(nv).empty());

  LinearPlan bf = plain_bf16_plan();
  bf.dge = contract::DgeConfig{};
  CHECK_CONTAINS(check_dge(bf), "needs Fprop's weight in an FP4 format");
  CHECK_CONTAINS(check_dge(bf), "bf16");
  LinearPlan fp8 = plan;
  fp8.gemm[0].operand[1] = QuantSpec{QuantFormat::kFP8E4M3};
  CHECK_CONTAINS(check_dge(fp8), "fp8-e4m3");

  LinearPlan rotated = plan;
  rotated.gemm[0].rotated = true;
  for (auto& spec : rotated.gemm[0].operand) spec.hadamard = kernels::HadamardMode::kDeterministic;
  CHECK_CONTAINS(check_dge(rotated), "unrotated");

  LinearPlan bad_k = plan;
  bad_k.dge->k = 0;
  CHECK_CONTAINS(check_dge(bad_k), "quant.dge.k");
  LinearPlan bad_clamp = plan;
  bad_clamp.dge->clamp = std::numeric_limits<double>::infinity();
  CHECK_CONTAINS(check_dge(bad_clamp), "quant.dge.clamp");

  LinearPlan occ = plain_bf16_plan();
  CHECK(check_occ(occ).empty());
  for (double q : {1.0, 0.99, 1e-9}) {
    occ.occ = contract::OccConfig{q};
    CHECK(check_occ(occ).empty());
  }
  for (double q : {0.0, -0.5, 1.0000001, std::nan("")}) {
    occ.occ = contract::OccConfig{q};
    CHECK_CONTAINS(check_occ(occ), "quant.occ.quantile must lie in (0, 1]");
  }

  auto session = std::make_shared<QuantSession>();
  try {
    MXLinear layer(kK, kN, 0, bf, session);
    FAIL("a DGE plan with a BF16 Fprop weight was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == check_dge(bf));
  }
  auto state = std::make_shared<const LinearState>(LinearState{0, rotated, session});
  CHECK_THROWS_AS(mx_linear(at::ones({4, kK}), at::ones({kN, kK}), state), std::invalid_argument);
}

TEST_CASE("OCC's threshold is the nearest rank: ceil(q n)", "[trainer][occ]") {
  CHECK(occ_rank(0.1, 10) == 1);
  CHECK(occ_rank(0.99, 100) == 99);
  CHECK(occ_rank(0.995, 1000) == 995);
  CHECK(occ_rank(0.5, 3) == 2);
  CHECK(occ_rank(0.7, 10) == 7);
  CHECK(occ_rank(0.07, 100) == 7);     // 0.07 * 100 = 7.000000000000001 in doubles
  CHECK(occ_rank(0.56, 10000) == 5600);  // 5600.000000000001
  CHECK(occ_rank(0.5601, 10000) == 5601);
  CHECK(occ_rank(1.0, int64_t{1} << 50) == int64_t{1} << 50);
  CHECK(occ_rank(1.0, 12345) == 12345);
  CHECK(occ_rank(1e-9, 12345) == 1);
  CHECK(occ_rank(0.994, 1024) == 1018);
  CHECK_THROWS_AS(occ_rank(0.0, 10), std::invalid_argument);
  CHECK_THROWS_AS(occ_rank(0.5, 0), std::invalid_argument);
}

TEST_CASE("OCC clamps exactly the values above the quantile and reports their share",
          "[trainer][occ]") {
  // 32 x 32 values in [-1, 1] and 7 outliers of distinct magnitudes 10 … 16; q = 0.994 puts the
  // threshold at rank ceil(0.994 * 1024) = 1018, the smallest outlier (10): 6 are clamped.
  at::Generator gen = at::detail::createCPUGenerator(9);
  at::Tensor x = at::rand({32, 32}, gen) * 2 - 1;
  const std::vector<std::pair<int, int>> at_ = {{0, 1}, {2, 5}, {3, 31}, {5, 0}, {7, 7}, {9, 30}, {9, 31}};
  for (size_t i = 0; i < at_.size(); ++i)
    x[at_[i].first][at_[i].second] = (i % 2 ? -1.0 : 1.0) * (10.0 + static_cast<double>(i));
  const OccSplit split = occ_split(x, 0.994);
  CHECK(split.threshold == 10.0);
  CHECK(split.residual.nnz() == 6);
  CHECK(split.residual.fraction() == 6.0 / 1024);
  CHECK(split.clamped.abs().max().item<double>() == 10.0);
  CHECK(at::equal(split.clamped.index({x.abs() <= 10}), x.index({x.abs() <= 10})));
  // The residual, densified, is X - clamp(X) (exact here: integers).
  const at::Tensor dense = split.residual.times(at::eye(32));
  CHECK(at::equal(dense, x - split.clamped));

  // MXLinear reports the same share with Fprop's X telemetry, and only there.
  LinearPlan plan = fp4_plan(QuantFormat::kMXFP4);
  plan.occ = contract::OccConfig{0.994};
  const Result r = run_traced(x, spread(kN, 32, 4), spread(32, kN, 5), plan);
  int with_fraction = 0;
  for (const auto& rec : r.records) {
    if (rec.gemm == GemmKind::kFprop && rec.operand == Operand::kA) {
      REQUIRE(rec.occ_fraction.has_value());
      CHECK(*rec.occ_fraction == 6.0 / 1024);
      ++with_fraction;
    } else {
      CHECK_FALSE(rec.occ_fraction.has_value());
    }
  }
  CHECK(with_fraction == 1);
}

TEST_CASE("OCC at quantile 1 clamps nothing: MXLinear equals the plain path", "[trainer][occ]") {
  const at::Tensor x = spread(kM, kK, 11), w = spread(kN, kK, 12), g = spread(kM, kN, 13);
  LinearPlan plan = fp4_plan(QuantFormat::kMXFP4);
  const Result plain = run(x, w, g, plan);
  plan.occ = contract::OccConfig{1.0};
  const Result occ = run_traced(x, w, g, plan);
  CHECK(at::equal(occ.y, plain.y));
  CHECK(at::equal(occ.dx, plain.dx));
  CHECK(at::equal(occ.dw, plain.dw));
  REQUIRE_FALSE(occ.records.empty());
  REQUIRE(occ.records[0].occ_fraction.has_value());
  CHECK(*occ.records[0].occ_fraction == 0.0);
}

TEST_CASE("OCC with quantization the identity gives the unclamped products exactly",
          "[trainer][occ]") {
  // BF16 precision and small integers and halves: every value, product and sum is exact, so
  // Q(Xc) Wᵀ + R Wᵀ must be X Wᵀ to the bit, and dW = dYᵀ Xc + dYᵀ R = dYᵀ X.
  at::Generator gen = at::detail::createCPUGenerator(21);
  at::Tensor x = at::randint(-8, 9, {kM, kK}, gen).to(at::kFloat) / 2;
  x[3][4] = 96;
  x[10][0] = -72;
  x[50][63] = 40;
  const at::Tensor w = at::randint(-4, 5, {kN, kK}, gen).to(at::kFloat);
  const at::Tensor g = at::randint(-4, 5, {kM, kN}, gen).to(at::kFloat);
  LinearPlan plan = plain_bf16_plan();
  plan.occ = contract::OccConfig{0.8};
  const OccSplit split = occ_split(x, 0.8);
  CHECK(split.threshold == 3.5);
  REQUIRE(split.residual.nnz() > 100);  // the outliers and every ±4
  const Result r = run(x, w, g, plan);
  CHECK(at::equal(r.y, at::mm(x, w.t())));
  CHECK(at::equal(r.dw, at::mm(g.t(), x)));
  CHECK(at::equal(r.dx, at::mm(g, w)));  // Dgrad: straight through the clamp
}

TEST_CASE("OCC under MXFP4: Y and dW are the clamped quantized products plus the BF16 residual's",
          "[trainer][occ]") {
  const at::Tensor x = spread(kM, kK, 31), w = spread(kN, kK, 32), g = spread(kM, kN, 33);
  LinearPlan plan = fp4_plan(QuantFormat::kMXFP4);
  const Result plain = run(x, w, g, plan);
  plan.occ = contract::OccConfig{0.97};
  const Result r = run(x, w, g, plan);
  const OccSplit split = occ_split(x, 0.97);
  const at::Tensor resid = bf16(x - split.clamped);
  const QuantSpec mx{QuantFormat::kMXFP4};
  const at::Tensor y_ref =
      at::mm(kernels::fake_quantize(split.clamped, Axis::kRows, mx, key(GemmKind::kFprop, Operand::kA)),
             kernels::fake_quantize(w, Axis::kRows, mx, key(GemmKind::kFprop, Operand::kB)).t()) +
      at::mm(resid, bf16(w).t());
  const at::Tensor dw_ref =
      at::mm(kernels::fake_quantize(g, Axis::kCols, mx, key(GemmKind::kWgrad, Operand::kA)).t(),
             kernels::fake_quantize(split.clamped, Axis::kCols, mx, key(GemmKind::kWgrad, Operand::kB))) +
      at::mm(bf16(g).t(), resid);
  CHECK(rel_err(r.y, y_ref) < 1e-6);
  CHECK(rel_err(r.dw, dw_ref) < 1e-6);
  CHECK(at::equal(r.dx, plain.dx));
  CHECK(rel_err(r.y, plain.y) > 1e-3);  // the clamp changed the quantized operand
  // Compensation brings Y closer to the exact product than plain MXFP4 quantization.
  const at::Tensor exact = at::mm(x, w.t());
  CHECK(rel_err(r.y, exact) < rel_err(plain.y, exact));
}

TEST_CASE("DGE and OCC together: the factor multiplies the quantized product, not the residual's",
          "[trainer][dge][occ]") {
  const at::Tensor x = spread(kM, kK, 41), w = spread(kN, kK, 42), g = spread(kM, kN, 43);
  LinearPlan plan = fp4_plan(QuantFormat::kMXFP4);
  plan.dge = contract::DgeConfig{5, 3};
  plan.occ = contract::OccConfig{0.95};
  const Result r = run(x, w, g, plan);
  const OccSplit split = occ_split(x, 0.95);
  const QuantSpec mx{QuantFormat::kMXFP4};
  const at::Tensor quantized =
      at::mm(kernels::fake_quantize(g, Axis::kCols, mx, key(GemmKind::kWgrad, Operand::kA)).t(),
             kernels::fake_quantize(split.clamped, Axis::kCols, mx, key(GemmKind::kWgrad, Operand::kB)));
  const at::Tensor factor = dge_weight_factor(w, mx, key(GemmKind::kFprop, Operand::kB), *plan.dge);
  const at::Tensor residual = at::mm(bf16(g).t(), bf16(x - split.clamped));
  CHECK(rel_err(r.dw, quantized * factor + residual) < 1e-6);
  CHECK(rel_err(r.dw, (quantized + residual) * factor) > 1e-3);
}
