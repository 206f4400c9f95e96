#include "mxablate/trainer/plan/plan_rules.h"

#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "mxablate/kernels/gemm_shape.h"

namespace mxablate::trainer {

std::string check_dge(const LinearPlan& plan) {
  if (!plan.dge) return "";
  const contract::DgeConfig& c = *plan.dge;
  if (!std::isfinite(c.k) || c.k <= 0)
    return fmt::format("quant.dge.k must be a finite number > 0, got {}", c.k);
  if (!std::isfinite(c.clamp) || c.clamp <= 0)
    return fmt::format("quant.dge.clamp must be a finite number > 0, got {}", c.clamp);
  const GemmPlan& fprop = plan[kernels::GemmKind::kFprop];
  const kernels::QuantSpec& w = fprop.operand[static_cast<size_t>(kernels::Operand::kB)];
  if (!kernels::is_fp4(w.format))
    return fmt::format("quant.dge needs Fprop's weight in an FP4 format (mxfp4 or nvfp4), but it "
                       "is quantized to {}",
                       kernels::to_string(w.format));
  if (fprop.rotated || w.hadamard != kernels::HadamardMode::kNone)
    return "quant.dge needs Fprop's weight unrotated, but a Hadamard rotation is listed for fprop "
           "(the estimator's derivative is taken on the grid W itself was rounded onto)";
  return "";
}

std::string check_occ(const LinearPlan& plan) {
  if (!plan.occ) return "";
  const double q = plan.occ->quantile;
  if (!std::isfinite(q) || q <= 0 || q > 1)
    return fmt::format("quant.occ.quantile must lie in (0, 1], got {}", q);
  return "";
}

std::string check_fp8_tensor_core_shapes(const RunLayerPlans& plans, int64_t tokens) {
  for (const std::vector<LinearPlan>& phase : plans.phases) {
    for (size_t i = 0; i < plans.layers.size(); ++i) {
      const LinearShape& l = plans.layers[i];
      if (l.out_features == 0) continue;  // the LM head while the vocabulary is not known
      for (kernels::GemmKind g : contract::kAllGemms) {
        if (phase[i][g].precision != contract::GemmPrecision::kFP8) continue;
        // (M, N, K) of Y = X Wᵀ, dX = dY W, dW = dYᵀ X.
        const auto [m, n, k] = g == kernels::GemmKind::kFprop   ? std::tuple{tokens, l.out_features, l.in_features}
                               : g == kernels::GemmKind::kDgrad ? std::tuple{tokens, l.in_features, l.out_features}
                                                                : std::tuple{l.out_features, l.in_features, tokens};
        const std::string why = kernels::fp8_tensorwise_shape_problem(m, n, k);
        if (!why.empty()) return l.name + " " + gemm_name(g) + ": " + why;
      }
    }
  }
  return {};
}

}  // namespace mxablate::trainer
