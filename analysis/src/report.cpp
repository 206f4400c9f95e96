// The report page: figures embedded as data: URIs (isolated SVG documents, so gnuplot's element
// ids cannot clash), tables as HTML, and a small script that records whether every figure
// rendered and whether any script error happened — what the headless-browser test reads.
#include "mxablate/analysis/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/archive/iterators/base64_from_binary.hpp>
#include <boost/archive/iterators/transform_width.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "mxablate/analysis/curves.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/analysis/model_blocks.h"
#include "report_plots.h"

namespace mxablate::analysis {
namespace {

namespace fs = std::filesystem;

std::string base64(const std::string& bytes) {
  using namespace boost::archive::iterators;
  using It = base64_from_binary<transform_width<std::string::const_iterator, 6, 8>>;
  std::string out(It(bytes.begin()), It(bytes.end()));
  out.append((3 - bytes.size() % 3) % 3, '=');
  return out;
}

std::string divergence_table(const ReportData& data) {
  if (data.divergences.empty()) return "<p>No divergence events.</p>\n";
  std::string out =
      "<table>\n<tr><th>arm</th><th>seed</th><th>step</th><th>tokens</th><th>reason</th>"
      "<th>value</th><th>severity</th></tr>\n";
  for (const DivergenceMark& m : data.divergences) {
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.4g}</td><td>{}</td><td>{:.4g}</td><td>{}</td></tr>\n",
                       escape::html(m.arm), m.seed, m.step, m.tokens, escape::html(m.reason),
                       m.value, escape::html(m.severity));
  }
  return out + "</table>\n";
}

// OCC's compensated share per arm; nothing when no arm ran with OCC.
std::string occ_table(const ReportData& data) {
  if (data.occ.empty()) return "";
  std::string out =
      "<h2>Outlier clamping and compensation</h2>\n<p>Share of Fprop's X clamped and compensated "
      "in BF16, mean over layers, sampled steps and seeds.</p>\n<table>\n<tr><th>arm</th>"
      "<th>compensated</th><th>records</th></tr>\n";
  for (const OccShare& s : data.occ)
    out += fmt::format("<tr><td>{}</td><td>{:.4g} %</td><td>{}</td></tr>\n", escape::html(s.arm),
                       100 * s.mean_fraction, s.records);
  return out + "</table>\n";
}

// Why the figure of extra tokens against parameters is missing, or which of its points are.
std::string scale_notes(const ReportData& data, bool plots_skipped) {
  const ScaleFigure& f = data.scale;
  std::string out;
  if (!f.omitted.empty() && !plots_skipped)
    out += "<h2>Extra tokens to target vs parameters</h2>\n<p class=\"note\" id=\"scale-omitted\">" +
           escape::html(f.omitted) + "</p>\n";
  // A point of an arm with a run that never reached the target is only a lower bound, as the
  // table's "≥" says; the figure draws it like the others, so the page names them.
  std::vector<std::string> bounds;
  for (const ScaleSeries& s : f.series)
    for (const ScalePoint& p : s.points)
      if (p.lower_bound)
        bounds.push_back(fmt::format("{} at {} parameters: ≥ {:+.1f} %", s.arm,
                                     std::isfinite(p.params) && p.params >= 1 && p.params < 1e18
                                         ? params_text(static_cast<int64_t>(p.params))
                                         : fmt::format("{:.3g}", p.params),
                                     p.median_pct));
  if (!bounds.empty() && !plots_skipped) {
    out += "<p class=\"note\" id=\"scale-lower-bounds\">Lower bounds in the figure of extra "
           "tokens against parameters (a run never reached the target):</p>\n<ul>\n";
    for (const std::string& b : bounds) out += "<li>" + escape::html(b) + "</li>\n";
    out += "</ul>\n";
  }
  if (f.skipped.empty()) return out;
  out += "<p class=\"note\" id=\"scale-skipped\">Left out of the figure of extra tokens against "
         "parameters:</p>\n<ul>\n";
  for (const std::string& s : f.skipped) out += "<li>" + escape::html(s) + "</li>\n";
  return out + "</ul>\n";
}

