// An ArmSummary for table and report tests, with every member initialized (no aggregate
// initialization that leaves the counts and costs to -Wmissing-field-initializers).
#pragma once

#include <string>

#include "mxablate/analysis/arm_table.h"

namespace mxablate::test {

inline analysis::ArmSummary make_arm(std::string arm, std::string fprop, std::string dgrad,
                                     std::string wgrad, std::string stochastic_rounding,
                                     std::string hadamard_mode, bool is_baseline = false) {
  analysis::ArmSummary a;
  a.arm = std::move(arm);
  a.fprop = std::move(fprop);
  a.dgrad = std::move(dgrad);
  a.wgrad = std::move(wgrad);
  a.stochastic_rounding = std::move(stochastic_rounding);
  a.hadamard_mode = std::move(hadamard_mode);
  a.hadamard_size = 16;
  a.hadamard_gemms = "wgrad";
  a.is_baseline = is_baseline;
  return a;
}

}  // namespace mxablate::test
