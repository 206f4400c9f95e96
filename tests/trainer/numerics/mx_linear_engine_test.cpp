// MXLinear on the GEMM engine seam (docs/design.md §3). On the CPU every GEMM runs on the
// emulated engine, and its forward and backward must equal, bit for bit, MXLinear's computation
// before the seam, written out here from the kernels' primitives: each operand rounded to BF16
// (plain BF16) or fake-quantized to float32 along its GEMM's K with its GEMM's key, each product a
// float32 at::mm times the GEMM's SR fold, OCC's residual products and DGE's factor added as
// before. Also: each GEMM's engine is picked once, when the layer's state is made, from the
// session's routes and the operand formats; a route that cannot run is one clear line.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "catch.h"
#include "linear_test_util.h"
#include "mxablate/contract/gemm_routing.h"
#include "mxablate/kernels/torch/fake_quantize.h"
#include "mxablate/kernels/torch/gemm_engine.h"
#include "mxablate/trainer/numerics/dge.h"
#include "mxablate/trainer/numerics/mx_linear.h"
#include "mxablate/trainer/numerics/occ.h"

using namespace mxablate;
using namespace mxablate::trainer;
using namespace mxablate::test;
using kernels::Axis;
using kernels::GemmKind;
using kernels::GemmRoute;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

// MXLinear before the seam, on the CPU.
Result reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& g, const LinearPlan& plan) {
  const LinearState keys{kLayer, plan, session_at()};  // the random streams run keys the layer with
  const auto q = [&](const at::Tensor& t, GemmKind gemm, Operand o) {
    const QuantSpec& spec = plan[gemm].operand[static_cast<size_t>(o)];
    if (is_plain_bf16(spec)) return bf16(t);
    return kernels::fake_quantize(t, operand_axis(gemm, o), spec, keys.key(gemm, o), nullptr, at::kFloat);
  };
  const auto mm = [&](const at::Tensor& a, const at::Tensor& b, GemmKind gemm) {
    const auto& ops = plan[gemm].operand;
    const float fold = 1.0f / (kernels::effective_sr_prescale(ops[0]) * kernels::effective_sr_prescale(ops[1]));
    at::Tensor c = at::mm(a, b);
    if (fold != 1.0f) c.mul_(fold);
    return c;
  };
  std::optional<OccSplit> occ;
  if (plan.occ) occ = occ_split(x, plan.occ->quantile);
  const at::Tensor xc = occ ? occ->clamped : x;
  Result r;
  r.y = mm(q(xc, GemmKind::kFprop, Operand::kA), q(w, GemmKind::kFprop, Operand::kB).t(), GemmKind::kFprop);
  if (occ && occ->residual.nnz() > 0) r.y = r.y + occ->residual.times(bf16(w).t());
  r.dx = mm(q(g, GemmKind::kDgrad, Operand::kA), q(w, GemmKind::kDgrad, Operand::kB), GemmKind::kDgrad);
  r.dw = mm(q(g, GemmKind::kWgrad, Operand::kA).t(), q(xc, GemmKind::kWgrad, Operand::kB), GemmKind::kWgrad);
  if (plan.dge)
    r.dw = r.dw * dge_weight_factor(w, plan[GemmKind::kFprop].operand[1], keys.key(GemmKind::kFprop, Operand::kB),
                                    *plan.dge);
  if (occ && occ->residual.nnz() > 0) r.dw = r.dw + occ->residual.transposed_times(bf16(g)).t();
  return r;
}

QuantSpec spec(QuantFormat f) { return QuantSpec{f}; }

LinearPlan uniform(GemmPrecision p, const QuantSpec& a, const QuantSpec& b) {
  LinearPlan plan = plain_bf16_plan();
  for (GemmPlan& gp : plan.gemm) {
    gp.precision = p;
    gp.operand = {a, b};
  }
  return plan;
}

// The FP8 baseline's formats: E4M3 forward operands, E5M2 gradients.
LinearPlan fp8_plan() {
  LinearPlan plan = uniform(GemmPrecision::kFP8, spec(QuantFormat::kFP8E4M3), spec(QuantFormat::kFP8E4M3));
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand[0] = spec(QuantFormat::kFP8E5M2);
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand[0] = spec(QuantFormat::kFP8E5M2);
  return plan;
}

