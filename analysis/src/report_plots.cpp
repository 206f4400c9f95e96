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
#include "mxablate/analysis/model_blocks.h"

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
  // `note`, our own text, follows the clipped title (e.g. " (single seed)").
  DataFile(const fs::path& path, const std::string& title, const char* more_columns = "",
           const char* x_column = "tokens", const char* note = "")
      : path_(path), out_(path, std::ios::trunc) {
    out_ << x_column << "\t"
         << escape::gnuplot_datafile_text(escape::clip(title, kLabelColumns) + note)
         << more_columns << "\n";
  }
  // A row whose last field is text we made (numbers with their units), in lines, for tic
  // labels. A newline is written as gnuplot's escape for it (\0012, the form every other byte
  // takes): escape::gnuplot_datafile_text shows control bytes from the data visibly instead.
  void row_with_label(double x, std::initializer_list<std::string> lines) {
    out_ << number(x) << "\t";
    bool first = true;
    for (const std::string& line : lines) {
      out_ << (first ? "" : "\\0012") << escape::gnuplot_datafile_text(line);
      first = false;
    }
    out_ << "\n";
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

// The figures' styles, one definition for every figure (docs/design.md §6, "Figures"): each arm
// has one colour, taken in the sweep's arm order, in every figure of the report; each model has
// one dash type and one marker; a row with a single seed has the hollow form of its marker and
// "(single seed)" after its name in the key. Only integers and constant colour names reach a
// script: the styles depend on the data's shape (how many arms, models, seeds), never its text.
class Styles {
 public:
  explicit Styles(const ReportData& data) {
    for (size_t i = 0; i < data.arms.size(); ++i) {
      const bool keyed = data.row_keys.size() == data.arms.size();
      const std::string& arm = keyed ? data.row_keys[i].arm : data.arms[i];
      const std::string model = keyed ? data.row_keys[i].model : std::string();
      rows_.push_back({add(arm_index_, arm), add(model_index_, model), 0});
      row_index_.emplace(data.arms[i], i);
    }
    for (const RunCurve& r : data.runs)
      if (const auto it = row_index_.find(r.arm); it != row_index_.end()) ++rows_[it->second].seeds;
    // Arms only the scale figure names (a ReportData filled by hand) come after the sweep's.
    for (const ScaleSeries& series : data.scale.series) add(arm_index_, series.arm);
  }

  // The colour of the arm of row `row` (of ReportData::arms), or of the arm named `arm`.
  std::string row_colour(size_t row) const { return colour(rows_[row].arm); }
  std::string arm_colour(const std::string& arm) const { return colour(arm_index_.at(arm)); }
  int row_dash(size_t row) const { return kDashes[rows_[row].model % std::size(kDashes)]; }
  int row_point(size_t row) const { return point(rows_[row].model, single_seed(row)); }
  bool single_seed(size_t row) const { return rows_[row].seeds == 1; }
  std::optional<size_t> row_of(const std::string& label) const {
    const auto it = row_index_.find(label);
    return it == row_index_.end() ? std::nullopt : std::optional<size_t>(it->second);
  }
  // Filled marker of the first model, or its hollow form.
  static int point(size_t model, bool hollow) {
    const size_t i = model % std::size(kFilled);
    return hollow ? kHollow[i] : kFilled[i];
  }

 private:
  struct Row {
    size_t arm, model;
    int seeds;
  };
  // Tableau 10: distinguishable, and none of them the black of the target and divergence marks.
  static constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                             "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                             "#bcbd22", "#17becf"};
  static constexpr int kDashes[] = {1, 2, 3, 4, 5};
  // gnuplot's point types: filled circle, square, triangle, diamond, inverted triangle; and the
  // open form of each.
  static constexpr int kFilled[] = {7, 5, 9, 13, 11};
  static constexpr int kHollow[] = {6, 4, 8, 12, 10};

  static size_t add(std::map<std::string, size_t>& index, const std::string& key) {
    return index.emplace(key, index.size()).first->second;
  }
  // More arms than colours: the colours repeat (the key still names every line).
  static std::string colour(size_t arm) {
    return fmt::format("rgb '{}'", kColours[arm % std::size(kColours)]);
  }

  std::map<std::string, size_t> arm_index_, model_index_, row_index_;
  std::vector<Row> rows_;
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

  const Styles styles(data);
  std::vector<std::string> clauses;
  double x_min = INFINITY, x_max = -INFINITY;
  for (size_t i = 0; i < data.arms.size(); ++i) {
    std::vector<BandPoint> band;
    for (const BandPoint& p : arm_band(data.runs, data.arms[i]))
      if (p.tokens >= from) band.push_back(p);
    if (band.empty()) continue;
    const std::string file = fmt::format("{}_{}.dat", stem, i + 1);
    const bool single = styles.single_seed(i);
    DataFile out(workdir / file, data.arms[i], "\tmin\tmax", "tokens",
                 single ? " (single seed)" : "");
    for (const BandPoint& p : band) {
      out.row({p.tokens, p.median, p.min, p.max});
      x_min = std::min(x_min, p.tokens);
      x_max = std::max(x_max, p.tokens);
    }
    out.close();
    const std::string colour = styles.row_colour(i);
    if (!single)  // one seed has no band
      clauses.push_back(fmt::format(
          "'{}' using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc {} notitle",
          file, colour));
    clauses.push_back(fmt::format("'{}' using 1:2 with linespoints lw 2 dt {} pt {} ps {} lc {} "
                                  "title columnheader(2) noenhanced",
                                  file, styles.row_dash(i), styles.row_point(i),
                                  single ? "0.7" : "0.5", colour));
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
        "'{}' using 1:2 with points pt 2 ps 1.6 lw 2 lc rgb 'black' title columnheader(2) "
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
  // Colour: the arm; dash type: the model; marker: the operand (the first, second, … of the row).
  const Styles styles(data);
  std::vector<std::string> clauses;
  int index = 0;
  for (size_t arm_index = 0; arm_index < data.arms.size(); ++arm_index) {
    size_t operand = 0;
    for (const auto& [key, points] : series) {
      if (key.first != data.arms[arm_index]) continue;
      const std::string file = fmt::format("{}_{}.dat", stem, ++index);
      // Operands are named as the trainer reports them (x, w, dy; or a, b).
      DataFile out(workdir / file, key.first + " " + key.second);
      for (const auto& [tokens, sum] : points) out.row({tokens, sum.first / sum.second});
      out.close();
      clauses.push_back(fmt::format("'{}' using 1:2 with linespoints lw 2 dt {} pt {} ps 0.6 "
                                    "pi 4 lc {} title columnheader(2) noenhanced",
                                    file, styles.row_dash(arm_index),
                                    Styles::point(operand++, false), styles.row_colour(arm_index)));
    }
  }
  if (clauses.empty()) return "";
  return script_header(stem, telemetry_title(f), "relative error ||Q(x)-x|| / ||x||") +
         plot_command(clauses);
}

// One line per arm through its models: x = the model's parameter count (log scale), y = the
// arm's extra tokens to target against the baseline at that model, bars = the table's interval
// (a range below its seed threshold, extra_tokens.h). The arm's colour is its colour in every
// figure; a point of one seed is hollow. Below the baseline's 0 % line, each model's tokens per
// parameter (its baseline's budget). Points were checked to be finite when the figure's data was
// made (model_blocks.cpp); checked again here, since ReportData can be filled by anyone.
std::string scale_figure_script(const ReportData& data, const fs::path& workdir) {
  const char* stem = figure_stem(Figure::kExtraTokensVsParams);
  const Styles styles(data);
  std::vector<std::string> clauses;
  int index = 0;
  bool any_single = false;
  for (const ScaleSeries& series : data.scale.series) {
    std::vector<const ScalePoint*> points;
    for (const ScalePoint& p : series.points)
      if (std::isfinite(p.params) && p.params > 0 && std::isfinite(p.median_pct) &&
          std::isfinite(p.low_pct) && std::isfinite(p.high_pct))
        points.push_back(&p);
    if (points.empty()) continue;
    const std::string file = fmt::format("{}_{}.dat", stem, ++index);
    DataFile out(workdir / file, series.arm, "\tlow\thigh\tpoint", "params");
    for (const ScalePoint* p : points) {
      const bool single = p->seeds == 1;
      any_single = any_single || single;
      out.row({p->params, p->median_pct, p->low_pct, p->high_pct,
               static_cast<double>(Styles::point(0, single))});
    }
    out.close();
    const std::string colour = styles.arm_colour(series.arm);
    clauses.push_back(fmt::format(
        "'{}' using 1:2 with lines lw 2 lc {} title columnheader(2) noenhanced", file, colour));
    clauses.push_back(fmt::format(
        "'{}' using 1:2:3:4 with yerrorbars lw 1.5 ps 0 lc {} notitle", file, colour));
    clauses.push_back(fmt::format(
        "'{}' using 1:2:5 with points pt variable ps 1 lw 2 lc {} notitle", file, colour));
  }
  if (clauses.empty()) return "";
  std::vector<const ScaleModel*> models;
  for (const ScaleModel& m : data.scale.models)
    if (std::isfinite(m.params) && m.params > 0 && std::isfinite(m.tokens_per_param))
      models.push_back(&m);
  if (!models.empty()) {
    // The x axis's tics: at each model, its parameter count and, below it, its tokens per
    // parameter (two lines: the data file's escaped newline).
    const std::string file = fmt::format("{}_tokens_per_param.dat", stem);
    DataFile out(workdir / file, "tokens per parameter", "", "params");
    for (const ScaleModel* m : models)
      out.row_with_label(m->params,
                         {params_text(static_cast<int64_t>(std::llround(m->params))),
                          fmt::format("{:.2g} tok/param", m->tokens_per_param)});
    out.close();
    clauses.push_back(fmt::format("'{}' using 1:(NaN):xticlabels(2) notitle", file));
  }
  if (any_single)
    clauses.push_back("keyentry with points pt 6 ps 1 lw 2 lc rgb 'black' title 'single seed'");
  return script_header(stem, "Extra tokens to target vs parameters",
                       "extra tokens vs the baseline at that model (%)",
                       models.empty() ? "parameters"
                                      : "parameters; tokens per parameter (baseline budget)") +
         "set logscale x 10\nset xzeroaxis lt 1 lc rgb '#888888'\n" +
         (models.empty() ? "" : "set xlabel offset 0,-1\n") + plot_command(clauses);
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
      return "Extra tokens to target vs parameters (median over seeds, bars: the table's "
             "interval or range; hollow: a single seed; 0 % = the baseline at each model, "
             "labelled with its tokens per parameter)";
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
