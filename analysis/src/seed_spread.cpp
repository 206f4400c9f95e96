#include "mxablate/analysis/seed_spread.h"

#include <cmath>

namespace mxablate::analysis {

SeedsPlan plan_seeds(const std::vector<BlockTable>& blocks, double difference_pct) {
  SeedsPlan plan;
  plan.difference_pct = difference_pct;
  double sum_squares = 0;
  for (const BlockTable& b : blocks) {
    for (const ArmSummary& a : b.table) {
      if (a.is_baseline || !a.cost.paired || a.cost.per_seed.empty()) continue;
      RowSpread r;
      r.row = a.arm;
      r.model = b.block.model;
      r.pairs = static_cast<int>(a.cost.per_seed.size());
      for (const SeedCost& c : a.cost.per_seed) r.censored += c.at_least ? 1 : 0;
      r.sd_pct = sample_sd(seed_values(a.cost.per_seed));
      if (r.sd_pct) {
        r.pairs_needed = pairs_needed(*r.sd_pct, difference_pct);
        const int df = r.pairs - r.censored - 1;
        sum_squares += *r.sd_pct * *r.sd_pct * df;
        plan.pooled_df += df;
        ++plan.pooled_rows;
      }
      plan.rows.push_back(r);
    }
  }
  if (plan.pooled_df == 0) return plan;
  plan.pooled_sd_pct = std::sqrt(sum_squares / plan.pooled_df);
  plan.pairs_needed = pairs_needed(*plan.pooled_sd_pct, difference_pct);
  return plan;
}

}  // namespace mxablate::analysis