// MXFP4 in all three GEMMs: W in 2-D blocks for Fprop and Dgrad (one random stream for both),
// gradients under stochastic rounding with a 3/4 pre-scale, Wgrad's operands rotated by a
// per-step random Hadamard transform.
LinearPlan mxfp4_sr_hadamard_plan() {
  const QuantSpec mx = spec(QuantFormat::kMXFP4);
  QuantSpec w2d = mx, sr = mx, rot = mx;
  w2d.blocks = kernels::BlockShape::k2D;
  sr.rounding = kernels::Rounding::kStochastic;
  sr.sr_prescale = 0.75f;
  rot.hadamard = kernels::HadamardMode::kPerStepRandom;
  rot.hadamard_size = 32;
  QuantSpec sr_rot = rot;
  sr_rot.rounding = sr.rounding;
  sr_rot.sr_prescale = sr.sr_prescale;
  LinearPlan plan = uniform(GemmPrecision::kMXFP4, mx, w2d);
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)].operand = {sr, w2d};
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].operand = {sr_rot, rot};
  plan.gemm[static_cast<size_t>(GemmKind::kWgrad)].rotated = true;
  return plan;
}

LinearPlan occ_dge_plan() {
  LinearPlan plan = uniform(GemmPrecision::kMXFP4, spec(QuantFormat::kMXFP4), spec(QuantFormat::kMXFP4));
  plan.gemm[static_cast<size_t>(GemmKind::kDgrad)] = plain_bf16_plan().gemm[1];
  plan.occ = contract::OccConfig{0.99};
  plan.dge = contract::DgeConfig{5, 3};
  return plan;
}

void check_same_bits(const Result& got, const Result& want) {
  CHECK(got.y.scalar_type() == want.y.scalar_type());
  CHECK(at::equal(got.y, want.y));
  CHECK(at::equal(got.dx, want.dx));
  CHECK(at::equal(got.dw, want.dw));
}

}  // namespace

TEST_CASE("MXLinear on the emulated engine computes what it computed before the seam, bit for bit",
          "[trainer][mx_linear][engine]") {
  const at::Tensor x = spread(kM, kK, 21), w = spread(kN, kK, 22), g = spread(kM, kN, 23);
  struct Named {
    const char* name;
    LinearPlan plan;
  };
  LinearPlan nvfp4 = uniform(GemmPrecision::kNVFP4, spec(QuantFormat::kNVFP4), spec(QuantFormat::kNVFP4));
  LinearPlan dge_only = uniform(GemmPrecision::kMXFP4, spec(QuantFormat::kMXFP4), spec(QuantFormat::kMXFP4));
  dge_only.dge = contract::DgeConfig{3, 2.5};
  LinearPlan occ_only = plain_bf16_plan();
  occ_only.gemm[0] = uniform(GemmPrecision::kMXFP4, spec(QuantFormat::kMXFP4), spec(QuantFormat::kMXFP4)).gemm[0];
  occ_only.occ = contract::OccConfig{0.95};
  for (const Named& c : {Named{"bf16", plain_bf16_plan()}, Named{"fp8 emulated", fp8_plan()},
                         Named{"mxfp4 F+D+W, SR and Hadamard", mxfp4_sr_hadamard_plan()}, Named{"nvfp4", nvfp4},
                         Named{"occ", occ_only}, Named{"dge", dge_only}, Named{"occ and dge", occ_dge_plan()}}) {
    INFO(c.name);
    check_same_bits(run(x, w, g, c.plan), reference(x, w, g, c.plan));
  }
}

TEST_CASE("the reference tells a forgotten SR fold or a wrong key apart", "[trainer][mx_linear][engine]") {
  // The bit-for-bit test above is only worth something if the reference is sensitive: the same
  // plan with the pre-scale dropped from the fold, or another step's random stream, differs.
  const at::Tensor x = spread(kM, kK, 31), w = spread(kN, kK, 32), g = spread(kM, kN, 33);
  const LinearPlan plan = mxfp4_sr_hadamard_plan();
  const Result got = run(x, w, g, plan);
  LinearPlan no_prescale = plan;
  for (GemmPlan& gp : no_prescale.gemm)
    for (QuantSpec& s : gp.operand) s.sr_prescale = 1.0f;
  CHECK_FALSE(at::equal(got.dx, reference(x, w, g, no_prescale).dx));
  // Fprop is deterministic here; the stochastically rounded, randomly rotated gradients are not.
  const Result step6 = run(x, w, g, plan, 6);
  CHECK(at::equal(step6.y, got.y));
  CHECK_FALSE(at::equal(step6.dx, got.dx));
  CHECK_FALSE(at::equal(step6.dw, got.dw));
}

