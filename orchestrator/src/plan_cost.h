// `mxablate plan RECIPE --gpu h100|h200`: what the sweep costs in GPU-hours at most, per run, per
// arm and in all, from the rates measured on that GPU (run_cost.h; docs/design.md §5, "What a
// sweep costs"). A run without a measured rate is counted and named, never given a figure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxablate/orchestrator/gpu_memory.h"
#include "mxablate/orchestrator/launch_checks.h"
#include "mxablate/orchestrator/measured_rates.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/run_cost.h"

namespace mxablate::cli {

// `--gpu VALUE` as a GpuKind; an InputError (one line, exit 2) for anything else.
orchestrator::GpuKind parse_gpu_option(const std::string& value);

struct PlanCosts {
  orchestrator::GpuKind gpu = orchestrator::GpuKind::kH100;
  const orchestrator::MeasuredRates* rates = nullptr;
  std::vector<orchestrator::RunCost> runs;  // one per run of the plan, in its order
};

// Every run's cost on `gpu`; `auto` recompute resolved at `gpu_memory` where given.
PlanCosts plan_costs(const orchestrator::Plan& plan, const orchestrator::DatasetVocabularies& vocabularies,
                     orchestrator::GpuKind gpu, const std::optional<orchestrator::GpuMemory>& gpu_memory);

// The plan table's cell: the run's GPU-hours at most (rounded up), "-" without a rate.
std::string gpu_hours_cell(const orchestrator::RunCost& cost);

// What follows the plan's table: per arm and in all, the rates used and what each bounds, the
// runs without a rate and why, and the table the rates come from.
void print_plan_costs(const orchestrator::Plan& plan, const PlanCosts& costs);

// A run's "cost" in `plan --json`.
nlohmann::json cost_json(const PlanCosts& costs, size_t run);

}  // namespace mxablate::cli
