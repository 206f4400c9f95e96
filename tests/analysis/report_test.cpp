// The HTML report: written from hand-made data, every plot renders in headless Chromium with no
// script errors, and without gnuplot the page still carries the tables and says why. Hostile
// names (gnuplot commands, markup, control characters, bytes that are not UTF-8) never reach a
// gnuplot script or HTML markup, run nothing, and show literally in the figures and the page.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "arm_fixture.h"
#include "catch.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/analysis/report.h"
#include "process_util.h"
#include "report_plots.h"

using namespace mxablate::analysis;
using mxablate::test::run_command;
using mxablate::test::TempDir;
using mxablate::test::make_arm;

namespace {

// Every string of the report that comes from the data.
struct Names {
  std::string sweep = "smoke";
  std::string base = "fp8", fdw = "FDW", sr = "FDW+SR";
  std::string operand_a = "a", operand_b = "b";
  std::string reason = "nonfinite_loss", severity = "fatal";
};

ReportData sample_report(const Names& n = {}) {
  ReportData d;
  d.sweep = n.sweep;
  d.caption = "target val loss 4.0 (" + n.base + " at 80 % of its budget)";
  d.target = 4.0;
  d.arms = {n.base, n.fdw, n.sr};
  for (uint64_t seed : {1, 2}) {
    RunCurve base{n.base, seed, {}}, fdw{n.fdw, seed, {}}, sr{n.sr, seed, {}};
    for (int i = 1; i <= 10; ++i) {
      const double t = i * 1000.0;
      base.evals.push_back({t, 6.0 - 2.4 * std::log10(1 + i) - 0.01 * seed});
      fdw.evals.push_back({t, 6.1 - 2.3 * std::log10(1 + i) + 0.01 * seed});
      sr.evals.push_back({t, i < 6 ? 6.2 - 2.0 * std::log10(1 + i) : std::nan("")});
    }
    d.runs.push_back(base);
    d.runs.push_back(fdw);
    d.runs.push_back(sr);
    d.divergences.push_back({n.sr, seed, 60, 5500.0, n.reason, n.severity, NAN});
  }
  for (int i = 1; i <= 10; ++i) {
    for (const char* gemm : {"fprop", "dgrad", "wgrad"}) {
      d.telemetry.push_back({n.fdw, gemm, n.operand_a, i * 1000.0, 0.12 + 0.001 * i});
      d.telemetry.push_back({n.fdw, gemm, n.operand_b, i * 1000.0, 0.10});
    }
  }
  ArmSummary base = make_arm(n.base, "fp8", "fp8", "fp8", "", "none", true);
  base.seeds = 2;
  ArmSummary fdw = make_arm(n.fdw, "mxfp4", "mxfp4", "mxfp4", "", "none");
  fdw.cost.median_pct = 12.5;
  fdw.seeds = 2;
  ArmSummary sr = make_arm(n.sr, "mxfp4", "mxfp4", "mxfp4", "grad", "none");
  sr.seeds = 2;
  sr.diverged = 2;
  sr.first_divergence_reason = n.reason;
  d.table = {base, fdw, sr};
  // Extra tokens against parameters: FDW at two models, FDW+SR at one (its second point is NaN,
  // e.g. from a corrupt database: left out of the figure's data).
  d.scale.series = {{n.fdw, {{22e6, 12.5, 10.0, 15.0, false}, {124e6, 8.0, 6.5, 9.5, false}}},
                    {n.sr, {{22e6, 30.0, 20.0, 41.0, true}, {124e6, std::nan(""), 1.0, 2.0, false}}}};
  return d;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string chromium_program() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::filesystem::exists(c)) return c;
  return "";
}

// Loads the page in headless Chromium (skips where there is none) and checks that every figure
// rendered and nothing failed: data-errors counts script errors and failed loads, e.g. of an
// image a name tried to inject.
void check_renders_in_chromium(const std::filesystem::path& dir, const std::string& html_path) {
  const std::string chromium = chromium_program();
  if (chromium.empty()) {
    MXABLATE_SKIP("Chromium is not installed (scripts/setup.sh --tests installs it): no rendering check");
  }
  const auto out = run_command(
      chromium + " --headless --no-sandbox --disable-gpu --no-first-run "
                 "--disable-background-networking --disable-component-update --disable-sync "
                 "--user-data-dir=" + (dir / "chromium-profile").string() +
      " --virtual-time-budget=10000 --dump-dom file://" + html_path);
  INFO(out.output.substr(0, 2000));
  std::smatch plots, errors;
  REQUIRE(std::regex_search(out.output, plots, std::regex("data-plots=\"(\\d+/\\d+)\"")));
  REQUIRE(std::regex_search(out.output, errors, std::regex("data-errors=\"(\\d+)\"")));
  CHECK(plots[1].str() == "6/6");
  CHECK(errors[1].str() == "0");
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
  CHECK(r.plots == 6);  // loss, late stage, extra tokens vs parameters, telemetry for three GEMMs
  const std::string html = read(r.html_path);
  // FDW+SR's point at 22 M is a lower bound: the page says so, as the table's "≥" does.
  CHECK(html.find("<li>FDW+SR at 22 M parameters: ≥ +30.0 %</li>") != std::string::npos);
  CHECK(html.find("<td>FDW+SR</td>") != std::string::npos);
  CHECK(html.find("nonfinite_loss") != std::string::npos);
  CHECK(html.find("http") == std::string::npos);  // self-contained: nothing to fetch

  check_renders_in_chromium(dir.path, r.html_path);
}

