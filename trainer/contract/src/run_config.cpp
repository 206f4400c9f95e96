// The run config's reading: config.json into a RunConfig, section by section, then its ranges
// (validate.cpp). The toolkit is json_reading.h, the numerics keys quant_keys.h, the writer
// config_writer.cpp.
#include "mxablate/contract/run_config.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "json_reading.h"
#include "quant_keys.h"
#include "validate.h"

namespace mxablate::contract {
namespace {

using nlohmann::json;
using detail::ObjectReader;
using detail::one_line;
using detail::read_layer_quant;
using detail::read_override;
using detail::read_phase;
using detail::read_precision;
using detail::read_value;
using detail::require;
using detail::shown;
using detail::shown_key;

// ---- The model: a preset's name or a shape given key by key (docs/design.md §4).

constexpr const char* kModelShapeKeys = "d_model, n_layers, n_heads, n_kv_heads and ffn_hidden";

// The ranges a shape's numbers must have; what they must satisfy together (head counts, RoPE,
// GEMM blocks, a size a machine holds) is the trainer's check (trainer/plan run_fit.h).
ModelChoice read_model(const json& v, const std::string& path) {
  if (v.is_string()) {
    std::string name;
    read_value(v, path, name);
    return ModelChoice::named(name);
  }
  if (!v.is_object())
    throw ConfigError(path + ": expected a preset's name or a mapping of " + kModelShapeKeys +
                      " (rope_theta and norm_eps optional), got " + shown(v));
  ModelDims d;
  ObjectReader r(v, path);
  for (const auto& [key, field, most] :
       {std::tuple{"d_model", &d.d_model, kMaxModelWidth},
        std::tuple{"n_layers", &d.n_layers, kMaxModelLayers},
        std::tuple{"n_heads", &d.n_heads, kMaxModelWidth},
        std::tuple{"n_kv_heads", &d.n_kv_heads, kMaxModelWidth},
        std::tuple{"ffn_hidden", &d.ffn_hidden, kMaxModelWidth}}) {
    if (!v.contains(key))
      throw ConfigError(r.path(key) + ": required (a custom model gives " + kModelShapeKeys + ")");
    r.get(key, *field);
    require(*field >= 1 && *field <= most, r.path(key),
            "must be in [1, " + std::to_string(most) + "]", *field);
  }
  r.get("rope_theta", d.rope_theta);
  require(d.rope_theta > 0 && d.rope_theta <= 1e12, r.path("rope_theta"), "must be in (0, 1e12]",
          d.rope_theta);
  r.get("norm_eps", d.norm_eps);
  require(d.norm_eps > 0 && d.norm_eps < 1, r.path("norm_eps"), "must be in (0, 1)", d.norm_eps);
  r.finish();
  return ModelChoice::shaped(d);
}

}  // namespace

LayerSettings block_settings(const RunConfig& c) {
  LayerSettings s;
  s.precision = c.precision;
  s.scale_rule = c.quant.scale_rule;
  s.stochastic_rounding = c.quant.stochastic_rounding;
  s.hadamard = c.quant.hadamard;
  s.weight_blocks = c.quant.weight_blocks;
  s.sr_prescale = c.quant.sr_prescale;
  s.dge = c.quant.dge;
  s.occ = c.quant.occ;
  return s;
}

LayerSettings block_settings_in_phase(const RunConfig& c, size_t phase) {
  LayerSettings s = block_settings(c);
  if (phase > 0 && phase <= c.precision_schedule.size())
    s.precision = c.precision_schedule[phase - 1].precision;
  return s;
}

void set_block_settings(RunConfig& c, const LayerSettings& s) {
  c.precision = s.precision;
  c.quant.scale_rule = s.scale_rule;
  c.quant.stochastic_rounding = s.stochastic_rounding;
  c.quant.hadamard = s.hadamard;
  c.quant.weight_blocks = s.weight_blocks;
  c.quant.sr_prescale = s.sr_prescale;
  c.quant.dge = s.dge;
  c.quant.occ = s.occ;
}

std::string to_string(const Recompute& r) {
  if (r.selective && r.mode == Recompute::Mode::kNone) return "selective";
  if (r.selective && r.mode == Recompute::Mode::kFirstBlocks) return "selective+" + std::to_string(r.first_blocks);
  switch (r.mode) {
    case Recompute::Mode::kNone: return "false";
    case Recompute::Mode::kAll: return "true";
    case Recompute::Mode::kAuto: return "auto";
    case Recompute::Mode::kFirstBlocks: break;
  }
  return std::to_string(r.first_blocks);
}

json recompute_json(const Recompute& r) {
  if (r.selective && (r.mode == Recompute::Mode::kNone || r.mode == Recompute::Mode::kFirstBlocks))
    return to_string(r);
  switch (r.mode) {
    case Recompute::Mode::kNone: return false;
    case Recompute::Mode::kAll: return true;
    case Recompute::Mode::kAuto: return "auto";
    case Recompute::Mode::kFirstBlocks: break;
  }
  return r.first_blocks;
}

std::string model_label(const ModelChoice& m) {
  if (m.is_preset()) return m.preset;
  const ModelDims& d = *m.custom;
  std::string label = "d" + std::to_string(d.d_model) + "-L" + std::to_string(d.n_layers) + "-h" +
                      std::to_string(d.n_heads) + "/" + std::to_string(d.n_kv_heads) + "-f" +
                      std::to_string(d.ffn_hidden);
  // The shortest text that reads back as the same double (as JSON writes it, without a bare
  // ".0"): two shapes never share a label, so tables never merge their runs.
  const auto number = [](double x) {
    std::string text = json(x).dump();
    if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
    return text;
  };
  if (d.rope_theta != kDefaultRopeTheta) label += "-rt" + number(d.rope_theta);
  if (d.norm_eps != kDefaultNormEps) label += "-eps" + number(d.norm_eps);
  return label;
}

bool takes_name_or_mapping(std::string_view config_path) { return config_path == kModelKey; }

bool takes_several_types(std::string_view config_path) {
  return config_path == "train.activation_checkpointing";
}

// The reading and the rules; run_config_from_json below makes each refusal one line.
static RunConfig parse_run_config(const json& j) {
  RunConfig c;
  ObjectReader root(j, "");
  root.get("run_id", c.run_id);
  root.get("sweep", c.sweep);
  root.get("arm", c.arm);
  if (const json* m = root.child("model")) c.model = read_model(*m, "model");
  if (const json* d = root.child("data")) {
    ObjectReader r(*d, "data");
    r.get("dataset", c.data.dataset);
    r.get("seq_len", c.data.seq_len);
    r.finish();
  }
  if (const json* t = root.child("train")) {
    ObjectReader r(*t, "train");
    r.get("global_batch_tokens", c.train.global_batch_tokens);
    r.get("micro_batch_tokens", c.train.micro_batch_tokens);
    r.get("max_tokens", c.train.max_tokens);
    r.get("lr", c.train.lr);
    r.get("min_lr_ratio", c.train.min_lr_ratio);
    r.get("warmup_tokens", c.train.warmup_tokens);
    r.get("weight_decay", c.train.weight_decay);
    r.get("beta1", c.train.beta1);
    r.get("beta2", c.train.beta2);
    r.get("eps", c.train.eps);
    r.get("grad_clip", c.train.grad_clip);
    r.get("seed", c.train.seed);
    r.get("data_seed", c.train.data_seed);
    r.get("activation_checkpointing", c.train.activation_checkpointing);
    r.get("cuda_graphs", c.train.cuda_graphs);
    r.get("fused_producers", c.train.fused_producers);
    r.get("deterministic", c.train.deterministic);
    r.finish();
  }
  if (const json* e = root.child("eval")) {
    ObjectReader r(*e, "eval");
    r.get("every_tokens", c.eval.every_tokens);
    r.get("tokens", c.eval.tokens);
    r.finish();
  }
  LayerPatch blocks;
  if (const json* p = root.child("precision")) read_precision(*p, "precision", blocks);
  if (const json* q = root.child("quant")) {
    ObjectReader r(*q, "quant");
    read_layer_quant(r, blocks);
    r.get("gemm_path", c.quant.gemm_path);
    r.get("fp8_scaling", c.quant.fp8_scaling);
    r.get("fp8_amax_history", c.quant.fp8_amax_history);
    r.get("fp8_margin", c.quant.fp8_margin);
    r.get("bf16_first_blocks", c.quant.bf16_first_blocks);
    r.get("bf16_last_blocks", c.quant.bf16_last_blocks);
    r.finish();
  }
  LayerSettings block = block_settings(c);
  blocks.apply_to(block);
  set_block_settings(c, block);
  if (const json* s = root.child("precision_schedule")) {
    if (!s->is_array()) throw ConfigError("precision_schedule: expected a list, got " + shown(*s));
    for (size_t i = 0; i < s->size(); ++i)
      c.precision_schedule.push_back(
          read_phase((*s)[i], "precision_schedule[" + std::to_string(i) + "]",
                     c.precision_schedule.empty() ? nullptr : &c.precision_schedule.back(),
                     c.precision));
  }
  if (const json* o = root.child("overrides")) {
    if (!o->is_array()) throw ConfigError("overrides: expected a list, got " + shown(*o));
    for (size_t i = 0; i < o->size(); ++i)
      c.overrides.push_back(read_override((*o)[i], "overrides[" + std::to_string(i) + "]"));
  }
  if (const json* t = root.child("target")) {
    ObjectReader r(*t, "target");
    r.get("val_loss", c.target.val_loss);
    r.get("stop_at_target", c.target.stop_at_target);
    r.get("stop_hopeless", c.target.stop_hopeless);
    r.get("hopeless_confidence", c.target.hopeless_confidence);
    r.finish();
  }
  if (const json* d = root.child("divergence")) {
    ObjectReader r(*d, "divergence");
    r.get("loss_spike_factor", c.divergence.loss_spike_factor);
    r.get("grad_norm_factor", c.divergence.grad_norm_factor);
    r.get("val_regression", c.divergence.val_regression);
    r.get("fatal_after_spikes", c.divergence.fatal_after_spikes);
    r.finish();
  }
  if (const json* k = root.child("checkpoint")) {
    ObjectReader r(*k, "checkpoint");
    r.get("every_steps", c.checkpoint.every_steps);
    r.get("keep", c.checkpoint.keep);
    r.finish();
  }
  if (const json* t = root.child("telemetry")) {
    ObjectReader r(*t, "telemetry");
    r.get("train_every_steps", c.telemetry.train_every_steps);
    r.get("quant_every_steps", c.telemetry.quant_every_steps);
    r.finish();
  }
  if (const json* p = root.child("parallel")) {
    ObjectReader r(*p, "parallel");
    r.get("data", c.parallel.data);
    r.get("shard", c.parallel.shard);
    r.finish();
  }
  root.get("device", c.device);
  root.get("threads", c.threads);
  root.get("mllog", c.mllog);
  root.finish();
  detail::validate(c);
  return c;
}

int64_t micro_batch_tokens(const RunConfig& c) {
  return c.train.micro_batch_tokens > 0 ? c.train.micro_batch_tokens : c.train.global_batch_tokens;
}

int64_t micro_batches_per_step(const RunConfig& c) {
  return c.train.global_batch_tokens / micro_batch_tokens(c);
}

RunConfig run_config_from_json(const json& j) {
  try {
    return parse_run_config(j);
  } catch (const ConfigError& e) {
    throw ConfigError(one_line(e.what()));
  }
}

RunConfig read_run_config(const std::string& path) {
  // Parsed by the one JSON file reader (json_file.h): a number JSON cannot hold as a double
  // (1e400) is reported at its key like every other bad value, invalid JSON at its byte.
  json j;
  try {
    j = parse_json_file(path);
  } catch (const JsonFileError& e) {
    throw ConfigError(e.what());
  }
  try {
    return run_config_from_json(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

void write_run_config(const std::string& path, const RunConfig& c) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot write the run config");
    out << to_json(c).dump(2) << "\n";
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(path + ": cannot rename the run config into place");
}

}  // namespace mxablate::contract
