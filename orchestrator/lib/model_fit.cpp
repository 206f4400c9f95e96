#include "mxablate/orchestrator/model_fit.h"

#include <fmt/format.h>

#include "mxablate/trainer/linear_plan.h"
#include "mxablate/trainer/model_presets.h"

namespace mxablate::orchestrator {
namespace {

using contract::ConfigError;
using contract::RunConfig;

int64_t micro_batch_tokens(const RunConfig& c) {
  return c.train.micro_batch_tokens > 0 ? c.train.micro_batch_tokens : c.train.global_batch_tokens;
}

// The same rule as the trainer's model: the first/last N blocks may stay in BF16.
bool kept_bf16(int block, int n_layers, int first, int last) {
  return block < first || block >= n_layers - last;
}

// The first problem of any quantized transformer linear under `plan`, or "".
std::string first_problem(const trainer::LinearPlan& plan, const trainer::ModelShape& shape,
                          const RunConfig& c, std::string& layer) {
  for (const trainer::LinearShape& l : trainer::linear_layers(shape, 0)) {
    if (l.block < 0 || kept_bf16(l.block, static_cast<int>(shape.n_layers),
                                 c.quant.bf16_first_blocks, c.quant.bf16_last_blocks))
      continue;  // the LM head and BF16-kept blocks are not quantized
    const std::string problem =
        trainer::check_linear_shapes(plan, l.in_features, l.out_features, micro_batch_tokens(c));
    if (!problem.empty()) {
      layer = l.name;
      return problem;
    }
  }
  return "";
}

}  // namespace

void check_model_fit(const RunConfig& c) {
  const auto shape = trainer::find_model_preset(c.model);
  if (!shape)
    throw ConfigError(fmt::format("model: expected one of {}, got \"{}\"",
                                  trainer::model_preset_names(), c.model));
  if (shape->shape_check_only)
    throw ConfigError(fmt::format("model: \"{}\" is for shape checks only ({})", c.model,
                                  shape->note));
  // Block sizes first (rotations off), so the message names the key that decides it.
  RunConfig unrotated = c;
  unrotated.quant.hadamard.mode = "none";
  std::string layer;
  std::string problem = first_problem(trainer::make_linear_plan(unrotated, false), *shape, c, layer);
  std::string key;
  if (!problem.empty()) {
    key = "precision." + problem.substr(0, problem.find(' '));  // the problem starts with its GEMM
  } else {
    problem = first_problem(trainer::make_linear_plan(c, false), *shape, c, layer);
    key = "quant.hadamard.size";
  }
  if (!problem.empty())
    throw ConfigError(fmt::format("{}: layer {} of model {} with {} tokens per micro-batch: {}", key,
                                  layer, c.model, micro_batch_tokens(c), problem));
}

}  // namespace mxablate::orchestrator
