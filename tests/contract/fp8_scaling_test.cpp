// quant.fp8_scaling, quant.fp8_amax_history, quant.fp8_margin (docs/design.md §3, "FP8, per-tensor
// delayed scaling"): parsed once through their name table and ranges, written to the identity
// JSON only when set (run ids of configs without them stay the same), part of the trajectory a
// checkpoint must match, and an arm's intervention.
#include "catch.h"
#include "config_error.h"
#include "mxablate/contract/config_keys.h"
#include "mxablate/contract/run_config.h"
#include "mxablate/contract/settings_difference.h"

using namespace mxablate::contract;
using nlohmann::json;
using mxablate::test::error_of;
using mxablate::test::valid;

namespace {

constexpr auto kFP8 = GemmPrecision::kFP8, kMX = GemmPrecision::kMXFP4, kBF16 = GemmPrecision::kBF16;

RunConfig fp8_run() {
  RunConfig c;
  c.precision = {kFP8, kFP8, kFP8};
  return c;
}

// The JSON of an FP8 config with `quant` keys set as given.
json fp8_with(const json& quant) {
  json j = to_json(fp8_run());
  for (const auto& item : quant.items()) j["quant"][item.key()] = item.value();
  return j;
}

}  // namespace

TEST_CASE("fp8_scaling parses current and delayed only, from its one name table") {
  CHECK(parse_fp8_scaling("current") == Fp8Scaling::kCurrent);
  CHECK(parse_fp8_scaling("delayed") == Fp8Scaling::kDelayed);
  CHECK_FALSE(parse_fp8_scaling("Delayed").has_value());
  CHECK_FALSE(parse_fp8_scaling("").has_value());
  CHECK(fp8_scaling_names() == "current, delayed");
  CHECK(to_string(Fp8Scaling::kDelayed) == "delayed");
  const RunConfig defaults;
  CHECK(defaults.quant.fp8_scaling == Fp8Scaling::kCurrent);
  CHECK(defaults.quant.fp8_amax_history == 1024);  // TransformerEngine's default
  CHECK(defaults.quant.fp8_margin == 0);
}

TEST_CASE("A delayed-scaling config is read, and written back only with what it sets") {
  const RunConfig c = run_config_from_json(fp8_with({{"fp8_scaling", "delayed"}, {"fp8_amax_history", 16}, {"fp8_margin", 2}}));
  CHECK(c.quant.fp8_scaling == Fp8Scaling::kDelayed);
  CHECK(c.quant.fp8_amax_history == 16);
  CHECK(c.quant.fp8_margin == 2);
  const json compact = to_json(c);
  CHECK(compact["quant"]["fp8_scaling"] == "delayed");
  CHECK(compact["quant"]["fp8_amax_history"] == 16);
  CHECK(compact["quant"]["fp8_margin"] == 2);
  CHECK(run_config_from_json(compact).quant.fp8_amax_history == 16);
  // Delayed at the default window: only the mode is written.
  RunConfig d = fp8_run();
  d.quant.fp8_scaling = Fp8Scaling::kDelayed;
  CHECK(to_json(d)["quant"]["fp8_scaling"] == "delayed");
  CHECK_FALSE(to_json(d)["quant"].contains("fp8_amax_history"));
  CHECK_FALSE(to_json(d)["quant"].contains("fp8_margin"));
}

TEST_CASE("Configs without delayed scaling keep their identity JSON, so their run ids") {
  for (const RunConfig& c : {RunConfig{}, fp8_run()}) {
    const json j = to_json(c);
    for (const char* key : {"fp8_scaling", "fp8_amax_history", "fp8_margin"}) CHECK_FALSE(j["quant"].contains(key));
    // Spelling the default out changes nothing.
    json spelled = j;
    spelled["quant"]["fp8_scaling"] = "current";
    spelled["quant"]["fp8_amax_history"] = 1024;
    spelled["quant"]["fp8_margin"] = 0;
    if (c.precision.fprop == kFP8) CHECK(to_json(run_config_from_json(spelled)) == j);
  }
  const json full = to_json_full(RunConfig{});
  CHECK(full["quant"]["fp8_scaling"] == "current");
  CHECK(full["quant"]["fp8_amax_history"] == 1024);
  CHECK(full["quant"]["fp8_margin"] == 0);
  const json tree = config_key_tree();  // the recipe schema's keys and types
  CHECK(tree["quant"]["fp8_scaling"] == "current");
  CHECK(tree["quant"]["fp8_amax_history"] == 1024);
  CHECK_FALSE(tree["overrides"][0]["quant"].contains("fp8_scaling"));  // a run-wide setting
}

