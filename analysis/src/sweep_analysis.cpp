#include "mxablate/analysis/sweep_analysis.h"

#include "mxablate/contract/settings_difference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <type_traits>

#include "mxablate/results/schema.h"
#include "mxablate/results/sqlite_db.h"

namespace mxablate::analysis {
namespace {

using nlohmann::json;
using results::Database;
using results::Statement;

bool is_seed_axis(const std::string& axis) {
  return axis.size() >= 4 && axis.compare(axis.size() - 4, 4, "seed") == 0;
}


// A database can come from anyone: a stored target whose values have the wrong JSON type is an
// error naming the sweep and the key, never a JSON library exception and never a silent default.
// (Stored configs go through the contract's reader: its errors name run and key.)
template <typename T>
bool has_type(const json& v) {
  if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  else if constexpr (std::is_same_v<T, uint64_t>) return v.is_number_unsigned();
  else if constexpr (std::is_integral_v<T>) return v.is_number_integer();
  else return v.is_number();
}

template <typename T>
const char* type_word() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, uint64_t>) return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else return "a number";
}

template <typename T>
std::optional<T> target_value(const SweepData& sweep, const char* key) {
  if (!sweep.target_spec.contains(key)) return std::nullopt;
  const json& v = sweep.target_spec.at(key);
  if (!has_type<T>(v))
    throw std::invalid_argument(fmt::format("sweep {}: its stored target has {} as {}, not {}",
                                            sweep.name, key, v.type_name(), type_word<T>()));
  return v.get<T>();
}

// `has_occ`: the store has quant_stats.occ_fraction (schema version 4 on; a store of an older
// version, opened read-only, is read as it is).
void load_curves(Database& db, RunRecord& run, bool has_occ) {
  Statement evals(db, "SELECT tokens, val_loss FROM evals WHERE run_id = ? ORDER BY tokens, seq");
  evals.bind(1, run.run_id);
  while (evals.step()) {
    // A non-finite loss reaches JSON (and so the store) as null.
    run.evals.push_back({evals.get_double(0), evals.get_opt_double(1).value_or(std::nan(""))});
  }
  // The last projection: the run's projected outcome, or why it has none (run_projection.h).
  Statement projection(db,
                       "SELECT detail FROM events WHERE run_id = ? AND kind = 'projection' "
                       "ORDER BY seq DESC LIMIT 1");
  projection.bind(1, run.run_id);
  if (projection.step()) {
    const json detail = json::parse(projection.get_opt_text(0).value_or(""), nullptr, false);
    run.projection = projection_from_detail(detail);
  }
  Statement div(db,
                "SELECT step, tokens, json_extract(detail, '$.reason'), "
                "json_extract(detail, '$.severity'), json_extract(detail, '$.value') "
                "FROM events WHERE run_id = ? AND kind = 'divergence' ORDER BY seq");
  div.bind(1, run.run_id);
  while (div.step()) {
    run.divergences.push_back({run.group, run.seed, div.get_opt_int(0).value_or(0),
                               div.get_opt_double(1).value_or(0),
                               div.get_opt_text(2).value_or("unknown"),
                               div.get_opt_text(3).value_or("warning"),
                               div.get_opt_double(4).value_or(std::nan(""))});
  }
  // Telemetry averaged over layers at each sampled step.
  Statement tel(db,
                "SELECT tokens, gemm, operand, AVG(relative_error) FROM quant_stats "
                "WHERE run_id = ? AND relative_error IS NOT NULL "
                "GROUP BY tokens, gemm, operand ORDER BY tokens");
  tel.bind(1, run.run_id);
  while (tel.step()) {
    run.telemetry.push_back({run.group, tel.get_opt_text(1).value_or("?"),
                             tel.get_opt_text(2).value_or("?"), tel.get_double(0),
                             tel.get_double(3)});
  }
  if (has_occ) {
    // A value outside [0, 1] is not something the event reader lets through; skip it anyway.
    Statement occ(db,
                  "SELECT COUNT(occ_fraction), TOTAL(occ_fraction) FROM quant_stats "
                  "WHERE run_id = ? AND occ_fraction BETWEEN 0 AND 1");
    occ.bind(1, run.run_id);
    if (occ.step()) {
      run.occ_records = occ.get_int(0);
      run.occ_fraction_sum = occ.get_double(1);
    }
  }
}

