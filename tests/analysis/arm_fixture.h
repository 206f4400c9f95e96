// An ArmSummary for table and report tests, with every member initialized (no aggregate
// initialization that leaves the counts and costs to -Wmissing-field-initializers). Its
// interventions and paper figure come from the contract's one description of an arm against an
// FP8 baseline, as the sweep analysis computes them.
#pragma once

#include <string>

#include "mxablate/analysis/arm_table.h"
#include "mxablate/contract/settings_difference.h"

namespace mxablate::test {

inline analysis::ArmSummary make_arm(std::string arm, const std::string& fprop,
                                     const std::string& dgrad, const std::string& wgrad,
                                     const std::string& stochastic_rounding,
                                     const std::string& hadamard_mode, bool is_baseline = false) {
  contract::RunConfig config, baseline;
  baseline.precision = {contract::GemmPrecision::kFP8, contract::GemmPrecision::kFP8,
                        contract::GemmPrecision::kFP8};
  config.precision = {*contract::parse_gemm_precision(fprop), *contract::parse_gemm_precision(dgrad),
                      *contract::parse_gemm_precision(wgrad)};
  if (!stochastic_rounding.empty())
    config.quant.stochastic_rounding = {*contract::parse_operand_class(stochastic_rounding)};
  config.quant.hadamard.mode = *kernels::parse_hadamard_mode(hadamard_mode);
  analysis::ArmSummary a;
  a.arm = std::move(arm);
  a.precision = config.precision;
  a.interventions =
      contract::describe_differences(contract::settings_difference(config, baseline), false);
  a.paper = contract::paper_figure(config, baseline);
  a.is_baseline = is_baseline;
  return a;
}

}  // namespace mxablate::test