TEST_CASE("the OCC section lists each arm's compensated share, and is absent without OCC") {
  TempDir dir("mxablate_report_occ");
  ReportData d = sample_report();
  const std::string without = read(write_report(d, dir.path.string(), "gnuplot-not-installed").html_path);
  CHECK(without.find("Outlier clamping") == std::string::npos);
  d.occ.push_back({"FDW <occ>", 0.0125, 42});
  const std::string html = read(write_report(d, dir.path.string(), "gnuplot-not-installed").html_path);
  const size_t section = html.find("<h2>Outlier clamping and compensation</h2>");
  REQUIRE(section != std::string::npos);
  CHECK(html.find("<tr><td>FDW &lt;occ&gt;</td><td>1.25 %</td><td>42</td></tr>") != std::string::npos);
  CHECK(section < html.find("<h2>Divergence events</h2>"));
}

TEST_CASE("without gnuplot the report still holds the tables and says why there are no plots") {
  TempDir dir("mxablate_report_nognuplot");
  const ReportResult r = write_report(sample_report(), dir.path.string(), "gnuplot-not-installed");
  CHECK(r.plots == 0);
  CHECK(r.warning == gnuplot_missing_message("gnuplot-not-installed"));
  CHECK(r.warning.rfind("plots skipped: gnuplot was not found ('gnuplot-not-installed' is not on "
                        "PATH). The rest of the report is written. To get the plots, install "
                        "gnuplot", 0) == 0);
  CHECK(r.warning.find("copy the results database to a machine that has gnuplot") !=
        std::string::npos);
  const std::string html = read(r.html_path);
  // The notice stands where the figures would be: after the table, before the divergences.
  const size_t notice = html.find("<p class=\"warning\" id=\"plots-skipped\">plots skipped");
  REQUIRE(notice != std::string::npos);
  CHECK(html.find("<td>FDW</td>") < notice);
  CHECK(notice < html.find("<h2>Divergence events</h2>"));
  CHECK(html.find("<img") == std::string::npos);

  // A path that is not an executable program counts as missing too.
  const ReportResult by_path = write_report(sample_report(), dir.path.string(), dir / "nothing-here");
  CHECK(by_path.plots == 0);
  CHECK(by_path.warning.find("(no executable program at " + dir / "nothing-here" + ")") !=
        std::string::npos);
}

namespace {

// Hostile names: each tries another way into gnuplot (a new line with a shell command,
// system(), backquotes, a macro, load), into the HTML (an element with an event handler) or onto
// a terminal, or is not text at all. MARK is replaced by a marker file's path.
Names hostile_names(const std::string& mark) {
  Names n;
  n.sweep = "s\n<script>document.title='x'</script>";
  n.base = "fp8\n!touch " + mark + "1\n";
  n.fdw = "FDW\"; system(\"touch " + mark + "2\"); load '" + mark + "3' \\ @x {b}^_&~";
  n.sr = "`touch " + mark + "4` <img src=x onerror=f()> bad\xff\xfe \x1b[31m " +
         std::string(300, 'L');
  n.operand_a = "a'\n!touch " + mark + "5";
  n.operand_b = "b\xef\xbf\xbf\r\n set output '" + mark + "6'";  // U+FFFF: not allowed in XML
  n.reason = "r\n!touch " + mark + "7 <b>";
  n.severity = "fatal\x1b]0;t\x07";
  return n;
}

std::vector<std::string> all_names(const Names& n) {
  return {n.sweep, n.base, n.fdw, n.sr, n.operand_a, n.operand_b, n.reason, n.severity};
}

// The text of every <text> element of an SVG, with XML character references decoded.
std::vector<std::string> svg_texts(const std::string& svg) {
  std::vector<std::string> out;
  const std::regex text("<text[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text); it != std::sregex_iterator(); ++it) {
    std::string t = (*it)[1].str();
    std::string decoded;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] != '&') {
        decoded += t[i];
        continue;
      }
      const size_t end = t.find(';', i);
      const std::string ref = t.substr(i + 1, end - i - 1);
      if (ref == "amp") decoded += '&';
      else if (ref == "lt") decoded += '<';
      else if (ref == "gt") decoded += '>';
      else if (ref == "quot") decoded += '"';
      else if (ref == "apos") decoded += '\'';
      else if (ref.size() > 1 && ref[0] == '#') decoded += static_cast<char>(std::stoi(ref.substr(1)));
      else decoded += "&" + ref + ";";
      i = end;
    }
    out.push_back(decoded);
  }
  return out;
}

}  // namespace

