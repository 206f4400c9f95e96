// `mxablate plan RECIPE`: what a recipe would run — one row per run (arm, grid axes, run_id,
// precisions, ranks where any run has several, predicted peak GPU memory per rank of CUDA runs,
// token budget) and the totals — without running anything. `--memory` and `--json` add the
// weight cache the trainer will decide on (weight_cache.h), `--gpu` each run's GPU-hours at most
// from the measured rates (plan_cost.h). Every recipe error is reported here
// exactly as `run` would report it, and so is every launch check against the datasets the runs
// name (launch_checks.h).
#include <CLI/CLI.hpp>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"
#include "mxablate/orchestrator/gpu_memory.h"
#include "mxablate/orchestrator/plan.h"
#include "mxablate/orchestrator/progress.h"
#include "mxablate/orchestrator/recipe.h"
#include "mxablate/orchestrator/text_table.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/memory_plan.h"
#include "mxablate/trainer/plan/recompute_plan.h"
#include "mxablate/trainer/plan/model_presets.h"
#include "mxablate/trainer/plan/run_fit.h"
#include "mxablate/trainer/plan/weight_cache.h"
#include "mxablate/trainer/plan/working_copies.h"
#include "mxablate/contract/settings_difference.h"
#include "plan_cost.h"
#include "plan_seeds.h"
#include "recipe_input.h"

