// Which engine computes each GEMM of a run: the one rule that turns quant.gemm_path, a GEMM's
// precision and what the device offers into a route (docs/design.md §3). The trainer resolves
// every precision once before the first step, records the result in run_start and looks the
// route up per GEMM; nothing else decides it.
//
//   precision   auto                                  emulated   fp8                          fp8-where-exact
//   fp8         fp8-tensorwise if the device has it,  emulated   fp8-tensorwise (required)    fp8-tensorwise (required)
//               else emulated (the fallback is said)
//   mxfp4       emulated                              emulated   hopper-fp8 (required)        mxfp4-as-fp8 (required)
//   bf16/nvfp4  emulated                              emulated   emulated                     emulated
//
// mxfp4-as-fp8 runs the FP8 GEMM and recomputes, on the device, the output tiles E4M3 did not
// hold (kernels::mxfp4_as_fp8_shape_fits and the fix-up's rule, mx_to_fp8.h); the route is the
// engine that decides.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mxablate/contract/quant_settings.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/kernels/gemm_route.h"

namespace mxablate::contract {

// The route names are the kernels' (one enum, one name table; docs/design.md §3).
using GemmRoute = kernels::GemmRoute;  // emulated, fp8-tensorwise, hopper-fp8, mxfp4-as-fp8
using kernels::parse_gemm_route;
using kernels::to_string;

// What this process can run: for each tensor-core route, empty when it can run here, else one
// sentence saying why not (the trainer asks the kernels; on the CPU each says so).
struct GemmRouteSupport {
  std::string fp8_tensorwise;
  std::string hopper_fp8;
  std::string mxfp4_as_fp8;
};

struct GemmRouteChoice {
  GemmRoute route = GemmRoute::kEmulated;
  // Set when `auto` preferred FP8 tensor cores and fell back to emulation: why (said in the log
  // and in run_start, never silent).
  std::string fallback;
};

// The rule of the table above for one precision. Throws ConfigError ("quant.gemm_path: ...")
// when the setting demands a route that cannot run here.
GemmRouteChoice resolve_gemm_route(GemmPath setting, GemmPrecision precision,
                                   const GemmRouteSupport& support);

// Every precision's route, resolved once per run (so `fp8` on a device without the Hopper path
// is refused whatever the run's precisions, as before).
struct GemmRoutes {
  std::array<GemmRouteChoice, 4> by_precision;  // indexed by GemmPrecision
  GemmRoute of(GemmPrecision p) const { return by_precision[static_cast<size_t>(p)].route; }
};
GemmRoutes resolve_gemm_routes(GemmPath setting, const GemmRouteSupport& support);

// The route GEMMs of `gemm`'s kind in `precision` take: the precision's, unless that engine
// declines the kind (kernels::route_declines), then the emulation. Operand formats an engine
// cannot take are the layer's to check (MXLinear's engine pick).
GemmRoute route_of(const GemmRoutes& routes, GemmPrecision precision, GemmKind gemm);

// {"setting": "auto", "fp8": "fp8-tensorwise", "mxfp4": "emulated", …, "fallback": {"fp8": why},
//  "declined": {"mxfp4": {"wgrad": "emulated"}}} for run_start ("fallback" only when one
// happened, "declined" only for a kind whose precision's route does not take it).
nlohmann::json gemm_routes_json(GemmPath setting, const GemmRoutes& routes);

// Why resuming a run from a checkpoint with `now` would continue some of its FP8 or MXFP4
// GEMMs (a precision and kind the config plans) on other engines than its previous attempt ran
// them on; empty when nothing changes. `before` is that attempt's run_start "gemm_routes": one
// without "declined" was written when every route took every kind, and null stands for a log
// written before routes were recorded, when FP8 GEMMs always ran emulated and MXFP4 ones on
// hopper-fp8 exactly under `fp8`. The trainer refuses such a resume: one run's steps would come
// from two engines under one run id.
std::string gemm_routes_change(const nlohmann::json& before, const GemmRoutes& now, const RunConfig& c);

// True when every GEMM precision `run` plans would take the same route under run's gemm_path as
// under `reference`'s, on a device with every route: the two settings then differ in name only
// for this run (an MXFP4 arm under auto against an FP8 baseline under emulated, say), and
// settings_difference does not call the difference an intervention.
bool same_gemm_engines(const RunConfig& run, const RunConfig& reference);

// True when the config can plan `precision` for a GEMM of `gemm`'s kind: the blocks' precision,
// a schedule phase or an override.
bool plans_precision(const RunConfig& c, GemmPrecision precision, GemmKind gemm);

// True when any GEMM the config can plan is FP8: the blocks' precision, a schedule phase or an
// override. Without one, `auto` and `emulated` compute the same bits.
bool has_fp8_gemm(const RunConfig& c);

}  // namespace mxablate::contract