TEST_CASE("hostile names never become gnuplot or HTML code, and show literally") {
  TempDir dir("mxablate_report_hostile");
  const std::string mark = dir / "MARK";
  const Names names = hostile_names(mark);
  if (run_command("command -v gnuplot").exit_code != 0)
    MXABLATE_SKIP("gnuplot is not installed (scripts/setup.sh installs it): no script to check");
  const ReportResult r = write_report(sample_report(names), (dir.path / "hostile").string());
  CHECK(r.plots == 6);

  // Nothing ran: no marker file from any of the names.
  for (int i = 1; i <= 7; ++i) CHECK_FALSE(std::filesystem::exists(mark + std::to_string(i)));

  // The scripts hold no data: they are byte for byte the scripts of the harmless names.
  const ReportResult plain = write_report(sample_report(), (dir.path / "plain").string());
  REQUIRE(plain.plots == 6);
  int scripts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path / "hostile" / "plots")) {
    if (entry.path().extension() != ".gp") continue;
    ++scripts;
    const std::string script = read(entry.path().string());
    INFO(entry.path().filename().string());
    CHECK(script == read((dir.path / "plain" / "plots" / entry.path().filename()).string()));
    for (const std::string& bad : {std::string("touch"), std::string("system"), std::string("`"),
                                   std::string("MARK"), std::string("@"), std::string("FDW")})
      CHECK(script.find(bad) == std::string::npos);
    for (const std::string& name : all_names(names)) CHECK(script.find(name) == std::string::npos);
  }
  CHECK(scripts == 6);

  // The figures show the names as text: clipped to 40 characters, then in visible form (an
  // escape such as \x1b is never cut in half).
  const std::vector<std::string> loss = svg_texts(read((dir.path / "hostile" / "plots" / "loss.svg").string()));
  for (const std::string& arm : {names.base, names.fdw, names.sr}) {
    const std::string shown = mxablate::escape::visible(mxablate::escape::clip(arm, 40));
    CHECK(std::find(loss.begin(), loss.end(), shown) != loss.end());
  }
  const std::vector<std::string> scale =
      svg_texts(read((dir.path / "hostile" / "plots" / "extra_tokens_vs_params.svg").string()));
  for (const std::string& arm : {names.fdw, names.sr}) {
    const std::string shown = mxablate::escape::visible(mxablate::escape::clip(arm, 40));
    CHECK(std::find(scale.begin(), scale.end(), shown) != scale.end());
  }
  const std::vector<std::string> tele =
      svg_texts(read((dir.path / "hostile" / "plots" / "telemetry_fprop.svg").string()));
  CHECK(std::find(tele.begin(), tele.end(),
                  mxablate::escape::visible(mxablate::escape::clip(names.fdw + " " + names.operand_a, 40))) != tele.end());

  // The page: names as text only, never markup or raw control bytes.
  const std::string html = read(r.html_path);
  CHECK(html.find("<script>document") == std::string::npos);
  CHECK(html.find("<img src=x") == std::string::npos);
  CHECK(html.find("<b>") == std::string::npos);
  CHECK(html.find('\x1b') == std::string::npos);
  CHECK(html.find('\xff') == std::string::npos);
  CHECK(html.find("<h1>Sweep s\\x0a&lt;script&gt;document.title=&#39;x&#39;&lt;/script&gt;</h1>") !=
        std::string::npos);
  CHECK(html.find("<td>r\\x0a!touch " + mark + "7 &lt;b&gt;</td>") != std::string::npos);

  // Every figure still renders (valid XML whatever the bytes), and no injected image or script
  // ran: a failed image load or a script error would be counted.
  check_renders_in_chromium(dir.path, r.html_path);
}