TEST_CASE("Hostile fp8 scaling values are refused in one line naming key and value") {
  CHECK(error_of(fp8_with({{"fp8_scaling", "Delayed"}})) ==
        "quant.fp8_scaling: expected one of current, delayed, got \"Delayed\"");
  CHECK(error_of(fp8_with({{"fp8_scaling", 1}})) == "quant.fp8_scaling: expected a string, got 1");
  CHECK(error_of(fp8_with({{"fp8_scaling", nullptr}})) == "quant.fp8_scaling: expected a string, got null");
  const auto delayed = [](const json& extra) {
    json q = extra;
    q["fp8_scaling"] = "delayed";
    return error_of(fp8_with(q));
  };
  CHECK(delayed({{"fp8_amax_history", 0}}) == "quant.fp8_amax_history: must be in [1, 16384] (steps), got 0");
  CHECK(delayed({{"fp8_amax_history", -5}}) == "quant.fp8_amax_history: must be in [1, 16384] (steps), got -5");
  CHECK(delayed({{"fp8_amax_history", 16385}}) == "quant.fp8_amax_history: must be in [1, 16384] (steps), got 16385");
  CHECK(delayed({{"fp8_amax_history", 1.5}}) == "quant.fp8_amax_history: expected an integer, got 1.5");
  CHECK(delayed({{"fp8_amax_history", "1024"}}) == "quant.fp8_amax_history: expected an integer, got \"1024\"");
  CHECK(delayed({{"fp8_amax_history", 1e20}}).rfind("quant.fp8_amax_history: ", 0) == 0);
  CHECK(delayed({{"fp8_margin", -1}}) == "quant.fp8_margin: must be in [0, 8], got -1");
  CHECK(delayed({{"fp8_margin", 9}}) == "quant.fp8_margin: must be in [0, 8], got 9");
  CHECK(delayed({{"fp8_amax_history", 1}, {"fp8_margin", 8}}) == "no error");
  CHECK(delayed({{"fp8_amax_history", 16384}}) == "no error");
  CHECK(error_of(fp8_with({{"fp8_amax_history", 16}})) ==
        "quant.fp8_amax_history: applies only with quant.fp8_scaling: delayed (this config scales FP8 by the "
        "current amax), got 16");
  CHECK(error_of(fp8_with({{"fp8_margin", 1}})) ==
        "quant.fp8_margin: applies only with quant.fp8_scaling: delayed (this config scales FP8 by the current "
        "amax), got 1");
}

TEST_CASE("Delayed scaling needs an FP8 GEMM somewhere in the config") {
  json j = valid();  // all BF16
  j["quant"]["fp8_scaling"] = "delayed";
  const std::string none =
      "quant.fp8_scaling: \"delayed\" scales the operands of FP8 GEMMs, and no GEMM of this config is fp8 "
      "(precision, precision_schedule and overrides)";
  CHECK(error_of(j) == none);
  j["precision"] = {{"fprop", "mxfp4"}, {"dgrad", "mxfp4"}, {"wgrad", "mxfp4"}};
  CHECK(error_of(j) == none);
  j["precision"]["wgrad"] = "fp8";  // one FP8 GEMM is enough
  CHECK(error_of(j) == "no error");
  j["precision"]["wgrad"] = "mxfp4";
  j["overrides"] = json::array({{{"layers", "lm_head"}, {"precision", {{"fprop", "fp8"}}}}});
  CHECK(error_of(j) == "no error");
  j.erase("overrides");
  j["precision_schedule"] = json::array({{{"at_fraction", 0.5}, {"precision", {{"dgrad", "fp8"}}}}});
  CHECK(error_of(j) == "no error");
}

TEST_CASE("Delayed scaling is part of the trajectory and an arm's intervention") {
  const RunConfig fp8 = fp8_run();
  RunConfig delayed = fp8;
  delayed.quant.fp8_scaling = Fp8Scaling::kDelayed;
  // A checkpoint's trajectory holds it: a resume across a change is refused (trainer/rules checkpoint_state.h).
  const json trajectory = keys_with(to_json(delayed), kTrajectory);
  CHECK(trajectory["quant"]["fp8_scaling"] == "delayed");
  CHECK(keys_with(to_json(delayed), kTrajectory) != keys_with(to_json(fp8), kTrajectory));
  CHECK(describe_differences(settings_difference(delayed, fp8), true) == "fp8_scaling delayed");
  delayed.quant.fp8_amax_history = 16;
  delayed.quant.fp8_margin = 1;
  CHECK(describe_differences(settings_difference(delayed, fp8), true) ==
        "fp8_amax_history 16 + fp8_margin 1 + fp8_scaling delayed");
  // Described against a delayed baseline, a current-scaling arm lists each key that differs.
  CHECK(describe_differences(settings_difference(fp8, delayed), true) ==
        "fp8_amax_history 1024 + fp8_margin 0 + fp8_scaling current");
  // Another baseline than the paper's: no borrowed figure, for it or for arms measured against it.
  CHECK(paper_figure(fp8, fp8) == "baseline (FP8)");
  CHECK_FALSE(paper_figure(delayed, fp8).has_value());
  RunConfig mx = delayed;
  mx.precision = {kMX, kMX, kMX};
  CHECK_FALSE(paper_figure(mx, delayed).has_value());
  (void)kBF16;
}
