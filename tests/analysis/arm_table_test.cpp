// The paper-style table in its three formats, against golden text.
#include "arm_fixture.h"
#include "catch.h"
#include "mxablate/analysis/arm_table.h"

using namespace mxablate::analysis;
using mxablate::test::make_arm;

namespace {

// Paired costs as extra_token_cost gives them: FDW three seeds (the range), FDW+SR two seeds of
// which one never reached the target, FDW+H16 one seed.
SeedCost sc(std::string key, double pct, bool at_least) {
  SeedCost c;  // by member: the cost record grows (projections)
  c.pair_key = std::move(key);
  c.pct = pct;
  c.at_least = at_least;
  return c;
}

ExtraTokenCost paired(const std::vector<SeedCost>& costs) {
  ExtraTokenCost c;
  c.paired = true;
  c.runs = static_cast<int>(costs.size());
  c.per_seed = costs;
  const auto values = seed_values(costs);
  const auto m = censored_median(values);
  c.median_pct = m->value;
  c.lower_bound = m->at_least;
  c.interval = median_interval(values);
  c.test = sign_flip_test(values);
  return c;
}

std::vector<ArmSummary> arms() {
  ArmSummary fp8 = make_arm("fp8", "fp8", "fp8", "fp8", "", "none", true);
  fp8.final_val_loss = 3.2514;
  fp8.seeds = 3;
  fp8.converged = 3;
  ArmSummary fdw = make_arm("FDW", "mxfp4", "mxfp4", "mxfp4", "", "none");
  fdw.cost = paired(
      {sc("seed=1", 26.44, false), sc("seed=2", 20.0, false), sc("seed=3", 31.25, false)});
  fdw.final_val_loss = 3.3021;
  fdw.seeds = 3;
  fdw.converged = 3;
  ArmSummary sr = make_arm("FDW+SR", "mxfp4", "mxfp4", "mxfp4", "grad", "none");
  sr.cost = paired({sc("seed=1", 35.0, false), sc("seed=2", 41.0, true)});
  sr.seeds = 2;
  sr.converged = 1;
  sr.diverged = 1;
  sr.first_divergence_reason = "loss_spike";
  ArmSummary h16 = make_arm("FDW+H16", "mxfp4", "mxfp4", "mxfp4", "", "deterministic");
  h16.cost = paired({sc("seed=1", 8.5, false)});
  h16.final_val_loss = 3.27;
  h16.seeds = 1;
  h16.converged = 1;
  return {fp8, fdw, sr, h16};
}

}  // namespace

const std::string kPairedNote =
    "Extra tokens: each run against the baseline run of its own seed, median over seeds (n: the "
    "seeds compared). Interval: below 6 seeds the range of the per-seed costs, which holds the "
    "median with probability 1 - 2^(1-n) (75 % for 3 seeds), never a 95 % interval; from 6 seeds "
    "the distribution-free 95 % confidence interval of the median from order statistics. p: exact "
    "two-sided sign-flip permutation test of the paired costs against 0 (all 2^n sign patterns); "
    "below 6 seeds it cannot reach p < 0.05. A figure marked ≥ rests on a run that never reached "
    "the target: it is only a lower bound (an interval's upper end so marked is open above). "
    "Runs short of the target: FDW+SR seed=2: at least +41.0 %, no projection.";

TEST_CASE("markdown table: the interval with its kind, p with its method, n") {
  std::string caption = "target val loss 3.3. " + kPairedNote;
  caption.replace(caption.find("p < 0.05"), 8, "p \\< 0.05");
  const std::string expected =
      caption + "\n\n"
      "| arm | fprop | dgrad | wgrad | interventions | extra tokens | interval | p (sign-flip) | n | "
      "final val loss | seeds | reached | diverged | not reached | paper |\n"
      "|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      "| fp8 | fp8 | fp8 | fp8 | - | baseline | - | - | - | 3.2514 | 3 | 3 | 0 | 0 | "
      "baseline (FP8) |\n"
      "| FDW | mxfp4 | mxfp4 | mxfp4 | - | +26.4 % | [+20.0, +31.2] (range, 3 seeds) | 0.250 | 3 | "
      "3.3021 | 3 | 3 | 0 | 0 | +26-27 % |\n"
      "| FDW+SR | mxfp4 | mxfp4 | mxfp4 | SR(grad) | ≥ +38.0 % | [+35.0, ≥ +41.0] (range, 2 seeds) | "
      "≤ 0.500 | 2 | - | 2 | 1 | 1 (loss_spike) | 0 | did not converge |\n"
      "| FDW+H16 | mxfp4 | mxfp4 | mxfp4 | H16 deterministic (wgrad) | +8.5 % | - | 1.000 | 1 | "
      "3.2700 | 1 | 1 | 0 | 0 | +8-9 % |\n";
  CHECK(render_table(arms(), TableFormat::kMarkdown, "target val loss 3.3") == expected);
}

