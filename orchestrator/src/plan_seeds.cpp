#include "plan_seeds.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <stdexcept>

#include "cli_errors.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/analysis/seed_spread.h"
#include "mxablate/orchestrator/text_table.h"
#include "mxablate/results/sqlite_db.h"
#include "read_database.h"

namespace mxablate::cli {
namespace {

double parse_difference(const std::string& text) {
  const std::string why = "--difference: '" + text +
                          "' is not a positive number (the difference in extra tokens to detect, "
                          "in percent: 5 for 5 %)";
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError(why);
  }
  if (used != text.size() || !std::isfinite(value) || !(value > 0)) throw InputError(why);
  return value;
}

bool has_sweep(results::Database& db, const std::string& name) {
  results::Statement find(db, "SELECT 1 FROM sweeps WHERE name = ?");
  find.bind(1, name);
  return find.step();
}

std::string pct(double v) { return fmt::format("{:.2f} %", v); }

}  // namespace

SeedsFlags add_seeds_options(CLI::App* plan) {
  SeedsFlags f;
  f.options = std::make_shared<SeedsOptions>();
  const std::string what =
      "print how many seeds a difference in extra tokens needs (paired sign-flip test, alpha 0.05, "
      "80 % power), from the spread of the paired per-seed costs of an earlier sweep in --db";
  f.seeds = plan->add_flag("--seeds", what);
  plan->add_option("--db", f.options->db, "with --seeds: the results database")
      ->capture_default_str()
      ->needs(f.seeds);
  plan->add_option("--sweep", f.options->sweep,
                   "with --seeds: the sweep to take the spread from (default: the recipe's own "
                   "when the store holds it, else the most recently updated)")
      ->needs(f.seeds);
  plan->add_option("--difference", f.options->difference,
                   "with --seeds: the difference in extra tokens to detect, in percent")
      ->capture_default_str()
      ->needs(f.seeds);
  return f;
}

void print_seeds_plan(const SeedsOptions& o, const orchestrator::Plan& plan) {
  const double difference = parse_difference(o.difference);
  const auto db = open_results_for_reading(o.db);
  const std::string name = !o.sweep.empty()               ? o.sweep
                           : has_sweep(*db, plan.sweep) ? plan.sweep
                                                        : std::string();
  analysis::SweepData sweep;
  std::vector<analysis::BlockTable> blocks;
  try {
    sweep = analysis::load_sweep(*db, name);
    blocks = analysis::analyze_by_model(sweep, "");
  } catch (const std::invalid_argument& e) {
    // "STORE: holds no sweep yet", "STORE: no sweep named 'S'", …
    throw InputError(std::string("--seeds: ") + e.what() +
                     " (the spread of an earlier sweep's paired per-seed costs is what --seeds "
                     "plans with)");
  }
  const analysis::SeedsPlan p = analysis::plan_seeds(blocks, difference);
  if (!p.pooled_sd_pct)
    throw InputError(fmt::format(
        "--seeds: sweep '{}' in {} has no paired per-seed costs: no arm has two seeds paired with "
        "baseline runs of the same seed that reached the target",
        sweep.name, o.db));

  const bool several_models = blocks.size() > 1;
  std::cout << fmt::format("seeds for a difference of {:g} % in extra tokens, from sweep '{}' in "
                           "{}:\n",
                           difference, escape::terminal(sweep.name), escape::terminal(o.db));
  std::vector<std::string> headers{"row"};
  if (several_models) headers.push_back("model");
  for (const char* h : {"pairs", "censored", "SD of cost", "seeds needed"}) headers.push_back(h);
  orchestrator::TextTable table(headers);
  for (const analysis::RowSpread& r : p.rows) {
    std::vector<std::string> row{r.row};
    if (several_models) row.push_back(r.model);
    row.push_back(std::to_string(r.pairs));
    row.push_back(std::to_string(r.censored));
    row.push_back(r.sd_pct ? pct(*r.sd_pct) : "-");
    row.push_back(r.pairs_needed ? std::to_string(*r.pairs_needed) : "-");
    table.add_row(row);
  }
  std::cout << table.render(2);
  std::cout << fmt::format(
      "pooled over {} row{} ({} degrees of freedom): SD {} of the baseline's tokens per seed; a "
      "difference of {:g} % needs {} seeds for the exact sign-flip test at alpha {:g} with 80 % "
      "power\n",
      p.pooled_rows, p.pooled_rows == 1 ? "" : "s", p.pooled_df, pct(*p.pooled_sd_pct), difference,
      *p.pairs_needed, analysis::kTestAlpha);
  const int least = analysis::min_values_for_significance();
  std::cout << fmt::format(
      "the exact test can reach p < {:g} only from {} seeds (its smallest p is 2/2^n: {:g} with "
      "{}); below {} seeds the table's interval is the range of the seeds, not a {:g} % interval\n",
      analysis::kTestAlpha, least, analysis::min_sign_flip_p(least - 1), least - 1,
      analysis::min_values_for_interval(), 100 * analysis::kIntervalConfidence);
  std::cout << "SD of cost: the sample SD of each row's paired per-seed costs (100 · (tokens / "
               "the "
               "baseline run's of its seed − 1)), censored costs left out; pooled: weighted by "
               "degrees of freedom. Seeds needed: simulated power of the exact test for normal "
               "costs up to " << analysis::kSimulatedPowerMax
            << " seeds, the paired t-test's formula beyond\n";
}

}  // namespace mxablate::cli
