#include "mxablate/analysis/model_blocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "mxablate/analysis/ceiling.h"
#include "mxablate/analysis/escape.h"

namespace mxablate::analysis {
namespace {

// The count most runs of the model recorded (the smaller one on a tie); a note when they differ.
std::optional<int64_t> common_count(const std::vector<const RunRecord*>& runs,
                                    const std::string& model, std::vector<std::string>& notes) {
  std::map<int64_t, int> votes;
  for (const RunRecord* r : runs)
    if (r->params) ++votes[*r->params];
  if (votes.empty()) return std::nullopt;
  const auto best = std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) {
    return a.second < b.second;  // the first (smallest) of equals wins
  });
  if (votes.size() > 1) {
    std::string all;
    for (const auto& [count, n] : votes) all += fmt::format("{}{} ({} run{})", all.empty() ? "" : ", ", count, n, n == 1 ? "" : "s");
    notes.push_back(fmt::format("Runs of model {} recorded different parameter counts: {}; {} is "
                                "used for all of them",
                                model, all, best->first));
  }
  return best->first;
}

// The runs of one model, each row named by its arm and the grid settings that vary among them.
SweepData block_sweep(const SweepData& sweep, const std::vector<const RunRecord*>& runs) {
  SweepData out;
  out.name = sweep.name;
  out.target_spec = sweep.target_spec;
  // Settings every run of the model has with one value are the model's (its heading).
  std::map<std::string, std::set<std::string>> values;
  std::map<std::string, size_t> holders;
  for (const RunRecord* r : runs)
    for (const auto& [axis, value] : r->settings_axes) {
      values[axis].insert(value);
      ++holders[axis];
    }
  for (const RunRecord* r : runs) {
    RunRecord copy = *r;
    std::string varying;
    for (const auto& [axis, value] : r->settings_axes)
      if (values[axis].size() > 1 || holders[axis] != runs.size())
        varying += (varying.empty() ? "" : " ") + axis + "=" + value;
    copy.group = varying.empty() ? r->arm : r->arm + " [" + varying + "]";
    for (DivergenceMark& d : copy.divergences) d.arm = copy.group;
    for (TelemetryPoint& t : copy.telemetry) t.arm = copy.group;
    if (std::find(out.groups.begin(), out.groups.end(), copy.group) == out.groups.end())
      out.groups.push_back(copy.group);
    out.runs.push_back(std::move(copy));
  }
  return out;
}

bool finite(const std::optional<double>& v) { return v && std::isfinite(*v); }

}  // namespace

std::string params_text(int64_t params) {
  const double p = static_cast<double>(params);
  if (p >= 1e9) return fmt::format("{:.3g} B", p / 1e9);
  if (p >= 1e6) return fmt::format("{:.3g} M", p / 1e6);
  if (p >= 1e3) return fmt::format("{:.3g} k", p / 1e3);
  return std::to_string(params);
}

std::vector<ModelBlock> split_by_model(const SweepData& sweep) {
  std::vector<std::string> models;  // in plan order
  std::map<std::string, std::vector<const RunRecord*>> runs_of;
  for (const RunRecord& r : sweep.runs) {
    if (!runs_of.count(r.model)) models.push_back(r.model);
    runs_of[r.model].push_back(&r);
  }
  std::vector<ModelBlock> blocks;
  if (models.size() <= 1) {
    ModelBlock b;
    b.model = models.empty() ? "" : models.front();
    if (!models.empty()) b.params = common_count(runs_of[b.model], b.model, b.notes);
    b.sweep = sweep;
    blocks.push_back(std::move(b));
    return blocks;
  }
  for (const std::string& model : models) {
    ModelBlock b;
    b.model = model;
    b.params = common_count(runs_of[model], model, b.notes);
    b.heading = b.params ? fmt::format("model {} ({} parameters)", model, params_text(*b.params))
                         : fmt::format("model {} (parameter count not recorded yet)", model);
    b.sweep = block_sweep(sweep, runs_of[model]);
    blocks.push_back(std::move(b));
  }
  const bool all_counted = std::all_of(blocks.begin(), blocks.end(),
                                       [](const ModelBlock& b) { return b.params.has_value(); });
  if (all_counted)
    std::stable_sort(blocks.begin(), blocks.end(),
                     [](const ModelBlock& a, const ModelBlock& b) { return *a.params < *b.params; });
  return blocks;
}