namespace mxablate::cli {
namespace {

using namespace mxablate::orchestrator;

struct PlanOptions {
  std::string recipe;
  bool json = false;
  bool layers = false;
  bool memory = false;
  std::string gpu_memory;  // --gpu-memory SIZE: refuse CUDA runs predicted not to fit
  bool gpu_memory_given = false;  // an empty SIZE is an error, not the option left out
  std::string gpu;                // --gpu h100|h200: GPU-hours from the rates measured there
};

std::string axis_cell(const RunSpec& run, const std::string& axis) {
  for (const AxisValue& a : run.axes)
    if (a.axis == axis) return axis_text(run, a);
  return "-";
}

// A run's model size: with the embeddings when its dataset's vocabulary is known (from the
// manifest), else only what lies outside them.
struct ModelSize {
  int64_t non_embedding = 0;
  std::optional<int64_t> vocab;
  std::optional<int64_t> total;
};

ModelSize model_size(const RunSpec& run, const DatasetVocabularies& vocabularies) {
  // The planner resolved and checked every run's model: this cannot throw.
  const trainer::ModelShape shape = trainer::model_shape(run.config.model);
  ModelSize size;
  size.non_embedding = trainer::non_embedding_parameter_count(shape);
  if (const auto it = vocabularies.find(run.config.data.dataset); it != vocabularies.end()) {
    size.vocab = it->second;
    size.total = trainer::parameter_count(shape, it->second);
  }
  return size;
}

std::string name(contract::GemmPrecision p) { return std::string(contract::to_string(p)); }

// A CUDA run's predicted peak GPU memory per rank (memory_plan.h) at its dataset's vocabulary,
// and the recompute it plans with (recompute_plan.h): `auto` resolved against --gpu-memory where
// given, else at its least (every block); none for CPU runs (not modelled) or an unknown
// vocabulary.
struct RunMemory {
  trainer::MemoryPlan plan;
  int64_t recomputed = 0, blocks = 0;  // blocks 0 … recomputed-1 of the model's `blocks`, whole
  bool selective = false;              // every block makes its norms' outputs and SwiGLU's h again
  double recompute_flops = 0;          // the FLOPs they add, a fraction of the step's
  bool is_auto = false, resolved = false;
};

std::optional<RunMemory> memory_plan(const RunSpec& run, const DatasetVocabularies& vocabularies,
                                     const std::optional<GpuMemory>& gpu) {
  if (run.config.device != contract::Device::kCUDA) return std::nullopt;
  const auto it = vocabularies.find(run.config.data.dataset);
  if (it == vocabularies.end()) return std::nullopt;
  // The planner resolved and checked every run's model: this cannot throw.
  const trainer::ModelShape shape = trainer::model_shape(run.config.model);
  RunMemory m;
  m.is_auto = run.config.train.activation_checkpointing.mode == contract::Recompute::Mode::kAuto;
  m.resolved = m.is_auto && gpu;
  const contract::RunConfig executed =
      gpu ? trainer::resolve_recompute(run.config, shape, it->second, gpu->bytes) : run.config;
  m.plan = trainer::plan_memory(executed, shape, it->second);
  m.blocks = shape.n_layers;
  m.recomputed = trainer::recomputed_blocks(executed.train.activation_checkpointing, shape.n_layers);
  m.selective = trainer::selective_recompute(executed.train.activation_checkpointing);
  m.recompute_flops =
      trainer::recompute_flops_fraction(shape, run.config.data.seq_len, it->second, m.recomputed);
  return m;
}

// "-", "27/32", "sel+0/32" (selective, no whole block), "auto sel+27/32" (resolved), "auto
// ≤32/32" (at its least until the GPU is known).
std::string recompute_cell(const RunMemory& m) {
  if (!m.is_auto && m.recomputed == 0 && !m.selective) return "-";
  return fmt::format("{}{}{}/{}", m.is_auto ? (m.resolved ? "auto " : "auto ≤") : "", m.selective ? "sel+" : "",
                     m.recomputed, m.blocks);
}

// Whether the trainer will keep each layer's weight operands for a whole step (docs/design.md §4,
// "Weight operands per step"), by the trainer's own rule (weight_cache.h) on the run's memory
// plan: the bytes the cache holds; for a CUDA run the least GPU memory that keeps it; the decision
// where the GPU is known (--gpu-memory) and for a CPU run (always on). None when the dataset's
// vocabulary is unknown.
struct PlannedWeightCache {
  int64_t bytes = 0;
  std::optional<int64_t> least_gpu_memory;
  std::optional<trainer::WeightCache> decision;
};

std::optional<PlannedWeightCache> planned_weight_cache(const RunSpec& run, const DatasetVocabularies& vocabularies,
                                                       const std::optional<GpuMemory>& gpu) {
  const auto it = vocabularies.find(run.config.data.dataset);
  if (it == vocabularies.end()) return std::nullopt;
  PlannedWeightCache c;
  // The planner resolved and checked every run's model: this cannot throw.
  const trainer::ModelShape shape = trainer::model_shape(run.config.model);
  const trainer::RunLayerPlans plans =
      trainer::plan_run_layers(run.config, trainer::linear_layers(shape, it->second), shape.n_layers);
  c.bytes = trainer::weight_cache_bytes(plans, trainer::bf16_working_copies(run.config, plans));
  if (run.config.device != contract::Device::kCUDA) {
    c.decision = trainer::decide_weight_cache(false, 0, c.bytes, 0);
    return c;
  }
  // The plan of the config the trainer runs: `auto` recompute resolved on the GPU where known.
  const contract::RunConfig executed =
      gpu ? trainer::resolve_recompute(run.config, shape, it->second, plans, gpu->bytes) : run.config;
  const int64_t plan_total = trainer::plan_memory(executed, shape, it->second, plans).total();
  c.least_gpu_memory = trainer::weight_cache_least_device_memory(plan_total, c.bytes);
  if (gpu) c.decision = trainer::decide_weight_cache(true, plan_total, c.bytes, gpu->bytes);
  return c;
}

void print_plan(const Recipe& recipe, const Plan& plan, const DatasetVocabularies& vocabularies,
                const std::optional<GpuMemory>& gpu, const PlanCosts* costs) {
  std::cout << fmt::format("sweep {} ({})\n", plan.sweep, recipe.file);
  // Free text from the recipe (names are validated by the loader): shown, never sent raw.
  if (!recipe.description.empty())
    std::cout << "  " << escape::terminal(recipe.description) << "\n";
  if (recipe.target.perplexity)
    std::cout << fmt::format("target: perplexity {} (validation loss {:.4f}){}\n",
                             *recipe.target.perplexity, *recipe.target.val_loss,
                             recipe.target.stop_at_target ? " (runs stop there)" : "");
  else if (recipe.target.val_loss)
    std::cout << fmt::format("target: validation loss {} (perplexity {:.2f}){}\n",
                             *recipe.target.val_loss, std::exp(*recipe.target.val_loss),
                             recipe.target.stop_at_target ? " (runs stop there)" : "");
  else if (recipe.target.from_arm)
    std::cout << fmt::format("target: arm {}'s median validation loss at {:g} of its budget{}\n",
                             *recipe.target.from_arm, recipe.target.at_fraction,
                             recipe.target.stop_at_target ? " (runs stop there)" : "");
  // The largest cost the sweep can measure (docs/design.md §5, "The measurable ceiling").
  const CeilingReport ceiling = ceiling_report(recipe, plan);
  for (const std::string& line : ceiling.lines) std::cout << escape::terminal(line) << "\n";
  for (const std::string& w : ceiling.warnings)
    std::cerr << "mxablate: warning: " << escape::terminal(w) << "\n";
  std::vector<std::string> headers{"#", "run_id", "arm"};
  for (const auto& a : plan.axis_names) headers.push_back(a);
  // A grid over the model already shows it (by its label) among the axes.
  const bool model_is_axis =
      std::find(plan.axis_names.begin(), plan.axis_names.end(), "model") != plan.axis_names.end();
  if (!model_is_axis) headers.push_back("model");
  for (const char* h : {"params", "fprop", "dgrad", "wgrad", "interventions"}) headers.push_back(h);
  // The ranks of each run (parallel.data: the slots it takes at once), where any has several.
  const bool ranks = std::any_of(plan.runs.begin(), plan.runs.end(),
                                 [](const RunSpec& r) { return r.config.parallel.data > 1; });
  if (ranks) headers.push_back("ranks");
  const bool on_gpu = std::any_of(plan.runs.begin(), plan.runs.end(), [](const RunSpec& r) {
    return r.config.device == contract::Device::kCUDA;
  });
  if (on_gpu) headers.push_back("gpu mem/rank");
  headers.push_back("tokens");
  if (costs) headers.push_back("GPU-h ≤");
  TextTable table(headers);
  bool all_known = true;
  std::set<int64_t> vocab_sizes;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const RunSpec& r = plan.runs[i];
    std::vector<std::string> row{std::to_string(i + 1), r.run_id, r.arm};
    for (const auto& a : plan.axis_names) row.push_back(axis_cell(r, a));
    if (!model_is_axis) row.push_back(contract::model_label(r.config.model));
    const ModelSize size = model_size(r, vocabularies);
    if (size.vocab) vocab_sizes.insert(*size.vocab);
    all_known = all_known && size.total.has_value();
    row.push_back(size.total ? format_count(static_cast<double>(*size.total))
                             : format_count(static_cast<double>(size.non_embedding)) + "*");
    row.push_back(name(r.config.precision.fprop));
    row.push_back(name(r.config.precision.dgrad));
    row.push_back(name(r.config.precision.wgrad));
    row.push_back(r.interventions);
    if (ranks) row.push_back(std::to_string(r.config.parallel.data));
    if (on_gpu) {
      const std::optional<RunMemory> m = memory_plan(r, vocabularies, gpu);
      row.push_back(m ? trainer::format_bytes(m->plan.total()) : "-");
    }
    row.push_back(format_count(r.config.train.max_tokens));
    if (costs) row.push_back(gpu_hours_cell(costs->runs[i]));
    table.add_row(row);
  }
  std::cout << table.render(2);
  std::string vocabs;
  for (const int64_t v : vocab_sizes) vocabs += (vocabs.empty() ? "" : ", ") + std::to_string(v);
  if (!vocab_sizes.empty())
    std::cout << fmt::format("params: the model's parameters with the embeddings of its dataset's "
                             "{}-token vocabulary{}\n",
                             vocabs, all_known ? "" : "; *: outside the embeddings only");
  if (vocab_sizes.empty())
    std::cout << "params: outside the embeddings only (*): the datasets' vocabularies are not "
                 "known\n";
  if (on_gpu)
    std::cout << "gpu mem/rank: the predicted peak GPU memory of each rank (CUDA runs; `plan "
                 "--memory` shows its parts and the weight cache)\n";
  std::cout << fmt::format("interventions: the settings that differ from arm {}'s run at the same "
                           "grid point\n",
                           escape::terminal(plan.baseline_arm));
  const auto combos = static_cast<size_t>(recipe.grid_points());
  std::cout << fmt::format("{} runs ({} arms × {} grid combination{}{}{}), {} tokens\n",
                           plan.runs.size(), recipe.arms.size(), combos, combos == 1 ? "" : "s",
                           recipe.exclude.empty() ? "" : ", minus excludes",
                           recipe.include.empty() ? "" : ", plus includes",
                           format_count(plan.total_tokens()));
  if (costs) print_plan_costs(plan, *costs);
}

// A layer's settings other than its precisions, as differences from the defaults.
std::string layer_text(const contract::LayerSettings& s) {
  contract::RunConfig layer;
  contract::set_block_settings(layer, s);
  return contract::describe_differences(
      contract::settings_difference(layer, contract::RunConfig{}), false);
}

// `plan --layers`: what every linear layer runs with, per arm (its first run) and per phase of
// the precision schedule — overrides, BF16 shorthands and the schedule resolved exactly as the
// trainer resolves them (trainer/linear_plan.h).
void print_layers(const Plan& plan) {
  std::vector<std::string> seen;
  for (const RunSpec& r : plan.runs) {
    if (std::find(seen.begin(), seen.end(), r.arm) != seen.end()) continue;
    seen.push_back(r.arm);
    // The planner resolved and checked every run's model: this cannot throw.
    const trainer::ModelShape shape = trainer::model_shape(r.config.model);
    const auto layers = trainer::linear_layers(shape, 0);
    for (size_t phase = 0; phase <= r.config.precision_schedule.size(); ++phase) {
      std::cout << fmt::format(
          "arm {} (run {}, model {}){}\n", escape::terminal(r.arm), r.run_id, shape.name,
          phase == 0 ? std::string()
                     : fmt::format(", from {:g} of the token budget",
                                   r.config.precision_schedule[phase - 1].at_fraction));
      TextTable table({"layer", "fprop", "dgrad", "wgrad", "settings"});
      for (const trainer::LinearShape& l : layers) {
        const contract::LayerSettings s =
            trainer::layer_settings(r.config, l, shape.n_layers, phase);
        table.add_row({l.name, name(s.precision.fprop), name(s.precision.dgrad),
                       name(s.precision.wgrad), layer_text(s)});
      }
      std::cout << table.render(2);
    }
  }
}

// What `auto` chooses between, for each run that has it: the predicted peak and the FLOPs added
// with no recompute, with selective recompute alone, and with it and a quarter, half and three
// quarters of the blocks whole, every block but the last, and the choice at the GPU's memory where
// known. Runs whose configs plan alike share one line.
void print_recompute_ladders(const Plan& plan, const DatasetVocabularies& vocabularies,
                             const std::optional<GpuMemory>& gpu, const std::vector<size_t>& runs) {
  std::map<std::string, std::vector<size_t>> lines;  // ladder text → its runs, in plan order
  std::vector<std::string> order;
  for (const size_t i : runs) {
    const RunSpec& r = plan.runs[i];
    const int64_t vocab = vocabularies.at(r.config.data.dataset);
    const trainer::ModelShape shape = trainer::model_shape(r.config.model);
    const int64_t n = shape.n_layers;
    // The ladder's steps: none (index 0), then selective with k blocks whole (index k + 1).
    std::set<size_t> steps{0, 1};
    for (const int64_t k : {n / 4, n / 2, 3 * n / 4, std::max<int64_t>(0, n - 1)}) steps.insert(static_cast<size_t>(k) + 1);
    // The whole ladder in one pass: the steps shown and the choice read the same figures.
    const std::vector<trainer::RecomputeStep> ladder = trainer::recompute_ladder(
        r.config, shape, vocab, trainer::plan_run_layers(r.config, trainer::linear_layers(shape, vocab), n));
    std::optional<size_t> chosen;
    if (gpu) {
      const trainer::RecomputeChoice choice = trainer::choose_recompute(ladder, n, gpu->bytes);
      for (size_t i = 0; i < ladder.size(); ++i)
        if (ladder[i].setting == choice.setting) chosen = i;
      if (chosen) steps.insert(*chosen);
    }
    std::string text;
    for (const size_t i : steps) {
      const int64_t k = trainer::recomputed_blocks(ladder[i].setting, n);
      text += fmt::format("{}{}{}/{} {} +{:.1f}%{}", text.empty() ? "" : ", ", i == 0 ? "" : "sel+", k, n,
                          trainer::format_bytes(ladder[i].plan.total()),
                          100 * trainer::recompute_flops_fraction(shape, r.config.data.seq_len, vocab, k),
                          chosen && *chosen == i ? " (chosen)" : "");
    }
    if (!lines.count(text)) order.push_back(text);
    lines[text].push_back(i + 1);
  }
  for (const std::string& text : order) {
    std::string numbers;
    for (const size_t n : lines[text]) numbers += (numbers.empty() ? "#" : ", #") + std::to_string(n);
    std::cout << fmt::format("auto recompute of {}: {}\n", numbers, text);
  }
}

// `plan --memory`: each CUDA run's predicted peak GPU memory per rank, part by part, and the weight
// cache the trainer will decide on beside it: on or off for `gpu` (--gpu-memory), else the least
// GPU memory that keeps it.
void print_memory(const Plan& plan, const DatasetVocabularies& vocabularies, const std::optional<GpuMemory>& gpu) {
  TextTable table({"#", "run_id", "arm", "recompute", "+flops", "weights", "grads", "optimizer",
                   "activations", "w operands", "working", "logits", "comm", "workspace", "fragment",
                   "total", "w cache", "kept"});
  bool any = false;
  std::vector<size_t> auto_runs;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const RunSpec& r = plan.runs[i];
    const std::optional<RunMemory> rm = memory_plan(r, vocabularies, gpu);
    if (!rm) continue;
    any = true;
    if (rm->is_auto) auto_runs.push_back(i);
    const trainer::MemoryPlan* m = &rm->plan;
    std::vector<std::string> row{std::to_string(i + 1), r.run_id, r.arm, recompute_cell(*rm),
                                 rm->recomputed == 0 ? "-" : fmt::format("{:.1f}%", 100 * rm->recompute_flops)};
    for (const int64_t bytes : {m->weights, m->gradients, m->optimizer, m->activations,
                                m->weight_operands, m->working, m->logits, m->communication,
                                m->workspace, m->fragmentation, m->total()})
      row.push_back(trainer::format_bytes(bytes));
    // A CUDA run's vocabulary is known (it has a memory plan): so is its cache.
    const PlannedWeightCache cache = *planned_weight_cache(r, vocabularies, gpu);
    row.push_back(trainer::format_bytes(cache.bytes));
    row.push_back(cache.decision ? (cache.decision->on ? "on" : "off")
                                 : "if ≥ " + trainer::format_bytes(*cache.least_gpu_memory));
    table.add_row(row);
  }
  if (!any) {
    std::cout << "no run uses device cuda: GPU memory is not predicted for CPU runs\n";
    return;
  }
  std::cout << table.render(2);
  std::cout << fmt::format(
      "predicted peak GPU memory per rank (docs/trainer.md, \"GPU memory\"): weights FP32 on "
      "every rank (with parallel.shard, the linears no quantizer reads BF16 on every rank and their "
      "FP32 masters 1/ranks); grads FP32 (a 1/ranks shard and {} of buckets in flight with parallel.shard: "
      "gradients); optimizer AdamW's two FP32 moments (1/ranks with parallel.shard); activations "
      "saved by one micro-batch; w operands the BF16 weights Dgrad reads (none where it reads the BF16 weights themselves); working the largest "
      "block backward; logits one chunk of the loss; comm NCCL {}; workspace CUDA context and "
      "cuBLAS {}; fragment {}% of the per-micro-batch parts\n",
      trainer::format_bytes(trainer::kShardedInFlightBytes),
      trainer::format_bytes(trainer::kNcclBufferBytes),
      trainer::format_bytes(trainer::kCudaWorkspaceBytes), trainer::kFragmentationPercent);
  std::cout << fmt::format(
      "recompute: the blocks that recompute whole in the backward (the first ones; docs/design.md §4, "
      "\"Recompute chosen by the memory plan\"), sel+ where every block also makes its norms' outputs "
      "and SwiGLU's product again (selective; no GEMM), +flops what they add to the step; auto takes "
      "the first of none, sel+0, sel+1, … whose total is within {}% of the GPU's memory: {}\n",
      trainer::kAutoRecomputeMemoryPercent,
      gpu ? "here the " + trainer::format_bytes(gpu->bytes) + " of " + gpu->source
          : std::string("not known here (give --gpu-memory SIZE), so auto is shown at its least "
                        "memory, every block recomputed"));
  print_recompute_ladders(plan, vocabularies, gpu, auto_runs);
  std::cout << fmt::format(
      "w cache: the weight operands the trainer keeps for a whole step (docs/trainer.md, \"GPU "
      "memory\"), not in total; kept where total + w cache is within {}% of the GPU's memory: {}\n",
      trainer::kWeightCacheMemoryPercent,
      gpu ? "here the " + trainer::format_bytes(gpu->bytes) + " of " + gpu->source
          : std::string("not known here (give --gpu-memory SIZE), so kept says how much keeps it"));
}

