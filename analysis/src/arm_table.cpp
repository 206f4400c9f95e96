#include "mxablate/analysis/arm_table.h"

#include "mxablate/contract/perplexity.h"

#include <fmt/format.h>

#include <cmath>

#include "mxablate/analysis/escape.h"

namespace mxablate::analysis {
namespace {

std::string name(contract::GemmPrecision p) { return std::string(contract::to_string(p)); }

std::string pct(double v) { return fmt::format("{:+.1f}", std::fabs(v) < 0.05 ? 0.0 : v); }

std::string percent_sign(TableFormat f) { return f == TableFormat::kLatex ? "\\%" : "%"; }
std::string at_least_sign(TableFormat f) { return f == TableFormat::kLatex ? "$\\geq$ " : "≥ "; }

// "+12.3 %", "≥ +41.0 %" when the median is only a lower bound, "baseline", or "n/a".
std::string cost_text(const ArmSummary& a, TableFormat f) {
  if (a.is_baseline) return "baseline";
  if (!a.cost.median_pct) return "n/a";
  return (a.cost.lower_bound ? at_least_sign(f) : "") + pct(*a.cost.median_pct) + " " +
         percent_sign(f);
}

// "[+8.1, +15.0] (range, 3 seeds)", "[+6.0, ≥ +19.2] (95 % CI (order statistics), 8 seeds)";
// an end that rests on a censored cost is only a lower bound and says so. Unpaired costs are
// counted in runs: they are not seeds of a paired comparison.
std::string interval_text(const ArmSummary& a, TableFormat f) {
  if (a.is_baseline || !a.cost.interval) return "-";
  const MedianInterval& i = *a.cost.interval;
  std::string kind;
  for (const char c : interval_kind_text(i, a.cost.paired ? "seeds" : "runs, unpaired"))
    kind += c == '%' ? percent_sign(f) : std::string(1, c);
  return "[" + (i.low_at_least ? at_least_sign(f) : "") + pct(i.low) + ", " +
         (i.high_at_least ? at_least_sign(f) : "") + pct(i.high) + "] (" + kind + ")";
}

std::string p_number(double p) {
  return p >= 0.001 ? fmt::format("{:.3f}", p) : fmt::format("{:.1e}", p);
}

// "0.500", "≤ 0.031" (censored costs: the exact p is at most this), "n/a" without a test.
std::string p_text(const ArmSummary& a, TableFormat f) {
  if (a.is_baseline) return "-";
  if (!a.cost.test) return "n/a";
  const SignFlipTest& t = *a.cost.test;
  return (t.p_at_most ? (f == TableFormat::kLatex ? "$\\leq$ " : "≤ ") : std::string()) +
         p_number(t.p_value) + (t.exact ? "" : " (Monte Carlo)");
}

std::string n_text(const ArmSummary& a) {
  return a.is_baseline ? "-" : std::to_string(a.cost.per_seed.size());
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

// The statistics columns (extra tokens, interval, p) are text we formatted from numbers, already in
// the table's format ("$\geq$" and "\%" in LaTeX); every other cell and the caption can hold names
// from the data and go through the format's one escaping function.
constexpr size_t kFirstStatColumn = 5;
constexpr size_t kEndStatColumn = 8;
bool formatted_here(size_t column) { return column >= kFirstStatColumn && column < kEndStatColumn; }

void render_markdown(const std::vector<std::vector<std::string>>& rows,
                     const std::vector<std::string>& header, const std::string& caption,
                     std::string& out) {
  out += escape::markdown_cell(caption) + "\n\n";
  auto line = [&](const std::vector<std::string>& cells, bool escaped) {
    out += "|";
    for (size_t i = 0; i < cells.size(); ++i)
      out += " " + (escaped && !formatted_here(i) ? escape::markdown_cell(cells[i]) : cells[i]) +
             " |";
    out += "\n";
  };
  line(header, false);  // our own text
  out += "|";
  for (size_t i = 0; i < header.size(); ++i) out += (i == 0 || i == 4 || i == 6) ? "---|" : "---:|";
  out += "\n";
  for (const auto& r : rows) line(r, true);
}

void render_latex(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<std::string>& header, const std::string& caption,
                  std::string& out) {
  out += "\\begin{table}[t]\n\\centering\n\\caption{" + escape::latex(caption) + "}\n";
  out += "\\begin{tabular}{lllllrlrrrrrrrl}\n\\toprule\n";
  for (size_t i = 0; i < header.size(); ++i) out += (i ? " & " : "") + escape::latex(header[i]);
  out += " \\\\\n\\midrule\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i)
      out += (i ? " & " : "") + (formatted_here(i) ? r[i] : escape::latex(r[i]));
    out += " \\\\\n";
  }
  out += "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
}

// For the report page: every cell as HTML text (the statistics are plain text in this format).
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

std::string flag(bool b) { return b ? "true" : "false"; }

const char* interval_kind_name(IntervalKind k) {
  return k == IntervalKind::kRange ? "range" : "order_statistics";
}

// Machine-readable: numbers in their own columns, empty where undefined. The interval's kind and
// coverage (exact for continuous costs; empty unpaired, where the range is no interval of the
// median) and the p-value's method are columns of their own: no reader takes a range for a 95 %
// interval.
void render_csv(const std::vector<ArmSummary>& arms, TableMetric metric, std::string& out) {
  const bool ppl = metric == TableMetric::kPerplexity;
  out += fmt::format("arm,fprop,dgrad,wgrad,interventions,baseline,extra_tokens_pct,lower_bound,"
                     "interval_kind,interval_low_pct,interval_low_at_least,interval_high_pct,"
                     "interval_high_at_least,interval_coverage,p_value,p_at_most,p_method,n,{},"
                     "seeds,reached,diverged,first_divergence_reason,not_reached,paper,model,"
                     "params\n",
                     ppl ? "final_val_perplexity,best_val_perplexity" : "final_val_loss");
  for (const auto& a : arms) {
    const auto& iv = a.cost.interval;
    const auto& t = a.cost.test;
    const bool stats = !a.is_baseline;
    std::vector<std::string> cells = {
        a.arm, name(a.precision.fprop), name(a.precision.dgrad), name(a.precision.wgrad),
        a.interventions, flag(a.is_baseline), optional_number(a.cost.median_pct),
        flag(a.cost.lower_bound),
        stats && iv ? interval_kind_name(iv->kind) : "",
        stats && iv ? optional_number(iv->low) : "",
        stats && iv ? flag(iv->low_at_least) : "",
        stats && iv ? optional_number(iv->high) : "",
        stats && iv ? flag(iv->high_at_least) : "",
        stats && iv && a.cost.paired ? optional_number(iv->coverage) : "",
        stats && t ? optional_number(t->p_value) : "",
        stats && t ? flag(t->p_at_most) : "",
        stats && t ? (t->exact ? "sign-flip exact" : "sign-flip Monte Carlo") : "",
        stats ? std::to_string(a.cost.per_seed.size()) : ""};
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

static std::string short_of_target_note(const std::vector<ArmSummary>& arms);

std::string cost_method_note(const std::vector<ArmSummary>& arms) {
  bool all_paired = true;
  int left_out = 0;
  for (const auto& a : arms) {
    if (a.is_baseline) continue;
    all_paired &= a.cost.paired;
    left_out += a.cost.pairs_without_baseline;
  }
  const int least = min_values_for_interval();
  std::string note;
  if (all_paired) {
    note = fmt::format(
        "Extra tokens: each run against the baseline run of its own seed, median over seeds (n: "
        "the seeds compared). Interval: below {0} seeds the range of the per-seed costs, which "
        "holds the median with probability 1 - 2^(1-n) (75 % for 3 seeds), never a {1:g} % "
        "interval; from {0} seeds the distribution-free {1:g} % confidence interval of the median "
        "from order statistics. p: exact two-sided sign-flip permutation test of the paired costs "
        "against 0 (all 2^n sign patterns); below {2} seeds it cannot reach p < {3:g}.",
        least, 100 * kIntervalConfidence, min_values_for_significance(), kTestAlpha);
  } else {
    note = "Extra tokens: each run against the median of the baseline runs (seeds do not match "
           "one to one), median over runs; interval: the range of those costs, which leaves out "
           "the baseline's own spread (not an interval for the median); no paired test.";
  }
  note += " A figure marked ≥ rests on a run that never reached the target: it is only a lower "
          "bound (an interval's upper end so marked is open above).";
  if (left_out > 0)
    note += fmt::format(" {} run{} left out: the baseline run of {} seed never reached the target.",
                        left_out, left_out == 1 ? "" : "s", left_out == 1 ? "its" : "their");
  return note + short_of_target_note(arms);
}

// Each censored run: its bound and its projected cost with the interval, or why it has none
// (docs/design.md §4, "Projected outcomes and hopeless runs"): a bound alone does not say whether
// the run was close.
static std::string short_of_target_note(const std::vector<ArmSummary>& arms) {
  std::string note;
  for (const auto& a : arms)
    for (const SeedCost& c : a.cost.per_seed) {
      if (!c.at_least) continue;
      note += fmt::format("{} {}{}: at least {:+.1f} %", note.empty() ? "" : ";", a.arm,
                          c.pair_key.empty() ? "" : " " + c.pair_key, c.pct);
      if (c.projected_pct) {
        note += fmt::format(", projected {:+.1f} %", *c.projected_pct);
        if (c.projected_low_pct && c.projected_high_pct)
          note += fmt::format(" [{:+.1f}, {:+.1f}]", *c.projected_low_pct, *c.projected_high_pct);
      } else if (!c.no_projection_reason.empty()) {
        note += ", no projection: " + c.no_projection_reason;
      } else {
        note += ", no projection";
      }
    }
  return note.empty() ? "" : " Runs short of the target:" + note + ".";
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
  const std::vector<std::string> header = {"arm", "fprop", "dgrad", "wgrad", "interventions",
                                           "extra tokens", "interval", "p (sign-flip)", "n",
                                           ppl ? "final / best val ppl" : "final val loss",
                                           "seeds", "reached", "diverged", "not reached", "paper"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : arms) {
    rows.push_back({a.arm, name(a.precision.fprop), name(a.precision.dgrad),
                    name(a.precision.wgrad), a.interventions, cost_text(a, format),
                    interval_text(a, format), p_text(a, format), n_text(a),
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
