#include "mxablate/trainer/run_fit.h"

#include "mxablate/trainer/linear_plan.h"
#include "mxablate/trainer/plan_rules.h"

namespace mxablate::trainer {
namespace {

using contract::ConfigError;
using contract::LayerSettings;
using contract::RunConfig;

// What the checks switch off to find which setting a problem belongs to.
enum class Stage { kBlocks, kTiles, kRotations };

LayerSettings at_stage(LayerSettings s, Stage stage) {
  if (stage != Stage::kRotations) s.hadamard.mode = kernels::HadamardMode::kNone;
  if (stage == Stage::kBlocks) s.weight_blocks = kernels::BlockShape::k1D;
  return s;
}

}  // namespace

void check_run_fits(const RunConfig& c, const ModelShape& shape, int64_t vocab_size) {
  const std::vector<LinearShape> layers = linear_layers(shape, vocab_size);
  if (const std::string problem = check_override_patterns(c, layers); !problem.empty())
    throw ConfigError(problem);
  const int64_t tokens = contract::micro_batch_tokens(c);
  if (c.quant.dge && !contract::is_fp4(c.precision.fprop))
    throw ConfigError("quant.dge: needs precision.fprop mxfp4 or nvfp4 (it differentiates W's "
                      "4-bit quantizer), got " + std::string(contract::to_string(c.precision.fprop)));
  for (size_t phase = 0; phase <= c.precision_schedule.size(); ++phase) {
    const std::string when =
        phase == 0 ? "" : " from precision_schedule[" + std::to_string(phase - 1) + "]";
    for (const LinearShape& l : layers) {
      const LayerSettings settings = layer_settings(c, l, shape.n_layers, phase);
      const LinearPlan full = make_linear_plan(settings);
      for (const auto& [key, why] : {std::pair{"quant.dge", check_dge(full)},
                                     std::pair{"quant.occ", check_occ(full)}})
        if (!why.empty()) throw ConfigError(std::string(key) + ": layer " + l.name + when + ": " + why);
      if (l.out_features == 0) continue;  // the LM head when the vocabulary is not known yet
      for (Stage stage : {Stage::kBlocks, Stage::kTiles, Stage::kRotations}) {
        const LinearPlan plan = make_linear_plan(at_stage(settings, stage));
        const std::string problem = check_linear_shapes(plan, l.in_features, l.out_features, tokens);
        if (problem.empty()) continue;
        const std::string key =
            stage == Stage::kBlocks ? "precision." + problem.substr(0, problem.find(' '))
            : stage == Stage::kTiles ? "quant.weight_blocks"
                                     : "quant.hadamard.size";
        throw ConfigError(key + ": layer " + l.name + " of model " + shape.name + " with " +
                          std::to_string(tokens) + " tokens per micro-batch" + when + ": " + problem);
      }
    }
  }
}

}  // namespace mxablate::trainer