TEST_CASE("LaTeX table") {
  const std::string expected =
      "\\begin{table}[t]\n\\centering\n\\caption{target val loss 3.3. Extra tokens: each run "
      "against the baseline run of its own seed, median over seeds (n: the seeds compared). "
      "Interval: below 6 seeds the range of the per-seed costs, which holds the median with "
      "probability 1 - 2\\textasciicircum{}(1-n) (75 \\% for 3 seeds), never a 95 \\% interval; from "
      "6 seeds the distribution-free 95 \\% confidence interval of the median from order "
      "statistics. p: exact two-sided sign-flip permutation test of the paired costs against 0 "
      "(all 2\\textasciicircum{}n sign patterns); below 6 seeds it cannot reach p \\textless{} "
      "0.05. A figure marked ≥ rests on a run that never reached the target: it is only a lower "
      "bound (an interval's upper end so marked is open above). Runs short of the target: FDW+SR "
      "seed=2: at least +41.0 \\%, no projection.}\n"
      "\\begin{tabular}{lllllrlrrrrrrrl}\n\\toprule\n"
      "arm & fprop & dgrad & wgrad & interventions & extra tokens & interval & p (sign-flip) & n & "
      "final val loss & seeds & reached & diverged & not reached & paper \\\\\n\\midrule\n"
      "fp8 & fp8 & fp8 & fp8 & - & baseline & - & - & - & 3.2514 & 3 & 3 & 0 & 0 & baseline (FP8) "
      "\\\\\n"
      "FDW & mxfp4 & mxfp4 & mxfp4 & - & +26.4 \\% & [+20.0, +31.2] (range, 3 seeds) & 0.250 & 3 & "
      "3.3021 & 3 & 3 & 0 & 0 & +26-27 \\% \\\\\n"
      "FDW+SR & mxfp4 & mxfp4 & mxfp4 & SR(grad) & $\\geq$ +38.0 \\% & [+35.0, $\\geq$ +41.0] "
      "(range, 2 seeds) & $\\leq$ 0.500 & 2 & - & 2 & 1 & 1 (loss\\_spike) & 0 & did not converge "
      "\\\\\n"
      "FDW+H16 & mxfp4 & mxfp4 & mxfp4 & H16 deterministic (wgrad) & +8.5 \\% & - & 1.000 & 1 & "
      "3.2700 & 1 & 1 & 0 & 0 & +8-9 \\% \\\\\n"
      "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
  CHECK(render_table(arms(), TableFormat::kLatex, "target val loss 3.3") == expected);
}

// The paper's "+26-27 %" starts like a formula: spreadsheets get it as text ('+26-27 %).
TEST_CASE("CSV table keeps numbers in their own columns, the interval's kind and p's method too") {
  const std::string expected =
      "arm,fprop,dgrad,wgrad,interventions,baseline,extra_tokens_pct,lower_bound,interval_kind,"
      "interval_low_pct,interval_low_at_least,interval_high_pct,interval_high_at_least,"
      "interval_coverage,p_value,p_at_most,p_method,n,final_val_loss,seeds,reached,diverged,"
      "first_divergence_reason,not_reached,paper,model,params\n"
      "fp8,fp8,fp8,fp8,-,true,,false,,,,,,,,,,,3.2514,3,3,0,,0,baseline (FP8),,\n"
      "FDW,mxfp4,mxfp4,mxfp4,-,false,26.44,false,range,20,false,31.25,false,0.75,0.25,false,"
      "sign-flip exact,3,3.3021,3,3,0,,0,'+26-27 %,,\n"
      "FDW+SR,mxfp4,mxfp4,mxfp4,SR(grad),false,38,true,range,35,false,41,true,0.5,0.5,true,"
      "sign-flip exact,2,,2,1,1,loss_spike,0,did not converge,,\n"
      "FDW+H16,mxfp4,mxfp4,mxfp4,H16 deterministic (wgrad),false,8.5,false,,,,,,,1,false,"
      "sign-flip exact,1,3.27,1,1,0,,0,'+8-9 %,,\n";
  CHECK(render_table(arms(), TableFormat::kCsv, "") == expected);
}