std::string pct_text(double fraction) { return fmt::format("{:g} %", 100 * fraction); }

}  // namespace

SweepData load_sweep(Database& db, const std::string& sweep) {
  Statement find(db, sweep.empty()
                         ? "SELECT sweep_id, name, target_json, target_val_loss FROM sweeps "
                           "ORDER BY updated_at DESC LIMIT 1"
                         : "SELECT sweep_id, name, target_json, target_val_loss FROM sweeps "
                           "WHERE name = ?");
  if (!sweep.empty()) find.bind(1, sweep);
  if (!find.step())
    throw std::invalid_argument(sweep.empty() ? db.path() + ": holds no sweep yet"
                                              : db.path() + ": no sweep named '" + sweep + "'");
  SweepData data;
  const int64_t sweep_id = find.get_int(0);
  data.name = find.get_text(1);
  data.target_spec = json::parse(find.get_opt_text(2).value_or("{}"), nullptr, false);
  if (!data.target_spec.is_object())
    throw std::invalid_argument(db.path() + ": sweep " + data.name +
                                ": its stored target is not a JSON object");
  data.stored_target = find.get_opt_double(3);
  const bool has_occ = results::schema_version(db) >= 4;

  Statement runs(db,
                 "SELECT run_id, arm, arm_index, config_json, status, max_tokens, tokens, "
                 "final_val_loss, CASE WHEN typeof(params) = 'integer' AND params > 0 THEN params END "
                 "FROM runs WHERE sweep_id = ? AND plan_index IS NOT NULL "
                 "ORDER BY arm_index, plan_index");
  runs.bind(1, sweep_id);
  while (runs.step()) {
    RunRecord r;
    r.run_id = runs.get_text(0);
    r.arm = runs.get_text(1);
    r.arm_index = static_cast<int>(runs.get_int(2));
    r.config = json::parse(runs.get_text(3), nullptr, false);
    if (!r.config.is_object())
      throw std::invalid_argument(db.path() + ": run " + r.run_id +
                                  ": its stored config is not a JSON object");
    try {
      r.settings = contract::run_config_from_json(r.config);
    } catch (const contract::ConfigError& e) {
      throw std::invalid_argument(db.path() + ": run " + r.run_id + ": its stored config: " +
                                  e.what());
    }
    r.status = runs.get_text(4);
    r.max_tokens = runs.get_opt_double(5).value_or(0);
    r.tokens_trained = runs.get_opt_double(6).value_or(0);
    r.final_val_loss = runs.get_opt_double(7);
    r.seed = r.settings.train.seed;
    // Only a positive integer is a count (the column takes whatever a database holds).
    r.params = runs.get_opt_int(8);
    // The model's one label (a preset's name or a custom shape's): what its block is named by.
    r.model = contract::model_label(r.settings.model);
    data.runs.push_back(std::move(r));
  }
  for (RunRecord& r : data.runs) {
    Statement axes(db, "SELECT axis, value FROM run_axes WHERE run_id = ? ORDER BY position");
    axes.bind(1, r.run_id);
    std::string extra;
    while (axes.step()) {
      const std::string axis = axes.get_text(0);
      // A model axis by the model's one label (a preset's name or a custom shape's), read from
      // the run's typed config rather than the axis value's JSON.
      const std::string setting =
          axis + "=" + (axis == contract::kModelKey ? contract::model_label(r.settings.model)
                                                    : axes.get_text(1));
      if (is_seed_axis(axis)) {
        r.pair_key += (r.pair_key.empty() ? "" : " ") + setting;
        continue;
      }
      extra += (extra.empty() ? "" : " ") + setting;
      r.settings_axes.emplace_back(axis, axes.get_text(1));
    }
    // Without a seed axis every run of the sweep has the recipe's one seed.
    if (r.pair_key.empty()) r.pair_key = "train.seed=" + std::to_string(r.seed);
    r.group = extra.empty() ? r.arm : r.arm + " [" + extra + "]";
    if (std::find(data.groups.begin(), data.groups.end(), r.group) == data.groups.end())
      data.groups.push_back(r.group);
    load_curves(db, r, has_occ);
  }
  return data;
}

