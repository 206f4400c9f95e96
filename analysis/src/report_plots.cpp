// gnuplot scripts for the report's figures, their data files, and running gnuplot on them.
#include "report_plots.h"

#include <fmt/format.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "mxablate/analysis/escape.h"

namespace mxablate::analysis {
namespace detail {
namespace {

namespace bp = boost::process;
namespace fs = std::filesystem;

// A key entry longer than this would squeeze the plot to nothing; the table has the full name.
constexpr size_t kLabelColumns = 40;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string number(double v) { return fmt::format("{:.9g}", v); }

// A tab-separated data file whose first line holds the column headers; the second column's
// header is the series' title, as text from the data, escaped for gnuplot's data-file reader.
class DataFile {
 public:
  DataFile(const fs::path& path, const std::string& title, const char* more_columns = "",
           const char* x_column = "tokens")
      : path_(path), out_(path, std::ios::trunc) {
    out_ << x_column << "\t" << escape::gnuplot_datafile_text(escape::clip(title, kLabelColumns))
         << more_columns << "\n";
  }
  void row(std::initializer_list<double> values) {
    bool first = true;
    for (double v : values) {
      out_ << (first ? "" : "\t") << number(v);
      first = false;
    }
    out_ << "\n";
  }
  void close() {
    out_.close();
    if (!out_) throw std::runtime_error(path_.string() + ": cannot write plot data");
  }

