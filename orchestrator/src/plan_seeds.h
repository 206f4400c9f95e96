// `mxablate plan RECIPE --seeds [--db STORE] [--sweep S] [--difference PCT]`: how many seeds a
// difference in extra tokens needs, from the spread of the paired per-seed costs of an earlier
// sweep in the store (analysis/seed_spread.h; docs/design.md §6, "Intervals and the paired test").
#pragma once

#include <memory>
#include <string>

#include "mxablate/orchestrator/plan.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace mxablate::cli {

struct SeedsOptions {
  std::string db = "mxablate.db";
  // The sweep whose spread is used; empty: the recipe's own sweep when the store holds it (a
  // re-plan with more seeds), else the most recently updated sweep.
  std::string sweep;
  std::string difference = "5";  // percent of the baseline's tokens to target
};

// The options on `plan`: --seeds, and --db, --sweep, --difference, which need it.
struct SeedsFlags {
  CLI::Option* seeds = nullptr;
  std::shared_ptr<SeedsOptions> options;
};
SeedsFlags add_seeds_options(CLI::App* plan);

// Bad input (InputError, exit 2, one line naming the option): --difference not a positive number,
// a store that is missing or holds no sweep, a sweep without paired per-seed costs.
void print_seeds_plan(const SeedsOptions& options, const orchestrator::Plan& plan);

}  // namespace mxablate::cli
