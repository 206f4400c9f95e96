// The run config -> per-GEMM QuantSpec translation (linear_plan.h).
#include "catch.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/plan_rules.h"

using namespace mxablate;
using namespace mxablate::trainer;
using kernels::Axis;
using kernels::GemmKind;
using kernels::HadamardMode;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::Rounding;

namespace {
using contract::GemmPrecision;
using contract::OperandClass;
constexpr auto kBF16 = GemmPrecision::kBF16, kFP8 = GemmPrecision::kFP8,
               kMX = GemmPrecision::kMXFP4, kNV = GemmPrecision::kNVFP4;

const kernels::QuantSpec& op(const LinearPlan& p, GemmKind g, Operand o) {
  return p[g].operand[static_cast<size_t>(o)];
}

contract::LayerSettings with_precision(GemmPrecision f, GemmPrecision d, GemmPrecision w) {
  contract::LayerSettings s;
  s.precision = {f, d, w};
  return s;
}

// The smoke-sized layer list: 2 blocks of 7 linears and the LM head.
std::vector<LinearShape> two_blocks() {
  ModelShape shape = *find_model_preset("smoke");
  shape.n_layers = 2;
  return linear_layers(shape, 256);
}
}  // namespace

TEST_CASE("Operand axes follow the reduction dimension of each GEMM", "[trainer][plan]") {
  CHECK(operand_axis(GemmKind::kFprop, Operand::kA) == Axis::kRows);
  CHECK(operand_axis(GemmKind::kFprop, Operand::kB) == Axis::kRows);
  CHECK(operand_axis(GemmKind::kDgrad, Operand::kA) == Axis::kRows);
  CHECK(operand_axis(GemmKind::kDgrad, Operand::kB) == Axis::kCols);
  CHECK(operand_axis(GemmKind::kWgrad, Operand::kA) == Axis::kCols);
  CHECK(operand_axis(GemmKind::kWgrad, Operand::kB) == Axis::kCols);
  CHECK(std::string(operand_name(GemmKind::kWgrad, Operand::kB)) == "x");
  CHECK(std::string(operand_name(GemmKind::kDgrad, Operand::kB)) == "w");
  CHECK(std::string(operand_name(GemmKind::kDgrad, Operand::kA)) == "dy");
}

TEST_CASE("FP8 uses E4M3 for X and W and E5M2 for dY", "[trainer][plan]") {
  const LinearPlan p = make_linear_plan(with_precision(kFP8, kFP8, kFP8));
  CHECK(op(p, GemmKind::kFprop, Operand::kA).format == QuantFormat::kFP8E4M3);
  CHECK(op(p, GemmKind::kFprop, Operand::kB).format == QuantFormat::kFP8E4M3);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).format == QuantFormat::kFP8E5M2);
  CHECK(op(p, GemmKind::kDgrad, Operand::kB).format == QuantFormat::kFP8E4M3);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).format == QuantFormat::kFP8E5M2);
  CHECK(op(p, GemmKind::kWgrad, Operand::kB).format == QuantFormat::kFP8E4M3);
}