const char* kStyle = R"(body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
img.plot{display:block;max-width:100%;margin:1em 0;border:1px solid #eee}
.warning{background:#fff3cd;padding:0.6em;border:1px solid #e0c36a})";

// Sets data-plots="rendered/total" and data-errors on <body> once the page has loaded.
const char* kCheckScript = R"(<script>
(function () {
  var errors = 0;
  window.addEventListener('error', function () { errors++; }, true);
  window.addEventListener('load', function () {
    var imgs = document.querySelectorAll('img.plot'), ok = 0;
    for (var i = 0; i < imgs.length; i++) if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++;
    document.body.setAttribute('data-plots', ok + '/' + imgs.length);
    document.body.setAttribute('data-errors', String(errors));
  });
})();
</script>)";

}  // namespace

std::vector<BandPoint> arm_band(const std::vector<RunCurve>& runs, const std::string& arm) {
  std::map<double, std::vector<double>> at;
  for (const RunCurve& r : runs) {
    if (r.arm != arm) continue;
    for (const EvalPoint& p : r.evals) {
      if (!std::isfinite(p.tokens)) continue;  // a corrupt row has no place on the x axis
      if (!std::isfinite(p.val_loss)) break;   // nothing after a divergence
      at[p.tokens].push_back(p.val_loss);
    }
  }
  std::vector<BandPoint> band;
  for (const auto& [tokens, losses] : at) {
    const auto [lo, hi] = std::minmax_element(losses.begin(), losses.end());
    band.push_back({tokens, median(losses), *lo, *hi, static_cast<int>(losses.size())});
  }
  return band;
}

ReportResult write_report(const ReportData& data, const std::string& out_dir,
                          const std::string& gnuplot) {
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(out_dir + ": cannot create the report directory: " + ec.message());
  const fs::path work = dir / "plots";
  fs::create_directories(work, ec);
  if (ec) throw std::runtime_error(work.string() + ": cannot create: " + ec.message());

  ReportResult result;
  std::vector<std::pair<std::string, std::string>> figures;  // (heading, svg)
  const auto program = find_gnuplot(gnuplot);
  if (!program) {
    result.warning = gnuplot_missing_message(gnuplot);
  } else {
    for (const detail::Figure f : detail::kFigures) {
      const std::string script = detail::write_figure(data, f, work);
      if (script.empty()) continue;
      figures.emplace_back(detail::figure_heading(f), detail::run_gnuplot(*program, script, work, f));
    }
  }
  result.plots = static_cast<int>(figures.size());

  std::string html = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<title>mxablate report: " + escape::html(data.sweep) + "</title>\n<style>" + kStyle +
          "</style>\n</head>\n<body>\n";
  html += "<h1>Sweep " + escape::html(data.sweep) + "</h1>\n<p>" +
          escape::html(data.caption + ". " + cost_method_note(data.table)) + "</p>\n";
  if (data.blocks.empty()) {
    html += "<h2>Extra tokens to target, per arm</h2>\n" +
            render_table(data.table, TableFormat::kHtml, "");
  } else {
    for (const ReportBlock& b : data.blocks)
      html += "<h2>Extra tokens to target: " + escape::html(b.heading) + "</h2>\n" +
              render_table(b.table, TableFormat::kHtml, b.caption);
  }
  // Where the figures would be, so that nobody reads the page as "there was nothing to plot".
  if (!result.warning.empty())
    html += "<h2>Figures</h2>\n<p class=\"warning\" id=\"plots-skipped\">" +
            escape::html(result.warning) + "</p>\n";
  for (const auto& [heading, svg] : figures) {
    html += "<h2>" + escape::html(heading) + "</h2>\n<img class=\"plot\" alt=\"" +
            escape::html(heading) + "\" src=\"data:image/svg+xml;base64," + base64(svg) + "\">\n";
  }
  html += scale_notes(data, !result.warning.empty());
  html += occ_table(data);
  html += "<h2>Divergence events</h2>\n" + divergence_table(data);
  html += kCheckScript;
  html += "\n</body>\n</html>\n";

  result.html_path = (dir / "index.html").string();
  std::ofstream out(result.html_path, std::ios::trunc);
  out << html;
  out.close();
  if (!out) throw std::runtime_error(result.html_path + ": cannot write the report");
  return result;
}

}  // namespace mxablate::analysis
