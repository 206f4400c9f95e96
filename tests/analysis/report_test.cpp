// The HTML report: written from hand-made data, every plot renders in headless Chromium with no
// script errors, and without gnuplot the page still carries the tables and says why.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "catch.h"
#include "mxablate/analysis/report.h"
#include "process_util.h"

using namespace mxablate::analysis;
using mxablate::test::run_command;
using mxablate::test::TempDir;

namespace {

ReportData sample_report() {
  ReportData d;
  d.sweep = "smoke";
  d.caption = "target val loss 4.0 (fp8 at 80 % of its budget)";
  d.target = 4.0;
  d.arms = {"fp8", "FDW", "FDW+SR"};
  for (uint64_t seed : {1, 2}) {
    RunCurve base{"fp8", seed, {}}, fdw{"FDW", seed, {}}, sr{"FDW+SR", seed, {}};
    for (int i = 1; i <= 10; ++i) {
      const double t = i * 1000.0;
      base.evals.push_back({t, 6.0 - 2.4 * std::log10(1 + i) - 0.01 * seed});
      fdw.evals.push_back({t, 6.1 - 2.3 * std::log10(1 + i) + 0.01 * seed});
      sr.evals.push_back({t, i < 6 ? 6.2 - 2.0 * std::log10(1 + i) : std::nan("")});
    }
    d.runs.push_back(base);
    d.runs.push_back(fdw);
    d.runs.push_back(sr);
    d.divergences.push_back({"FDW+SR", seed, 60, 5500.0, "nonfinite_loss", "fatal", NAN});
  }
  for (int i = 1; i <= 10; ++i) {
    for (const char* gemm : {"fprop", "dgrad", "wgrad"}) {
      d.telemetry.push_back({"FDW", gemm, "a", i * 1000.0, 0.12 + 0.001 * i});
      d.telemetry.push_back({"FDW", gemm, "b", i * 1000.0, 0.10});
    }
  }
  ArmSummary base{"fp8", "fp8", "fp8", "fp8", "", "none", 16, "wgrad", true};
  base.seeds = 2;
  ArmSummary fdw{"FDW", "mxfp4", "mxfp4", "mxfp4", "", "none", 16, "wgrad"};
  fdw.cost.median_pct = 12.5;
  fdw.seeds = 2;
  ArmSummary sr{"FDW+SR", "mxfp4", "mxfp4", "mxfp4", "grad", "none", 16, "wgrad"};
  sr.seeds = 2;
  sr.diverged = 2;
  sr.first_divergence_reason = "nonfinite_loss";
  d.table = {base, fdw, sr};
  return d;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("the band is the median and min-max over seeds, stopping at a divergence") {
  const ReportData d = sample_report();
  const auto band = arm_band(d.runs, "FDW+SR");
  REQUIRE(band.size() == 5);  // evaluations after the NaN are dropped
  CHECK(band[0].runs == 2);
  const auto fdw = arm_band(d.runs, "FDW");
  CHECK(fdw[0].min < fdw[0].median);
  CHECK(fdw[0].median < fdw[0].max);
}

TEST_CASE("the report page renders every plot in headless Chromium without errors") {
  TempDir dir("mxablate_report");
  const ReportResult r = write_report(sample_report(), dir.path.string());
  if (run_command("command -v gnuplot").exit_code != 0)
    MXABLATE_SKIP("gnuplot is not installed (scripts/setup.sh installs it): " << r.warning);
  REQUIRE(r.warning.empty());
  CHECK(r.plots == 5);  // loss, late stage, telemetry for three GEMMs
  const std::string html = read(r.html_path);
  CHECK(html.find("<td>FDW+SR</td>") != std::string::npos);
  CHECK(html.find("nonfinite_loss") != std::string::npos);
  CHECK(html.find("http") == std::string::npos);  // self-contained: nothing to fetch

  const char* candidates[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser"};
  std::string chromium;
  for (const char* c : candidates)
    if (std::filesystem::exists(c)) chromium = c;
  if (chromium.empty()) {
    MXABLATE_SKIP("Chromium is not installed (scripts/setup.sh installs it): no rendering check");
  }
  const auto out = run_command(
      chromium + " --headless --no-sandbox --disable-gpu --no-first-run "
                 "--disable-background-networking --disable-component-update --disable-sync "
                 "--user-data-dir=" + dir / "chromium-profile" +
      " --virtual-time-budget=10000 --dump-dom file://" + r.html_path);
  INFO(out.output.substr(0, 2000));
  std::smatch m;
  REQUIRE(std::regex_search(out.output, m, std::regex("data-plots=\"(\\d+)/(\\d+)\"")));
  CHECK(m[1].str() == "5");
  CHECK(m[2].str() == "5");
  REQUIRE(std::regex_search(out.output, m, std::regex("data-errors=\"(\\d+)\"")));
  CHECK(m[1].str() == "0");
}

TEST_CASE("without gnuplot the report still holds the tables and says why there are no plots") {
  TempDir dir("mxablate_report_nognuplot");
  const ReportResult r = write_report(sample_report(), dir.path.string(), "gnuplot-not-installed");
  CHECK(r.plots == 0);
  CHECK(r.warning.find("gnuplot (gnuplot-not-installed) was not found") == 0);
  const std::string html = read(r.html_path);
  CHECK(html.find("class=\"warning\"") != std::string::npos);
  CHECK(html.find("<td>FDW</td>") != std::string::npos);
}
