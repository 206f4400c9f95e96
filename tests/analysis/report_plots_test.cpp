// The figures of a sweep over several models (docs/design.md §6, "Figures"), read from their
// gnuplot scripts and data files, not from pixels: one colour per arm, the same in every figure;
// one dash type and marker per model; rows and points of a single seed hollow and named so; the
// figure of extra tokens against parameters labelled with each model's tokens per parameter;
// and the scripts the same whatever the names.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "catch.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/analysis/report.h"
#include "process_util.h"
#include "report_plots.h"

using namespace mxablate::analysis;
using mxablate::test::TempDir;

namespace {

struct Names {
  std::string base = "fp8", fdw = "FDW", small = "llama-20m", large = "llama-125m";
};

// fp8 and FDW at two models: llama-20m with two seeds, llama-125m with one.
ReportData two_models(const Names& n = {}) {
  ReportData d;
  d.sweep = "scales";
  const auto label = [](const std::string& arm, const std::string& model) {
    return arm + " · " + model;
  };
  for (const std::string* model : {&n.small, &n.large})
    for (const std::string* arm : {&n.base, &n.fdw}) {
      d.arms.push_back(label(*arm, *model));
      d.row_keys.push_back({*arm, *model});
      const int seeds = model == &n.small ? 2 : 1;
      for (int seed = 1; seed <= seeds; ++seed) {
        RunCurve r{label(*arm, *model), static_cast<uint64_t>(seed), {}};
        for (int i = 1; i <= 6; ++i)
          r.evals.push_back({i * 1000.0, 6.0 - 0.3 * i + (arm == &n.fdw ? 0.1 : 0.0) + 0.01 * seed});
        d.runs.push_back(r);
      }
      if (arm == &n.fdw)
        for (int i = 1; i <= 6; ++i)
          for (const char* gemm : {"fprop", "dgrad", "wgrad"})
            d.telemetry.push_back({label(*arm, *model), gemm, "x", i * 1000.0, 0.1});
    }
  ScalePoint small{20e6, 9.0, 7.0, 11.0, false, 2}, large{120e6, 4.0, 4.0, 4.0, false, 1};
  d.scale.series = {{n.fdw, {small, large}}};
  d.scale.models = {{n.small, 20e6, 1.5}, {n.large, 120e6, 0.125}};
  return d;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Clause {
  std::string colour;
  int dash = 0, point = 0;
};

// The style of the line drawn from each data file ("loss_2.dat" → its linespoints clause).
std::map<std::string, Clause> line_clauses(const std::string& script) {
  std::map<std::string, Clause> out;
  const std::regex re("'([a-z_0-9]+\\.dat)' using 1:2 with linespoints lw 2 dt (\\d+) pt (\\d+) "
                      "ps [0-9.]+ (?:pi 4 )?lc rgb '(#[0-9a-f]{6})'");
  for (std::sregex_iterator it(script.begin(), script.end(), re), end; it != end; ++it)
    out[(*it)[1]] = {(*it)[4], std::stoi((*it)[2]), std::stoi((*it)[3])};
  return out;
}

}  // namespace

TEST_CASE("each arm keeps one colour in every figure, each model has its own dash type and "
          "marker, and a single seed is hollow and named") {
  TempDir dir("mxablate_report_plots");
  const ReportData d = two_models();
  // Rows: 1 fp8·20m, 2 FDW·20m, 3 fp8·125m, 4 FDW·125m.
  const std::string loss = detail::write_figure(d, detail::Figure::kLoss, dir.path);
  const auto lines = line_clauses(loss);
  REQUIRE(lines.size() == 4);
  const Clause &base20 = lines.at("loss_1.dat"), &fdw20 = lines.at("loss_2.dat"),
               &base125 = lines.at("loss_3.dat"), &fdw125 = lines.at("loss_4.dat");
  CHECK(base20.colour == base125.colour);
  CHECK(fdw20.colour == fdw125.colour);
  CHECK(base20.colour != fdw20.colour);
  CHECK(base20.dash == fdw20.dash);
  CHECK(base125.dash == fdw125.dash);
  CHECK(base20.dash != base125.dash);
  // Two seeds: the model's filled marker and a band; one seed: its hollow form, no band, and the
  // key says so.
  CHECK(base20.point == 7);
  CHECK(base125.point == 4);  // the second model's square, hollow
  CHECK(loss.find("'loss_1.dat' using 1:3:4 with filledcurves") != std::string::npos);
  CHECK(loss.find("'loss_3.dat' using 1:3:4 with filledcurves") == std::string::npos);
  const auto header = [](const std::string& title) {
    return "tokens\t" + mxablate::escape::gnuplot_datafile_text(title) + "\tmin\tmax\n";
  };
  CHECK(read(dir.path / "loss_3.dat").rfind(header("fp8 · llama-125m (single seed)"), 0) == 0);
  CHECK(read(dir.path / "loss_1.dat").rfind(header("fp8 · llama-20m"), 0) == 0);

  // Telemetry: FDW in its colour, each model in its dash type.
  const auto tele = line_clauses(detail::write_figure(d, detail::Figure::kTelemetryWgrad, dir.path));
  REQUIRE(tele.size() == 2);
  for (const auto& [file, clause] : tele) CHECK(clause.colour == fdw20.colour);
  CHECK(tele.begin()->second.dash != std::next(tele.begin())->second.dash);

  // Extra tokens against parameters: FDW in its colour; the single-seed point hollow (column 5,
  // gnuplot's point type) and named in the key; each model's tokens per parameter under its tic.
  const std::string scale = detail::write_figure(d, detail::Figure::kExtraTokensVsParams, dir.path);
  CHECK(scale.find("'extra_tokens_vs_params_1.dat' using 1:2 with lines lw 2 lc rgb '" +
                   fdw20.colour + "'") != std::string::npos);
  CHECK(scale.find("'extra_tokens_vs_params_1.dat' using 1:2:5 with points pt variable") !=
        std::string::npos);
  CHECK(read(dir.path / "extra_tokens_vs_params_1.dat") ==
        "params\tFDW\tlow\thigh\tpoint\n20000000\t9\t7\t11\t7\n120000000\t4\t4\t4\t6\n");
  CHECK(scale.find("keyentry with points pt 6") != std::string::npos);
  CHECK(scale.find("title 'single seed'") != std::string::npos);
  using mxablate::escape::gnuplot_datafile_text;
  CHECK(read(dir.path / "extra_tokens_vs_params_tokens_per_param.dat") ==
        "params\t" + gnuplot_datafile_text("tokens per parameter") + "\n20000000\t" +
            gnuplot_datafile_text("20 M") + "\\0012" + gnuplot_datafile_text("1.5 tok/param") +
            "\n120000000\t" + gnuplot_datafile_text("120 M") + "\\0012" +
            gnuplot_datafile_text("0.12 tok/param") + "\n");
  CHECK(scale.find("'extra_tokens_vs_params_tokens_per_param.dat' using 1:(NaN):xticlabels(2)") !=
        std::string::npos);
}

TEST_CASE("without single-seed rows nothing is hollow and the key has no single-seed entry") {
  TempDir dir("mxablate_report_plots_seeds");
  ReportData d = two_models();
  for (const RunCurve& r : std::vector<RunCurve>(d.runs))
    if (r.seed == 1) d.runs.push_back({r.arm, 2, r.evals});
  for (ScaleSeries& s : d.scale.series)
    for (ScalePoint& p : s.points) p.seeds = 3;
  for (const auto& [file, clause] : line_clauses(detail::write_figure(d, detail::Figure::kLoss, dir.path)))
    CHECK((clause.point == 7 || clause.point == 5));
  CHECK(detail::write_figure(d, detail::Figure::kExtraTokensVsParams, dir.path).find("single seed") ==
        std::string::npos);
}

TEST_CASE("the scripts of a sweep over models are the same whatever the arm and model names") {
  TempDir dir("mxablate_report_plots_names");
  Names hostile;
  hostile.base = "fp8' lc 1; !touch MARK; '";
  hostile.fdw = "`touch MARK2` \"x\"";
  hostile.small = "m\nplot sin(x)";
  hostile.large = "@macro";
  std::filesystem::create_directories(dir.path / "plain");
  std::filesystem::create_directories(dir.path / "hostile");
  for (const detail::Figure f : detail::kFigures) {
    INFO(detail::figure_stem(f));
    const std::string plain = detail::write_figure(two_models(), f, dir.path / "plain");
    const std::string bad = detail::write_figure(two_models(hostile), f, dir.path / "hostile");
    CHECK(bad == plain);
    CHECK(bad.find("MARK") == std::string::npos);
  }
}

TEST_CASE("gnuplot draws the figures of a sweep over models") {
  if (mxablate::test::run_command("command -v gnuplot").exit_code != 0)
    MXABLATE_SKIP("gnuplot is not installed (scripts/setup.sh installs it)");
  const auto gnuplot = find_gnuplot("gnuplot");
  REQUIRE(gnuplot);
  TempDir dir("mxablate_report_plots_render");
  const ReportData d = two_models();
  for (const detail::Figure f : {detail::Figure::kLoss, detail::Figure::kTelemetryWgrad,
                                 detail::Figure::kExtraTokensVsParams}) {
    INFO(detail::figure_stem(f));
    const std::string script = detail::write_figure(d, f, dir.path);
    const std::string svg = detail::run_gnuplot(*gnuplot, script, dir.path, f);
    CHECK(svg.find("<svg") != std::string::npos);
  }
  const std::string scale = read(dir.path / "extra_tokens_vs_params.svg");
  CHECK(scale.find("0.12 tok/param") != std::string::npos);
  CHECK(scale.find("single seed") != std::string::npos);
}
