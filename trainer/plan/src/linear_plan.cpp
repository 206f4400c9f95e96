#include "mxablate/trainer/plan/linear_plan.h"

#include <algorithm>
#include <tuple>


namespace mxablate::trainer {

using kernels::Axis;
using kernels::GemmKind;
using kernels::Operand;
using kernels::QuantFormat;
using kernels::QuantSpec;

namespace {

using contract::OperandClass;

OperandClass operand_class(GemmKind g, Operand o) {
  switch (g) {
    case GemmKind::kFprop: return o == Operand::kA ? OperandClass::kActivation : OperandClass::kWeight;
    case GemmKind::kDgrad: return o == Operand::kA ? OperandClass::kGrad : OperandClass::kWeight;
    case GemmKind::kWgrad: return o == Operand::kA ? OperandClass::kGrad : OperandClass::kActivation;
  }
  return OperandClass::kActivation;
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

// The kernels' name table's entry: a string literal, so its view is NUL-terminated.
const char* gemm_name(GemmKind gemm) { return kernels::to_string(gemm).data(); }

bool is_plain_bf16(const QuantSpec& spec) {
  return spec.format == QuantFormat::kBF16 && spec.hadamard == kernels::HadamardMode::kNone;
}

bool weight_shares_rounding(const LinearPlan& plan) {
  return is_plain_bf16(plan[GemmKind::kFprop].operand[static_cast<size_t>(Operand::kB)]) &&
         is_plain_bf16(plan[GemmKind::kDgrad].operand[static_cast<size_t>(Operand::kB)]);
}

bool is_low_precision(const QuantSpec& spec) {
  return spec.format != QuantFormat::kBF16 && spec.format != QuantFormat::kFP32;
}

bool is_memoizable(const QuantSpec& spec) {
  using kernels::HadamardMode;
  return spec.rounding == kernels::Rounding::kNearest &&
         (spec.hadamard == HadamardMode::kNone || spec.hadamard == HadamardMode::kDeterministic);
}

bool same_quantization(const QuantSpec& a, const QuantSpec& b) {
  return std::tie(a.format, a.scale_rule, a.rounding, a.hadamard, a.hadamard_size, a.blocks,
                  a.sr_prescale) ==
         std::tie(b.format, b.scale_rule, b.rounding, b.hadamard, b.hadamard_size, b.blocks,
                  b.sr_prescale);
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

LinearPlan make_linear_plan(const contract::LayerSettings& settings) {
  LinearPlan plan;
  for (GemmKind g : contract::kAllGemms) {
    GemmPlan& gp = plan.gemm[static_cast<size_t>(g)];
    gp.precision = settings.precision.of(g);
    gp.rotated = settings.hadamard.gemms.has(g) && settings.hadamard.mode != kernels::HadamardMode::kNone;
    for (Operand o : {Operand::kA, Operand::kB}) {
      const OperandClass c = operand_class(g, o);
      QuantSpec spec;
      spec.format = format_for(gp.precision, c);
      spec.scale_rule = settings.scale_rule;
      // Stochastic rounding only means something where there is a coarse grid to round onto.
      const bool sr = settings.stochastic_rounding.has(c) && is_low_precision(spec);
      spec.rounding = sr ? kernels::Rounding::kStochastic : kernels::Rounding::kNearest;
      spec.sr_prescale = sr ? static_cast<float>(settings.sr_prescale) : 1.0f;
      spec.hadamard = gp.rotated ? settings.hadamard.mode : kernels::HadamardMode::kNone;
      spec.hadamard_size = settings.hadamard.size;
      if (c == OperandClass::kWeight && kernels::is_fp4(spec.format))
        spec.blocks = settings.weight_blocks;
      gp.operand[static_cast<size_t>(o)] = spec;
    }
  }
  // DGE differentiates W's 4-bit step: where Fprop's W is not FP4 there is none to estimate.
  if (contract::is_fp4(settings.precision.fprop)) plan.dge = settings.dge;
  plan.occ = settings.occ;
  return plan;
}

size_t precision_phase(const contract::RunConfig& config, double tokens_before) {
  size_t phase = 0;
  for (const contract::PrecisionPhase& p : config.precision_schedule)
    if (tokens_before >= p.at_fraction * config.train.max_tokens) ++phase;
  return phase;
}

contract::LayerSettings layer_settings(const contract::RunConfig& config, const LinearShape& layer,
                                       int64_t n_layers, size_t phase) {
  contract::LayerSettings s;  // the LM head: plain BF16 unless an override says otherwise
  if (layer.block >= 0) {
    s = contract::block_settings_in_phase(config, phase);
    const bool kept = layer.block < config.quant.bf16_first_blocks ||
                      layer.block >= n_layers - config.quant.bf16_last_blocks;
    if (kept) {  // plain BF16: precision bf16 x3, no rotation, no estimator or compensation
      s.precision = contract::PrecisionConfig{};
      s.hadamard.mode = kernels::HadamardMode::kNone;
      s.dge.reset();
      s.occ.reset();
    }
  }
  for (const contract::LayerOverride& o : config.overrides)
    if (contract::layer_matches(o.layers, layer.name)) o.patch.apply_to(s);
  return s;
}

RunLayerPlans plan_run_layers(const contract::RunConfig& config, std::vector<LinearShape> layers,
                              int64_t n_layers) {
  RunLayerPlans r;
  r.layers = std::move(layers);
  r.phases.resize(config.precision_schedule.size() + 1);
  for (size_t phase = 0; phase < r.phases.size(); ++phase) {
    r.phases[phase].reserve(r.layers.size());
    for (const LinearShape& l : r.layers)
      r.phases[phase].push_back(make_linear_plan(layer_settings(config, l, n_layers, phase)));
  }
  return r;
}

std::string check_override_patterns(const contract::RunConfig& config,
                                    const std::vector<LinearShape>& layers) {
  for (size_t i = 0; i < config.overrides.size(); ++i) {
    const std::string& pattern = config.overrides[i].layers;
    bool any = false;
    int last_block = -1;
    for (const LinearShape& l : layers) {
      any = any || contract::layer_matches(pattern, l.name);
      last_block = std::max(last_block, l.block);
    }
    if (!any)
      return "overrides[" + std::to_string(i) + "].layers: \"" + pattern +
             "\" matches no layer (names: blocks.N.attn.q|k|v|o, blocks.N.mlp.gate|up|down, "
             "lm_head; N from 0 to " + std::to_string(last_block) + ")";
  }
  return "";
}

std::string check_linear_shapes(const LinearPlan& plan, int64_t in_features, int64_t out_features,
                                int64_t tokens) {
  // The 2-D shapes the operands have: X (tokens x in), W (out x in), dY (tokens x out).
  const auto shape_of = [&](GemmKind g, Operand o) -> std::pair<int64_t, int64_t> {
    switch (operand_class(g, o)) {
      case OperandClass::kActivation: return {tokens, in_features};
      case OperandClass::kWeight: return {out_features, in_features};
      case OperandClass::kGrad: return {tokens, out_features};
    }
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