TEST_CASE("each GEMM's engine is picked once, from its precision's route and its operand formats",
          "[trainer][mx_linear][engine]") {
  static_assert(std::is_same_v<contract::GemmRoute, kernels::GemmRoute>, "one route enum");
  auto session = std::make_shared<QuantSession>();
  set_route(*session, GemmPrecision::kFP8, GemmRoute::kFP8Tensorwise);
  set_route(*session, GemmPrecision::kMXFP4, GemmRoute::kHopperFP8);
  // Fprop MXFP4 x MXFP4, Dgrad FP8 E5M2 x E4M3, Wgrad BF16.
  LinearPlan mixed = plain_bf16_plan();
  mixed.gemm[0] = uniform(GemmPrecision::kMXFP4, spec(QuantFormat::kMXFP4), spec(QuantFormat::kMXFP4)).gemm[0];
  mixed.gemm[1] = fp8_plan().gemm[1];
  const LinearState state{0, mixed, session};
  CHECK(state.engine(GemmKind::kFprop).route() == GemmRoute::kHopperFP8);
  CHECK(state.engine(GemmKind::kDgrad).route() == GemmRoute::kFP8Tensorwise);
  CHECK(state.engine(GemmKind::kWgrad).route() == GemmRoute::kEmulated);

  // A route whose engine cannot take the operand formats leaves that GEMM emulated: MXFP4
  // precision with an NVFP4 operand, FP8 precision with two E5M2 operands.
  LinearPlan odd = mixed;
  odd.gemm[0].operand[1] = spec(QuantFormat::kNVFP4);
  odd.gemm[1].operand = {spec(QuantFormat::kFP8E5M2), spec(QuantFormat::kFP8E5M2)};
  const LinearState odd_state{0, odd, session};
  CHECK(odd_state.engine(GemmKind::kFprop).route() == GemmRoute::kEmulated);
  CHECK(odd_state.engine(GemmKind::kDgrad).route() == GemmRoute::kEmulated);

  // Picked when the state is made: routes changed afterwards reach only states made afterwards
  // (as MXLinear::set_plan makes them).
  set_route(*session, GemmPrecision::kMXFP4, GemmRoute::kEmulated);
  CHECK(state.engine(GemmKind::kFprop).route() == GemmRoute::kHopperFP8);
  CHECK(LinearState(0, mixed, session).engine(GemmKind::kFprop).route() == GemmRoute::kEmulated);
  MXLinear layer(kK, kN, 0, mixed, session);
  CHECK(layer->state()->engine(GemmKind::kFprop).route() == GemmRoute::kEmulated);
  set_route(*session, GemmPrecision::kMXFP4, GemmRoute::kHopperFP8);
  CHECK(layer->state()->engine(GemmKind::kFprop).route() == GemmRoute::kEmulated);
  layer->set_plan(mixed);
  CHECK(layer->state()->engine(GemmKind::kFprop).route() == GemmRoute::kHopperFP8);
}

TEST_CASE("a GEMM routed where it cannot run fails in one clear line", "[trainer][mx_linear][engine]") {
  auto session = std::make_shared<QuantSession>();
  set_route(*session, GemmPrecision::kMXFP4, GemmRoute::kHopperFP8);
  const LinearPlan plan = uniform(GemmPrecision::kMXFP4, spec(QuantFormat::kMXFP4), spec(QuantFormat::kMXFP4));
  auto state = std::make_shared<const LinearState>(LinearState{0, plan, session});
  const at::Tensor x = spread(32, 128, 41), w = spread(48, 128, 42);
  const std::string hopper = error_of<std::exception>([&] { mx_linear(x, w, state); });
  CHECK(hopper == kernels::gemm_route_unavailable_reason(GemmRoute::kHopperFP8, at::kCPU));
  CHECK(hopper.find('\n') == std::string::npos);

  set_route(*session, GemmPrecision::kMXFP4, GemmRoute::kMXFP4AsFP8);
  auto as_fp8_state = std::make_shared<const LinearState>(LinearState{0, plan, session});
  const std::string as_fp8 = error_of<std::exception>([&] { mx_linear(x, w, as_fp8_state); });
  CHECK(as_fp8 == kernels::gemm_route_unavailable_reason(GemmRoute::kMXFP4AsFP8, at::kCPU));
  CHECK(as_fp8.find('\n') == std::string::npos);
}