 private:
  fs::path path_;
  std::ofstream out_;
};

// The constant part of every script. `stem`, `title` and `ylabel` are literals of this file.
std::string script_header(const char* stem, const char* title, const char* ylabel,
                          const char* xlabel = "tokens") {
  return fmt::format(
      "set encoding utf8\n"
      "set terminal svg size 900,520 fixed noenhanced font 'sans,12' background rgb 'white'\n"
      "set output '{}.svg'\n"
      "set datafile separator tab\n"
      "set datafile columnheaders\n"
      "set title '{}'\n"
      "set xlabel '{}'\nset ylabel '{}'\n"
      "set grid lc rgb '#dddddd'\nset key outside right top\n"
      "set format x '%.1s%c'\n",
      stem, title, xlabel, ylabel);
}

std::string plot_command(const std::vector<std::string>& clauses) {
  if (clauses.empty()) return "";
  std::string out = "plot ";
  for (size_t i = 0; i < clauses.size(); ++i) out += (i ? ", \\\n     " : "") + clauses[i];
  return out + "\n";
}

// The y of a divergence mark: the run's validation loss there, or its last finite one.
std::optional<double> mark_height(const ReportData& data, const DivergenceMark& m) {
  for (const RunCurve& r : data.runs) {
    if (r.arm != m.arm || r.seed != m.seed) continue;
    if (const auto l = loss_at(r.evals, m.tokens)) return l;
    std::optional<double> last;
    for (const EvalPoint& p : r.evals)
      if (std::isfinite(p.val_loss) && p.tokens <= m.tokens) last = p.val_loss;
    return last;
  }
  return std::nullopt;
}

std::string loss_figure(const ReportData& data, const fs::path& workdir, bool zoom) {
  const char* stem = figure_stem(zoom ? Figure::kLossZoom : Figure::kLoss);
  double max_tokens = 0;
  for (const RunCurve& r : data.runs)
    for (const EvalPoint& p : r.evals)
      if (std::isfinite(p.tokens)) max_tokens = std::max(max_tokens, p.tokens);
  // The late stage is the second half of training: points before it are left out of the data.
  const double from = zoom ? 0.5 * max_tokens : -INFINITY;

  std::vector<std::string> clauses;
  double x_min = INFINITY, x_max = -INFINITY;
  for (size_t i = 0; i < data.arms.size(); ++i) {
    const int color = static_cast<int>(i) + 1;
    std::vector<BandPoint> band;
    for (const BandPoint& p : arm_band(data.runs, data.arms[i]))
      if (p.tokens >= from) band.push_back(p);
    if (band.empty()) continue;
    const std::string file = fmt::format("{}_{}.dat", stem, color);
    DataFile out(workdir / file, data.arms[i], "\tmin\tmax");
    for (const BandPoint& p : band) {
      out.row({p.tokens, p.median, p.min, p.max});
      x_min = std::min(x_min, p.tokens);
      x_max = std::max(x_max, p.tokens);
    }
    out.close();
    clauses.push_back(fmt::format(
        "'{}' using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc {} notitle",
        file, color));
    clauses.push_back(fmt::format(
        "'{}' using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc {} title columnheader(2) noenhanced",
        file, color));
  }
  if (clauses.empty()) return "";
  if (data.target && std::isfinite(*data.target)) {
    const std::string file = fmt::format("{}_target.dat", stem);
    DataFile out(workdir / file, "target");
    out.row({x_min, *data.target});
    out.row({x_max, *data.target});
    out.close();
    clauses.push_back(fmt::format(
        "'{}' using 1:2 with lines dt 2 lw 1.5 lc rgb 'black' title columnheader(2) noenhanced",
        file));
  }
  const std::string marks_file = fmt::format("{}_marks.dat", stem);
  DataFile marks(workdir / marks_file, "divergence event");
  int mark_count = 0;
  for (const DivergenceMark& m : data.divergences) {
    if (!std::isfinite(m.tokens) || m.tokens < from) continue;
    if (const auto y = mark_height(data, m)) {
      marks.row({m.tokens, *y});
      ++mark_count;
    }
  }
  marks.close();
  if (mark_count > 0)
    clauses.push_back(fmt::format(
        "'{}' using 1:2 with points pt 6 ps 1.6 lw 2 lc rgb '#d62728' title columnheader(2) "
        "noenhanced",
        marks_file));
  return script_header(stem,
                       zoom ? "Late stage (second half of training)" : "Validation loss vs tokens",
                       "validation loss") +
         plot_command(clauses);
}

const char* gemm_of(Figure f) {
  switch (f) {
    case Figure::kTelemetryFprop: return "fprop";
    case Figure::kTelemetryDgrad: return "dgrad";
    default: return "wgrad";
  }
}

const char* telemetry_title(Figure f) {
  switch (f) {
    case Figure::kTelemetryFprop: return "Quantization error in fprop (mean over layers)";
    case Figure::kTelemetryDgrad: return "Quantization error in dgrad (mean over layers)";
    default: return "Quantization error in wgrad (mean over layers)";
  }
}

std::string telemetry_figure(const ReportData& data, Figure f, const fs::path& workdir) {
  const char* stem = figure_stem(f);
  const std::string gemm = gemm_of(f);
  // One line per (arm, operand): relative error vs tokens, averaged over layers and seeds.
  std::map<std::pair<std::string, std::string>, std::map<double, std::pair<double, int>>> series;
  for (const TelemetryPoint& t : data.telemetry) {
    if (t.gemm != gemm || !std::isfinite(t.relative_error) || !std::isfinite(t.tokens)) continue;
    auto& cell = series[{t.arm, t.operand}][t.tokens];
    cell.first += t.relative_error;
    cell.second += 1;
  }
  std::vector<std::string> clauses;
  int index = 0;
  for (size_t arm_index = 0; arm_index < data.arms.size(); ++arm_index) {
    int dash = 1;
    for (const auto& [key, points] : series) {
      if (key.first != data.arms[arm_index]) continue;
      const std::string file = fmt::format("{}_{}.dat", stem, ++index);
      // Operands are named as the trainer reports them (x, w, dy; or a, b).
      DataFile out(workdir / file, key.first + " " + key.second);
      for (const auto& [tokens, sum] : points) out.row({tokens, sum.first / sum.second});
      out.close();
      clauses.push_back(fmt::format(
          "'{}' using 1:2 with lines lw 2 dt {} lc {} title columnheader(2) noenhanced", file,
          dash++, arm_index + 1));
    }
  }
  if (clauses.empty()) return "";
  return script_header(stem, telemetry_title(f), "relative error ||Q(x)-x|| / ||x||") +
         plot_command(clauses);
}

// One line per arm through its models: x = the model's parameter count (log scale), y = the
// arm's extra tokens to target against the baseline at that model, bars = the bootstrap 95 %
// interval. Points were checked to be finite when the figure's data was made (model_blocks.cpp);
// checked again here, since ReportData can be filled by anyone.
std::string scale_figure_script(const ReportData& data, const fs::path& workdir) {
  const char* stem = figure_stem(Figure::kExtraTokensVsParams);
  std::vector<std::string> clauses;
  int index = 0;
  for (const ScaleSeries& series : data.scale.series) {
    std::vector<const ScalePoint*> points;
    for (const ScalePoint& p : series.points)
      if (std::isfinite(p.params) && p.params > 0 && std::isfinite(p.median_pct) &&
          std::isfinite(p.low_pct) && std::isfinite(p.high_pct))
        points.push_back(&p);
    if (points.empty()) continue;
    const int color = ++index;
    const std::string file = fmt::format("{}_{}.dat", stem, color);
    DataFile out(workdir / file, series.arm, "\tlow\thigh", "params");
    for (const ScalePoint* p : points) out.row({p->params, p->median_pct, p->low_pct, p->high_pct});
    out.close();
    clauses.push_back(fmt::format(
        "'{}' using 1:2:3:4 with yerrorlines lw 2 pt 7 ps 0.8 lc {} title columnheader(2) "
        "noenhanced",
        file, color));
  }
  if (clauses.empty()) return "";
  return script_header(stem, "Extra tokens to target vs parameters",
                       "extra tokens vs the baseline at that model (%)", "parameters") +
         "set logscale x 10\nset xzeroaxis lt 1 lc rgb '#888888'\n" + plot_command(clauses);
}

}  // namespace

const char* figure_stem(Figure f) {
  switch (f) {
    case Figure::kLoss: return "loss";
    case Figure::kLossZoom: return "loss_zoom";
    case Figure::kTelemetryFprop: return "telemetry_fprop";
    case Figure::kTelemetryDgrad: return "telemetry_dgrad";
    case Figure::kTelemetryWgrad: return "telemetry_wgrad";
    case Figure::kExtraTokensVsParams: return "extra_tokens_vs_params";
  }
  return "figure";
}

const char* figure_heading(Figure f) {
  switch (f) {
    case Figure::kLoss: return "Validation loss vs tokens (median over seeds, band: min-max)";
    case Figure::kLossZoom: return "Late stage";
    case Figure::kTelemetryFprop: return "Quantization telemetry: fprop";
    case Figure::kTelemetryDgrad: return "Quantization telemetry: dgrad";
    case Figure::kTelemetryWgrad: return "Quantization telemetry: wgrad";
    case Figure::kExtraTokensVsParams:
      return "Extra tokens to target vs parameters (median over seeds, bars: bootstrap 95 % "
             "interval; 0 % = the baseline at each model)";
  }
  return "";
}

std::string write_figure(const ReportData& data, Figure f, const fs::path& workdir) {
  switch (f) {
    case Figure::kLoss: return loss_figure(data, workdir, false);
    case Figure::kLossZoom: return loss_figure(data, workdir, true);
    case Figure::kExtraTokensVsParams: return scale_figure_script(data, workdir);
    default: return telemetry_figure(data, f, workdir);
  }
}

std::string run_gnuplot(const std::string& gnuplot, const std::string& script,
                        const fs::path& workdir, Figure f) {
  const std::string stem = figure_stem(f);
  const fs::path svg_path = workdir / (stem + ".svg");
  const fs::path log_path = workdir / (stem + ".log");
  {
    std::ofstream out(workdir / (stem + ".gp"), std::ios::trunc);
    out << script;
    out.close();
    if (!out) throw std::runtime_error((workdir / (stem + ".gp")).string() + ": cannot write");
  }
  std::error_code ec;
  fs::remove(svg_path, ec);  // never embed an SVG left by an earlier report
  int rc = -1;
  try {
    rc = bp::system(bp::exe = gnuplot, bp::args = {stem + ".gp"}, bp::start_dir = workdir.string(),
                    bp::std_in < bp::null, (bp::std_out & bp::std_err) > log_path.string());
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot run " + gnuplot + ": " + e.what());
  }
  std::string svg = fs::exists(svg_path) ? read_file(svg_path) : "";
  if (rc != 0 || svg.find("<svg") == std::string::npos) {
    std::string log = read_file(log_path);
    if (log.size() > 300) log = log.substr(0, 300);
    throw std::runtime_error("gnuplot failed on " + stem + " (exit " + std::to_string(rc) +
                             "): " + escape::visible(log));
  }
  return svg;
}

}  // namespace detail

std::optional<std::string> find_gnuplot(const std::string& program) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string::npos) {
    std::error_code ec;
    const bool ok = std::filesystem::is_regular_file(program, ec) && ::access(program.c_str(), X_OK) == 0;
    return ok ? std::optional<std::string>(program) : std::nullopt;
  }
  const auto path = boost::process::search_path(program);
  if (path.empty()) return std::nullopt;
  return path.string();
}

std::string gnuplot_missing_message(const std::string& program) {
  const std::string where = program.find('/') != std::string::npos
                                ? "no executable program at " + program
                                : "'" + program + "' is not on PATH";
  return "plots skipped: gnuplot was not found (" + where +
         "). The rest of the report is written. To get the plots, install gnuplot "
         "(Debian/Ubuntu: apt-get install gnuplot-nox) and run `mxablate report` again, or copy "
         "the results database to a machine that has gnuplot and run `mxablate report --db "
         "<copy>` there.";
}

}  // namespace mxablate::analysis