std::string ResolvedTarget::caption(bool perplexity_first) const {
  if (!val_loss) return description;
  const std::string both = perplexity_first
                               ? fmt::format("target perplexity {:.2f} (val loss {:.4f})",
                                             std::exp(*val_loss), *val_loss)
                               : fmt::format("target val loss {:.4f} (perplexity {:.2f})",
                                             *val_loss, std::exp(*val_loss));
  return both + basis;
}

ResolvedTarget resolve_target(const SweepData& sweep) {
  ResolvedTarget t = resolve_target_value(sweep);
  if (t.val_loss) t.description = t.caption(false);
  return t;
}

namespace {

// The baseline arm's validation curves and its token budget (the largest of its runs').
std::pair<std::vector<Curve>, double> baseline_curves(const SweepData& sweep,
                                                      const std::string& arm) {
  std::vector<Curve> curves;
  double budget = 0;
  for (const RunRecord& r : sweep.runs) {
    if (r.arm != arm) continue;
    curves.push_back(r.evals);
    budget = std::max(budget, r.max_tokens);
  }
  return {curves, budget};
}

// How much further the baseline's median loss fell between the target and the end of its
// budget, as a share of the target: a target on a curve that has flattened (under 1 %) measures
// the arms at the end of training; one on a slope measures them in mid-descent, where a few
// percent of extra tokens is a small loss difference.
std::string fall_after_target(const SweepData& sweep, const std::string& arm, double target) {
  const auto [curves, budget] = baseline_curves(sweep, arm);
  const auto end = target_from_baseline(curves, budget, 1.0);
  if (!end || !(target > 0)) return "";
  const double fall = 100.0 * (target - *end) / target;
  return fmt::format("; the baseline's median loss fell a further {:.1f} % by the end of its "
                     "budget ({})",
                     fall, fall < 1.0 ? "flattened" : "still falling at the target");
}

// The target's value and, in `basis`, the rule that derived it.
ResolvedTarget resolve_target_basis(const SweepData& sweep) {
  ResolvedTarget t;
  if (sweep.stored_target) {
    t.val_loss = sweep.stored_target;
    if (const auto arm = target_value<std::string>(sweep, "from_arm")) {
      const double fraction = target_value<double>(sweep, "at_fraction").value_or(0.8);
      t.basis = fmt::format(": median of arm {} at {} of its budget, stored with the sweep", *arm,
                            pct_text(fraction));
    }
    return t;
  }
  if (const auto val_loss = target_value<double>(sweep, "val_loss")) {
    t.val_loss = *val_loss;
    return t;
  }
  const auto from_arm = target_value<std::string>(sweep, "from_arm");
  if (!from_arm) {
    t.description = "no target: the recipe sets none";
    return t;
  }
  const std::string arm = *from_arm;
  const double fraction = target_value<double>(sweep, "at_fraction").value_or(0.8);
  const auto [curves, budget] = baseline_curves(sweep, arm);
  t.val_loss = target_from_baseline(curves, budget, fraction);
  if (t.val_loss) {
    t.basis = fmt::format(": median of arm {} at {} of its {:.3g}-token budget", arm,
                          pct_text(fraction), budget);
  } else {
    t.description = fmt::format("target not resolved yet: arm {} has not reached {} of its budget",
                                arm, pct_text(fraction));
  }
  return t;
}

}  // namespace

