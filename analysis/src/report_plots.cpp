// gnuplot scripts for the report's figures, and running gnuplot on them.
#include "report_plots.h"

#include <boost/process.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace mxablate::analysis::detail {
namespace {

namespace bp = boost::process;
namespace fs = std::filesystem;

std::string gp_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// gnuplot's enhanced text treats _ ^ @ & ~ { } as markup: show arm names literally.
std::string literal_title(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '^' || c == '@' || c == '&' || c == '~' || c == '{' || c == '}')
      out += "\\\\";
    out += c;
  }
  return gp_quoted(out);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string common_header(const fs::path& svg, const std::string& title, const std::string& x,
                          const std::string& y) {
  std::ostringstream s;
  s << "set terminal svg size 900,520 fixed enhanced font 'sans,12' background rgb 'white'\n"
    << "set output " << gp_quoted(svg.string()) << "\n"
    << "set title " << literal_title(title) << "\n"
    << "set xlabel " << gp_quoted(x) << "\nset ylabel " << gp_quoted(y) << "\n"
    << "set grid lc rgb '#dddddd'\nset key outside right top\nset datafile missing 'NaN'\n"
    << "set format x '%.1s%c'\n";
  return s.str();
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

}  // namespace

std::optional<std::string> find_gnuplot(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    return fs::exists(program) ? std::optional<std::string>(program) : std::nullopt;
  }
  const auto path = bp::search_path(program);
  if (path.empty()) return std::nullopt;
  return path.string();
}

std::string run_gnuplot(const std::string& gnuplot, const std::string& script,
                        const fs::path& workdir, const std::string& name) {
  const fs::path script_path = workdir / (name + ".gp");
  const fs::path log_path = workdir / (name + ".log");
  const fs::path svg_path = workdir / (name + ".svg");
  std::ofstream(script_path) << script;
  const int rc = bp::system(gnuplot, script_path.string(), bp::std_out > log_path.string(),
                            bp::std_err > log_path.string(), bp::std_in < bp::null);
  std::string svg = fs::exists(svg_path) ? read_file(svg_path) : "";
  if (rc != 0 || svg.find("<svg") == std::string::npos) {
    std::string log = read_file(log_path);
    if (log.size() > 300) log = log.substr(0, 300);
    throw std::runtime_error("gnuplot failed on " + name + " (exit " + std::to_string(rc) + "): " + log);
  }
  return svg;
}

std::string loss_plot_script(const ReportData& data, const fs::path& workdir, bool zoom,
                             const fs::path& svg) {
  double max_tokens = 0;
  for (const RunCurve& r : data.runs)
    for (const EvalPoint& p : r.evals) max_tokens = std::max(max_tokens, p.tokens);
  std::ostringstream s;
  s << common_header(svg, zoom ? "Late stage (second half of training)" : "Validation loss vs tokens",
                     "tokens", "validation loss");
  if (zoom) s << "set xrange [" << 0.5 * max_tokens << ":*]\n";
  std::vector<std::string> plots;
  int color = 1;
  for (const std::string& arm : data.arms) {
    const auto band = arm_band(data.runs, arm);
    if (band.empty()) {
      ++color;
      continue;
    }
    const fs::path file = workdir / ("band_" + std::to_string(color) + ".dat");
    std::ofstream out(file);
    out.precision(9);
    for (const BandPoint& p : band)
      out << p.tokens << ' ' << p.median << ' ' << p.min << ' ' << p.max << '\n';
    plots.push_back(gp_quoted(file.string()) + " using 1:3:4 with filledcurves fs transparent solid 0.18 noborder lc " +
                    std::to_string(color) + " notitle");
    plots.push_back(gp_quoted(file.string()) + " using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc " +
                    std::to_string(color) + " title " + literal_title(arm));
    ++color;
  }
  if (data.target) {
    plots.push_back(std::to_string(*data.target) + " with lines dt 2 lw 1.5 lc rgb 'black' title " +
                    gp_quoted("target"));
  }
  const fs::path marks = workdir / (zoom ? "marks_zoom.dat" : "marks.dat");
  std::ofstream mark_out(marks);
  mark_out.precision(9);
  int mark_count = 0;
  for (const DivergenceMark& m : data.divergences) {
    if (const auto y = mark_height(data, m)) {
      mark_out << m.tokens << ' ' << *y << '\n';
      ++mark_count;
    }
  }
  mark_out.close();
  if (mark_count > 0)
    plots.push_back(gp_quoted(marks.string()) +
                    " using 1:2 with points pt 6 ps 1.6 lw 2 lc rgb '#d62728' title " +
                    gp_quoted("divergence event"));
  if (plots.empty()) return "";
  s << "plot ";
  for (size_t i = 0; i < plots.size(); ++i) s << (i ? ", \\\n     " : "") << plots[i];
  s << "\n";
  return s.str();
}

std::string telemetry_plot_script(const ReportData& data, const std::string& gemm,
                                  const fs::path& workdir, const fs::path& svg) {
  // One line per (arm, operand): relative error vs tokens, averaged over layers and seeds.
  std::map<std::pair<std::string, std::string>, std::map<double, std::pair<double, int>>> series;
  for (const TelemetryPoint& t : data.telemetry) {
    if (t.gemm != gemm || !std::isfinite(t.relative_error)) continue;
    auto& cell = series[{t.arm, t.operand}][t.tokens];
    cell.first += t.relative_error;
    cell.second += 1;
  }
  if (series.empty()) return "";
  std::ostringstream s;
  s << common_header(svg, "Quantization error in " + gemm + " (mean over layers)", "tokens",
                     "relative error ||Q(x)-x|| / ||x||");
  std::vector<std::string> plots;
  // Operands are named as the trainer reports them (x, w, dy; or a, b): one line each.
  int index = 0;
  for (size_t arm_index = 0; arm_index < data.arms.size(); ++arm_index) {
    const std::string& arm = data.arms[arm_index];
    int dash = 1;
    for (const auto& [key, points] : series) {
      if (key.first != arm) continue;
      const fs::path file = workdir / ("telemetry_" + gemm + "_" + std::to_string(index++) + ".dat");
      std::ofstream out(file);
      out.precision(9);
      for (const auto& [tokens, sum] : points) out << tokens << ' ' << sum.first / sum.second << '\n';
      plots.push_back(gp_quoted(file.string()) + " using 1:2 with lines lw 2 dt " +
                      std::to_string(dash++) + " lc " + std::to_string(arm_index + 1) +
                      " title " + literal_title(arm + " " + key.second));
    }
  }
  if (plots.empty()) return "";
  s << "plot ";
  for (size_t i = 0; i < plots.size(); ++i) s << (i ? ", \\\n     " : "") << plots[i];
  s << "\n";
  return s.str();
}

}  // namespace mxablate::analysis::detail
