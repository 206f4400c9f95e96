#include "mxablate/contract/run_config.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "mxablate/contract/gemm_route.h"
#include "mxablate/kernels/quant_spec.h"

namespace mxablate::contract {
namespace {

using nlohmann::json;

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// A value as it appears in an error message: JSON text, with invalid UTF-8 replaced (a config
// built in-process from YAML may carry any bytes) and non-finite numbers spelled out (JSON would
// print them as null).
std::string shown(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    const double d = v.get<double>();
    return std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

void read_value(const json& v, const std::string& path, double& out) {
  if (!v.is_number()) throw ConfigError(path + ": expected a number, got " + shown(v));
  out = v.get<double>();
  if (!std::isfinite(out)) throw ConfigError(path + ": must be a finite number, got " + shown(v));
}

void read_value(const json& v, const std::string& path, int64_t& out) {
  // YAML writes 100e6 as a float; accept any number with an integral value.
  if (!v.is_number()) throw ConfigError(path + ": expected an integer, got " + shown(v));
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d)
      throw ConfigError(path + ": expected an integer, got " + shown(v));
    if (std::fabs(d) > kLargestFloatInteger)
      throw ConfigError(path + ": out of range (beyond 9e15 write an integer digit by digit, "
                        "without an exponent), got " + shown(v));
    out = static_cast<int64_t>(d);
  } else if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw ConfigError(path + ": out of range (an integer from -9223372036854775808 to "
                        "9223372036854775807), got " + shown(v));
    out = static_cast<int64_t>(v.get<uint64_t>());
  } else {
    out = v.get<int64_t>();
  }
}

void read_value(const json& v, const std::string& path, int& out) {
  int64_t wide = 0;
  read_value(v, path, wide);
  if (wide < -(1ll << 31) || wide >= (1ll << 31))
    throw ConfigError(path + ": out of range (an integer from -2147483648 to 2147483647), got " +
                      v.dump());
  out = static_cast<int>(wide);
}

void read_value(const json& v, const std::string& path, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return;
  }
  int64_t wide = 0;
  read_value(v, path, wide);
  if (wide < 0) throw ConfigError(path + ": must be >= 0, got " + shown(v));
  out = static_cast<uint64_t>(wide);
}

void read_value(const json& v, const std::string& path, bool& out) {
  if (!v.is_boolean()) throw ConfigError(path + ": expected true or false, got " + shown(v));
  out = v.get<bool>();
}

// Strings end up in file names, event logs and SQLite: they must be valid UTF-8 without NULs.
void read_value(const json& v, const std::string& path, std::string& out) {
  if (!v.is_string()) throw ConfigError(path + ": expected a string, got " + shown(v));
  try {
    (void)v.dump();  // throws on invalid UTF-8
  } catch (const json::type_error&) {
    throw ConfigError(path + ": not valid UTF-8, got " + shown(v));
  }
  out = v.get<std::string>();
  if (out.find('\0') != std::string::npos)
    throw ConfigError(path + ": contains a NUL character, got " + shown(v));
}


void read_value(const json& v, const std::string& path, std::optional<double>& out) {
  if (v.is_null()) {
    out.reset();
    return;
  }
  double d = 0;
  read_value(v, path, d);
  out = d;
}

// A name from a setting's table: "expected one of a, b, c, got "x"".
template <typename E>
void read_name(const json& v, const std::string& path, E& out,
               std::optional<E> (*parse)(std::string_view), std::string (*names)()) {
  std::string s;
  read_value(v, path, s);
  const std::optional<E> parsed = parse(s);
  if (!parsed) throw ConfigError(path + ": expected one of " + names() + ", got " + shown(v));
  out = *parsed;
}

template <typename E>
void read_name_set(const json& v, const std::string& path, EnumSet<E>& out,
                   std::optional<E> (*parse)(std::string_view), std::string (*names)()) {
  if (!v.is_array()) throw ConfigError(path + ": expected a list, got " + shown(v));
  out = {};
  for (size_t i = 0; i < v.size(); ++i) {
    E e{};
    read_name(v[i], path + "[" + std::to_string(i) + "]", e, parse, names);
    out.add(e);
  }
}