// The target's value and, in `basis`, how it was derived and how far the baseline still fell
// after it; the caption is made by the caller.
ResolvedTarget resolve_target_value(const SweepData& sweep) {
  ResolvedTarget t = resolve_target_basis(sweep);
  if (t.val_loss && !t.basis.empty())
    if (const auto arm = target_value<std::string>(sweep, "from_arm"))
      t.basis += fall_after_target(sweep, *arm, *t.val_loss);
  return t;
}

std::optional<double> target_to_store(const SweepData& sweep) {
  if (sweep.stored_target) return std::nullopt;
  for (const RunRecord& r : sweep.runs)
    if (r.model != sweep.runs.front().model) return std::nullopt;
  const auto from_arm = target_value<std::string>(sweep, "from_arm");
  if (!from_arm) return std::nullopt;
  const std::string& arm = *from_arm;
  bool any = false;
  for (const RunRecord& r : sweep.runs) {
    if (r.arm != arm) continue;
    any = true;
    if (!results::is_final_result(r.status) && r.status != results::status::kFailed)
      return std::nullopt;
  }
  if (!any) return std::nullopt;
  return resolve_target(sweep).val_loss;
}

std::string baseline_group(const SweepData& sweep, const std::string& requested) {
  auto has = [&](const std::string& g) {
    return std::find(sweep.groups.begin(), sweep.groups.end(), g) != sweep.groups.end();
  };
  if (!requested.empty()) {
    if (has(requested)) return requested;
    for (const RunRecord& r : sweep.runs)
      if (r.arm == requested) return r.group;
    throw std::invalid_argument("--baseline: sweep '" + sweep.name + "' has no arm '" + requested + "'");
  }
  if (const auto from_arm = target_value<std::string>(sweep, "from_arm")) {
    const std::string& arm = *from_arm;
    if (has(arm)) return arm;
    for (const RunRecord& r : sweep.runs)
      if (r.arm == arm) return r.group;
  }
  if (sweep.groups.empty()) throw std::invalid_argument("sweep '" + sweep.name + "' has no runs");
  return sweep.groups.front();
}

