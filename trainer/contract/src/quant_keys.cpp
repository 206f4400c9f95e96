// The numerics keys (quant_keys.h): the one reader and the one writer of the precision section
// and the per-layer quant keys.
#include "quant_keys.h"

#include "mxablate/kernels/quant_spec.h"

namespace mxablate::contract::detail {
namespace {

using nlohmann::json;

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

}  // namespace

void read_precision(const json& j, const std::string& path, LayerPatch& p) {
  ObjectReader r(j, path);
  r.get_optional("fprop", p.fprop);
  r.get_optional("dgrad", p.dgrad);
  r.get_optional("wgrad", p.wgrad);
  r.finish();
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

// The identity JSON leaves out the keys added later while they hold their defaults
// (config_writer.cpp, from config_keys.h): here every key is written.
void write_layer_quant(const LayerSettings& s, JsonKeys keys, json& out) {
  const bool examples = keys == JsonKeys::kKeyTree;
  out["scale_rule"] = name_json(kernels::to_string(s.scale_rule));
  out["stochastic_rounding"] = operand_classes_json(s.stochastic_rounding);
  out["hadamard"] = {{"mode", name_json(kernels::to_string(s.hadamard.mode))},
                     {"size", s.hadamard.size},
                     {"gemms", gemms_json(s.hadamard.gemms)}};
  out["weight_blocks"] = name_json(kernels::to_string(s.weight_blocks));
  out["sr_prescale"] = s.sr_prescale;
  out["dge"] = dge_json(examples && !s.dge ? DgeConfig{} : s.dge);
  out["occ"] = occ_json(examples && !s.occ ? OccConfig{} : s.occ);
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

}  // namespace mxablate::contract::detail
