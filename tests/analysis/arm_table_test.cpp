// The paper-style table in its three formats, against golden text.
#include "arm_fixture.h"
#include "catch.h"
#include "mxablate/analysis/arm_table.h"

using namespace mxablate::analysis;
using mxablate::test::make_arm;

namespace {

std::vector<ArmSummary> arms() {
  ArmSummary fp8 = make_arm("fp8", "fp8", "fp8", "fp8", "", "none", true);
  fp8.final_val_loss = 3.2514;
  fp8.seeds = 2;
  fp8.converged = 2;
  ArmSummary fdw = make_arm("FDW", "mxfp4", "mxfp4", "mxfp4", "", "none");
  fdw.cost.median_pct = 26.44;
  fdw.cost.ci_low_pct = 20.0;
  fdw.cost.ci_high_pct = 31.25;
  fdw.final_val_loss = 3.3021;
  fdw.seeds = 2;
  fdw.converged = 2;
  ArmSummary sr = make_arm("FDW+SR", "mxfp4", "mxfp4", "mxfp4", "grad", "none");
  sr.cost.median_pct = 41.0;
  sr.cost.lower_bound = true;
  sr.seeds = 2;
  sr.diverged = 2;
  sr.first_divergence_reason = "loss_spike";
  ArmSummary h16 = make_arm("FDW+H16", "mxfp4", "mxfp4", "mxfp4", "", "deterministic");
  h16.cost.median_pct = 8.5;
  h16.final_val_loss = 3.27;
  h16.seeds = 1;
  h16.converged = 1;
  return {fp8, fdw, sr, h16};
}

}  // namespace

TEST_CASE("markdown table") {
  const std::string expected =
      "target val loss 3.3. Extra tokens: each run against the median of the baseline runs "
      "(seeds do not match one to one), bootstrap 95 % interval.\n\n"
      "| arm | fprop | dgrad | wgrad | interventions | extra tokens [95% CI] | final val loss | "
      "seeds | reached | diverged | not reached | paper |\n"
      "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
      "| fp8 | fp8 | fp8 | fp8 | - | baseline | 3.2514 | 2 | 2 | 0 | 0 | baseline (FP8) |\n"
      "| FDW | mxfp4 | mxfp4 | mxfp4 | - | +26.4 % [+20.0, +31.2] | 3.3021 | 2 | 2 | 0 | 0 | "
      "+26-27 % |\n"
      "| FDW+SR | mxfp4 | mxfp4 | mxfp4 | SR(grad) | ≥ +41.0 % | - | 2 | 0 | 2 (loss_spike) | 0 "
      "| did not converge |\n"
      "| FDW+H16 | mxfp4 | mxfp4 | mxfp4 | H16 deterministic (wgrad) | +8.5 % | 3.2700 | 1 | 1 | "
      "0 | 0 | +8-9 % |\n";
  CHECK(render_table(arms(), TableFormat::kMarkdown, "target val loss 3.3") == expected);
}

TEST_CASE("LaTeX table") {
  const std::string expected =
      "\\begin{table}[t]\n\\centering\n\\caption{target val loss 3.3. Extra tokens: each run against the median of the "
      "baseline runs (seeds do not match one to one), bootstrap 95 \\% interval.}\n"
      "\\begin{tabular}{lllllrrrrrrl}\n\\toprule\n"
      "arm & fprop & dgrad & wgrad & interventions & extra tokens [95\\% CI] & final val loss & "
      "seeds & reached & diverged & not reached & paper \\\\\n\\midrule\n"
      "fp8 & fp8 & fp8 & fp8 & - & baseline & 3.2514 & 2 & 2 & 0 & 0 & baseline (FP8) \\\\\n"
      "FDW & mxfp4 & mxfp4 & mxfp4 & - & +26.4 \\% [+20.0, +31.2] & 3.3021 & 2 & 2 & 0 & 0 & "
      "+26-27 \\% \\\\\n"
      "FDW+SR & mxfp4 & mxfp4 & mxfp4 & SR(grad) & $\\geq$ +41.0 \\% & - & 2 & 0 & "
      "2 (loss\\_spike) & 0 & did not converge \\\\\n"
      "FDW+H16 & mxfp4 & mxfp4 & mxfp4 & H16 deterministic (wgrad) & +8.5 \\% & 3.2700 & 1 & 1 & "
      "0 & 0 & +8-9 \\% \\\\\n"
      "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
  CHECK(render_table(arms(), TableFormat::kLatex, "target val loss 3.3") == expected);
}

// The paper's "+26-27 %" starts like a formula: spreadsheets get it as text ('+26-27 %).
TEST_CASE("CSV table keeps numbers in their own columns") {
  const std::string expected =
      "arm,fprop,dgrad,wgrad,interventions,baseline,extra_tokens_pct,ci_low_pct,ci_high_pct,"
      "lower_bound,final_val_loss,seeds,reached,diverged,first_divergence_reason,not_reached,"
      "paper,model,params\n"
      "fp8,fp8,fp8,fp8,-,true,,,,false,3.2514,2,2,0,,0,baseline (FP8),,\n"
      "FDW,mxfp4,mxfp4,mxfp4,-,false,26.44,20,31.25,false,3.3021,2,2,0,,0,'+26-27 %,,\n"
      "FDW+SR,mxfp4,mxfp4,mxfp4,SR(grad),false,41,,,true,,2,0,2,loss_spike,0,did not converge,,\n"
      "FDW+H16,mxfp4,mxfp4,mxfp4,H16 deterministic (wgrad),false,8.5,,,false,3.27,1,1,0,,0,'+8-9 %,,\n";
  CHECK(render_table(arms(), TableFormat::kCsv, "") == expected);
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
  CHECK(csv.find(",false,,20.0855,") != std::string::npos);
}