TEST_CASE("the figure of extra tokens against parameters: a data file per arm, its points and "
          "intervals, NaN left out") {
  TempDir dir("mxablate_report_scale");
  const std::string script =
      detail::write_figure(sample_report(), detail::Figure::kExtraTokensVsParams, dir.path);
  // One series per arm, each its own data file: params, median, interval's ends, marker (7
  // filled; 6, hollow, for a point of one seed: seeds not set here).
  CHECK(read((dir.path / "extra_tokens_vs_params_1.dat").string()) ==
        "params\tFDW\tlow\thigh\tpoint\n22000000\t12.5\t10\t15\t7\n124000000\t8\t6.5\t9.5\t7\n");
  CHECK(read((dir.path / "extra_tokens_vs_params_2.dat").string()) ==
        "params\tFDW\\0053SR\tlow\thigh\tpoint\n22000000\t30\t20\t41\t7\n");
  CHECK_FALSE(std::filesystem::exists(dir.path / "extra_tokens_vs_params_3.dat"));
  CHECK(script.find("set logscale x 10\n") != std::string::npos);
  CHECK(script.find("set xlabel 'parameters'") != std::string::npos);
  CHECK(script.find("'extra_tokens_vs_params_1.dat' using 1:2:3:4 with yerrorbars") !=
        std::string::npos);
  CHECK(script.find("'extra_tokens_vs_params_2.dat' using 1:2:3:4 with yerrorbars") !=
        std::string::npos);
  CHECK(script.find("FDW") == std::string::npos);  // names live in the data files only

  // No points at all: no figure.
  ReportData empty = sample_report();
  empty.scale.series = {{"FDW", {{NAN, 1.0, 1.0, 1.0, false}, {1e6, INFINITY, 1.0, 2.0, false}}}};
  CHECK(detail::write_figure(empty, detail::Figure::kExtraTokensVsParams, dir.path).empty());
}

TEST_CASE("the page says why the figure of extra tokens against parameters is missing, and which "
          "points are") {
  TempDir dir("mxablate_report_scale_note");
  ReportData d = sample_report();
  d.scale.series.clear();
  d.scale.omitted = "The figure needs <two> models.";
  d.scale.skipped = {"FDW <b>x</b> at model llama-5m: no extra-token figure"};
  const ReportResult r = write_report(d, dir.path.string(), "gnuplot");
  const std::string html = read(r.html_path);
  if (r.warning.empty()) {
    CHECK(html.find("<p class=\"note\" id=\"scale-omitted\">The figure needs &lt;two&gt; "
                    "models.</p>") != std::string::npos);
  }
  CHECK(html.find("<li>FDW &lt;b&gt;x&lt;/b&gt; at model llama-5m: no extra-token figure</li>") !=
        std::string::npos);
  CHECK(html.find("<b>x</b>") == std::string::npos);

  // A sweep over several models: a table per model under its heading, in the given order.
  d.blocks = {{"model llama-5m (5.24 M parameters)", "target <5>", d.table},
              {"model llama-20m (22 M parameters)", "target 4", d.table}};
  const std::string blocks = read(write_report(d, dir.path.string(), "gnuplot").html_path);
  const size_t small = blocks.find("<h2>Extra tokens to target: model llama-5m (5.24 M parameters)</h2>");
  const size_t large = blocks.find("<h2>Extra tokens to target: model llama-20m (22 M parameters)</h2>");
  REQUIRE(small != std::string::npos);
  REQUIRE(large != std::string::npos);
  CHECK(small < large);
  CHECK(blocks.find("<caption>target &lt;5&gt;. Extra tokens:") != std::string::npos);
  CHECK(blocks.find("Extra tokens to target, per arm") == std::string::npos);
}

TEST_CASE("gnuplot reads every escaped name back as written, digits after escapes included") {
  if (run_command("command -v gnuplot").exit_code != 0)
    MXABLATE_SKIP("gnuplot is not installed (scripts/setup.sh installs it)");
  TempDir dir("mxablate_gnuplot_names");
  // Every model preset's label has a digit after the '-' (llama-20m); the old \ooo escape let
  // gnuplot read "\0552" and show "llamaj0m".
  const std::vector<std::string> names = {"fp8 · llama-20m", "FDW+H16 · llama-350m", "a'b\"c 7",
                                          "x-1-2-3", "ü9"};
  std::string script = "set terminal svg noenhanced\nset output 'names.svg'\n"
                       "set datafile separator tab\nset datafile columnheaders\nplot ";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string file = "n" + std::to_string(i) + ".dat";
    std::ofstream(dir.path / file) << "x\t" << mxablate::escape::gnuplot_datafile_text(names[i]) << "\n1\t"
                                   << i << "\n2\t" << i + 1 << "\n";
    script += (i ? ", '" : "'") + file + "' using 1:2 with lines title columnheader(2) noenhanced";
  }
  std::ofstream(dir.path / "names.gp") << script << "\n";
  const auto r = run_command("cd '" + dir.path.string() + "' && gnuplot names.gp 2>&1");
  REQUIRE(r.exit_code == 0);
  const std::string svg = read((dir.path / "names.svg").string());
  for (const std::string& expected :
       {std::string(">fp8 · llama-20m<"), std::string(">FDW+H16 · llama-350m<"),
        std::string(">a'b\"c 7<"), std::string(">x-1-2-3<"), std::string(">ü9<")}) {
    INFO(expected);
    CHECK(svg.find(expected) != std::string::npos);
  }
}