std::vector<ArmSummary> summarize(const SweepData& sweep, const std::string& baseline,
                                  const ResolvedTarget& target) {
  std::map<std::string, std::vector<const RunRecord*>> by_group;
  for (const RunRecord& r : sweep.runs) by_group[r.group].push_back(&r);
  auto outcome = [&](const RunRecord& r) {
    RunOutcome o;
    // A run that ended without reaching the target did not reach it within its budget, even
    // if it stopped early by diverging: censor it at the budget. A run stopped as projected not
    // to reach the target is censored at its budget too: the projection said, at its
    // confidence, that the rest of the budget would not reach it.
    o.projected_not_reached = r.status == results::status::kProjectedNotReached;
    o.tokens_trained = results::is_final_result(r.status) ? std::max(r.tokens_trained, r.max_tokens)
                                                          : r.tokens_trained;
    if (target.val_loss) o.tokens_to_target = tokens_to_target(r.evals, *target.val_loss);
    o.pair_key = r.pair_key;
    o.projection = r.projection.projection;
    o.no_projection_reason = r.projection.no_projection_reason;
    return o;
  };
  // What the cost compares: runs with a result — the target reached (also by a run still
  // going), or a final status. A run pending, interrupted, running short of the target or failed
  // has no result yet; counting it as "at least what it trained" would put a bound of −100 % on a
  // run that never started. It is left out and the row's n says how many seeds were compared.
  auto compared = [&](const std::vector<const RunRecord*>& runs) {
    std::vector<RunOutcome> out;
    for (const RunRecord* r : runs) {
      RunOutcome o = outcome(*r);
      if (o.tokens_to_target || results::is_final_result(r->status)) out.push_back(std::move(o));
    }
    return out;
  };
  // The baseline arm's row with the same other grid settings as `group` when the sweep has one:
  // an arm at lr=1e-3 is compared with the baseline at lr=1e-3, not with whichever row came first.
  const std::string& baseline_arm = by_group[baseline].front()->arm;
  const auto baseline_for = [&](const std::string& group) {
    const std::string& arm = by_group[group].front()->arm;
    const std::string candidate = baseline_arm + group.substr(arm.size());
    return by_group.count(candidate) ? candidate : baseline;
  };

  std::vector<ArmSummary> rows;
  for (const std::string& group : sweep.groups) {
    const auto& runs = by_group[group];
    const RunRecord& c = *runs.front();
    ArmSummary a;
    a.arm = group;
    const std::string own_baseline = baseline_for(group);
    a.is_baseline = group == own_baseline;
    const contract::RunConfig& base = by_group[own_baseline].front()->settings;
    a.precision = c.settings.precision;
    a.interventions =
        contract::describe_differences(contract::settings_difference(c.settings, base), false);
    a.paper = contract::paper_figure(c.settings, base);
    a.cost = extra_token_cost(compared(runs), compared(by_group[own_baseline]));
    a.seeds = static_cast<int>(runs.size());
    std::vector<double> finals, bests;
    double first_divergence_tokens = INFINITY;
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunRecord& r = *runs[i];
      // A run cut short (pending, interrupted, failed) has a last loss, not a final one.
      const bool has_result = results::is_final_result(r.status) || outcome(r).tokens_to_target;
      if (has_result && r.final_val_loss && std::isfinite(*r.final_val_loss))
        finals.push_back(*r.final_val_loss);
      double best = INFINITY;
      for (const EvalPoint& e : r.evals)
        if (std::isfinite(e.val_loss)) best = std::min(best, e.val_loss);
      if (std::isfinite(best)) bests.push_back(best);
      if (outcome(r).tokens_to_target) {
        ++a.converged;
      } else if (r.status == "diverged") {
        ++a.diverged;
      } else if (r.status == "converged" || r.status == "budget_exhausted" ||
                 r.status == results::status::kProjectedNotReached) {
        ++a.not_reached;
      }
      for (const DivergenceMark& d : r.divergences) {
        const bool counts = r.status == "diverged" ? d.severity == "fatal" : false;
        if (counts && d.tokens < first_divergence_tokens) {
          first_divergence_tokens = d.tokens;
          a.first_divergence_reason = d.reason;
        }
      }
      if (r.status == "diverged" && a.first_divergence_reason.empty())
        a.first_divergence_reason = "diverged";
    }
    if (!finals.empty()) a.final_val_loss = median(finals);
    if (!bests.empty()) a.best_val_loss = median(bests);
    rows.push_back(a);
  }
  return rows;
}

ReportData report_data(const SweepData& sweep, const std::vector<ArmSummary>& table,
                       const ResolvedTarget& target) {
  ReportData d;
  d.sweep = sweep.name;
  d.caption = target.description;
  d.target = target.val_loss;
  d.arms = sweep.groups;
  d.table = table;
  for (const std::string& group : sweep.groups) {
    OccShare share{group, 0, 0};
    double sum = 0;
    for (const RunRecord& r : sweep.runs) {
      if (r.group != group) continue;
      share.records += r.occ_records;
      sum += r.occ_fraction_sum;
    }
    if (share.records == 0) continue;
    share.mean_fraction = sum / static_cast<double>(share.records);
    d.occ.push_back(share);
  }
  for (const RunRecord& r : sweep.runs) {
    d.runs.push_back({r.group, r.seed, r.evals});
    d.divergences.insert(d.divergences.end(), r.divergences.begin(), r.divergences.end());
    d.telemetry.insert(d.telemetry.end(), r.telemetry.begin(), r.telemetry.end());
  }
  return d;
}

}  // namespace mxablate::analysis
