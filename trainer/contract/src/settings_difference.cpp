#include "mxablate/contract/settings_difference.h"

#include <algorithm>

#include "mxablate/contract/config_keys.h"
#include "mxablate/contract/gemm_routing.h"

namespace mxablate::contract {
namespace {

using nlohmann::json;

// Keys that do not describe an arm (config_keys.h: the run's name, the target, seeds, where it
// runs); the model does, but is compared as its label, below (a preset and a shape are different
// JSON types). A key without a row is compared.
bool left_out(const std::string& key) {
  if (key == kModelKey) return true;
  const ConfigKey* row = config_key(key);
  return row && !row->has(kDescribesArm);
}

// A value as compact text: names bare, numbers as JSON writes them, null as "off", mappings as
// "(k=v, …)", lists as "[a, b]".
std::string text_of(const json& v) {
  if (v.is_null()) return "off";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) {
    std::string out = "(";
    for (const auto& item : v.items())
      out += (out.size() > 1 ? ", " : "") + item.key() + "=" + text_of(item.value());
    return out + ")";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (const auto& e : v) out += (out.size() > 1 ? ", " : "") + text_of(e);
    return out + "]";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Walks both trees: mappings on both sides are compared key by key, anything else as a whole
// (a list, a number, a mapping against null).
void compare(const json& run, const json& reference, const std::string& path,
             std::vector<SettingDifference>& out) {
  if (!path.empty() && left_out(path)) return;
  if (run.is_object() && reference.is_object() && path != "quant.hadamard") {
    for (const auto& item : run.items()) {
      const std::string key = path.empty() ? item.key() : path + "." + item.key();
      const auto other = reference.find(item.key());
      compare(item.value(), other == reference.end() ? json() : *other, key, out);
    }
    return;
  }
  if (run != reference) out.push_back({path, text_of(run), run});
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A precision section: "bf16" when all three GEMMs agree, else "F mxfp4 D bf16 W bf16" with only
// the GEMMs it names.
std::string precision_text(const json& p) {
  if (!p.is_object()) return text_of(p);
  const json f = p.value("fprop", json()), d = p.value("dgrad", json()), w = p.value("wgrad", json());
  if (p.size() == 3 && f == d && d == w) return text_of(f);
  std::string out;
  for (const auto& [key, letter] : {std::pair{"fprop", "F"}, std::pair{"dgrad", "D"},
                                    std::pair{"wgrad", "W"}})
    if (p.contains(key)) out += (out.empty() ? "" : " ") + std::string(letter) + " " + text_of(p[key]);
  return out;
}

// The schedule as "bf16 from 0.9" per phase; an override as "blocks.0.*: bf16, scale_rule mse".
std::string schedule_text(const json& phases) {
  std::string out;
  for (const json& p : phases)
    out += (out.empty() ? "" : ", ") + precision_text(p.value("precision", json())) + " from " +
           text_of(p.value("at_fraction", json()));
  return out;
}

std::string overrides_text(const json& overrides) {
  std::string out;
  for (const json& o : overrides) {
    std::string what;
    if (o.contains("precision")) what = precision_text(o["precision"]);
    if (o.contains("quant") && o["quant"].is_object())
      for (const auto& item : o["quant"].items())
        what += (what.empty() ? "" : ", ") + item.key() + " " + text_of(item.value());
    out += (out.empty() ? "" : "; ") + text_of(o.value("layers", json())) + ": " + what;
  }
  return out;
}

}  // namespace

std::vector<SettingDifference> settings_difference(const RunConfig& run, const RunConfig& reference) {
  std::vector<SettingDifference> out;
  compare(to_json_full(run), to_json_full(reference), "", out);
  // gemm_path names an engine per GEMM precision: where the run's GEMMs take the same engines
  // either way (auto and emulated for a run without FP8 GEMMs), it is no intervention.
  if (same_gemm_engines(run, reference))
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const SettingDifference& d) { return d.key == "quant.gemm_path"; }),
              out.end());
  if (!(run.model == reference.model)) {
    // In key order, like the rest: shown by its one label (a preset's name or the shape's).
    const auto after = std::find_if(out.begin(), out.end(),
                                    [](const SettingDifference& d) { return d.key > "model"; });
    out.insert(after, {"model", model_label(run.model), to_json_full(run)["model"]});
  }
  return out;
}