TEST_CASE("Stochastic rounding classes and Hadamard GEMMs land on the right operands", "[trainer][plan]") {
  contract::LayerSettings c = with_precision(kMX, kNV, kMX);
  c.scale_rule = kernels::ScaleRule::kEven;
  c.stochastic_rounding = {OperandClass::kGrad, OperandClass::kWeight};
  c.hadamard = {HadamardMode::kFixedRandom, 64, {GemmKind::kWgrad, GemmKind::kDgrad}};
  const LinearPlan p = make_linear_plan(c);
  CHECK(p[GemmKind::kDgrad].precision == GemmPrecision::kNVFP4);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).format == QuantFormat::kNVFP4);
  CHECK(op(p, GemmKind::kFprop, Operand::kA).scale_rule == kernels::ScaleRule::kEven);
  // grad = dY (Dgrad A, Wgrad A); weight = W (Fprop B, Dgrad B); X is never stochastic here.
  CHECK(op(p, GemmKind::kFprop, Operand::kA).rounding == Rounding::kNearest);
  CHECK(op(p, GemmKind::kFprop, Operand::kB).rounding == Rounding::kStochastic);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).rounding == Rounding::kStochastic);
  CHECK(op(p, GemmKind::kDgrad, Operand::kB).rounding == Rounding::kStochastic);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).rounding == Rounding::kStochastic);
  CHECK(op(p, GemmKind::kWgrad, Operand::kB).rounding == Rounding::kNearest);
  CHECK_FALSE(p[GemmKind::kFprop].rotated);
  CHECK(p[GemmKind::kDgrad].rotated);
  CHECK(p[GemmKind::kWgrad].rotated);
  for (Operand o : {Operand::kA, Operand::kB}) {
    CHECK(op(p, GemmKind::kFprop, o).hadamard == HadamardMode::kNone);
    CHECK(op(p, GemmKind::kWgrad, o).hadamard == HadamardMode::kFixedRandom);
    CHECK(op(p, GemmKind::kWgrad, o).hadamard_size == 64);
  }
}

TEST_CASE("BF16 GEMMs never round stochastically, kept layers are plain BF16", "[trainer][plan]") {
  contract::RunConfig c;
  c.precision = {kBF16, kMX, kBF16};
  c.quant.stochastic_rounding = {OperandClass::kGrad, OperandClass::kActivation, OperandClass::kWeight};
  c.quant.hadamard = {HadamardMode::kDeterministic, 16, {GemmKind::kWgrad}};
  c.quant.bf16_first_blocks = 1;
  const std::vector<LinearShape> layers = two_blocks();
  const std::vector<LinearPlan> plans = plan_run_layers(c, layers, 2).phases[0];
  const LinearPlan& p = plans[7];  // blocks.1.attn.q: not kept
  CHECK(op(p, GemmKind::kFprop, Operand::kA).rounding == Rounding::kNearest);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).rounding == Rounding::kStochastic);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).format == QuantFormat::kBF16);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).hadamard == HadamardMode::kDeterministic);
  CHECK_FALSE(is_plain_bf16(op(p, GemmKind::kWgrad, Operand::kA)));
  // blocks.0.* (kept by bf16_first_blocks) and the LM head: plain BF16.
  for (const LinearPlan* kept : {&plans[0], &plans[6], &plans.back()})
    for (GemmKind g : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad})
      for (Operand o : {Operand::kA, Operand::kB}) CHECK(is_plain_bf16(op(*kept, g, o)));
}

TEST_CASE("Shape checks name the GEMM, operand and problem", "[trainer][plan]") {
  contract::LayerSettings c = with_precision(kMX, kMX, kMX);
  const LinearPlan p = make_linear_plan(c);
  CHECK(check_linear_shapes(p, 64, 96, 128) == "");
  // 48 tokens per micro-batch: Wgrad reduces over tokens, not a multiple of 32.
  const std::string tokens = check_linear_shapes(p, 64, 96, 48);
  CHECK(tokens.rfind("wgrad operand dy (48x96)", 0) == 0);
  // 80 output features: Dgrad reduces over them.
  CHECK(check_linear_shapes(p, 64, 80, 128).rfind("dgrad operand dy", 0) == 0);
  c.hadamard = {HadamardMode::kDeterministic, 128, {GemmKind::kFprop}};
  CHECK(check_linear_shapes(make_linear_plan(c), 64, 128, 128).rfind("fprop operand x", 0) == 0);
}

