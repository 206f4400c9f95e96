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
  for (GemmPrecision p : kPrecisions) {
    const GemmRouteChoice& c = routes.by_precision[static_cast<size_t>(p)];
    out[std::string(to_string(p))] = std::string(to_string(c.route));
    if (!c.fallback.empty()) fallback[std::string(to_string(p))] = c.fallback;
  }
  if (!fallback.empty()) out["fallback"] = fallback;
  return out;
}

std::string gemm_routes_change(const nlohmann::json& before, const GemmRoutes& now, const RunConfig& c) {
  const auto was = [&](GemmPrecision p) -> std::string {
    const std::string key(to_string(p));
    if (before.is_object() && before.contains(key) && before[key].is_string()) return before[key].get<std::string>();
    if (p == GemmPrecision::kMXFP4 && c.quant.gemm_path == GemmPath::kFP8) return std::string(to_string(GemmRoute::kHopperFP8));
    return std::string(to_string(GemmRoute::kEmulated));
  };
  for (GemmPrecision p : {GemmPrecision::kFP8, GemmPrecision::kMXFP4}) {
    if (p == GemmPrecision::kFP8 && !has_fp8_gemm(c)) continue;
    const std::string then = was(p), here(to_string(now.of(p)));
    if (then != here)
      return "the checkpoint's " + std::string(to_string(p)) + " GEMMs ran " + then + ", here they would run " +
             here + " (resume where they run " + then + ", or start a new run directory)";
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

bool has_fp8_gemm(const RunConfig& c) {
  const auto fp8 = [](const PrecisionConfig& p) {
    return p.fprop == GemmPrecision::kFP8 || p.dgrad == GemmPrecision::kFP8 || p.wgrad == GemmPrecision::kFP8;
  };
  if (fp8(c.precision)) return true;
  for (const PrecisionPhase& phase : c.precision_schedule)
    if (fp8(phase.precision)) return true;
  for (const LayerOverride& o : c.overrides)
    for (const auto& p : {o.patch.fprop, o.patch.dgrad, o.patch.wgrad})
      if (p == GemmPrecision::kFP8) return true;
  return false;
}

}  // namespace mxablate::contract
