#include "mxablate/contract/gemm_routing.h"

namespace mxablate::contract {
namespace {

constexpr GemmPrecision kPrecisions[] = {GemmPrecision::kBF16, GemmPrecision::kFP8,
                                         GemmPrecision::kMXFP4, GemmPrecision::kNVFP4};

[[noreturn]] void refuse(GemmPath setting, GemmPrecision precision, const std::string& why) {
  throw ConfigError("quant.gemm_path: \"" + std::string(to_string(setting)) + "\" cannot run the " +
                    std::string(to_string(precision)) + " GEMMs here: " + why +
                    " (gemm_path: auto or emulated runs them emulated)");
}

}  // namespace

GemmRouteChoice resolve_gemm_route(GemmPath setting, GemmPrecision precision,
                                   const GemmRouteSupport& support) {
  if (setting == GemmPath::kEmulated) return {};
  switch (precision) {
    case GemmPrecision::kFP8:
      if (support.fp8_tensorwise.empty()) return {GemmRoute::kFP8Tensorwise, {}};
      if (demands_fp8_tensor_cores(setting)) refuse(setting, precision, support.fp8_tensorwise);
      return {GemmRoute::kEmulated, support.fp8_tensorwise};
    case GemmPrecision::kMXFP4:
      if (setting == GemmPath::kFP8) {
        if (!support.hopper_fp8.empty()) refuse(setting, precision, support.hopper_fp8);
        return {GemmRoute::kHopperFP8, {}};
      }
      if (setting == GemmPath::kFP8WhereExact) {
        if (!support.mxfp4_as_fp8.empty()) refuse(setting, precision, support.mxfp4_as_fp8);
        return {GemmRoute::kMXFP4AsFP8, {}};
      }
      return {};
    case GemmPrecision::kBF16:
    case GemmPrecision::kNVFP4:
      return {};
  }
  return {};
}

GemmRoutes resolve_gemm_routes(GemmPath setting, const GemmRouteSupport& support) {
  GemmRoutes r;
  for (GemmPrecision p : kPrecisions)
    r.by_precision[static_cast<size_t>(p)] = resolve_gemm_route(setting, p, support);
  return r;
}

nlohmann::json gemm_routes_json(GemmPath setting, const GemmRoutes& routes) {
  nlohmann::json out = {{"setting", std::string(to_string(setting))}};
  nlohmann::json fallback = nlohmann::json::object();
  nlohmann::json declined = nlohmann::json::object();
  for (GemmPrecision p : kPrecisions) {
    const GemmRouteChoice& c = routes.by_precision[static_cast<size_t>(p)];
    const std::string name(to_string(p));
    out[name] = std::string(to_string(c.route));
    if (!c.fallback.empty()) fallback[name] = c.fallback;
    for (GemmKind g : kAllGemms)
      if (c.route != route_of(routes, p, g)) declined[name][std::string(to_string(g))] = std::string(to_string(route_of(routes, p, g)));
  }
  if (!fallback.empty()) out["fallback"] = fallback;
  if (!declined.empty()) out["declined"] = declined;
  return out;
}

GemmRoute route_of(const GemmRoutes& routes, GemmPrecision precision, GemmKind gemm) {
  const GemmRoute r = routes.of(precision);
  return kernels::route_declines(r, gemm).empty() ? r : GemmRoute::kEmulated;
}

std::string gemm_routes_change(const nlohmann::json& before, const GemmRoutes& now, const RunConfig& c) {
  // What the attempt recorded for GEMMs of precision p and kind g: its kind's entry under
  // "declined", else its precision's route. A log without "declined" was written when no route
  // declined a kind (mxfp4-as-fp8 then took Wgrad too); one without gemm_routes, before they were
  // recorded, when FP8 GEMMs always ran emulated and MXFP4 ones on hopper-fp8 under `fp8`.
  const auto was = [&](GemmPrecision p, GemmKind g) -> std::string {
    const std::string key(to_string(p)), kind(to_string(g));
    if (before.is_object() && before.contains("declined") && before["declined"].is_object()) {
      const nlohmann::json& d = before["declined"];
      if (d.contains(key) && d[key].is_object() && d[key].contains(kind) && d[key][kind].is_string())
        return d[key][kind].get<std::string>();
    }
    if (before.is_object() && before.contains(key) && before[key].is_string()) return before[key].get<std::string>();
    if (p == GemmPrecision::kMXFP4 && c.quant.gemm_path == GemmPath::kFP8) return std::string(to_string(GemmRoute::kHopperFP8));
    return std::string(to_string(GemmRoute::kEmulated));
  };
  for (GemmPrecision p : {GemmPrecision::kFP8, GemmPrecision::kMXFP4})
    for (GemmKind g : kAllGemms) {
      if (!plans_precision(c, p, g)) continue;
      const std::string then = was(p, g), here(to_string(route_of(now, p, g)));
      if (then != here)
        return "the checkpoint's " + std::string(to_string(p)) + " " + std::string(to_string(g)) + " GEMMs ran " + then +
               ", here they would run " + here + " (resume where they run " + then + ", or start a new run directory)";
    }
  return {};
}

bool same_gemm_engines(const RunConfig& run, const RunConfig& reference) {
  std::array<bool, 4> used{};
  used[static_cast<size_t>(GemmPrecision::kBF16)] = true;  // the LM head
  const auto mark = [&used](const PrecisionConfig& p) {
    for (GemmKind g : kAllGemms) used[static_cast<size_t>(p.of(g))] = true;
  };
  mark(run.precision);
  for (const PrecisionPhase& phase : run.precision_schedule) mark(phase.precision);
  for (const LayerOverride& o : run.overrides)
    for (const auto& p : {o.patch.fprop, o.patch.dgrad, o.patch.wgrad})
      if (p) used[static_cast<size_t>(*p)] = true;
  const GemmRouteSupport everything;  // every route available
  for (GemmPrecision p : kPrecisions)
    if (used[static_cast<size_t>(p)] &&
        resolve_gemm_route(run.quant.gemm_path, p, everything).route !=
            resolve_gemm_route(reference.quant.gemm_path, p, everything).route)
      return false;
  return true;
}

bool plans_precision(const RunConfig& c, GemmPrecision precision, GemmKind gemm) {
  if (c.precision.of(gemm) == precision) return true;
  for (const PrecisionPhase& phase : c.precision_schedule)
    if (phase.precision.of(gemm) == precision) return true;
  for (const LayerOverride& o : c.overrides) {
    const auto& patch = gemm == GemmKind::kFprop ? o.patch.fprop : gemm == GemmKind::kDgrad ? o.patch.dgrad : o.patch.wgrad;
    if (patch == precision) return true;
  }
  return false;
}

bool has_fp8_gemm(const RunConfig& c) {
  for (GemmKind g : kAllGemms)
    if (plans_precision(c, GemmPrecision::kFP8, g)) return true;
  return false;
}

}  // namespace mxablate::contract
