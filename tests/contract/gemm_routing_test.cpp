// quant.gemm_path and the route of each GEMM (gemm_routing.h): the rule per setting, precision and
// device; the stated fallback; run ids that stay put where auto and emulated compute the same.
#include "catch.h"
#include "config_error.h"
#include "mxablate/contract/gemm_routing.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/settings_difference.h"

using namespace mxablate::contract;
using nlohmann::json;

namespace {

using mxablate::test::error_of;
using mxablate::test::valid;

constexpr auto kBF16 = GemmPrecision::kBF16, kFP8 = GemmPrecision::kFP8,
               kMX = GemmPrecision::kMXFP4, kNV = GemmPrecision::kNVFP4;

const GemmRouteSupport kHopper{};  // every tensor-core route available
const GemmRouteSupport kCpu{"FP8 tensor cores need a CUDA device, this run is on cpu",
                            "the hopper-fp8 path needs a CUDA device and the GPU kernels",
                            "the mxfp4-as-fp8 path needs a CUDA device and the GPU kernels"};

std::string refusal(GemmPath setting, GemmPrecision p, const GemmRouteSupport& s) {
  try {
    resolve_gemm_route(setting, p, s);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

RunConfig with(GemmPrecision f, GemmPrecision d, GemmPrecision w) {
  RunConfig c;
  c.precision = {f, d, w};
  return c;
}

}  // namespace

TEST_CASE("gemm_path defaults to auto and parses auto, emulated, fp8 and fp8-where-exact only") {
  CHECK(RunConfig{}.quant.gemm_path == GemmPath::kAuto);
  CHECK(parse_gemm_path("auto") == GemmPath::kAuto);
  CHECK(parse_gemm_path("emulated") == GemmPath::kEmulated);
  CHECK(parse_gemm_path("fp8") == GemmPath::kFP8);
  CHECK(parse_gemm_path("fp8-where-exact") == GemmPath::kFP8WhereExact);
  CHECK_FALSE(parse_gemm_path("Auto").has_value());
  CHECK_FALSE(parse_gemm_path("fp8-where").has_value());
  json j = valid();
  j["quant"]["gemm_path"] = "fast";
  CHECK(error_of(j) == "quant.gemm_path: expected one of auto, emulated, fp8, fp8-where-exact, got \"fast\"");
  j["quant"]["gemm_path"] = "auto";
  CHECK(run_config_from_json(j).quant.gemm_path == GemmPath::kAuto);
}

TEST_CASE("auto runs FP8 GEMMs on FP8 tensor cores where the device has them, everything else emulated") {
  for (GemmPrecision p : {kBF16, kMX, kNV}) {
    INFO(to_string(p));
    CHECK(resolve_gemm_route(GemmPath::kAuto, p, kHopper).route == GemmRoute::kEmulated);
    CHECK(resolve_gemm_route(GemmPath::kAuto, p, kHopper).fallback.empty());
  }
  const GemmRouteChoice fp8 = resolve_gemm_route(GemmPath::kAuto, kFP8, kHopper);
  CHECK(fp8.route == GemmRoute::kFP8Tensorwise);
  CHECK(fp8.fallback.empty());
}

TEST_CASE("auto on a device without FP8 tensor cores emulates FP8 GEMMs and says why") {
  const GemmRouteChoice fp8 = resolve_gemm_route(GemmPath::kAuto, kFP8, kCpu);
  CHECK(fp8.route == GemmRoute::kEmulated);
  CHECK(fp8.fallback == kCpu.fp8_tensorwise);
  const GemmRoutes routes = resolve_gemm_routes(GemmPath::kAuto, kCpu);
  CHECK(routes.of(kFP8) == GemmRoute::kEmulated);
  CHECK(routes.of(kMX) == GemmRoute::kEmulated);
  CHECK(gemm_routes_json(GemmPath::kAuto, routes) ==
        json{{"setting", "auto"},
             {"bf16", "emulated"},
             {"fp8", "emulated"},
             {"mxfp4", "emulated"},
             {"nvfp4", "emulated"},
             {"fallback", {{"fp8", kCpu.fp8_tensorwise}}}});
}

TEST_CASE("emulated forces the emulation for every precision, whatever the device has") {
  for (GemmPrecision p : {kBF16, kFP8, kMX, kNV}) {
    INFO(to_string(p));
    const GemmRouteChoice c = resolve_gemm_route(GemmPath::kEmulated, p, kHopper);
    CHECK(c.route == GemmRoute::kEmulated);
    CHECK(c.fallback.empty());  // asked for, not a fallback
  }
  const GemmRoutes routes = resolve_gemm_routes(GemmPath::kEmulated, kCpu);
  CHECK_FALSE(gemm_routes_json(GemmPath::kEmulated, routes).contains("fallback"));
}

TEST_CASE("fp8 demands tensor cores for FP8 and MXFP4 GEMMs and refuses a device without them") {
  const GemmRoutes routes = resolve_gemm_routes(GemmPath::kFP8, kHopper);
  CHECK(routes.of(kFP8) == GemmRoute::kFP8Tensorwise);
  CHECK(routes.of(kMX) == GemmRoute::kHopperFP8);
  CHECK(routes.of(kBF16) == GemmRoute::kEmulated);
  CHECK(routes.of(kNV) == GemmRoute::kEmulated);
  CHECK(gemm_routes_json(GemmPath::kFP8, routes) == json{{"setting", "fp8"},
                                                         {"bf16", "emulated"},
                                                         {"fp8", "fp8-tensorwise"},
                                                         {"mxfp4", "hopper-fp8"},
                                                         {"nvfp4", "emulated"}});
  CHECK(refusal(GemmPath::kFP8, kFP8, kCpu) ==
        "quant.gemm_path: \"fp8\" cannot run the fp8 GEMMs here: " + kCpu.fp8_tensorwise +
            " (gemm_path: auto or emulated runs them emulated)");
  CHECK(refusal(GemmPath::kFP8, kMX, kCpu) ==
        "quant.gemm_path: \"fp8\" cannot run the mxfp4 GEMMs here: " + kCpu.hopper_fp8 +
            " (gemm_path: auto or emulated runs them emulated)");
  // A device with per-tensor FP8 but not the Hopper blockwise path (sm_89, or an older torch).
  const GemmRouteSupport ada{"", "the hopper-fp8 path needs compute capability 9.0"};
  CHECK(resolve_gemm_route(GemmPath::kFP8, kFP8, ada).route == GemmRoute::kFP8Tensorwise);
  CHECK_THROWS_AS(resolve_gemm_routes(GemmPath::kFP8, ada), ConfigError);
  CHECK(resolve_gemm_routes(GemmPath::kAuto, ada).of(kFP8) == GemmRoute::kFP8Tensorwise);
}

TEST_CASE("fp8-where-exact runs MXFP4 GEMMs on the mxfp4-as-fp8 route and FP8 ones on FP8 tensor cores, or refuses") {
  const GemmRoutes routes = resolve_gemm_routes(GemmPath::kFP8WhereExact, kHopper);
  CHECK(routes.of(kFP8) == GemmRoute::kFP8Tensorwise);
  CHECK(routes.of(kMX) == GemmRoute::kMXFP4AsFP8);
  CHECK(routes.of(kBF16) == GemmRoute::kEmulated);
  CHECK(routes.of(kNV) == GemmRoute::kEmulated);  // NVFP4's E4M3 block scales are no powers of two
  CHECK(gemm_routes_json(GemmPath::kFP8WhereExact, routes) == json{{"setting", "fp8-where-exact"},
                                                                   {"bf16", "emulated"},
                                                                   {"fp8", "fp8-tensorwise"},
                                                                   {"mxfp4", "mxfp4-as-fp8"},
                                                                   {"nvfp4", "emulated"},
                                                                   {"declined", {{"mxfp4", {{"wgrad", "emulated"}}}}}});
  // The route declines Wgrad (its lines run across tokens): those GEMMs run on the emulation.
  CHECK(route_of(routes, kMX, GemmKind::kFprop) == GemmRoute::kMXFP4AsFP8);
  CHECK(route_of(routes, kMX, GemmKind::kDgrad) == GemmRoute::kMXFP4AsFP8);
  CHECK(route_of(routes, kMX, GemmKind::kWgrad) == GemmRoute::kEmulated);
  CHECK(route_of(routes, kFP8, GemmKind::kWgrad) == GemmRoute::kFP8Tensorwise);
  CHECK(mxablate::kernels::route_declines(GemmRoute::kMXFP4AsFP8, GemmKind::kWgrad).find("takes Fprop and Dgrad") !=
        std::string::npos);
  for (GemmRoute r : {GemmRoute::kEmulated, GemmRoute::kFP8Tensorwise, GemmRoute::kHopperFP8})
    for (GemmKind g : kAllGemms) CHECK(mxablate::kernels::route_declines(r, g).empty());
  CHECK(refusal(GemmPath::kFP8WhereExact, kMX, kCpu) ==
        "quant.gemm_path: \"fp8-where-exact\" cannot run the mxfp4 GEMMs here: " + kCpu.mxfp4_as_fp8 +
            " (gemm_path: auto or emulated runs them emulated)");
  CHECK(refusal(GemmPath::kFP8WhereExact, kFP8, kCpu) ==
        "quant.gemm_path: \"fp8-where-exact\" cannot run the fp8 GEMMs here: " + kCpu.fp8_tensorwise +
            " (gemm_path: auto or emulated runs them emulated)");
  // An sm_89 device: tensor-wise FP8, but neither Hopper path (blockwise, row-wise scales).
  const GemmRouteSupport ada{"", "the hopper-fp8 path needs compute capability 9.0",
                             "the mxfp4-as-fp8 path needs compute capability 9.0"};
  CHECK(resolve_gemm_route(GemmPath::kFP8WhereExact, kFP8, ada).route == GemmRoute::kFP8Tensorwise);
  CHECK(refusal(GemmPath::kFP8WhereExact, kMX, ada).find(ada.mxfp4_as_fp8) != std::string::npos);
  // Its MXFP4 arms run other engines than under fp8 or auto: a difference in the arm's identity.
  CHECK_FALSE(same_gemm_engines(with(kMX, kMX, kMX), [] {
    RunConfig c = with(kMX, kMX, kMX);
    c.quant.gemm_path = GemmPath::kFP8WhereExact;
    return c;
  }()));
  RunConfig bf16_where_exact;
  bf16_where_exact.quant.gemm_path = GemmPath::kFP8WhereExact;
  CHECK(same_gemm_engines(bf16_where_exact, RunConfig{}));  // no MXFP4 or FP8 GEMM: the same engines
  json j = valid();
  j["quant"]["gemm_path"] = "fp8-where-exact";
  j["device"] = "cpu";
  CHECK(error_of(j) == "quant.gemm_path: \"fp8-where-exact\" (FP8 and MXFP4 GEMMs on FP8 tensor cores) needs "
                       "device: cuda, this run's device is \"cpu\"");
}

TEST_CASE("route names round-trip") {
  for (GemmRoute r : {GemmRoute::kEmulated, GemmRoute::kFP8Tensorwise, GemmRoute::kHopperFP8, GemmRoute::kMXFP4AsFP8})
    CHECK(parse_gemm_route(to_string(r)) == r);
  CHECK(to_string(GemmRoute::kMXFP4AsFP8) == "mxfp4-as-fp8");
  CHECK(to_string(GemmRoute::kFP8Tensorwise) == "fp8-tensorwise");
  CHECK_FALSE(parse_gemm_route("fp8").has_value());
}

TEST_CASE("has_fp8_gemm sees FP8 in the blocks, a schedule phase or an override") {
  CHECK_FALSE(has_fp8_gemm(RunConfig{}));
  CHECK_FALSE(has_fp8_gemm(with(kMX, kMX, kMX)));
  CHECK(has_fp8_gemm(with(kBF16, kBF16, kFP8)));
  RunConfig scheduled = with(kMX, kMX, kMX);
  scheduled.precision_schedule = {{0.9, {kBF16, kFP8, kBF16}}};
  CHECK(has_fp8_gemm(scheduled));
  RunConfig overridden = with(kMX, kMX, kMX);
  overridden.overrides = {{"lm_head", {}}};
  CHECK_FALSE(has_fp8_gemm(overridden));
  overridden.overrides[0].patch.dgrad = kFP8;
  CHECK(has_fp8_gemm(overridden));
}

TEST_CASE("auto keeps the run id of every config without an FP8 GEMM, FP8 arms get their own") {
  // The compact JSON is the run id's input: where auto and emulated compute the same bits it
  // spells auto "emulated", as every config was written before auto existed.
  CHECK(to_json(RunConfig{})["quant"]["gemm_path"] == "emulated");
  CHECK(to_json(with(kMX, kMX, kMX))["quant"]["gemm_path"] == "emulated");
  const RunConfig fp8 = with(kFP8, kFP8, kFP8);
  CHECK(to_json(fp8)["quant"]["gemm_path"] == "auto");
  RunConfig forced = fp8;
  forced.quant.gemm_path = GemmPath::kEmulated;
  CHECK(to_json(forced)["quant"]["gemm_path"] == "emulated");
  CHECK(to_json(forced) != to_json(fp8));
  RunConfig hopper = with(kMX, kMX, kMX);
  hopper.quant.gemm_path = GemmPath::kFP8;
  hopper.device = Device::kCUDA;
  CHECK(to_json(hopper)["quant"]["gemm_path"] == "fp8");
  // Read back, each computes what it was written for.
  CHECK(run_config_from_json(to_json(fp8)).quant.gemm_path == GemmPath::kAuto);
  CHECK(run_config_from_json(to_json(forced)).quant.gemm_path == GemmPath::kEmulated);
  // The comparison JSON and the schema keep the setting as given.
  CHECK(to_json_full(RunConfig{})["quant"]["gemm_path"] == "auto");
  CHECK(config_key_tree()["quant"]["gemm_path"] == "auto");
}

TEST_CASE("fp8 on the CPU is refused at the boundary, naming both GEMM kinds it would move") {
  json j = valid();
  j["quant"]["gemm_path"] = "fp8";
  CHECK(error_of(j) == "quant.gemm_path: \"fp8\" (FP8 and MXFP4 GEMMs on FP8 tensor cores) needs "
                       "device: cuda, this run's device is \"cpu\"");
  j["quant"]["gemm_path"] = "auto";  // auto on the CPU: emulated, said at run start
  CHECK(error_of(j) == "no error");
}

TEST_CASE("A resume that would move a run's FP8 or MXFP4 GEMMs to another engine is named") {
  const RunConfig fp8 = with(kFP8, kFP8, kFP8);
  const GemmRoutes tensor_cores = resolve_gemm_routes(GemmPath::kAuto, kHopper);
  const GemmRoutes emulated = resolve_gemm_routes(GemmPath::kAuto, kCpu);
  const json tc_before = gemm_routes_json(GemmPath::kAuto, tensor_cores);
  const json emu_before = gemm_routes_json(GemmPath::kAuto, emulated);
  CHECK(gemm_routes_change(tc_before, tensor_cores, fp8).empty());
  CHECK(gemm_routes_change(emu_before, emulated, fp8).empty());
  // Checkpointed on FP8 tensor cores, resumed where auto falls back to emulation (or back).
  CHECK(gemm_routes_change(tc_before, emulated, fp8) ==
        "the checkpoint's fp8 fprop GEMMs ran fp8-tensorwise, here they would run emulated (resume where they "
        "run fp8-tensorwise, or start a new run directory)");
  CHECK_FALSE(gemm_routes_change(emu_before, tensor_cores, fp8).empty());
  // A run without FP8 GEMMs does not care where FP8 GEMMs would run.
  CHECK(gemm_routes_change(tc_before, emulated, with(kMX, kMX, kMX)).empty());
  // A log from before gemm_routes: FP8 GEMMs ran emulated, MXFP4 ones on hopper-fp8 under fp8.
  RunConfig fp8_setting = fp8;
  fp8_setting.quant.gemm_path = GemmPath::kFP8;
  const GemmRoutes fp8_routes = resolve_gemm_routes(GemmPath::kFP8, kHopper);
  CHECK(gemm_routes_change(json(), fp8_routes, fp8_setting) ==
        "the checkpoint's fp8 fprop GEMMs ran emulated, here they would run fp8-tensorwise (resume where they run "
        "emulated, or start a new run directory)");
  RunConfig mx_hopper = with(kMX, kMX, kMX);
  mx_hopper.quant.gemm_path = GemmPath::kFP8;
  CHECK(gemm_routes_change(json(), fp8_routes, mx_hopper).empty());
  RunConfig forced = fp8;
  forced.quant.gemm_path = GemmPath::kEmulated;
  CHECK(gemm_routes_change(json(), resolve_gemm_routes(GemmPath::kEmulated, kHopper), forced).empty());
  // A malformed record reads as the legacy engines, never as a match by accident.
  CHECK_FALSE(gemm_routes_change(json{{"fp8", 3}}, tensor_cores, fp8).empty());
}

TEST_CASE("A resume is refused when one GEMM kind would move engines, though its precision's route did not") {
  RunConfig mx = with(kMX, kMX, kMX);
  mx.quant.gemm_path = GemmPath::kFP8WhereExact;
  const GemmRoutes now = resolve_gemm_routes(GemmPath::kFP8WhereExact, kHopper);
  // This trainer's own record: the same engines for every kind.
  CHECK(gemm_routes_change(gemm_routes_json(GemmPath::kFP8WhereExact, now), now, mx).empty());
  // A record from when mxfp4-as-fp8 took Wgrad too (no "declined"): its Wgrad steps ran on the
  // route, this trainer's would run emulated.
  json old = gemm_routes_json(GemmPath::kFP8WhereExact, now);
  old.erase("declined");
  CHECK(gemm_routes_change(old, now, mx) ==
        "the checkpoint's mxfp4 wgrad GEMMs ran mxfp4-as-fp8, here they would run emulated (resume where they "
        "run mxfp4-as-fp8, or start a new run directory)");
  // A run whose Wgrad is not MXFP4 anywhere does not care where MXFP4 Wgrad would run.
  RunConfig fd = with(kMX, kMX, kBF16);
  fd.quant.gemm_path = GemmPath::kFP8WhereExact;
  CHECK(gemm_routes_change(old, now, fd).empty());
  // ... unless a layer override or a schedule phase plans it.
  LayerOverride o;
  o.patch.wgrad = kMX;
  fd.overrides.push_back(o);
  CHECK_FALSE(gemm_routes_change(old, now, fd).empty());
  fd.overrides.clear();
  PrecisionPhase phase;
  phase.precision = {kBF16, kBF16, kMX};
  fd.precision_schedule.push_back(phase);
  CHECK_FALSE(gemm_routes_change(old, now, fd).empty());
  // A hostile "declined" entry is read as no entry, never as a match by accident.
  json hostile = gemm_routes_json(GemmPath::kFP8WhereExact, now);
  hostile["declined"] = json{{"mxfp4", {{"wgrad", 7}}}};
  CHECK_FALSE(gemm_routes_change(hostile, now, mx).empty());
  hostile["declined"] = "wgrad";
  CHECK_FALSE(gemm_routes_change(hostile, now, mx).empty());
  // An FP8-only run under fp8-where-exact: MXFP4's kinds are not its business.
  RunConfig fp8 = with(kFP8, kFP8, kFP8);
  fp8.quant.gemm_path = GemmPath::kFP8WhereExact;
  CHECK(gemm_routes_change(old, now, fp8).empty());
}

TEST_CASE("gemm_path is an intervention only where it moves the arm's own GEMMs") {
  const RunConfig fp8 = with(kFP8, kFP8, kFP8);  // the baseline, under auto
  // An MXFP4 arm as stored (its compact JSON spells auto "emulated"): the same engines.
  RunConfig mx = run_config_from_json(to_json(with(kMX, kMX, kMX)));
  REQUIRE(mx.quant.gemm_path == GemmPath::kEmulated);
  CHECK(same_gemm_engines(mx, fp8));
  CHECK(describe_differences(settings_difference(mx, fp8), false) == "-");
  // The FP8 arm forced to the emulation: its FP8 GEMMs move.
  RunConfig forced = fp8;
  forced.quant.gemm_path = GemmPath::kEmulated;
  CHECK_FALSE(same_gemm_engines(forced, fp8));
  CHECK(describe_differences(settings_difference(forced, fp8), false) == "gemm_path emulated");
  // MXFP4 on the Hopper path against the auto baseline: its MXFP4 GEMMs move.
  RunConfig hopper = with(kMX, kMX, kMX);
  hopper.quant.gemm_path = GemmPath::kFP8;
  CHECK(describe_differences(settings_difference(hopper, fp8), false) == "gemm_path fp8");
  // A schedule or an override bringing FP8 GEMMs in counts.
  RunConfig late_fp8 = mx;
  late_fp8.precision_schedule = {{0.9, {kFP8, kFP8, kFP8}}};
  CHECK_FALSE(same_gemm_engines(late_fp8, fp8));
}