std::vector<BlockTable> analyze_by_model(const SweepData& sweep, const std::string& baseline) {
  std::vector<BlockTable> out;
  std::vector<ModelBlock> blocks = split_by_model(sweep);
  const bool several = blocks.size() > 1;
  const auto has_baseline = [&](const SweepData& s) {
    return std::any_of(s.runs.begin(), s.runs.end(), [&](const RunRecord& r) {
      return r.arm == baseline || r.group == baseline;
    });
  };
  if (several && !baseline.empty() && !has_baseline(sweep))
    throw std::invalid_argument("--baseline: sweep '" + sweep.name + "' has no arm '" + baseline +
                                "'");
  for (ModelBlock& b : blocks) {
    BlockTable t;
    if (several && !baseline.empty() && !has_baseline(b.sweep))
      throw std::invalid_argument("--baseline: sweep '" + sweep.name + "' has no arm '" + baseline +
                                  "' at model " + b.model);
    t.target = resolve_target(b.sweep);
    add_measured_ceiling(t.target, b.sweep, baseline_group(b.sweep, baseline));  // ceiling.h
    t.table = summarize(b.sweep, baseline_group(b.sweep, baseline), t.target);
    for (ArmSummary& a : t.table) {
      a.model = b.model;
      a.params = b.params;
    }
    t.block = std::move(b);
    out.push_back(std::move(t));
  }
  return out;
}

ScaleFigure scale_figure(const std::vector<BlockTable>& blocks) {
  ScaleFigure f;
  if (blocks.size() < 2) {
    f.omitted = fmt::format("The figure of extra tokens against parameters needs a sweep over at "
                            "least two models; this one has {}.",
                            blocks.empty() || blocks.front().block.model.empty()
                                ? std::string("none")
                                : "one (" + blocks.front().block.model + ")");
    return f;
  }
  int counted = 0;
  for (const BlockTable& b : blocks) {
    if (b.block.params) {
      ++counted;
    } else {
      f.skipped.push_back(fmt::format("model {}: no parameter count recorded yet (the trainer "
                                      "records it when a run starts)",
                                      b.block.model));
    }
  }
  if (counted < 2) {
    f.omitted = fmt::format("The figure of extra tokens against parameters needs the parameter "
                            "counts of at least two models; {} of the sweep's {} models {} one "
                            "yet (the trainer records it when a run starts).",
                            counted, blocks.size(), counted == 1 ? "has" : "have");
    return f;
  }
  for (const BlockTable& b : blocks) {
    if (!b.block.params) continue;
    // Where the model stands in tokens per parameter: its baseline's budget (report_plots.cpp's
    // second x axis).
    double budget = 0;
    for (const ArmSummary& a : b.table)
      if (a.is_baseline)
        for (const RunRecord& r : b.block.sweep.runs)
          if (r.group == a.arm) budget = std::max(budget, r.max_tokens);
    if (budget > 0)
      f.models.push_back({b.block.model, static_cast<double>(*b.block.params),
                          budget / static_cast<double>(*b.block.params)});
    for (const ArmSummary& a : b.table) {
      if (a.is_baseline) continue;
      auto series = std::find_if(f.series.begin(), f.series.end(),
                                 [&](const ScaleSeries& s) { return s.arm == a.arm; });
      if (series == f.series.end()) {
        f.series.push_back({a.arm, {}});
        series = f.series.end() - 1;
      }
      if (!finite(a.cost.median_pct)) {
        f.skipped.push_back(fmt::format("{} at model {}: no extra-token figure (no run of it or of "
                                        "the baseline at that model reached the target)",
                                        a.arm, b.block.model));
        continue;
      }
      ScalePoint p;
      p.params = static_cast<double>(*b.block.params);
      p.median_pct = *a.cost.median_pct;
      // The table's interval, whatever its kind (extra_tokens.h): a range below 6 seeds.
      const auto& iv = a.cost.interval;
      const bool interval = iv && std::isfinite(iv->low) && std::isfinite(iv->high);
      p.low_pct = interval ? iv->low : p.median_pct;
      p.high_pct = interval ? iv->high : p.median_pct;
      p.lower_bound = a.cost.lower_bound;
      p.seeds = a.seeds;
      series->points.push_back(p);
    }
  }
  for (ScaleSeries& s : f.series)
    std::sort(s.points.begin(), s.points.end(),
              [](const ScalePoint& a, const ScalePoint& b) { return a.params < b.params; });
  f.series.erase(std::remove_if(f.series.begin(), f.series.end(),
                                [](const ScaleSeries& s) { return s.points.empty(); }),
                 f.series.end());
  if (f.series.empty())
    f.omitted = "The figure of extra tokens against parameters has no point yet: no arm has an "
                "extra-token figure at a model with a parameter count.";
  return f;
}

