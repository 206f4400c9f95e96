#include "mxablate/trainer/linear_plan.h"

#include <algorithm>

namespace mxablate::trainer {

using kernels::Axis;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

enum class OperandClass { kActivation, kWeight, kGrad };

OperandClass operand_class(GemmKind g, Operand o) {
  switch (g) {
    case GemmKind::kFprop: return o == Operand::kA ? OperandClass::kActivation : OperandClass::kWeight;
    case GemmKind::kDgrad: return o == Operand::kA ? OperandClass::kGrad : OperandClass::kWeight;
    case GemmKind::kWgrad: return o == Operand::kA ? OperandClass::kGrad : OperandClass::kActivation;
  }
  return OperandClass::kActivation;
}

const char* class_name(OperandClass c) {
  switch (c) {
    case OperandClass::kActivation: return "activation";
    case OperandClass::kWeight: return "weight";
    case OperandClass::kGrad: return "grad";
  }
  return "";
}

QuantFormat format_for(GemmPrecision p, OperandClass c) {
  switch (p) {
    case GemmPrecision::kBF16: return QuantFormat::kBF16;
    case GemmPrecision::kFP8:
      return c == OperandClass::kGrad ? QuantFormat::kFP8E5M2 : QuantFormat::kFP8E4M3;
    case GemmPrecision::kMXFP4: return QuantFormat::kMXFP4;
    case GemmPrecision::kNVFP4: return QuantFormat::kNVFP4;
  }
  return QuantFormat::kBF16;
}

const std::string& precision_of(const contract::PrecisionConfig& p, GemmKind g) {
  switch (g) {
    case GemmKind::kFprop: return p.fprop;
    case GemmKind::kDgrad: return p.dgrad;
    case GemmKind::kWgrad: return p.wgrad;
  }
  return p.fprop;
}

}  // namespace

Axis operand_axis(GemmKind gemm, Operand operand) {
  switch (gemm) {
    case GemmKind::kFprop: return Axis::kRows;
    case GemmKind::kDgrad: return operand == Operand::kA ? Axis::kRows : Axis::kCols;
    case GemmKind::kWgrad: return Axis::kCols;
  }
  return Axis::kRows;
}

const char* operand_name(GemmKind gemm, Operand operand) {
  switch (operand_class(gemm, operand)) {
    case OperandClass::kActivation: return "x";
    case OperandClass::kWeight: return "w";
    case OperandClass::kGrad: return "dy";
  }
  return "";
}

const char* gemm_name(GemmKind gemm) {
  switch (gemm) {
    case GemmKind::kFprop: return "fprop";
    case GemmKind::kDgrad: return "dgrad";
    case GemmKind::kWgrad: return "wgrad";
  }
  return "";
}

bool is_plain_bf16(const QuantSpec& spec) {
  return spec.format == QuantFormat::kBF16 && spec.hadamard == kernels::HadamardMode::kNone;
}

bool is_low_precision(const QuantSpec& spec) {
  return spec.format != QuantFormat::kBF16 && spec.format != QuantFormat::kFP32;
}

GemmPrecision parse_gemm_precision(const std::string& name) {
  if (name == "bf16") return GemmPrecision::kBF16;
  if (name == "fp8") return GemmPrecision::kFP8;
  if (name == "mxfp4") return GemmPrecision::kMXFP4;
  if (name == "nvfp4") return GemmPrecision::kNVFP4;
  throw contract::ConfigError("precision: expected one of bf16, fp8, mxfp4, nvfp4, got \"" + name +
                              "\"");
}

LinearPlan plain_bf16_plan() {
  LinearPlan plan;
  for (auto& g : plan.gemm) {
    g.precision = GemmPrecision::kBF16;
    g.operand[0] = QuantSpec{QuantFormat::kBF16};
    g.operand[1] = QuantSpec{QuantFormat::kBF16};
  }
  return plan;
}

LinearPlan make_linear_plan(const contract::RunConfig& config, bool keep_bf16) {
  if (keep_bf16) return plain_bf16_plan();
  const contract::QuantConfig& q = config.quant;
  const auto scale_rule = kernels::parse_scale_rule(q.scale_rule);
  if (!scale_rule) throw contract::ConfigError("quant.scale_rule: unknown rule \"" + q.scale_rule + "\"");
  const auto hadamard = kernels::parse_hadamard_mode(q.hadamard.mode);
  if (!hadamard)
    throw contract::ConfigError("quant.hadamard.mode: unknown mode \"" + q.hadamard.mode + "\"");
  LinearPlan plan;
  for (GemmKind g : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad}) {
    GemmPlan& gp = plan.gemm[static_cast<size_t>(g)];
    gp.precision = parse_gemm_precision(precision_of(config.precision, g));
    const bool listed = std::find(q.hadamard.gemms.begin(), q.hadamard.gemms.end(),
                                  gemm_name(g)) != q.hadamard.gemms.end();
    gp.rotated = listed && *hadamard != kernels::HadamardMode::kNone;
    for (Operand o : {Operand::kA, Operand::kB}) {
      const OperandClass c = operand_class(g, o);
      QuantSpec spec;
      spec.format = format_for(gp.precision, c);
      spec.scale_rule = *scale_rule;
      const bool sr = std::find(q.stochastic_rounding.begin(), q.stochastic_rounding.end(),
                                class_name(c)) != q.stochastic_rounding.end();
      // Stochastic rounding only means something where there is a coarse grid to round onto.
      spec.rounding = sr && is_low_precision(spec) ? kernels::Rounding::kStochastic
                                                   : kernels::Rounding::kNearest;
      spec.hadamard = gp.rotated ? *hadamard : kernels::HadamardMode::kNone;
      spec.hadamard_size = q.hadamard.size;
      gp.operand[static_cast<size_t>(o)] = spec;
    }
  }
  return plan;
}

std::string check_linear_shapes(const LinearPlan& plan, int64_t in_features, int64_t out_features,
                                int64_t tokens) {
  // The 2-D shapes the operands have: X (tokens x in), W (out x in), dY (tokens x out).
  const auto shape_of = [&](GemmKind g, Operand o) -> std::pair<int64_t, int64_t> {
    const std::string name = operand_name(g, o);
    if (name == "x") return {tokens, in_features};
    if (name == "w") return {out_features, in_features};
    return {tokens, out_features};
  };
  for (GemmKind g : {GemmKind::kFprop, GemmKind::kDgrad, GemmKind::kWgrad}) {
    for (Operand o : {Operand::kA, Operand::kB}) {
      const QuantSpec& spec = plan[g].operand[static_cast<size_t>(o)];
      const auto [rows, cols] = shape_of(g, o);
      const std::string problem = kernels::check_shape(spec, rows, cols, operand_axis(g, o));
      if (!problem.empty())
        return std::string(gemm_name(g)) + " operand " + operand_name(g, o) + " (" +
               std::to_string(rows) + "x" + std::to_string(cols) + "): " + problem;
    }
  }
  return "";
}

}  // namespace mxablate::trainer