TEST_CASE("from 6 seeds the interval is the order-statistic 95 % CI, and says so in every format") {
  std::vector<ArmSummary> a = arms();
  a[1].cost = paired({sc("1", 9, false), sc("2", 3, false), sc("3", 12, false), sc("4", -1, false),
                      sc("5", 7, false), sc("6", 15, false), sc("7", 4, false), sc("8", 10, false),
                      sc("9", 6, false)});
  const std::string md = render_table(a, TableFormat::kMarkdown, "");
  CHECK(md.find("| FDW | mxfp4 | mxfp4 | mxfp4 | - | +7.0 % | [+3.0, +12.0] (95 % CI (order "
                "statistics), 9 seeds) | 0.008 | 9 |") != std::string::npos);
  const std::string tex = render_table(a, TableFormat::kLatex, "");
  CHECK(tex.find("& +7.0 \\% & [+3.0, +12.0] (95 \\% CI (order statistics), 9 seeds) & 0.008 & 9 &") !=
        std::string::npos);
  const std::string csv = render_table(a, TableFormat::kCsv, "");
  CHECK(csv.find("\nFDW,mxfp4,mxfp4,mxfp4,-,false,7,false,order_statistics,3,false,12,false,"
                 "0.960938,0.0078125,false,sign-flip exact,9,") != std::string::npos);
  const std::string html = render_table(a, TableFormat::kHtml, "");
  CHECK(html.find("<td>+7.0 %</td><td>[+3.0, +12.0] (95 % CI (order statistics), 9 seeds)</td>"
                  "<td>0.008</td><td>9</td>") != std::string::npos);
}

TEST_CASE("unpaired costs: the range of runs, never an interval of the median, and no test") {
  std::vector<ArmSummary> a = arms();
  a[1].cost = extra_token_cost({{120.0, 200}, {130.0, 200}, {125.0, 200}},
                               {{100.0, 200}, {110.0, 200}, {90.0, 200}});
  const std::string md = render_table(a, TableFormat::kMarkdown, "target");
  CHECK(md.rfind("target. Extra tokens: each run against the median of the baseline runs (seeds "
                 "do not match one to one), median over runs; interval: the range of those costs, "
                 "which leaves out the baseline's own spread (not an interval for the median); no "
                 "paired test.",
                 0) == 0);
  CHECK(md.find("| FDW | mxfp4 | mxfp4 | mxfp4 | - | +25.0 % | [+20.0, +30.0] (range, 3 runs, "
                "unpaired) | n/a | 3 |") != std::string::npos);
  const std::string csv = render_table(a, TableFormat::kCsv, "");
  CHECK(csv.find("\nFDW,mxfp4,mxfp4,mxfp4,-,false,25,false,range,20,false,30,false,,,,,3,") !=
        std::string::npos);
}

TEST_CASE("The table shows an arm's interventions and paper figure as its summary says") {
  // What they say is the contract's (contract/quant_settings_test.cpp); the table adds nothing.
  ArmSummary a = make_arm("odd", "mxfp4", "mxfp4", "mxfp4", "", "none");
  a.interventions = "scale_rule ceil + weight_blocks 2d";
  a.paper.reset();
  const std::string table = render_table({a}, TableFormat::kMarkdown, "");
  CHECK(table.find("| odd | mxfp4 | mxfp4 | mxfp4 | scale_rule ceil + weight_blocks 2d |") !=
        std::string::npos);
  CHECK(table.find("+26-27") == std::string::npos);
}

TEST_CASE("a perplexity too large for a double is shown as missing in every format") {
  // exp(800) overflows to inf: one rule (contract::perplexity_of) for every format.
  std::vector<ArmSummary> a = arms();
  a[1].final_val_loss = 800.0;
  a[1].best_val_loss = 3.0;
  const std::string md = render_table(a, TableFormat::kMarkdown, "", TableMetric::kPerplexity);
  CHECK(md.find("| - / 20.09 |") != std::string::npos);
  const std::string csv = render_table(a, TableFormat::kCsv, "", TableMetric::kPerplexity);
  CHECK(csv.find("inf") == std::string::npos);
  CHECK(csv.find(",sign-flip exact,3,,20.0855,") != std::string::npos);
}