std::string render_blocks(const std::string& sweep, const std::vector<BlockTable>& blocks,
                          TableFormat format, TableMetric metric) {
  const bool perplexity = metric == TableMetric::kPerplexity;
  if (format == TableFormat::kCsv) {
    std::vector<ArmSummary> all;
    for (const BlockTable& b : blocks) all.insert(all.end(), b.table.begin(), b.table.end());
    return render_table(all, format, "", metric);
  }
  const auto caption = [&](const BlockTable& b) {
    std::string c = b.target.caption(perplexity);
    for (const std::string& note : b.block.notes) c += ". " + note;
    return c;
  };
  std::string out;
  if (format == TableFormat::kMarkdown)
    out += escape::markdown_cell(fmt::format("Sweep {}: {} models, one table each; every arm is "
                                             "compared with the baseline at its own model, "
                                             "against that model's target.",
                                             sweep, blocks.size())) +
           "\n\n";
  for (const BlockTable& b : blocks) {
    if (format == TableFormat::kMarkdown) {
      out += "## " + escape::markdown_cell(b.block.heading) + "\n\n" +
             render_table(b.table, format, caption(b), metric) + "\n";
    } else {
      out += render_table(b.table, format,
                          fmt::format("Sweep {}, {}: {}", sweep, b.block.heading, caption(b)),
                          metric);
    }
  }
  return out;
}

ReportData report_data(const SweepData& sweep, const std::vector<BlockTable>& blocks) {
  if (blocks.size() == 1) {
    ReportData d = report_data(sweep, blocks.front().table, blocks.front().target);
    d.scale = scale_figure(blocks);
    return d;
  }
  std::vector<ArmSummary> all;
  for (const BlockTable& b : blocks) all.insert(all.end(), b.table.begin(), b.table.end());
  ResolvedTarget per_model;
  per_model.description = fmt::format("{} models, each with its own target and baseline",
                                      blocks.size());
  // Curves, divergences, telemetry and the OCC table name a row by its label within its model
  // and the model ("FDW · llama-125m"), in block order: shorter than the full grid settings.
  SweepData labelled;
  labelled.name = sweep.name;
  for (const BlockTable& b : blocks) {
    const auto label = [&](const std::string& group) { return group + " · " + b.block.model; };
    for (const std::string& g : b.block.sweep.groups) labelled.groups.push_back(label(g));
    for (RunRecord r : b.block.sweep.runs) {
      r.group = label(r.group);
      for (DivergenceMark& m : r.divergences) m.arm = r.group;
      for (TelemetryPoint& t : r.telemetry) t.arm = r.group;
      labelled.runs.push_back(std::move(r));
    }
  }
  ReportData d = report_data(labelled, all, per_model);
  for (const BlockTable& b : blocks)  // each labelled row's arm and model, for the figures
    for (const std::string& g : b.block.sweep.groups) d.row_keys.push_back({g, b.block.model});
  for (const BlockTable& b : blocks) {
    std::string caption = b.target.description;
    for (const std::string& note : b.block.notes) caption += ". " + note;
    d.blocks.push_back({b.block.heading, caption, b.table});
  }
  d.scale = scale_figure(blocks);
  return d;
}

}  // namespace mxablate::analysis
