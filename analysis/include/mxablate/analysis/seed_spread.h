// The spread of an earlier sweep's paired per-seed costs, and how many seeds a difference needs
// (`mxablate plan RECIPE --seeds`, docs/design.md §6 "Intervals and the paired test"). The spread
// is the sample standard deviation of each row's paired costs (censored costs left out: their
// values are not known); the figure planned with is the SD pooled over every row that has one
// (the square root of the mean of the rows' variances weighted by their degrees of freedom), as a
// paired t-test would pool: arms of one sweep share their seeds' noise, and one row of 3 seeds
// says little alone.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mxablate/analysis/model_blocks.h"

namespace mxablate::analysis {

struct RowSpread {
  std::string row;    // the table row (arm plus non-seed grid settings)
  std::string model;  // its model, for a sweep over several
  int pairs = 0;      // paired costs (those whose baseline run reached the target)
  int censored = 0;   // of them, lower bounds only: left out of the SD
  std::optional<double> sd_pct;      // >= 2 known costs
  std::optional<int> pairs_needed;   // for the difference, at this row's SD
};

struct SeedsPlan {
  double difference_pct = 0;
  std::vector<RowSpread> rows;  // every non-baseline row with paired costs, in table order
  // nullopt when no row has two known paired costs (a sweep of one seed, unpaired runs, or
  // baselines that never reached the target): nothing to plan with.
  std::optional<double> pooled_sd_pct;
  int pooled_rows = 0;  // rows that entered the pooled SD
  int pooled_df = 0;    // their degrees of freedom: sum of (known costs - 1)
  std::optional<int> pairs_needed;  // at the pooled SD
};

// Every block's non-baseline paired rows, their SDs, the pooled SD and the pairs each needs.
SeedsPlan plan_seeds(const std::vector<BlockTable>& blocks, double difference_pct);

}  // namespace mxablate::analysis