std::string describe_differences(const std::vector<SettingDifference>& differences,
                                 bool with_precision) {
  // Stochastic rounding and the Hadamard rotation keep the short forms the field uses; every
  // other setting is "name value" with the section prefix dropped.
  std::string out;
  const auto add = [&out](const std::string& item) { out += (out.empty() ? "" : " + ") + item; };
  for (const SettingDifference& d : differences) {
    if (starts_with(d.key, "precision.") && !with_precision) continue;
    if (d.key == "quant.stochastic_rounding") {
      add(d.value == "[]" ? "no SR" : "SR(" + d.value.substr(1, d.value.size() - 2) + ")");
    } else if (d.key == "quant.hadamard" && d.raw.is_object()) {
      const json mode = d.raw.value("mode", json()), size = d.raw.value("size", json());
      const std::string gemms = text_of(d.raw.value("gemms", json::array()));
      add(mode == "none" ? "no Hadamard"
                         : "H" + text_of(size) + " " + text_of(mode) + " (" +
                               gemms.substr(1, gemms.size() - 2) + ")");
    } else if (d.key == "precision_schedule" && d.raw.is_array()) {
      add(d.raw.empty() ? "no precision schedule" : schedule_text(d.raw));
    } else if (d.key == "overrides" && d.raw.is_array()) {
      add(d.raw.empty() ? "no overrides" : "overrides " + overrides_text(d.raw));
    } else {
      const size_t dot = d.key.find('.');
      const bool section = starts_with(d.key, "quant.") || starts_with(d.key, "precision.");
      add((section ? d.key.substr(dot + 1) : d.key) + " " + d.value);
    }
  }
  return out.empty() ? "-" : out;
}

std::optional<std::string> paper_figure(const RunConfig& arm, const RunConfig& baseline) {
  // The numerics of a config: everything the paper's arms could differ in.
  const auto numerics = [](const RunConfig& c) {
    RunConfig n;
    n.precision = c.precision;
    n.quant = c.quant;
    n.quant.gemm_path = GemmPath::kEmulated;  // how the GEMM is computed, not what it computes
    n.precision_schedule = c.precision_schedule;
    n.overrides = c.overrides;
    return to_json_full(n);
  };
  const auto paper_arm = [](GemmPrecision f, GemmPrecision d, GemmPrecision w) {
    RunConfig c;
    c.precision = {f, d, w};
    return c;
  };
  constexpr auto kFP8 = GemmPrecision::kFP8, kMX = GemmPrecision::kMXFP4;
  if (numerics(baseline) != numerics(paper_arm(kFP8, kFP8, kFP8))) return std::nullopt;
  const json mine = numerics(arm);
  RunConfig sr = paper_arm(kMX, kMX, kMX);
  sr.quant.stochastic_rounding = {OperandClass::kGrad};
  RunConfig rht = paper_arm(kMX, kMX, kMX);
  rht.quant.hadamard = {HadamardMode::kPerStepRandom, 16, {GemmKind::kWgrad}};
  RunConfig h16 = paper_arm(kMX, kMX, kMX);
  h16.quant.hadamard = {HadamardMode::kDeterministic, 16, {GemmKind::kWgrad}};
  const std::pair<RunConfig, const char*> kPaperArms[] = {
      {paper_arm(kFP8, kFP8, kFP8), "baseline (FP8)"},
      {paper_arm(kMX, kFP8, kFP8), "modest"},
      {paper_arm(kMX, kMX, kFP8), "modest"},
      {paper_arm(kMX, kMX, kMX), "+26-27 %"},
      {sr, "did not converge"},
      {rht, "did not converge"},
      {h16, "+8-9 %"},
  };
  for (const auto& [config, figure] : kPaperArms)
    if (mine == numerics(config)) return std::string(figure);
  return std::nullopt;
}

}  // namespace mxablate::contract