nlohmann::json memory_json(const trainer::MemoryPlan& m) {
  return {{"weights", m.weights},
          {"gradients", m.gradients},
          {"optimizer", m.optimizer},
          {"activations", m.activations},
          {"weight_operands", m.weight_operands},
          {"working", m.working},
          {"logits", m.logits},
          {"communication", m.communication},
          {"workspace", m.workspace},
          {"fragmentation", m.fragmentation},
          {"total", m.total()},
          {"allocator_peak", m.allocator_peak()},
          {"micro_batch_tokens", m.tokens},
          {"logits_chunk_tokens", m.logits_tokens}};
}

// null where the dataset's vocabulary is unknown; "on" and "reason" null for a CUDA run without
// --gpu-memory.
nlohmann::json weight_cache_json(const std::optional<PlannedWeightCache>& c) {
  if (!c) return nullptr;
  return {{"bytes", c->bytes},
          {"least_gpu_memory", c->least_gpu_memory ? nlohmann::json(*c->least_gpu_memory) : nlohmann::json()},
          {"on", c->decision ? nlohmann::json(c->decision->on) : nlohmann::json()},
          {"reason", c->decision ? nlohmann::json(c->decision->reason) : nlohmann::json()}};
}

// The runs as an array (what the GPU scripts read); with --gpu each has its "cost" (plan_cost.h).
void print_json(const Plan& plan, const DatasetVocabularies& vocabularies, const std::optional<GpuMemory>& gpu,
                const PlanCosts* costs) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const RunSpec& r = plan.runs[i];
    nlohmann::json axes = nlohmann::json::object();
    for (const AxisValue& a : r.axes) axes[a.axis] = a.value;
    const ModelSize size = model_size(r, vocabularies);
    const nlohmann::json model{
        {"label", contract::model_label(r.config.model)},
        {"non_embedding_parameters", size.non_embedding},
        {"vocab_size", size.vocab ? nlohmann::json(*size.vocab) : nlohmann::json()},
        {"parameters", size.total ? nlohmann::json(*size.total) : nlohmann::json()}};
    const std::optional<RunMemory> memory = memory_plan(r, vocabularies, gpu);
    nlohmann::json memory_out;
    if (memory) {
      memory_out = memory_json(memory->plan);
      // auto's blocks are its least where the GPU is not known (resolved false).
      memory_out["recompute"] = {{"setting", contract::recompute_json(r.config.train.activation_checkpointing)},
                                 {"blocks", memory->recomputed},
                                 {"selective", memory->selective},
                                 {"of", memory->blocks},
                                 {"resolved", !memory->is_auto || memory->resolved},
                                 {"flops_fraction", memory->recompute_flops}};
    }
    out.push_back({{"run_id", r.run_id},
                   {"arm", r.arm},
                   {"axes", axes},
                   {"model", model},
                   {"gpu_memory_per_rank", memory_out},
                   {"weight_cache", weight_cache_json(planned_weight_cache(r, vocabularies, gpu))},
                   {"config", r.config_json}});
    if (costs) out.back()["cost"] = cost_json(*costs, i);
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
  CLI::Option* layers_flag = cmd->add_flag("--layers", opts->layers,
                "print each arm's layers with their resolved precision per GEMM and settings "
                "(overrides, BF16 blocks and the precision schedule applied)");
  CLI::Option* memory_flag = cmd->add_flag("--memory", opts->memory,
                "print each CUDA run's predicted peak GPU memory per rank, part by part, and whether "
                "the trainer will cache its weight operands per step (for --gpu-memory SIZE)");
  CLI::Option* gpu_memory_option = cmd->add_option("--gpu-memory", opts->gpu_memory,
                  "refuse CUDA runs predicted to need more GPU memory per rank than SIZE "
                  "(80GB, 80GiB, 141e9)");
  CLI::Option* gpu_option = cmd->add_option(
      "--gpu", opts->gpu,
      "print each run's GPU-hours at most, per arm and in all, from the training rates measured on "
      "this GPU (h100, h200; docs/performance.md, \"Rates the plan uses\"); runs without a measured "
      "rate are named, not given a figure");
  const SeedsFlags seeds = add_seeds_options(cmd);
  // The figures go with the runs' listing and --json, not with the other views.
  gpu_option->excludes(layers_flag)->excludes(memory_flag)->excludes(seeds.seeds);
  cmd->callback([opts, gpu_memory_option, gpu_option, seeds] {
    // The seeds a difference needs: the store's spread, not the datasets (plan_seeds.h).
    if (seeds.seeds->count() > 0)
      return print_seeds_plan(*seeds.options, load_recipe_input(opts->recipe).plan);
    opts->gpu_memory_given = gpu_memory_option->count() > 0;
    std::optional<GpuMemory> gpu;
    if (opts->gpu_memory_given) {
      try {
        gpu = GpuMemory{parse_memory_size(opts->gpu_memory), "--gpu-memory " + opts->gpu_memory};
      } catch (const std::invalid_argument& e) {
        throw InputError(std::string("--gpu-memory: ") + e.what());
      }
    }
    // Parsed before the recipe is read: a bad value is one line whatever the recipe holds.
    const std::optional<GpuKind> gpu_kind =
        gpu_option->count() > 0 ? std::optional(parse_gpu_option(opts->gpu)) : std::nullopt;
    const RecipeInput input = load_checked_recipe_input(opts->recipe);
    if (gpu) {
      try {
        check_gpu_memory(input.recipe, input.plan, input.vocabularies, *gpu);
      } catch (const RecipeError& e) {
        throw InputError(e.what());
      }
    }
    const std::optional<PlanCosts> costs =
        gpu_kind ? std::optional(plan_costs(input.plan, input.vocabularies, *gpu_kind, gpu)) : std::nullopt;
    const PlanCosts* cost_ptr = costs ? &*costs : nullptr;
    if (opts->json) print_json(input.plan, input.vocabularies, gpu, cost_ptr);
    else if (opts->layers) print_layers(input.plan);
    else if (opts->memory) print_memory(input.plan, input.vocabularies, gpu);
    else print_plan(input.recipe, input.plan, input.vocabularies, gpu, cost_ptr);
  });
}

}  // namespace mxablate::cli
