#include "mxablate/trainer/plan/run_fit.h"

#include <fmt/format.h>

#include "mxablate/contract/gemm_routing.h"
#include "mxablate/trainer/plan/linear_plan.h"
#include "mxablate/trainer/plan/plan_rules.h"
#include "mxablate/trainer/plan/step_capture.h"

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

ModelShape model_shape(const contract::ModelChoice& model) {
  if (const auto& d = model.custom)
    return shape_from_dims(contract::model_label(model), d->d_model, d->n_layers, d->n_heads,
                           d->n_kv_heads, d->ffn_hidden, d->rope_theta, d->norm_eps);
  const auto preset = find_model_preset(model.preset);
  if (!preset)
    throw ConfigError("model: expected one of " + model_preset_names() + " (or a mapping of "
                      "d_model, n_layers, n_heads, n_kv_heads, ffn_hidden), got " +
                      nlohmann::json(model.preset).dump(-1, ' ', false,
                                                        nlohmann::json::error_handler_t::replace));
  return *preset;
}

void check_model_shape(const ModelShape& s) {
  // The contract bounds every width and the depth; these are what they must satisfy together.
  if (s.d_model <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 ||
      s.ffn_hidden <= 0 || s.d_model > contract::kMaxModelWidth ||
      s.ffn_hidden > contract::kMaxModelWidth || s.n_layers > contract::kMaxModelLayers)
    throw ConfigError("model: " + s.name + " has a width or depth outside [1, " +
                      std::to_string(contract::kMaxModelWidth) + "] / [1, " +
                      std::to_string(contract::kMaxModelLayers) + "]");
  if (s.n_heads % s.n_kv_heads != 0)
    throw ConfigError("model.n_kv_heads: must divide model.n_heads (" + std::to_string(s.n_heads) +
                      ": each KV head serves a whole group of query heads), got " +
                      std::to_string(s.n_kv_heads));
  if (s.d_model % s.n_heads != 0)
    throw ConfigError("model.n_heads: must divide model.d_model (" + std::to_string(s.d_model) +
                      "), got " + std::to_string(s.n_heads));
  if (s.head_dim() % 2 != 0)
    throw ConfigError("model.n_heads: the head dimension d_model / n_heads = " +
                      std::to_string(s.head_dim()) +
                      " must be even (RoPE rotates pairs of dimensions), got " +
                      std::to_string(s.n_heads));
  if (const int64_t n = non_embedding_parameter_count(s); n > kMaxModelParameters)
    throw ConfigError("model: " + s.name + " has " + std::to_string(n) +
                      " parameters outside the embeddings, more than the " +
                      std::to_string(kMaxModelParameters) + " a run may have");
}

ModelShape runnable_model_shape(const RunConfig& c) {
  ModelShape shape = model_shape(c.model);
  check_model_shape(shape);
  return shape;
}

RunLayerPlans check_run_fits(const RunConfig& c, const ModelShape& shape, int64_t vocab_size) {
  check_model_shape(shape);
  // In double: a hostile manifest's vocabulary times d_model may not fit int64.
  const double with_embeddings =
      static_cast<double>(non_embedding_parameter_count(shape)) +
      2.0 * static_cast<double>(vocab_size) * static_cast<double>(shape.d_model);
  if (with_embeddings > static_cast<double>(kMaxModelParameters))
    throw ConfigError(fmt::format("model: {} has {:.4g} parameters with a {}-token vocabulary, "
                                  "more than the {} a run may have",
                                  shape.name, with_embeddings, vocab_size, kMaxModelParameters));
  const std::vector<LinearShape> layers = linear_layers(shape, vocab_size);
  if (const std::string problem = check_override_patterns(c, layers); !problem.empty())
    throw ConfigError(problem);
  if (const contract::Recompute& r = c.train.activation_checkpointing;
      r.mode == contract::Recompute::Mode::kFirstBlocks && r.first_blocks > shape.n_layers)
    throw ConfigError(fmt::format("train.activation_checkpointing: {} blocks, more than the {} of "
                                  "model {} (true recomputes every block)",
                                  r.first_blocks, shape.n_layers, shape.name));
  const int64_t tokens = contract::micro_batch_tokens(c);
  if (c.quant.dge && !contract::is_fp4(c.precision.fprop))
    throw ConfigError("quant.dge: needs precision.fprop mxfp4 or nvfp4 (it differentiates W's "
                      "4-bit quantizer), got " + std::string(contract::to_string(c.precision.fprop)));
  const RunLayerPlans plans = plan_run_layers(c, layers, shape.n_layers);
  for (size_t phase = 0; phase < plans.phases.size(); ++phase) {
    const std::string when =
        phase == 0 ? "" : " from precision_schedule[" + std::to_string(phase - 1) + "]";
    for (size_t i = 0; i < layers.size(); ++i) {
      const LinearShape& l = layers[i];
      const LinearPlan& full = plans.phases[phase][i];
      for (const auto& [key, why] : {std::pair{"quant.dge", check_dge(full)},
                                     std::pair{"quant.occ", check_occ(full)}})
        if (!why.empty()) throw ConfigError(std::string(key) + ": layer " + l.name + when + ": " + why);
      if (l.out_features == 0) continue;  // the LM head when the vocabulary is not known yet
      const LayerSettings settings = layer_settings(c, l, shape.n_layers, phase);
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
  // The GEMM path's rule on a device with every route (docs/design.md §3, "GEMM paths"): what
  // it refuses there, a path demanding FP8 tensor cores for an FP8 GEMM whose shape they cannot
  // take, it refuses on every machine. What a device lacks is the trainer's to find.
  contract::GemmRouteSupport shapes_only;
  shapes_only.fp8_tensorwise = check_fp8_tensor_core_shapes(plans, tokens);
  contract::resolve_gemm_routes(c.quant.gemm_path, shapes_only);
  check_step_capture(c, plans);
  return plans;
}

void check_runnable(const RunConfig& c) { check_run_fits(c, runnable_model_shape(c), 0); }

}  // namespace mxablate::trainer
