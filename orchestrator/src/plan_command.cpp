// `mxablate plan RECIPE`: what a recipe would run — one row per run (arm, grid axes, run_id,
// precisions, token budget) and the totals — without running anything. Every recipe error is
// reported here exactly as `run` would report it.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>
#include <memory>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/progress.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/text_table.h"
#include "recipe_input.h"

namespace mxablate::cli {
namespace {

using namespace mxablate::orchestrator;

struct PlanOptions {
  std::string recipe;
  bool json = false;
};

std::string axis_cell(const RunSpec& run, const std::string& axis) {
  for (const AxisValue& a : run.axes)
    if (a.axis == axis) return a.value.is_string() ? a.value.get<std::string>() : a.value.dump();
  return "-";
}

std::string quant_cell(const contract::RunConfig& c) {
  std::string s;
  if (!c.quant.stochastic_rounding.empty()) {
    s = "SR(";
    for (size_t i = 0; i < c.quant.stochastic_rounding.size(); ++i)
      s += (i ? "," : "") + c.quant.stochastic_rounding[i];
    s += ")";
  }
  if (c.quant.hadamard.mode != "none") {
    std::string gemms;
    for (const auto& g : c.quant.hadamard.gemms) gemms += (gemms.empty() ? "" : ",") + g;
    s += fmt::format("{}H{} {} ({})", s.empty() ? "" : " ", c.quant.hadamard.size,
                     c.quant.hadamard.mode, gemms);
  }
  return s.empty() ? "-" : s;
}

void print_plan(const Recipe& recipe, const Plan& plan) {
  std::cout << fmt::format("sweep {} ({})\n", plan.sweep, recipe.file);
  // Free text from the recipe (names are validated by the loader): shown, never sent raw.
  if (!recipe.description.empty())
    std::cout << "  " << escape::terminal(recipe.description) << "\n";
  if (recipe.target.val_loss)
    std::cout << fmt::format("target: validation loss {}{}\n", *recipe.target.val_loss,
                             recipe.target.stop_at_target ? " (runs stop there)" : "");
  else if (recipe.target.from_arm)
    std::cout << fmt::format("target: arm {}'s median validation loss at {:g} of its budget\n",
                             *recipe.target.from_arm, recipe.target.at_fraction);
  std::vector<std::string> headers{"#", "run_id", "arm"};
  for (const auto& a : plan.axis_names) headers.push_back(a);
  for (const char* h : {"model", "fprop", "dgrad", "wgrad", "quant", "tokens"}) headers.push_back(h);
  TextTable table(headers);
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const RunSpec& r = plan.runs[i];
    std::vector<std::string> row{std::to_string(i + 1), r.run_id, r.arm};
    for (const auto& a : plan.axis_names) row.push_back(axis_cell(r, a));
    row.push_back(r.config.model);
    row.push_back(r.config.precision.fprop);
    row.push_back(r.config.precision.dgrad);
    row.push_back(r.config.precision.wgrad);
    row.push_back(quant_cell(r.config));
    row.push_back(format_count(r.config.train.max_tokens));
    table.add_row(row);
  }
  std::cout << table.render(2);
  size_t combos = 1;
  for (const auto& g : recipe.grid) combos *= g.values.size();
  std::cout << fmt::format("{} runs ({} arms × {} grid combination{}{}{}), {} tokens\n",
                           plan.runs.size(), recipe.arms.size(), combos, combos == 1 ? "" : "s",
                           recipe.exclude.empty() ? "" : ", minus excludes",
                           recipe.include.empty() ? "" : ", plus includes",
                           format_count(plan.total_tokens()));
}

void print_json(const Plan& plan) {
  nlohmann::json out = nlohmann::json::array();
  for (const RunSpec& r : plan.runs) {
    nlohmann::json axes = nlohmann::json::object();
    for (const AxisValue& a : r.axes) axes[a.axis] = a.value;
    out.push_back({{"run_id", r.run_id}, {"arm", r.arm}, {"axes", axes}, {"config", r.config_json}});
  }
  std::cout << out.dump(2) << "\n";
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Validate a recipe and list the runs it expands to (arm, grid axes, run_id), "
              "with totals; runs nothing");
  cmd->add_option("recipe", opts->recipe, "recipe file (YAML)")->required();
  cmd->add_flag("--json", opts->json, "print the runs and their resolved configs as JSON");
  cmd->callback([opts] {
    const RecipeInput input = load_recipe_input(opts->recipe);
    if (opts->json) print_json(input.plan);
    else print_plan(input.recipe, input.plan);
  });
}

}  // namespace mxablate::cli
