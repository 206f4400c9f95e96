#include "mxablate/analysis/arm_table.h"

#include "mxablate/contract/perplexity.h"

#include <fmt/format.h>

#include <cmath>

#include "mxablate/analysis/escape.h"

namespace mxablate::analysis {
namespace {

std::string name(contract::GemmPrecision p) { return std::string(contract::to_string(p)); }

std::string pct(double v) { return fmt::format("{:+.1f}", std::fabs(v) < 0.05 ? 0.0 : v); }

// "+12.3 % [+8.1, +15.0]", "≥ +41.0 % [...]" for lower bounds, "baseline", or "n/a".
std::string cost_text(const ArmSummary& a, TableFormat f) {
  if (a.is_baseline) return "baseline";
  if (!a.cost.median_pct) return "n/a";
  const std::string percent = f == TableFormat::kLatex ? "\\%" : "%";
  std::string s;
  if (a.cost.lower_bound) s += f == TableFormat::kLatex ? "$\\geq$ " : "≥ ";
  s += pct(*a.cost.median_pct) + " " + percent;
  if (a.cost.ci_low_pct && a.cost.ci_high_pct)
    s += " [" + pct(*a.cost.ci_low_pct) + ", " + pct(*a.cost.ci_high_pct) + "]";
  return s;
}

std::string loss_text(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fmt::format("{:.4f}", *v) : "-";
}

std::string perplexity_text(const ArmSummary& a) {
  const auto ppl = [](const std::optional<double>& loss) {
    const auto p = contract::perplexity_of(loss);
    return p ? fmt::format("{:.2f}", *p) : std::string("-");
  };
  return ppl(a.final_val_loss) + " / " + ppl(a.best_val_loss);
}

std::string diverged_text(const ArmSummary& a) {
  if (a.diverged == 0) return "0";
  return fmt::format("{} ({})", a.diverged, a.first_divergence_reason);
}

std::string optional_number(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return {};
  return fmt::format("{:.6g}", std::fabs(*v) < 1e-9 ? 0.0 : *v);  // no "-1.1e-14" for zero
}

// The cost column (kCostColumn) is text we formatted from numbers, already in the table's
// format ("$\geq$" and "\%" in LaTeX); every other cell and the caption can hold names from the
// data and go through the format's one escaping function.
constexpr size_t kCostColumn = 5;

void render_markdown(const std::vector<std::vector<std::string>>& rows,
                     const std::vector<std::string>& header, const std::string& caption,
                     std::string& out) {
  out += escape::markdown_cell(caption) + "\n\n";
  auto line = [&](const std::vector<std::string>& cells, bool escaped) {
    out += "|";
    for (size_t i = 0; i < cells.size(); ++i)
      out += " " + (escaped && i != kCostColumn ? escape::markdown_cell(cells[i]) : cells[i]) + " |";
    out += "\n";
  };
  line(header, false);  // our own text, with brackets meant as brackets
  out += "|";
  for (size_t i = 0; i < header.size(); ++i) out += (i == 0 || i == 4) ? "---|" : "---:|";
  out += "\n";
  for (const auto& r : rows) line(r, true);
}

void render_latex(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<std::string>& header, const std::string& caption,
                  std::string& out) {
  out += "\\begin{table}[t]\n\\centering\n\\caption{" + escape::latex(caption) + "}\n";
  out += "\\begin{tabular}{lllllrrrrrrl}\n\\toprule\n";
  for (size_t i = 0; i < header.size(); ++i) out += (i ? " & " : "") + escape::latex(header[i]);
  out += " \\\\\n\\midrule\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i)
      out += (i ? " & " : "") + (i == kCostColumn ? r[i] : escape::latex(r[i]));
    out += " \\\\\n";
  }
  out += "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
}

// For the report page: every cell as HTML text (the cost column is plain text in this format).
void render_html(const std::vector<std::vector<std::string>>& rows,
                 const std::vector<std::string>& header, const std::string& caption,
                 std::string& out) {
  out += "<table>\n";
  if (!caption.empty()) out += "<caption>" + escape::html(caption) + "</caption>\n";
  auto line = [&](const std::vector<std::string>& cells, const char* tag) {
    out += "<tr>";
    for (const auto& c : cells) out += fmt::format("<{0}>{1}</{0}>", tag, escape::html(c));
    out += "</tr>\n";
  };
  line(header, "th");
  for (const auto& r : rows) line(r, "td");
  out += "</table>\n";
}

// Machine-readable: numbers in their own columns, empty where undefined.
void render_csv(const std::vector<ArmSummary>& arms, TableMetric metric, std::string& out) {
  const bool ppl = metric == TableMetric::kPerplexity;
  out += fmt::format("arm,fprop,dgrad,wgrad,interventions,baseline,extra_tokens_pct,ci_low_pct,"
                     "ci_high_pct,lower_bound,{},seeds,reached,diverged,first_divergence_reason,"
                     "not_reached,paper,model,params\n",
                     ppl ? "final_val_perplexity,best_val_perplexity" : "final_val_loss");
  for (const auto& a : arms) {
    std::vector<std::string> cells = {
        a.arm, name(a.precision.fprop), name(a.precision.dgrad), name(a.precision.wgrad),
        a.interventions, a.is_baseline ? "true" : "false",
        optional_number(a.cost.median_pct), optional_number(a.cost.ci_low_pct),
        optional_number(a.cost.ci_high_pct), a.cost.lower_bound ? "true" : "false"};
    if (ppl) {
      cells.push_back(optional_number(contract::perplexity_of(a.final_val_loss)));
      cells.push_back(optional_number(contract::perplexity_of(a.best_val_loss)));
    } else {
      cells.push_back(optional_number(a.final_val_loss));
    }
    for (const std::string& c :
         {std::to_string(a.seeds), std::to_string(a.converged), std::to_string(a.diverged),
          a.first_divergence_reason, std::to_string(a.not_reached), a.paper.value_or(""),
          a.model, a.params ? std::to_string(*a.params) : std::string()})
      cells.push_back(c);
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + escape::csv_field(cells[i]);
    out += "\n";
  }
}

}  // namespace