TEST_CASE("2-D blocks go to W only, the SR pre-scale to stochastically rounded operands only",
          "[trainer][plan]") {
  contract::LayerSettings c = with_precision(kMX, kMX, kMX);
  c.weight_blocks = kernels::BlockShape::k2D;
  c.stochastic_rounding = {OperandClass::kGrad};
  c.sr_prescale = 0.75;
  const LinearPlan p = make_linear_plan(c);
  CHECK(op(p, GemmKind::kFprop, Operand::kB).blocks == kernels::BlockShape::k2D);
  CHECK(op(p, GemmKind::kDgrad, Operand::kB).blocks == kernels::BlockShape::k2D);
  CHECK(op(p, GemmKind::kFprop, Operand::kA).blocks == kernels::BlockShape::k1D);
  CHECK(op(p, GemmKind::kWgrad, Operand::kB).blocks == kernels::BlockShape::k1D);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).sr_prescale == 0.75f);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).sr_prescale == 0.75f);
  CHECK(op(p, GemmKind::kFprop, Operand::kA).sr_prescale == 1.0f);
  CHECK(op(p, GemmKind::kFprop, Operand::kB).sr_prescale == 1.0f);
  // FP8 weights are per-tensor: no tiles.
  c.precision.fprop = kFP8;
  CHECK(op(make_linear_plan(c), GemmKind::kFprop, Operand::kB).blocks == kernels::BlockShape::k1D);
}

TEST_CASE("DGE is planned only where Fprop's W is FP4, plan_rules refuses it rotated",
          "[trainer][plan]") {
  contract::LayerSettings c = with_precision(kMX, kMX, kMX);
  c.dge = contract::DgeConfig{};
  CHECK(make_linear_plan(c).dge == contract::DgeConfig{});
  CHECK(check_dge(make_linear_plan(c)) == "");
  c.hadamard = {HadamardMode::kDeterministic, 16, {GemmKind::kFprop}};
  CHECK(check_dge(make_linear_plan(c)).find("unrotated") != std::string::npos);
  c.hadamard.mode = HadamardMode::kNone;  // fprop listed, but no rotation
  CHECK(check_dge(make_linear_plan(c)) == "");
  c.precision.fprop = kFP8;  // no 4-bit step: nothing to estimate, nothing planned
  CHECK_FALSE(make_linear_plan(c).dge.has_value());
}

TEST_CASE("Overrides apply in order over the blocks' settings, the LM head included",
          "[trainer][plan]") {
  contract::RunConfig c;
  c.precision = {kMX, kMX, kMX};
  contract::LayerOverride first{"blocks.1.*", {}};
  first.patch.fprop = kBF16;
  first.patch.stochastic_rounding = contract::OperandClassSet{OperandClass::kGrad};
  contract::LayerOverride later{"blocks.?.mlp.down", {}};
  later.patch.fprop = kNV;
  contract::LayerOverride head{"lm_head", {}};
  head.patch.wgrad = kMX;
  c.overrides = {first, later, head};
  const std::vector<LinearShape> layers = two_blocks();
  const auto at = [&](const std::string& name) {
    for (const LinearShape& l : layers)
      if (l.name == name) return layer_settings(c, l, 2, 0);
    FAIL("no layer " << name);
    return contract::LayerSettings{};
  };
  CHECK(at("blocks.0.attn.q").precision == contract::PrecisionConfig{kMX, kMX, kMX});
  CHECK(at("blocks.1.attn.q").precision == contract::PrecisionConfig{kBF16, kMX, kMX});
  CHECK(at("blocks.1.attn.q").stochastic_rounding.has(OperandClass::kGrad));
  CHECK_FALSE(at("blocks.0.attn.q").stochastic_rounding.has(OperandClass::kGrad));
  CHECK(at("blocks.0.mlp.down").precision.fprop == kNV);
  CHECK(at("blocks.1.mlp.down").precision.fprop == kNV);  // the later override wins
  CHECK(at("lm_head").precision == contract::PrecisionConfig{kBF16, kBF16, kMX});
  CHECK(check_override_patterns(c, layers) == "");
  c.overrides.push_back({"blocks.2.*", {}});
  CHECK(check_override_patterns(c, layers).rfind("overrides[3].layers: \"blocks.2.*\" matches no layer", 0) == 0);
}

