#include "plan_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "cli_errors.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/orchestrator/text_table.h"

namespace mxablate::cli {
namespace {

using namespace orchestrator;

// Three significant figures (whole hours from 100), rounded up: a bound shown rounded down
// would understate it.
std::string hours_text(double hours) {
  if (hours <= 0) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(hours)));
  const int decimals = std::max(0, 2 - magnitude);
  const double scale = std::pow(10.0, decimals);
  // The relative nudge keeps 12.3 from showing as 12.4 through 12.3 × 10 = 123.00000000000001.
  const double up = std::ceil(hours * scale * (1 - 1e-12)) / scale;
  return fmt::format("{:.{}f}", up, decimals);
}

std::string rate_text(double tokens_per_second) { return fmt::format("{:.0f}", tokens_per_second); }

// "#1–#3, #7": run numbers as the plan's table shows them, consecutive ones as a range.
std::string run_numbers(const std::vector<size_t>& runs) {
  std::string out;
  for (size_t i = 0; i < runs.size();) {
    size_t j = i;
    while (j + 1 < runs.size() && runs[j + 1] == runs[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") +
           (j == i ? fmt::format("#{}", runs[i] + 1) : fmt::format("#{}–#{}", runs[i] + 1, runs[j] + 1));
    i = j + 1;
  }
  return out;
}

// A row as the plan names it: where it is, what was measured, where it was copied from.
std::string row_text(const MeasuredRates& rates, const MeasuredRate& r) {
  return fmt::format("{}:{}: {}, seq {}, vocabulary {}, micro-batches of {}, {}, {} rank{}{}, {}, "
                     "recompute {}; {}, {}",
                     rates.file, r.line, r.model, r.seq_len, r.vocab, r.micro_batch_tokens, to_string(r.gpu),
                     r.ranks, r.ranks == 1 ? "" : "s",
                     r.ranks == 1 ? "" : fmt::format(" shard {}", contract::to_string(r.shard)),
                     to_string(r.arm), recompute_text(r), r.source, r.date);
}

std::string joined(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

// Keys in first-seen order with their runs: arms, rows used, reasons for no rate.
struct Groups {
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> runs;
  void add(const std::string& key, size_t run) {
    if (!runs.count(key)) order.push_back(key);
    runs[key].push_back(run);
  }
};

}  // namespace

GpuKind parse_gpu_option(const std::string& value) {
  const std::optional<GpuKind> gpu = parse_gpu_kind(value);
  if (!gpu)
    throw InputError(fmt::format("--gpu: '{}' is not a GPU with measured rates (one of: {})", value,
                                 gpu_kind_names()));
  return *gpu;
}

PlanCosts plan_costs(const Plan& plan, const DatasetVocabularies& vocabularies, GpuKind gpu,
                     const std::optional<GpuMemory>& gpu_memory) {
  PlanCosts costs;
  costs.gpu = gpu;
  costs.rates = &built_in_measured_rates();
  for (const RunSpec& r : plan.runs) {
    RunFacts facts;
    if (const auto it = vocabularies.find(r.config.data.dataset); it != vocabularies.end()) facts.vocab = it->second;
    if (gpu_memory) facts.gpu_memory_bytes = gpu_memory->bytes;
    costs.runs.push_back(run_cost(*costs.rates, gpu, r.config, facts));
  }
  return costs;
}

std::string gpu_hours_cell(const RunCost& cost) { return cost.gpu_hours ? hours_text(*cost.gpu_hours) : "-"; }

namespace {

// Per arm and for the sweep: the runs, how many have a rate, the rate, the GPU-hours at most.
void print_arm_table(const Plan& plan, const PlanCosts& costs, Groups& arms) {
  TextTable table({"arm", "runs", "with a rate", "tokens/s a GPU", "GPU-hours at most"});
  double sweep_hours = 0;
  size_t sweep_rated = 0;
  for (const std::string& arm : arms.order) {
    double hours = 0;
    size_t rated = 0;
    std::vector<double> arm_rates;
    for (const size_t i : arms.runs[arm]) {
      const RunCost& c = costs.runs[i];
      if (!c.gpu_hours) continue;
      ++rated;
      hours += *c.gpu_hours;
      if (std::find(arm_rates.begin(), arm_rates.end(), c.match.rate->tokens_per_second_per_gpu) == arm_rates.end())
        arm_rates.push_back(c.match.rate->tokens_per_second_per_gpu);
    }
    sweep_hours += hours;
    sweep_rated += rated;
    table.add_row({arm, std::to_string(arms.runs[arm].size()), std::to_string(rated),
                   arm_rates.empty() ? "-" : arm_rates.size() == 1 ? rate_text(arm_rates[0]) : "several",
                   rated == 0 ? "-" : hours_text(hours)});
  }
  table.add_row({"sweep", std::to_string(plan.runs.size()), std::to_string(sweep_rated), "",
                 sweep_rated == 0 ? "-" : hours_text(sweep_hours)});
  std::cout << table.render(2);
}

// Each row used, once, with the runs it bounds and where it did more work a token than they.
void print_rates_used(const PlanCosts& costs, Groups& rows) {
  for (const std::string& key : rows.order) {
    const std::vector<size_t>& runs = rows.runs[key];
    const RunCost& c = costs.runs[runs.front()];
    std::cout << "  "
              << escape::terminal(fmt::format(
                     "rate {} tokens/s a GPU for {}: {}{}", rate_text(c.match.rate->tokens_per_second_per_gpu),
                     run_numbers(runs), row_text(*costs.rates, *c.match.rate),
                     c.match.bounds.empty() ? "" : "; a bound: " + joined(c.match.bounds, ", ")))
              << "\n";
  }
}

// The runs without a rate, counted, grouped by why, with their arms and models.
void print_without_rate(const Plan& plan, const std::string& gpu, Groups& reasons) {
  if (reasons.order.empty()) return;
  size_t n = 0;
  for (const std::string& reason : reasons.order) n += reasons.runs[reason].size();
  std::cout << fmt::format("{} run{} no measured rate for {}, so no figure:\n", n, n == 1 ? " has" : "s have", gpu);
  for (const std::string& reason : reasons.order) {
    const std::vector<size_t>& runs = reasons.runs[reason];
    std::vector<std::string> arm_names, models;  // each once
    for (const size_t i : runs) {
      const std::string model = contract::model_label(plan.runs[i].config.model);
      if (std::find(arm_names.begin(), arm_names.end(), plan.runs[i].arm) == arm_names.end())
        arm_names.push_back(plan.runs[i].arm);
      if (std::find(models.begin(), models.end(), model) == models.end()) models.push_back(model);
    }
    std::cout << "  "
              << escape::terminal(fmt::format("{} ({} at {}): {}", run_numbers(runs), joined(arm_names, ", "),
                                              joined(models, ", "), reason))
              << "\n";
  }
}

// Runs that may end before their budget: the figures count them to it.
void print_early_stops(const Plan& plan) {
  const auto runs_with = [&](bool contract::TargetConfig::*flag) {
    return static_cast<size_t>(std::count_if(plan.runs.begin(), plan.runs.end(),
                                             [&](const RunSpec& r) { return r.config.target.*flag; }));
  };
  const size_t at_target = runs_with(&contract::TargetConfig::stop_at_target);
  const size_t hopeless = runs_with(&contract::TargetConfig::stop_hopeless);
  const auto how_many = [&](size_t n) {
    return n == plan.runs.size() ? std::string("the runs") : fmt::format("{} of the runs", n);
  };
  const std::string at_target_text = "at the target (target.stop_at_target)";
  const std::string hopeless_text = "once projected not to reach it (target.stop_hopeless)";
  std::vector<std::string> stops;
  if (at_target > 0 && at_target == hopeless)
    stops.push_back(fmt::format("{} stop {} or {}", how_many(at_target), at_target_text, hopeless_text));
  else {
    if (at_target > 0) stops.push_back(fmt::format("{} stop {}", how_many(at_target), at_target_text));
    if (hopeless > 0) stops.push_back(fmt::format("{} stop {}", how_many(hopeless), hopeless_text));
  }
  if (!stops.empty()) std::cout << "upper bounds: " << joined(stops, "; ") << ", before their budgets\n";
}

}  // namespace

void print_plan_costs(const Plan& plan, const PlanCosts& costs) {
  const std::string gpu(to_string(costs.gpu));
  std::cout << fmt::format(
      "GPU-hours on {} at most: each run's steps to train.max_tokens and its evaluations ÷ the "
      "tokens/s a GPU measured at its settings or with more work a token ÷ 3600 (start-up and "
      "checkpoint writes not counted)\n",
      gpu);
  Groups arms, rows, reasons;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const RunCost& c = costs.runs[i];
    arms.add(plan.runs[i].arm, i);
    if (c.match.rate)
      rows.add(fmt::format("{}\n{}", c.match.rate->line, joined(c.match.bounds, "; ")), i);
    else
      reasons.add(c.match.no_rate, i);
  }
  print_arm_table(plan, costs, arms);
  print_rates_used(costs, rows);
  print_without_rate(plan, gpu, reasons);
  print_early_stops(plan);
  std::cout << fmt::format("rates: {}, \"{}\" (measured {} … {}), built into this mxablate\n",
                           costs.rates->file, kMeasuredRatesSection, costs.rates->first_date,
                           costs.rates->last_date);
}

nlohmann::json cost_json(const PlanCosts& costs, size_t run) {
  const RunCost& c = costs.runs[run];
  nlohmann::json rate;  // null without a rate
  if (const MeasuredRate* r = c.match.rate)
    rate = {{"tokens_per_second_per_gpu", r->tokens_per_second_per_gpu},
            {"model", r->model},
            {"seq_len", r->seq_len},
            {"vocab", r->vocab},
            {"micro_batch_tokens", r->micro_batch_tokens},
            {"gpu", to_string(r->gpu)},
            {"ranks", r->ranks},
            {"shard", contract::to_string(r->shard)},
            {"arm", to_string(r->arm)},
            {"recompute", recompute_text(*r)},
            {"date", r->date},
            {"source", r->source},
            {"line", r->line}};
  return {{"gpu", to_string(costs.gpu)},
          {"gpu_hours_at_most", c.gpu_hours ? nlohmann::json(*c.gpu_hours) : nlohmann::json()},
          {"tokens_trained", c.tokens.trained},
          {"tokens_evaluated", c.tokens.evaluated},
          {"rate", rate},
          {"bounds", c.match.bounds},
          {"no_rate", c.match.rate ? nlohmann::json() : nlohmann::json(c.match.no_rate)},
          {"rates_from", fmt::format("{}, \"{}\"", costs.rates->file, kMeasuredRatesSection)}};
}

}  // namespace mxablate::cli