void read_value(const json& v, const std::string& path, GemmPrecision& out) {
  read_name(v, path, out, parse_gemm_precision, gemm_precision_names);
}
void read_value(const json& v, const std::string& path, ScaleRule& out) {
  read_name(v, path, out, kernels::parse_scale_rule, kernels::scale_rule_names);
}
void read_value(const json& v, const std::string& path, HadamardMode& out) {
  read_name(v, path, out, kernels::parse_hadamard_mode, kernels::hadamard_mode_names);
}
void read_value(const json& v, const std::string& path, kernels::BlockShape& out) {
  read_name(v, path, out, kernels::parse_block_shape, kernels::block_shape_names);
}
void read_value(const json& v, const std::string& path, GemmPath& out) {
  read_name(v, path, out, parse_gemm_path, gemm_path_names);
}
void read_value(const json& v, const std::string& path, Device& out) {
  read_name(v, path, out, parse_device, device_names);
}
void read_value(const json& v, const std::string& path, ShardLevel& out) {
  read_name(v, path, out, parse_shard_level, shard_level_names);
}
void read_value(const json& v, const std::string& path, OperandClassSet& out) {
  read_name_set(v, path, out, parse_operand_class, operand_class_names);
}
void read_value(const json& v, const std::string& path, GemmSet& out) {
  read_name_set(v, path, out, kernels::parse_gemm_kind, kernels::gemm_kind_names);
}

// A message as one line: a value quoted in it may hold control characters (a string from YAML),
// shown as escapes.
std::string one_line(const std::string& m) {
  std::string out;
  for (const char ch : m) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u != 0x7f) {
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return out;
}

// An unknown key as it appears in an error message: as is when it is plain, else quoted.
std::string shown_key(const std::string& key) {
  const std::string quoted = shown(json(key));
  return quoted.size() == key.size() + 2 && quoted.substr(1, key.size()) == key ? key : quoted;
}

