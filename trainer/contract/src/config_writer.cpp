// The run config's writer: config.json as a run's identity (to_json), every key at its value
// (to_json_full) and every key a config may hold (config_key_tree, the recipe schema's source).
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mxablate/contract/config_keys.h"
#include "mxablate/contract/gemm_routing.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/kernels/quant_spec.h"
#include "quant_keys.h"

namespace mxablate::contract {
namespace {

using nlohmann::json;
using detail::full_patch;
using detail::JsonKeys;
using detail::name_json;
using detail::patch_json;
using detail::precision_json;
using detail::write_layer_quant;

// A preset as its name (the JSON of every config before custom shapes: run ids stay the same); a
// shape as a mapping. The key tree shows the mapping.
json model_json(const ModelChoice& m, JsonKeys keys) {
  if (keys == JsonKeys::kKeyTree && m.is_preset())
    return model_json(ModelChoice::shaped({64, 2, 4, 2, 192}), JsonKeys::kFull);
  if (m.is_preset()) return m.preset;
  const ModelDims& d = *m.custom;
  json out{{"d_model", d.d_model},
           {"n_layers", d.n_layers},
           {"n_heads", d.n_heads},
           {"n_kv_heads", d.n_kv_heads},
           {"ffn_hidden", d.ffn_hidden}};
  out["rope_theta"] = d.rope_theta;
  out["norm_eps"] = d.norm_eps;
  return out;
}

// gemm_path as the run's identity (the compact JSON, whose hash is the run id) spells it: a
// config without an FP8 GEMM computes the same bits under auto and emulated (gemm_routing.h), so
// auto is written "emulated" there, as every config was before auto existed, and those runs
// keep their ids. A config with an FP8 GEMM writes "auto": its FP8 GEMMs may run on FP8 tensor
// cores, another computation than the emulated runs of earlier releases, so another id.
GemmPath identity_gemm_path(const RunConfig& c) {
  if (c.quant.gemm_path == GemmPath::kAuto && !has_fp8_gemm(c)) return GemmPath::kEmulated;
  return c.quant.gemm_path;
}

// Every key of `c` at its value; examples (kKeyTree) fill optional sections and lists.
json all_keys_json(const RunConfig& c, JsonKeys keys) {
  const bool examples = keys == JsonKeys::kKeyTree;
  json target = json::object();
  target["val_loss"] = c.target.val_loss ? json(*c.target.val_loss) : json(nullptr);
  target["stop_at_target"] = c.target.stop_at_target;
  target["stop_hopeless"] = c.target.stop_hopeless;
  target["hopeless_confidence"] = c.target.hopeless_confidence;
  json quant = json::object();
  write_layer_quant(block_settings(c), keys, quant);
  quant["gemm_path"] = name_json(to_string(keys == JsonKeys::kCompact ? identity_gemm_path(c) : c.quant.gemm_path));
  quant["fp8_scaling"] = name_json(to_string(c.quant.fp8_scaling));
  quant["fp8_amax_history"] = c.quant.fp8_amax_history;
  quant["fp8_margin"] = c.quant.fp8_margin;
  quant["bf16_first_blocks"] = c.quant.bf16_first_blocks;
  quant["bf16_last_blocks"] = c.quant.bf16_last_blocks;
  json out{
      {"run_id", c.run_id},
      {"sweep", c.sweep},
      {"arm", c.arm},
      {"model", model_json(c.model, keys)},
      {"data", {{"dataset", c.data.dataset}, {"seq_len", c.data.seq_len}}},
      {"train",
       {{"global_batch_tokens", c.train.global_batch_tokens},
        {"micro_batch_tokens", c.train.micro_batch_tokens},
        {"max_tokens", c.train.max_tokens},
        {"lr", c.train.lr},
        {"min_lr_ratio", c.train.min_lr_ratio},
        {"warmup_tokens", c.train.warmup_tokens},
        {"weight_decay", c.train.weight_decay},
        {"beta1", c.train.beta1},
        {"beta2", c.train.beta2},
        {"eps", c.train.eps},
        {"grad_clip", c.train.grad_clip},
        {"seed", c.train.seed},
        {"data_seed", c.train.data_seed}}},
      {"eval", {{"every_tokens", c.eval.every_tokens}, {"tokens", c.eval.tokens}}},
      {"precision", precision_json(c.precision)},
      {"quant", quant},
      {"target", target},
      {"divergence",
       {{"loss_spike_factor", c.divergence.loss_spike_factor},
        {"grad_norm_factor", c.divergence.grad_norm_factor},
        {"val_regression", c.divergence.val_regression},
        {"fatal_after_spikes", c.divergence.fatal_after_spikes}}},
      {"checkpoint", {{"every_steps", c.checkpoint.every_steps}, {"keep", c.checkpoint.keep}}},
      {"telemetry",
       {{"train_every_steps", c.telemetry.train_every_steps},
        {"quant_every_steps", c.telemetry.quant_every_steps}}},
      {"device", name_json(to_string(c.device))},
      {"threads", c.threads},
      {"mllog", c.mllog},
      {"parallel", {{"data", c.parallel.data}, {"shard", name_json(to_string(c.parallel.shard))}}},
  };
  out["train"]["activation_checkpointing"] = recompute_json(c.train.activation_checkpointing);
  out["train"]["cuda_graphs"] = name_json(to_string(c.train.cuda_graphs));
  out["train"]["fused_producers"] = c.train.fused_producers;
  out["train"]["deterministic"] = c.train.deterministic;
  {
    json phases = json::array();
    for (const PrecisionPhase& p : c.precision_schedule)
      phases.push_back({{"at_fraction", p.at_fraction}, {"precision", precision_json(p.precision)}});
    if (examples && phases.empty())
      phases.push_back({{"at_fraction", 0.5}, {"precision", precision_json(c.precision)}});
    out["precision_schedule"] = phases;
  }
  {
    json overrides = json::array();
    for (const LayerOverride& o : c.overrides) {
      json item = patch_json(o.patch);
      item["layers"] = o.layers;
      overrides.push_back(item);
    }
    if (examples && overrides.empty()) {
      json item = patch_json(full_patch());
      // An override's quant section takes only the per-layer keys: the example shows all of them.
      write_layer_quant(LayerSettings{}, JsonKeys::kKeyTree, item["quant"]);
      item["layers"] = "blocks.0.*";
      overrides.push_back(item);
    }
    out["overrides"] = overrides;
  }
  return out;
}

// Every value at its default: RunConfig's, with a model shape at ModelDims' (a preset has no
// shape keys).
const json& default_values() {
  static const json defaults = [] {
    RunConfig c;
    c.model = ModelChoice::shaped(ModelDims{});
    return all_keys_json(c, JsonKeys::kFull);
  }();
  return defaults;
}

// Removes the key at `path` ("quant.dge") from `section` where it holds the same value as in
// `defaults`, and a section that leaves empty (parallel). A path `section` does not hold as
// mappings (a preset's model) is left as it is.
void drop_if_default(json& section, const json& defaults, std::string_view path) {
  if (!section.is_object() || !defaults.is_object()) return;
  const size_t dot = path.find('.');
  const std::string key(path.substr(0, dot));
  const auto it = section.find(key);
  const auto fallback = defaults.find(key);
  if (it == section.end() || fallback == defaults.end()) return;
  if (dot == std::string_view::npos) {
    if (*it == *fallback) section.erase(it);
    return;
  }
  const bool was_empty = it->empty();
  drop_if_default(*it, *fallback, path.substr(dot + 1));
  if (it->is_object() && it->empty() && !was_empty) section.erase(it);
}

json config_json(const RunConfig& c, JsonKeys keys) {
  json out = all_keys_json(c, keys);
  if (keys != JsonKeys::kCompact) return out;
  // The identity JSON: keys added after the first release (config_keys.h, kWrittenWhenSet) only
  // when they differ from their defaults, so a run's id (a hash of this JSON) stays the same
  // across releases that add settings (docs/design.md §2, "Identity and resumption").
  for (const ConfigKey& k : kConfigKeys)
    if (k.has(kWrittenWhenSet)) drop_if_default(out, default_values(), k.path);
  return out;
}

}  // namespace

nlohmann::json to_json(const RunConfig& c) { return config_json(c, JsonKeys::kCompact); }

nlohmann::json to_json_full(const RunConfig& c) { return config_json(c, JsonKeys::kFull); }

nlohmann::json config_key_tree() { return config_json(RunConfig{}, JsonKeys::kKeyTree); }

}  // namespace mxablate::contract
