// The run config -> per-GEMM QuantSpec translation (linear_plan.h).
#include "catch.h"
#include "mxablate/trainer/linear_plan.h"

using namespace mxablate;
using namespace mxablate::trainer;
using kernels::Axis;
using kernels::GemmKind;
using kernels::HadamardMode;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::Rounding;

namespace {
const kernels::QuantSpec& op(const LinearPlan& p, GemmKind g, Operand o) {
  return p[g].operand[static_cast<size_t>(o)];
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
  contract::RunConfig c;
  c.precision = {"fp8", "fp8", "fp8"};
  const LinearPlan p = make_linear_plan(c, false);
  CHECK(op(p, GemmKind::kFprop, Operand::kA).format == QuantFormat::kFP8E4M3);
  CHECK(op(p, GemmKind::kFprop, Operand::kB).format == QuantFormat::kFP8E4M3);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).format == QuantFormat::kFP8E5M2);
  CHECK(op(p, GemmKind::kDgrad, Operand::kB).format == QuantFormat::kFP8E4M3);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).format == QuantFormat::kFP8E5M2);
  CHECK(op(p, GemmKind::kWgrad, Operand::kB).format == QuantFormat::kFP8E4M3);
}

TEST_CASE("Stochastic rounding classes and Hadamard GEMMs land on the right operands", "[trainer][plan]") {
  contract::RunConfig c;
  c.precision = {"mxfp4", "nvfp4", "mxfp4"};
  c.quant.scale_rule = "even";
  c.quant.stochastic_rounding = {"grad", "weight"};
  c.quant.hadamard = {"fixed-random", 64, {"wgrad", "dgrad"}};
  const LinearPlan p = make_linear_plan(c, false);
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
  c.precision = {"bf16", "mxfp4", "bf16"};
  c.quant.stochastic_rounding = {"grad", "activation", "weight"};
  c.quant.hadamard = {"deterministic", 16, {"wgrad"}};
  const LinearPlan p = make_linear_plan(c, false);
  CHECK(op(p, GemmKind::kFprop, Operand::kA).rounding == Rounding::kNearest);
  CHECK(op(p, GemmKind::kDgrad, Operand::kA).rounding == Rounding::kStochastic);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).format == QuantFormat::kBF16);
  CHECK(op(p, GemmKind::kWgrad, Operand::kA).hadamard == HadamardMode::kDeterministic);
  CHECK_FALSE(is_plain_bf16(op(p, GemmKind::kWgrad, Operand::kA)));
  const LinearPlan kept = make_linear_plan(c, true);
  for (GemmKind g : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad})
    for (Operand o : {Operand::kA, Operand::kB}) CHECK(is_plain_bf16(op(kept, g, o)));
}

TEST_CASE("Shape checks name the GEMM, operand and problem", "[trainer][plan]") {
  contract::RunConfig c;
  c.precision = {"mxfp4", "mxfp4", "mxfp4"};
  const LinearPlan p = make_linear_plan(c, false);
  CHECK(check_linear_shapes(p, 64, 96, 128) == "");
  // 48 tokens per micro-batch: Wgrad reduces over tokens, not a multiple of 32.
  const std::string tokens = check_linear_shapes(p, 64, 96, 48);
  CHECK(tokens.rfind("wgrad operand dy (48x96)", 0) == 0);
  // 80 output features: Dgrad reduces over them.
  CHECK(check_linear_shapes(p, 64, 80, 128).rfind("dgrad operand dy", 0) == 0);
  c.quant.hadamard = {"deterministic", 128, {"fprop"}};
  CHECK(check_linear_shapes(make_linear_plan(c, false), 64, 128, 128).rfind("fprop operand x", 0) == 0);
  CHECK_THROWS_AS(parse_gemm_precision("fp4"), contract::ConfigError);
}