std::string cost_method_note(const std::vector<ArmSummary>& arms) {
  bool all_paired = true;
  int left_out = 0;
  for (const auto& a : arms) {
    if (a.is_baseline) continue;
    all_paired &= a.cost.paired;
    left_out += a.cost.pairs_without_baseline;
  }
  std::string note =
      all_paired ? "Extra tokens: each run against the baseline run of its own seed, median over "
                   "seeds, bootstrap 95 % interval over seeds."
                 : "Extra tokens: each run against the median of the baseline runs (seeds do not "
                   "match one to one), bootstrap 95 % interval.";
  if (left_out > 0)
    note += fmt::format(" {} run{} left out: the baseline run of {} seed never reached the target.",
                        left_out, left_out == 1 ? "" : "s", left_out == 1 ? "its" : "their");
  return note;
}

std::string render_table(const std::vector<ArmSummary>& arms, TableFormat format,
                         const std::string& given_caption, TableMetric metric) {
  const bool ppl = metric == TableMetric::kPerplexity;
  std::string out;
  const std::string caption =
      given_caption.empty() ? given_caption : given_caption + ". " + cost_method_note(arms);
  if (format == TableFormat::kCsv) {
    render_csv(arms, metric, out);
    return out;
  }
  const std::vector<std::string> header = {"arm",   "fprop",   "dgrad",    "wgrad",
                                           "interventions", "extra tokens [95% CI]",
                                           ppl ? "final / best val ppl" : "final val loss",
                                           "seeds", "reached", "diverged",
                                           "not reached", "paper"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : arms) {
    rows.push_back({a.arm, name(a.precision.fprop), name(a.precision.dgrad),
                    name(a.precision.wgrad), a.interventions, cost_text(a, format),
                    ppl ? perplexity_text(a) : loss_text(a.final_val_loss), std::to_string(a.seeds),
                    std::to_string(a.converged), diverged_text(a), std::to_string(a.not_reached),
                    a.paper.value_or("-")});
  }
  switch (format) {
    case TableFormat::kMarkdown: render_markdown(rows, header, caption, out); break;
    case TableFormat::kLatex: render_latex(rows, header, caption, out); break;
    case TableFormat::kHtml: render_html(rows, header, caption, out); break;
    case TableFormat::kCsv: break;  // handled above
  }
  return out;
}

}  // namespace mxablate::analysis