// Reads the known keys of one JSON object and rejects the rest.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object())
      throw ConfigError((path_.empty() ? "config" : path_) + ": expected an object, got " +
                        shown(j_));
  }
  template <typename T>
  void get(const std::string& key, T& out) {
    seen_.insert(key);
    const auto it = j_.find(key);
    if (it != j_.end()) read_value(*it, join(path_, key), out);
  }
  // Sets `out` only when the key is present (a patch records what it sets).
  template <typename T>
  void get_optional(const std::string& key, std::optional<T>& out) {
    seen_.insert(key);
    const auto it = j_.find(key);
    if (it == j_.end()) return;
    T value{};
    read_value(*it, join(path_, key), value);
    out = value;
  }
  const json* child(const std::string& key) {
    seen_.insert(key);
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  std::string path(const std::string& key) const { return join(path_, key); }
  void finish() const {
    for (const auto& item : j_.items())
      if (!seen_.count(item.key()))
        throw ConfigError(join(path_, shown_key(item.key())) + ": unknown key");
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

void require(bool ok, const std::string& path, const std::string& what, const json& got) {
  if (!ok) throw ConfigError(path + ": " + what + ", got " + shown(got));
}

// ---- The model: a preset's name or a shape given key by key (docs/design.md §4).

constexpr const char* kModelShapeKeys = "d_model, n_layers, n_heads, n_kv_heads and ffn_hidden";

// The ranges a shape's numbers must have; what they must satisfy together (head counts, RoPE,
// GEMM blocks, a size a machine holds) is the trainer's check (trainer/core run_fit.h).
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

// Limits beyond the planner's runnable rules (validate_runnable): quantization keys number steps
// in 32 bits (the last value reserved); sequences and batches no machine holds; learning rates
// and epsilons that are typing mistakes. Non-finite numbers never get this far: read_value
// refuses them.
void validate_limits(const RunConfig& c) {
  constexpr int64_t kMaxSteps = 0xFFFFFFFEll;
  const TrainConfig& t = c.train;
  require(t.global_batch_tokens <= (int64_t{1} << 40), "train.global_batch_tokens",
          "must be at most 2^40", t.global_batch_tokens);
  // Budgets beyond 9e15 tokens are validate_runnable's to refuse.
  if (t.global_batch_tokens > 0 && t.max_tokens <= kLargestFloatInteger)
    require(std::ceil(t.max_tokens / static_cast<double>(t.global_batch_tokens)) <=
                static_cast<double>(kMaxSteps),
            "train.max_tokens",
            "needs more than " + std::to_string(kMaxSteps) +
                " optimizer steps of train.global_batch_tokens (the most a run can number)",
            t.max_tokens);
  require(t.lr <= 10, "train.lr", "must be at most 10", t.lr);
  require(t.eps <= 1, "train.eps", "must be at most 1", t.eps);
  if (c.target.val_loss)
    require(*c.target.val_loss > 0, "target.val_loss", "must be > 0 (or null)", *c.target.val_loss);
}

// Values that pass the per-key rules above yet make every attempt of the trainer fail or never
// end: a thread pool of a million threads, a decoupled weight decay whose step lr * weight_decay
// reaches 1 (weights flip sign or overflow to inf on the first step), token counts whose step
// arithmetic (int64 steps) would overflow, a GPU-only GEMM path on the CPU.
void validate_runnable(const RunConfig& c) {
  constexpr int kMaxThreads = 1024;
  require(c.threads >= 0 && c.threads <= kMaxThreads, "threads", "must be in [0, 1024] (0: the library default)",
          c.threads);
  require(c.train.weight_decay >= 0, "train.weight_decay", "must be >= 0",
          c.train.weight_decay);
  require(c.train.lr * c.train.weight_decay < 1, "train.weight_decay",
          "must keep train.lr * train.weight_decay below 1 (the decay step; lr " +
              json(c.train.lr).dump() + ")",
          c.train.weight_decay);
  for (const auto& [name, value] : {std::pair{"train.max_tokens", c.train.max_tokens},
                                    std::pair{"train.warmup_tokens", c.train.warmup_tokens},
                                    std::pair{"eval.every_tokens", c.eval.every_tokens},
                                    std::pair{"eval.tokens", c.eval.tokens}})
    require(value <= kLargestFloatInteger, name, "must be at most 9e15", value);
  // The trainer resolves the GEMM path before the first step, whatever the precisions.
  if (c.quant.gemm_path == GemmPath::kFP8 && c.device != Device::kCUDA)
    throw ConfigError("quant.gemm_path: \"fp8\" (FP8 and MXFP4 GEMMs on FP8 tensor cores) "
                      "needs device: cuda, this run's device is \"" +
                      std::string(to_string(c.device)) + "\"");
}

// ---- The numerics sections: one reader and one writer serve the base sections, the schedule's
// phases and the overrides, so a key means the same wherever it appears.

void read_precision(const json& j, const std::string& path, LayerPatch& p) {
  ObjectReader r(j, path);
  r.get_optional("fprop", p.fprop);
  r.get_optional("dgrad", p.dgrad);
  r.get_optional("wgrad", p.wgrad);
  r.finish();
}

std::optional<DgeConfig> read_dge(const json& v, const std::string& path) {
  if (v.is_null()) return std::nullopt;  // `dge: null` turns it off (e.g. in an arm)
  DgeConfig d;
  ObjectReader r(v, path);
  r.get("k", d.k);
  r.get("clamp", d.clamp);
  r.finish();
  require(d.k > 0, path + ".k", "must be > 0", d.k);
  require(d.clamp > 0, path + ".clamp", "must be > 0", d.clamp);
  return d;
}

std::optional<OccConfig> read_occ(const json& v, const std::string& path) {
  if (v.is_null()) return std::nullopt;
  OccConfig o;
  ObjectReader r(v, path);
  r.get("quantile", o.quantile);
  r.finish();
  require(o.quantile > 0 && o.quantile <= 1, path + ".quantile", "must be in (0, 1]", o.quantile);
  return o;
}

// The per-layer keys of a quant section.
void read_layer_quant(ObjectReader& r, LayerPatch& p) {
  r.get_optional("scale_rule", p.scale_rule);
  r.get_optional("stochastic_rounding", p.stochastic_rounding);
  if (const json* h = r.child("hadamard")) {
    ObjectReader hr(*h, r.path("hadamard"));
    hr.get_optional("mode", p.hadamard_mode);
    hr.get_optional("size", p.hadamard_size);
    if (p.hadamard_size)
      require(kernels::is_valid_hadamard_size(*p.hadamard_size), hr.path("size"),
              "must be one of 16, 32, 64, 128", *p.hadamard_size);
    hr.get_optional("gemms", p.hadamard_gemms);
    hr.finish();
  }
  r.get_optional("weight_blocks", p.weight_blocks);
  r.get_optional("sr_prescale", p.sr_prescale);
  // The kernels' range (kernels::kMinSrPrescale keeps a GEMM's 1 / (pa pb) a finite float).
  if (p.sr_prescale)
    require(*p.sr_prescale >= kernels::kMinSrPrescale && *p.sr_prescale <= 1,
            r.path("sr_prescale"), "must be in [2^-24, 1] (1: no pre-scale)", *p.sr_prescale);
  if (const json* d = r.child("dge")) p.dge = read_dge(*d, r.path("dge"));
  if (const json* o = r.child("occ")) p.occ = read_occ(*o, r.path("occ"));
}

LayerOverride read_override(const json& v, const std::string& path) {
  ObjectReader r(v, path);
  LayerOverride o;
  if (!v.contains("layers"))
    throw ConfigError(path + ".layers: required (a pattern over layer names, e.g. \"blocks.0.*\")");
  r.get("layers", o.layers);
  require(!o.layers.empty(), path + ".layers", "must not be empty", o.layers);
  if (const json* p = r.child("precision")) read_precision(*p, r.path("precision"), o.patch);
  if (const json* q = r.child("quant")) {
    ObjectReader qr(*q, r.path("quant"));
    read_layer_quant(qr, o.patch);
    qr.finish();
  }
  r.finish();
  if (o.patch == LayerPatch{})
    throw ConfigError(path + ": sets nothing (give it precision or quant keys)");
  return o;
}

PrecisionPhase read_phase(const json& v, const std::string& path, const PrecisionPhase* previous,
                          const PrecisionConfig& base) {
  ObjectReader r(v, path);
  PrecisionPhase phase;
  if (!v.contains("at_fraction"))
    throw ConfigError(path + ".at_fraction: required (the fraction of the token budget)");
  r.get("at_fraction", phase.at_fraction);
  require(phase.at_fraction > 0 && phase.at_fraction < 1, path + ".at_fraction",
          "must be in (0, 1)", phase.at_fraction);
  if (previous)
    require(phase.at_fraction > previous->at_fraction, path + ".at_fraction",
            "must be greater than the previous phase's " + json(previous->at_fraction).dump(),
            phase.at_fraction);
  const json* p = r.child("precision");
  if (!p) throw ConfigError(path + ".precision: required");
  LayerPatch patch;
  read_precision(*p, r.path("precision"), patch);
  LayerSettings s;
  s.precision = previous ? previous->precision : base;
  patch.apply_to(s);
  phase.precision = s.precision;
  r.finish();
  return phase;
}

json name_json(std::string_view name) { return std::string(name); }

json precision_json(const PrecisionConfig& p) {
  return {{"fprop", name_json(to_string(p.fprop))},
          {"dgrad", name_json(to_string(p.dgrad))},
          {"wgrad", name_json(to_string(p.wgrad))}};
}

json operand_classes_json(const OperandClassSet& set) {
  json out = json::array();
  for (OperandClass c : kAllOperandClasses)
    if (set.has(c)) out.push_back(name_json(to_string(c)));
  return out;
}

json gemms_json(const GemmSet& set) {
  json out = json::array();
  for (GemmKind g : kAllGemms)
    if (set.has(g)) out.push_back(name_json(kernels::to_string(g)));
  return out;
}

json dge_json(const std::optional<DgeConfig>& d) {
  return d ? json{{"k", d->k}, {"clamp", d->clamp}} : json(nullptr);
}

json occ_json(const std::optional<OccConfig>& o) {
  return o ? json{{"quantile", o->quantile}} : json(nullptr);
}

// How much a config's JSON holds: kCompact leaves keys added after the first release out when
// they hold their defaults (run ids stay stable); kFull writes every key at its value; kKeyTree
// also fills optional sections and lists with example values (the recipe schema).
enum class JsonKeys { kCompact, kFull, kKeyTree };

// The per-layer keys of a quant section.
void write_layer_quant(const LayerSettings& s, JsonKeys keys, json& out) {
  const LayerSettings defaults;
  const bool all_keys = keys != JsonKeys::kCompact;
  const bool examples = keys == JsonKeys::kKeyTree;
  out["scale_rule"] = name_json(kernels::to_string(s.scale_rule));
  out["stochastic_rounding"] = operand_classes_json(s.stochastic_rounding);
  out["hadamard"] = {{"mode", name_json(kernels::to_string(s.hadamard.mode))},
                     {"size", s.hadamard.size},
                     {"gemms", gemms_json(s.hadamard.gemms)}};
  if (all_keys || s.weight_blocks != defaults.weight_blocks)
    out["weight_blocks"] = name_json(kernels::to_string(s.weight_blocks));
  if (all_keys || s.sr_prescale != defaults.sr_prescale) out["sr_prescale"] = s.sr_prescale;
  if (all_keys || s.dge) out["dge"] = dge_json(examples && !s.dge ? DgeConfig{} : s.dge);
  if (all_keys || s.occ) out["occ"] = occ_json(examples && !s.occ ? OccConfig{} : s.occ);
}

json patch_json(const LayerPatch& p) {
  json precision = json::object();
  if (p.fprop) precision["fprop"] = name_json(to_string(*p.fprop));
  if (p.dgrad) precision["dgrad"] = name_json(to_string(*p.dgrad));
  if (p.wgrad) precision["wgrad"] = name_json(to_string(*p.wgrad));
  json quant = json::object();
  if (p.scale_rule) quant["scale_rule"] = name_json(kernels::to_string(*p.scale_rule));
  if (p.stochastic_rounding) quant["stochastic_rounding"] = operand_classes_json(*p.stochastic_rounding);
  json hadamard = json::object();
  if (p.hadamard_mode) hadamard["mode"] = name_json(kernels::to_string(*p.hadamard_mode));
  if (p.hadamard_size) hadamard["size"] = *p.hadamard_size;
  if (p.hadamard_gemms) hadamard["gemms"] = gemms_json(*p.hadamard_gemms);
  if (!hadamard.empty()) quant["hadamard"] = hadamard;
  if (p.weight_blocks) quant["weight_blocks"] = name_json(kernels::to_string(*p.weight_blocks));
  if (p.sr_prescale) quant["sr_prescale"] = *p.sr_prescale;
  if (p.dge) quant["dge"] = dge_json(*p.dge);
  if (p.occ) quant["occ"] = occ_json(*p.occ);
  json out = json::object();
  if (!precision.empty()) out["precision"] = precision;
  if (!quant.empty()) out["quant"] = quant;
  return out;
}

// A patch setting every per-layer key: the schema's example of an override.
LayerPatch full_patch() {
  const LayerSettings d;
  LayerPatch p;
  p.fprop = d.precision.fprop;
  p.dgrad = d.precision.dgrad;
  p.wgrad = d.precision.wgrad;
  p.scale_rule = d.scale_rule;
  p.stochastic_rounding = d.stochastic_rounding;
  p.hadamard_mode = d.hadamard.mode;
  p.hadamard_size = d.hadamard.size;
  p.hadamard_gemms = d.hadamard.gemms;
  p.weight_blocks = d.weight_blocks;
  p.sr_prescale = d.sr_prescale;
  p.dge = DgeConfig{};
  p.occ = OccConfig{};
  return p;
}


// A preset as its name (the JSON of every config before custom shapes: run ids stay the same); a
// shape as a mapping, rope_theta and norm_eps only when they differ from their defaults (or in
// kFull). The key tree shows the mapping with every key.
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
  const bool all_keys = keys != JsonKeys::kCompact;
  if (all_keys || d.rope_theta != kDefaultRopeTheta) out["rope_theta"] = d.rope_theta;
  if (all_keys || d.norm_eps != kDefaultNormEps) out["norm_eps"] = d.norm_eps;
  return out;
}

// gemm_path as the run's identity (the compact JSON, whose hash is the run id) spells it: a
// config without an FP8 GEMM computes the same bits under auto and emulated (gemm_route.h), so
// auto is written "emulated" there, as every config was before auto existed, and those runs
// keep their ids. A config with an FP8 GEMM writes "auto": its FP8 GEMMs may run on FP8 tensor
// cores, another computation than the emulated runs of earlier releases, so another id.
GemmPath identity_gemm_path(const RunConfig& c) {
  if (c.quant.gemm_path == GemmPath::kAuto && !has_fp8_gemm(c)) return GemmPath::kEmulated;
  return c.quant.gemm_path;
}

json config_json(const RunConfig& c, JsonKeys keys) {
  const bool all_keys = keys != JsonKeys::kCompact;
  const bool examples = keys == JsonKeys::kKeyTree;
  json target = json::object();
  target["val_loss"] = c.target.val_loss ? json(*c.target.val_loss) : json(nullptr);
  target["stop_at_target"] = c.target.stop_at_target;
  json quant = json::object();
  write_layer_quant(block_settings(c), keys, quant);
  quant["gemm_path"] = name_json(to_string(keys == JsonKeys::kCompact ? identity_gemm_path(c) : c.quant.gemm_path));
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
  };
  if (all_keys || c.parallel.data != ParallelConfig{}.data)
    out["parallel"] = {{"data", c.parallel.data}};
  if (all_keys || c.parallel.shard != ParallelConfig{}.shard)
    out["parallel"]["shard"] = name_json(to_string(c.parallel.shard));
  if (all_keys || c.train.activation_checkpointing)
    out["train"]["activation_checkpointing"] = c.train.activation_checkpointing;
  if (all_keys || !c.precision_schedule.empty()) {
    json phases = json::array();
    for (const PrecisionPhase& p : c.precision_schedule)
      phases.push_back({{"at_fraction", p.at_fraction}, {"precision", precision_json(p.precision)}});
    if (examples && phases.empty())
      phases.push_back({{"at_fraction", 0.5}, {"precision", precision_json(c.precision)}});
    out["precision_schedule"] = phases;
  }
  if (all_keys || !c.overrides.empty()) {
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

void validate(const RunConfig& c) {
  require(c.data.seq_len > 0, "data.seq_len", "must be > 0", c.data.seq_len);
  require(c.data.seq_len <= (int64_t{1} << 20), "data.seq_len", "must be at most 1048576",
          c.data.seq_len);
  const TrainConfig& t = c.train;
  require(t.global_batch_tokens > 0 && t.global_batch_tokens % c.data.seq_len == 0,
          "train.global_batch_tokens", "must be a positive multiple of data.seq_len",
          t.global_batch_tokens);
  constexpr int kMaxRanks = 4096;
  require(c.parallel.data >= 1 && c.parallel.data <= kMaxRanks, "parallel.data",
          "must be in [1, 4096] (the ranks of one run)", c.parallel.data);
  require(t.micro_batch_tokens >= 0 && (t.micro_batch_tokens == 0 ||
                                        (t.micro_batch_tokens % c.data.seq_len == 0 &&
                                         t.global_batch_tokens % t.micro_batch_tokens == 0)),
          "train.micro_batch_tokens",
          "must be 0 or a multiple of data.seq_len dividing train.global_batch_tokens",
          t.micro_batch_tokens);
  // The micro-batch is set explicitly for several ranks: it decides where the quantizers' blocks and
  // random streams begin (docs/design.md §4, "Data-parallel runs"), so the same run on one rank is the same config.
  if (c.parallel.data > 1)
    require(micro_batches_per_step(c) % c.parallel.data == 0, "parallel.data",
            "must divide the step's " + std::to_string(micro_batches_per_step(c)) +
                " micro-batches (train.global_batch_tokens / train.micro_batch_tokens; set "
                "train.micro_batch_tokens to split a step among the ranks)",
            c.parallel.data);
  if (c.parallel.shard != ShardLevel::kNone && c.parallel.data < 2)
    throw ConfigError("parallel.shard: \"" + std::string(to_string(c.parallel.shard)) +
                      "\" splits state over the ranks of parallel.data, which is " +
                      std::to_string(c.parallel.data) + " (set parallel.data to 2 or more, or shard: none)");
  require(t.max_tokens > 0, "train.max_tokens", "must be > 0", t.max_tokens);
  require(t.lr > 0, "train.lr", "must be > 0", t.lr);
  require(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1, "train.min_lr_ratio", "must be in [0, 1]",
          t.min_lr_ratio);
  require(t.warmup_tokens >= 0, "train.warmup_tokens", "must be >= 0", t.warmup_tokens);
  require(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "must be in [0, 1)", t.beta1);
  require(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "must be in [0, 1)", t.beta2);
  require(t.eps > 0, "train.eps", "must be > 0", t.eps);
  require(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 disables)", t.grad_clip);
  validate_limits(c);
  require(c.eval.every_tokens > 0, "eval.every_tokens", "must be > 0", c.eval.every_tokens);
  require(c.eval.tokens >= c.data.seq_len, "eval.tokens", "must be at least one sequence",
          c.eval.tokens);
  require(c.quant.bf16_first_blocks >= 0, "quant.bf16_first_blocks", "must be >= 0",
          c.quant.bf16_first_blocks);
  require(c.quant.bf16_last_blocks >= 0, "quant.bf16_last_blocks", "must be >= 0",
          c.quant.bf16_last_blocks);
  require(c.divergence.loss_spike_factor > 1, "divergence.loss_spike_factor", "must be > 1",
          c.divergence.loss_spike_factor);
  require(c.divergence.grad_norm_factor > 1, "divergence.grad_norm_factor", "must be > 1",
          c.divergence.grad_norm_factor);
  require(c.divergence.val_regression >= 0, "divergence.val_regression", "must be >= 0",
          c.divergence.val_regression);
  require(c.divergence.fatal_after_spikes >= 0, "divergence.fatal_after_spikes", "must be >= 0",
          c.divergence.fatal_after_spikes);
  require(c.checkpoint.every_steps >= 0, "checkpoint.every_steps", "must be >= 0",
          c.checkpoint.every_steps);
  require(c.checkpoint.keep >= 1, "checkpoint.keep", "must be >= 1", c.checkpoint.keep);
  require(c.telemetry.train_every_steps >= 1, "telemetry.train_every_steps", "must be >= 1",
          c.telemetry.train_every_steps);
  require(c.telemetry.quant_every_steps >= 0, "telemetry.quant_every_steps", "must be >= 0",
          c.telemetry.quant_every_steps);
  validate_runnable(c);
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

nlohmann::json to_json(const RunConfig& c) { return config_json(c, JsonKeys::kCompact); }

nlohmann::json to_json_full(const RunConfig& c) { return config_json(c, JsonKeys::kFull); }

nlohmann::json config_key_tree() { return config_json(RunConfig{}, JsonKeys::kKeyTree); }

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
  validate(c);
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

namespace {

// nlohmann's parse messages quote the input they stopped at, which may be any bytes: keep the
// message one printable ASCII line, and drop the "[json.exception.…] " prefix.
std::string parse_message(const json::exception& e) {
  std::string m = e.what();
  if (const size_t p = m.find("] "); m.rfind("[json.exception.", 0) == 0 && p != std::string::npos)
    m.erase(0, p + 2);
  for (char& ch : m)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
  return m;
}

}  // namespace

RunConfig read_run_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the run config");
  // The key path being parsed, so that a number JSON cannot hold as a double (1e400) is
  // reported at its key like every other bad value.
  std::vector<std::string> keys;
  const json::parser_callback_t track = [&keys](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string()) keys.back() = parsed.get<std::string>();
        break;
      case json::parse_event_t::value: break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(in, track);
  } catch (const json::out_of_range& e) {
    std::string where;
    for (const auto& k : keys)
      if (!k.empty()) where += (where.empty() ? "" : ".") + shown_key(k);
    throw ConfigError(path + ": " + (where.empty() ? std::string("config") : where) + ": " +
                      parse_message(e) + " (not a finite double)");
  } catch (const json::exception& e) {
    throw ConfigError(path + ": not valid JSON (" + parse_message(e) + ")");
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