TEST_CASE("The precision schedule switches the blocks, overrides stay on top", "[trainer][plan]") {
  contract::RunConfig c;
  c.train.max_tokens = 1000;
  c.precision = {kMX, kMX, kMX};
  c.precision_schedule = {{0.5, {kFP8, kFP8, kMX}}, {0.9, {kBF16, kBF16, kBF16}}};
  contract::LayerOverride keep{"blocks.0.attn.q", {}};
  keep.patch.wgrad = kNV;
  c.overrides = {keep};
  CHECK(precision_phase(c, 0) == 0);
  CHECK(precision_phase(c, 499) == 0);
  CHECK(precision_phase(c, 500) == 1);
  CHECK(precision_phase(c, 899.9) == 1);
  CHECK(precision_phase(c, 900) == 2);
  const std::vector<LinearShape> layers = two_blocks();
  CHECK(layer_settings(c, layers[1], 2, 1).precision == contract::PrecisionConfig{kFP8, kFP8, kMX});
  CHECK(layer_settings(c, layers[1], 2, 2).precision == contract::PrecisionConfig{kBF16, kBF16, kBF16});
  CHECK(layer_settings(c, layers[0], 2, 2).precision == contract::PrecisionConfig{kBF16, kBF16, kNV});
  CHECK(layer_settings(c, layers.back(), 2, 1).precision == contract::PrecisionConfig{});  // LM head
}

TEST_CASE("Globs: * any run, ? one character, nothing else special", "[trainer][plan]") {
  CHECK(contract::layer_matches("blocks.0.*", "blocks.0.attn.q"));
  CHECK_FALSE(contract::layer_matches("blocks.0.*", "blocks.10.attn.q"));
  CHECK(contract::layer_matches("*.mlp.*", "blocks.3.mlp.up"));
  CHECK(contract::layer_matches("*", "lm_head"));
  CHECK(contract::layer_matches("blocks.?.attn.?", "blocks.7.attn.v"));
  CHECK_FALSE(contract::layer_matches("blocks.[0-1].*", "blocks.0.attn.q"));
  CHECK(contract::layer_matches("blocks.[0-1].*", "blocks.[0-1].x"));
  CHECK_FALSE(contract::layer_matches("lm_head", "lm_head2"));
  CHECK(contract::layer_matches("**a*", "xxa"));
}

TEST_CASE("FP8 tensor cores take a run only if every FP8 GEMM's K and N are multiples of 16", "[trainer][plan]") {
  const std::vector<LinearShape> layers = two_blocks();  // d_model 64, ffn 192, vocabulary 256
  contract::RunConfig fp8;
  fp8.precision = {kFP8, kFP8, kFP8};
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(fp8, layers, 2), 1024).empty());
  // Wgrad reduces over the micro-batch's tokens.
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(fp8, layers, 2), 1000) ==
        "blocks.0.attn.q wgrad: FP8 tensor cores need K and N to be multiples of 16, got K 1000, N 64");
  // Only FP8 GEMMs count: BF16 and MXFP4 ones never run there.
  contract::RunConfig mx;
  mx.precision = {kMX, kMX, kMX};
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(mx, layers, 2), 1000).empty());
  contract::RunConfig fprop_only;
  fprop_only.precision = {kFP8, kBF16, kBF16};
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(fprop_only, layers, 2), 1000).empty());
  // A layer whose width is no multiple of 16 (the LM head over a 250-token vocabulary, here
  // made FP8 by an override; by default it stays BF16 and never counts).
  ModelShape shape = *find_model_preset("smoke");
  const std::vector<LinearShape> odd_vocab = linear_layers(shape, 250);
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(fp8, odd_vocab, shape.n_layers), 1024).empty());
  contract::RunConfig head = fp8;
  head.overrides = {{"lm_head", {}}};
  head.overrides[0].patch.fprop = kFP8;
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(head, odd_vocab, shape.n_layers), 1024) ==
        "lm_head fprop: FP8 tensor cores need K and N to be multiples of 16, got K 64, N 250");
  // A later precision phase counts too.
  contract::RunConfig scheduled;
  scheduled.precision_schedule = {{0.5, {kBF16, kBF16, kFP8}}};
  CHECK(check_fp8_tensor_core_shapes(plan_run_layers(scheduled, layers, 2), 1000) ==
        "blocks.0.attn.q wgrad: FP8 tensor cores need K and N to be multiples of 16, got K 1000, N 64");
}
